import t from 'tap';
import { sql } from 'drizzle-orm';
import { PERMISSIONS, type Permission } from '../../../src/platform/auth/permissions.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { wireClient } from '../../helpers/http-client.ts';
import { assertServedAnswer } from '../../helpers/contract.ts';
import { bearer, createDepartment, holdRows, lockWaiters, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('scim-tokens');
const other = await api.createTenant('scim-tokens-other');
const admin = tenant.adminToken;
const app = api.atrium.app!;
// SCIM requests go over a real connection, as an identity provider's do.
const wire = await wireClient(app);

type Tt = Parameters<typeof api.call>[0];
const create = (tt: Tt, body: unknown, token = admin) => api.call(tt, 'createScimToken', { token, body });
const scim = async (token: string, url = '/scim/v2/Users') => {
  const response = await wire.send({ method: 'GET', url, headers: bearer(token) });
  assertServedAnswer('GET', url, response);
  return response;
};

/**
 * Asks until the token is refused: a change made in the database, not through this process,
 * holds within the second its look-up is remembered. Every answer otherwise must have been
 * asked for within one second of the change.
 */
async function refusedWithinASecond(t: Tt, token: string, since: number) {
  let staleAskedAt: number | undefined;
  const status = await eventually(
    async () => {
      const askedAt = Date.now();
      const got = (await scim(token)).statusCode;
      if (got !== 401) staleAskedAt = askedAt;
      return got;
    },
    (got) => got === 401,
    5_000,
  );
  t.equal(status, 401, 'the token is refused');
  if (staleAskedAt !== undefined) t.ok(staleAskedAt - since < 1_000, `answered as before only within the second after the change (${staleAskedAt - since} ms)`);
}

t.test('bad input is a 422 and stores nothing', async (t) => {
  const before = await rowCount(api.db, 'scim_tokens');
  for (const body of [
    {},
    { name: '' },
    { name: '   ' },
    { name: 'x', expires_in: 59 },
    { name: 'x', expires_in: '3600' },
    { name: 'x', token: 'mine' },
    { name: 'x'.repeat(201) },
  ]) {
    const res = await create(t, body);
    t.equal(res.status, 422, JSON.stringify(body));
  }
  // The name labels every event the token writes in the audit trail: characters that do not show, or that turn or
  // break the text around them, are refused as in role and department names.
  for (const name of ['Entra\u202eDI', 'Entra\nID', 'Entra\u200bID', 'Entra\u0000ID']) {
    const res = await create(t, { name });
    t.equal(res.status, 422, JSON.stringify(name));
    t.strictSame(res.body.error_codes, { name: ['pattern'] }, JSON.stringify(name));
  }
  t.equal(await rowCount(api.db, 'scim_tokens'), before);
});

t.test('without users.administer the operations are refused', async (t) => {
  const viewer = await api.createUser(tenant.tenantId, { permissions: PERMISSIONS.filter((p) => p !== 'users.administer') });
  t.equal((await create(t, { name: 'x' }, viewer.token)).status, 403);
  t.equal((await api.call(t, 'listScimTokens', { token: viewer.token })).status, 403);
  t.equal((await api.call(t, 'deleteScimToken', { token: viewer.token, params: { scimTokenId: 1 } })).status, 403);
  t.equal((await api.call(t, 'listScimTokens')).status, 401);
});

t.test('a token is shown once, listed without its value, and revoked', async (t) => {
  const created = await create(t, { name: 'Entra ID', expires_in: 3600 });
  t.equal(created.status, 201);
  t.match(created.body.token, /^scim_[A-Za-z0-9_-]{43}$/);
  t.equal(created.body.last_used_at, null);
  t.ok(created.body.expires_at);
  const listed = await api.call(t, 'listScimTokens', { token: admin });
  const entry = listed.body.find((token: { id: number }) => token.id === created.body.id);
  t.ok(entry);
  t.notOk('token' in entry, 'the value is never listed');
  t.notOk(listed.text.includes(created.body.token), 'nor anywhere in the list');

  t.equal((await scim(created.body.token)).statusCode, 200, 'the token reaches /scim/v2');
  const used = (await api.call(t, 'listScimTokens', { token: admin })).body.find((token: { id: number }) => token.id === created.body.id);
  t.ok(used.last_used_at, 'its use is recorded');

  t.equal((await api.call(t, 'deleteScimToken', { token: admin, params: { scimTokenId: created.body.id } })).status, 204);
  t.equal((await scim(created.body.token)).statusCode, 401, 'a revoked token is refused at once');
  t.equal((await api.call(t, 'deleteScimToken', { token: admin, params: { scimTokenId: created.body.id } })).status, 404);
});

t.test("revoking a token needs every permission its minter's role lists, as signing the minter out does", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const administrators = await create(t, { name: "the administrator's" });
  const delegates = await create(t, { name: "the delegate's" }, delegate.token);
  const revoke = (token: string, id: number) => api.call(t, 'deleteScimToken', { token, params: { scimTokenId: id } });
  const refused = await revoke(delegate.token, administrators.body.id);
  t.equal(refused.status, 403, "a delegate cannot cut off the administrator's identity provider");
  t.equal(refused.body.code, 'permission_escalation');
  t.equal((await scim(administrators.body.token)).statusCode, 200, 'the token still works');
  t.equal((await revoke(delegate.token, delegates.body.id)).status, 204, 'the delegate revokes their own');
  const again = await create(t, { name: "the delegate's, again" }, delegate.token);
  t.equal((await revoke(admin, again.body.id)).status, 204, "the administrator revokes the delegate's");
  t.equal((await revoke(admin, administrators.body.id)).status, 204);
});

t.test('a use is recorded at most once a minute: a look-up within it writes nothing', async (t) => {
  const { body } = await create(t, { name: 'Throttled' });
  const lastUsedAt = async () => {
    const [row] = await api.db.owner.execute<{ at: string | null }>(sql`select last_used_at::text as at from scim_tokens where id = ${body.id}`);
    return row!.at;
  };
  t.equal((await scim(body.token)).statusCode, 200);
  const first = await lastUsedAt();
  t.ok(first, 'the first use is recorded');
  t.equal((await scim(body.token)).statusCode, 200);
  t.equal(await lastUsedAt(), first, 'a second use within the minute writes nothing');
  // The stamp a minute older, computed from the value read (Citus refuses a stable operator over a column in an update).
  await api.db.owner.execute(sql`update scim_tokens set last_used_at = ${first}::timestamptz - interval '61 seconds' where id = ${body.id}`);
  const aged = await lastUsedAt();
  // The process reads the aged stamp once its look-up of the token, remembered for a second, is made again.
  const after = await eventually(
    async () => {
      t.equal((await scim(body.token)).statusCode, 200);
      return lastUsedAt();
    },
    (at) => at !== aged,
    5_000,
  );
  t.ok(after !== null && after > aged!, 'a use a minute after the recorded one is recorded');
});

t.test('a SCIM token reaches nothing under /api, an access token nothing under /scim/v2', async (t) => {
  const { body } = await create(t, { name: 'Okta' });
  t.equal((await api.call(t, 'getCurrentUser', { token: body.token })).status, 401);
  t.equal((await api.call(t, 'listScimTokens', { token: body.token })).status, 401);
  const refused = await scim(admin);
  t.equal(refused.statusCode, 401);
  t.same(refused.json().schemas, ['urn:ietf:params:scim:api:messages:2.0:Error']);
  t.equal(refused.json().status, '401');
});

t.test("another tenant's token cannot be revoked, and its users stay apart", async (t) => {
  const { body } = await create(t, { name: 'Other IdP' }, other.adminToken);
  t.equal((await api.call(t, 'deleteScimToken', { token: admin, params: { scimTokenId: body.id } })).status, 404);
  const list = (await scim(body.token)).json();
  t.ok(
    list.Resources.every((user: { userName: string }) => user.userName === 'admin'),
    "only the other tenant's users",
  );
  t.equal(list.totalResults, 1);
});

/** What a minter holds: besides users.administer, every permission that shows user fields (SCIM reads and writes them all). */
const MINTER: Permission[] = ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'];

t.test('minting needs every permission that shows user fields', async (t) => {
  const before = await rowCount(api.db, 'scim_tokens');
  for (const lacking of ['users.view', 'users.view-personal', 'users.view-administrative'] as const) {
    const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER.filter((p) => p !== lacking) });
    const res = await create(t, { name: 'x' }, delegate.token);
    t.equal(res.status, 403, `refused without ${lacking}`);
    t.equal(res.body.code, 'permission_missing');
    t.match(res.body.detail, lacking);
  }
  t.equal(await rowCount(api.db, 'scim_tokens'), before, 'no token stored');
});

t.test('a token stops working when its minter loses users.view-personal (changed in the database: within a second)', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const { body } = await create(t, { name: 'delegated' }, delegate.token);
  t.equal((await scim(body.token)).statusCode, 200);
  await api.db.owner.execute(
    sql`update roles set permissions = array_remove(permissions, 'users.view-personal') where id = (select role_id from users where id = ${delegate.id})`,
  );
  await refusedWithinASecond(t, body.token, Date.now());
});

t.test('a token stops working when its minter is marked for logout; a token minted after works', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const { body } = await create(t, { name: 'before the mark' }, delegate.token);
  t.equal((await scim(body.token)).statusCode, 200);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await scim(body.token)).statusCode, 401, 'the token minted before the mark is refused');
  const again = await create(t, { name: 'after the mark' });
  t.equal((await scim(again.body.token)).statusCode, 200, 'a token of another minter is not concerned');
});

/**
 * A SCIM PATCH setting `victim`'s password with `token`, its token judged already, waits for the victim's row
 * while `meanwhile` ends the token; then it must be refused (401) and set no password.
 */
async function passwordSetWhileTokenEnds(t: Tt, token: string, victim: { id: number; username: string; password: string }, meanwhile: () => Promise<void>) {
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${victim.id} for no key update`);
  const patch = wire.send({
    method: 'PATCH',
    url: `/scim/v2/Users/${victim.id}`,
    headers: { ...bearer(token), 'content-type': 'application/scim+json' },
    payload: JSON.stringify({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'replace', path: 'password', value: 'a password of my choosing' }],
    }),
  });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the PATCH waits for the victim');
  await meanwhile();
  await held.release();
  t.equal((await patch).statusCode, 401, 'the PATCH found its token ended');
  const signIn = (password: string) => api.call(t, 'login', { body: { tenant: tenant.slug, username: victim.username, password } });
  t.equal((await signIn('a password of my choosing')).status, 401, 'the password was not set');
  t.equal((await signIn(victim.password)).status, 200, 'the old one still signs in');
}

t.test("a write under way when its minter's logout mark commits is refused: it sets no password", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const victim = await api.createUser(tenant.tenantId, { username: 'scim-reset-victim' });
  const { body } = await create(t, { name: 'stolen' }, delegate.token);
  await passwordSetWhileTokenEnds(t, body.token, victim, async () => {
    // The minter is marked for logout (which ends the token), and that mark commits.
    t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
    t.equal((await scim(body.token)).statusCode, 401, 'the token has stopped working');
  });
});

t.test('a write under way when its token expires is refused: it sets no password', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const victim = await api.createUser(tenant.tenantId, { username: 'scim-expiry-victim' });
  const { body } = await create(t, { name: 'expiring', expires_in: 60 }, delegate.token);
  // Used once: its use is recorded, so the PATCH does not write the token's row (which the expiry below changes).
  t.equal((await scim(body.token)).statusCode, 200);
  await passwordSetWhileTokenEnds(t, body.token, victim, async () => {
    // Expired now: later than the PATCH's transaction began, earlier than its token is judged again.
    await api.db.owner.execute(sql`update scim_tokens set expires_at = clock_timestamp() where id = ${body.id}`);
  });
});

t.test("a group write under way when its minter's logout mark commits is refused: it adds no member", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: [...MINTER, 'departments.manage'] });
  const accomplice = await api.createUser(tenant.tenantId, { username: 'scim-group-accomplice' });
  const department = await createDepartment(api.db, tenant.tenantId, 'Vault keepers');
  const { body } = await create(t, { name: 'stolen-groups' }, delegate.token);
  // The group's row is held, so the PATCH, its token judged already, waits in its transaction while the minter is
  // marked for logout (which ends the token) and that mark commits.
  const held = await holdRows(api.db, sql`select 1 from departments where tenant_id = ${tenant.tenantId} and id = ${department.id} for update`);
  const patch = wire.send({
    method: 'PATCH',
    url: `/scim/v2/Groups/${department.id}`,
    headers: { ...bearer(body.token), 'content-type': 'application/scim+json' },
    payload: JSON.stringify({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'add', path: 'members', value: [{ value: String(accomplice.id) }] }],
    }),
  });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the PATCH waits for the group');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await scim(body.token)).statusCode, 401, 'the token has stopped working');
  await held.release();
  t.equal((await patch).statusCode, 401, 'the PATCH found its token ended');
  const members = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from department_users where tenant_id = ${tenant.tenantId} and department_id = ${department.id}`,
  );
  t.equal(members[0]!.n, 0, 'the accomplice was not made a member');
});

t.test('a group write under way when its minter loses departments.manage is refused: it adds no member', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: [...MINTER, 'departments.manage'] });
  const accomplice = await api.createUser(tenant.tenantId, { username: 'scim-group-accomplice-2' });
  const department = await createDepartment(api.db, tenant.tenantId, 'Vault keepers 2');
  const { body } = await create(t, { name: 'demoted-groups' }, delegate.token);
  const held = await holdRows(api.db, sql`select 1 from departments where tenant_id = ${tenant.tenantId} and id = ${department.id} for update`);
  const patch = wire.send({
    method: 'PATCH',
    url: `/scim/v2/Groups/${department.id}`,
    headers: { ...bearer(body.token), 'content-type': 'application/scim+json' },
    payload: JSON.stringify({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
      Operations: [{ op: 'add', path: 'members', value: [{ value: String(accomplice.id) }] }],
    }),
  });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the PATCH waits for the group');
  // The minter's role loses departments.manage, and that change commits while the PATCH waits.
  await api.db.owner.execute(
    sql`update roles set permissions = array_remove(permissions, 'departments.manage') where id = (select role_id from users where id = ${delegate.id})`,
  );
  await held.release();
  t.equal((await patch).statusCode, 403, 'the PATCH found the permission gone');
  const members = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from department_users where tenant_id = ${tenant.tenantId} and department_id = ${department.id}`,
  );
  t.equal(members[0]!.n, 0, 'the accomplice was not made a member');
});

/**
 * Sends `send` (a SCIM write of `token`) while the token's row is held, so that it waits at its first statement, and
 * answers its answer once `meanwhile` (a change of the minter's permissions, answered) is done and the row released.
 */
async function writeWhileMinterChanges(
  t: Tt,
  token: { id: number },
  send: () => Promise<{ statusCode: number; body: string }>,
  meanwhile: () => Promise<void>,
) {
  const held = await holdRows(api.db, sql`select 1 from scim_tokens where tenant_id = ${tenant.tenantId} and id = ${token.id} for update`);
  const write = send();
  t.ok((await lockWaiters(api.db, 'for key share')) > 0, 'the write waits for its token');
  await meanwhile();
  await held.release();
  return write;
}

t.test('a user created while its minter loses a permission the default role grants is refused: 403, no user', async (t) => {
  const [granting] = await api.db.owner.execute<{ id: number }>(
    sql`insert into roles (tenant_id, name, permissions) values (${tenant.tenantId}, 'Auditing newcomers', '{audit.view}') returning id::int`,
  );
  await api.db.owner.execute(sql`insert into scim_settings (tenant_id, default_role_id) values (${tenant.tenantId}, ${granting!.id})
    on conflict (tenant_id) do update set default_role_id = excluded.default_role_id`);
  t.teardown(() => api.db.owner.execute(sql`delete from scim_settings where tenant_id = ${tenant.tenantId}`));
  const delegate = await api.createUser(tenant.tenantId, { permissions: [...MINTER, 'audit.view'] });
  const roleId = (await api.call(t, 'getCurrentUser', { token: delegate.token })).body.role_id as number;
  const { body: token } = await create(t, { name: 'newcomers' }, delegate.token);
  const created = await writeWhileMinterChanges(
    t,
    token,
    () =>
      wire.send({
        method: 'POST',
        url: '/scim/v2/Users',
        headers: { ...bearer(token.token), 'content-type': 'application/scim+json' },
        payload: JSON.stringify({
          schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
          userName: 'scim-auditing-newcomer',
          name: { givenName: 'Ada', familyName: 'Newcomer' },
        }),
      }),
    async () => {
      const demoted = await api.call(t, 'updateRole', { token: admin, params: { role: roleId }, body: { permissions: MINTER } });
      t.equal(demoted.status, 200, "the minter's audit.view is taken away, and that is answered");
    },
  );
  t.equal(created.statusCode, 403, `the create found the permission gone: ${created.body}`);
  t.match(JSON.parse(created.body), { status: '403', detail: /permissions changed/ }, 'a SCIM error naming why');
  t.equal(await rowCount(api.db, 'users', sql`username = 'scim-auditing-newcomer'`), 0, 'no user was created');
});

t.test("members added while the minter loses what lets them confer a form's rights are refused: 403, no member", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: [...MINTER, 'departments.manage', 'tasks.administer'] });
  const roleId = (await api.call(t, 'getCurrentUser', { token: delegate.token })).body.role_id as number;
  const accomplice = await api.createUser(tenant.tenantId, { username: 'scim-form-accomplice' });
  const department = await createDepartment(api.db, tenant.tenantId, 'Salary readers');
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Salaries',
      form_type: 'survey',
      fields: [{ name: 'Salary', field_type: 'number' }],
      entity_permissions: { department_ids: [department.id] },
    },
  });
  t.equal(form.status, 201, 'a form names the department');
  const { body: token } = await create(t, { name: 'forms' }, delegate.token);
  const added = await writeWhileMinterChanges(
    t,
    token,
    () =>
      wire.send({
        method: 'PATCH',
        url: `/scim/v2/Groups/${department.id}`,
        headers: { ...bearer(token.token), 'content-type': 'application/scim+json' },
        payload: JSON.stringify({
          schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
          Operations: [{ op: 'add', path: 'members', value: [{ value: String(accomplice.id) }] }],
        }),
      }),
    async () => {
      const demoted = await api.call(t, 'updateRole', { token: admin, params: { role: roleId }, body: { permissions: [...MINTER, 'departments.manage'] } });
      t.equal(demoted.status, 200, "the minter's tasks.administer is taken away, and that is answered");
    },
  );
  t.equal(added.statusCode, 403, `the PATCH found the permission gone: ${added.body}`);
  t.match(JSON.parse(added.body), { status: '403', detail: /permissions changed/ }, 'a SCIM error naming why');
  t.equal(await rowCount(api.db, 'department_users', sql`department_id = ${department.id}`), 0, 'the accomplice was not made a member');
});

t.test('a token stops working when its minter loses users.administer (changed through this process: at once)', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const { body } = await create(t, { name: 'delegated' }, delegate.token);
  t.equal((await scim(body.token)).statusCode, 200);
  const roleId = (await api.call(t, 'getCurrentUser', { token: delegate.token })).body.role_id as number;
  t.equal((await api.call(t, 'updateRole', { token: admin, params: { role: roleId }, body: { permissions: [] } })).status, 200);
  t.equal((await scim(body.token)).statusCode, 401);
});

t.test('an expired token is refused', async (t) => {
  const { body } = await create(t, { name: 'short', expires_in: 60 });
  await api.db.owner.execute(sql`update scim_tokens set expires_at = now() - interval '1 second' where id = ${body.id}`);
  t.equal((await scim(body.token)).statusCode, 401);
});

t.test('minting and revoking are audited without the value', async (t) => {
  const { body } = await create(t, { name: 'audited' });
  await api.call(t, 'deleteScimToken', { token: admin, params: { scimTokenId: body.id } });
  const rows = await api.db.owner.execute<{ action: string; text: string }>(
    sql`select action, row_to_json(a)::text as text from audit_events a where target_type = 'scim_token' and target_id = ${String(body.id)} order by id`,
  );
  t.same(rows.map((row) => row.action).sort(), ['scim_token.created', 'scim_token.revoked']);
  t.notOk(
    rows.some((row) => row.text.includes(body.token)),
    'the value is not in the trail',
  );
});
