import t from 'tap';
import { sql } from 'drizzle-orm';
import { PERMISSIONS } from '../../../src/platform/auth/permissions.ts';
import { newLoginTokenValue } from '../../../src/resources/login-tokens/token-value.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { loginTokenRow, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('tokens');
const other = await api.createTenant('tokens-other');
const admin = tenant.adminToken;

type Tt = Parameters<typeof api.call>[0];
const tokenCount = () => rowCount(api.db, 'user_login_tokens');
const tokenRow = (uuid: string) => loginTokenRow(api.db, uuid);
const create = (tt: Tt, body: unknown, token = admin) => api.call(tt, 'createUserLoginToken', { token, body });
const signIn = (tt: Tt, value: unknown) => api.call(tt, 'loginWithToken', { body: { token: value } });

t.test('bad creation input is a 422 and stores nothing', async (t) => {
  const before = await tokenCount();
  const bodies: unknown[] = [
    {},
    { expires_in: 0 },
    { expires_in: 86401 },
    { expires_in: -5 },
    { expires_in: 1.5 },
    { expires_in: '60' },
    { expires_in: null },
    { expires_in: 60, login_user_id: 1 },
  ];
  for (const body of bodies) {
    const res = await create(t, body);
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors, 'names the field');
  }
  const emailBodies: unknown[] = [
    { expires_in: 60 },
    { email: 'a@example.com' },
    { expires_in: 86401, email: 'a@example.com' },
    { expires_in: 60, email: 'not an address' },
    { expires_in: 60, email: 'nobody@example.com' },
  ];
  for (const body of emailBodies) {
    const res = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body });
    t.equal(res.status, 422, JSON.stringify(body));
  }
  t.equal((await api.call(t, 'createUserLoginToken', { token: admin, payload: '{"expires_in":', contentType: 'application/json' })).status, 400);
  t.equal(await tokenCount(), before, 'nothing stored');
});

t.test('expires_in accepts exactly 1 through 86400 seconds', async (t) => {
  for (const seconds of [1, 86400]) {
    const res = await create(t, { expires_in: seconds });
    t.equal(res.status, 201, String(seconds));
    const lifetime = Date.parse(res.body.expires_at) - Date.parse(res.body.created_at);
    t.ok(Math.abs(lifetime - seconds * 1000) < 1000, `lives ${seconds} s`);
  }
});

t.test('every login-token route needs login-tokens.administer', async (t) => {
  const plain = await api.createUser(tenant.tenantId, { permissions: ['users.administer'] });
  const uuid = '00000000-0000-4000-8000-000000000000';
  t.equal((await api.call(t, 'listUserLoginTokens', { token: plain.token })).status, 403);
  t.equal((await api.call(t, 'getUserLoginToken', { token: plain.token, params: { userLoginToken: uuid } })).status, 403);
  t.equal((await create(t, { expires_in: 60 }, plain.token)).status, 403);
  t.equal((await api.call(t, 'createUserLoginTokenForEmail', { token: plain.token, body: { expires_in: 60, email: 'x@example.com' } })).status, 403);
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: plain.token, params: { userLoginToken: uuid } })).status, 403);
  t.equal((await api.call(t, 'listUserLoginTokens', {})).status, 401);
});

t.test('the plain create signs in the caller, ignores a body user_id and returns the value once', async (t) => {
  const res = await create(t, { expires_in: 600, user_id: 999999 });
  t.equal(res.status, 201);
  t.equal(res.body.user_id, tenant.adminUserId);
  t.equal(res.body.login_user_id, tenant.adminUserId);
  t.equal(res.body.state, 'active');
  t.notOk('id' in res.body, 'no internal id by default');
  t.match(res.body.token, /^alt_[A-Za-z0-9_-]{43}\.[A-Za-z0-9_-]{43}$/);
  const expiresIn = Date.parse(res.body.expires_at) - Date.parse(res.body.created_at);
  t.ok(Math.abs(expiresIn - 600_000) < 1000, 'expires_at = created_at + expires_in');

  const row = await tokenRow(res.body.uuid);
  t.ok(row, 'stored');
  t.notOk(row!.token_hash.toString('utf8').includes(res.body.token), 'only a hash is stored');
  const leaks = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from user_login_tokens where row_to_json(user_login_tokens)::text like ${'%' + res.body.token.slice(4, 30) + '%'}`,
  );
  t.equal(leaks[0]!.n, 0, 'the value is nowhere in the table');

  const shown = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: res.body.uuid } });
  t.equal(shown.status, 200);
  t.notOk('token' in shown.body, 'show never returns the value');
  t.notOk('id' in shown.body);
  const listed = await api.call(t, 'listUserLoginTokens', { token: admin });
  t.ok(listed.body.some((row: { uuid: string }) => row.uuid === res.body.uuid));
  t.notOk(listed.text.includes(res.body.token), 'list never returns the value');
});

t.test('selects can ask for the internal id; relations name creator and login user', async (t) => {
  const created = await create(t, { expires_in: 60 });
  const res = await api.call(t, 'getUserLoginToken', {
    token: admin,
    params: { userLoginToken: created.body.uuid },
    query: { selects: 'id,uuid', relations: 'user|loginUser' },
  });
  t.equal(res.status, 200);
  t.strictSame(Object.keys(res.body).sort(), ['id', 'loginUser', 'user', 'uuid']);
  t.type(res.body.id, 'number');
  t.equal(res.body.user.id, tenant.adminUserId);
  t.equal(res.body.loginUser.username, 'admin');
  const bad = await api.call(t, 'listUserLoginTokens', { token: admin, query: { selects: 'token' } });
  t.equal(bad.status, 422, 'the value is not selectable');
  t.equal((await api.call(t, 'listUserLoginTokens', { token: admin, query: { relations: 'tenant' } })).status, 422);
});

t.test('a list costs a constant number of queries, whatever the number of tokens', async (t) => {
  const count = async () => {
    const before = api.db.queryCount;
    const res = await api.call(t, 'listUserLoginTokens', { token: admin, query: { relations: 'user|loginUser' } });
    t.equal(res.status, 200);
    return api.db.queryCount - before;
  };
  const few = await count();
  for (let i = 0; i < 5; i++) await create(t, { expires_in: 60 });
  t.equal(await count(), few);
});

t.test('a login token signs its user in once; the used token stays listed as used', async (t) => {
  const created = await create(t, { expires_in: 600 });
  const res = await signIn(t, created.body.token);
  t.equal(res.status, 200);
  t.equal(res.body.token_type, 'Bearer');
  const me = await api.call(t, 'getCurrentUser', { token: res.body.access_token });
  t.equal(me.status, 200);
  t.equal(me.body.id, tenant.adminUserId);
  t.ok(me.body.last_login_at, 'last_login_at stamped');

  const replay = await signIn(t, created.body.token);
  t.equal(replay.status, 401, 'a replay is refused');
  const row = await tokenRow(created.body.uuid);
  t.ok(row!.used_at && row!.deleted_at, 'soft-deleted on use');
  const shown = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: created.body.uuid } });
  t.equal(shown.body.state, 'used');
  t.ok(shown.body.deleted_at);
});

t.test('two concurrent uses of one token give exactly one success', async (t) => {
  for (let round = 0; round < 3; round++) {
    const created = await create(t, { expires_in: 600 });
    const before = (await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from access_tokens`))[0]!.n;
    const answers = await Promise.all([signIn(t, created.body.token), signIn(t, created.body.token)]);
    t.strictSame(answers.map((a) => a.status).sort(), [200, 401], `round ${round}`);
    const after = (await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from access_tokens`))[0]!.n;
    t.equal(after - before, 1, 'one access token issued');
  }
});

t.test('deleted, expired, forged and unknown tokens are refused with the same 401 and nothing changes', async (t) => {
  const deleted = await create(t, { expires_in: 600 });
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params: { userLoginToken: deleted.body.uuid } })).status, 204);
  const expired = await create(t, { expires_in: 600 });
  await api.db.owner.execute(sql`update user_login_tokens set expires_at = now() - interval '1 second' where uuid = ${expired.body.uuid}`);
  const valid = await create(t, { expires_in: 600 });
  const value: string = valid.body.token;
  const flipped = value.slice(0, -1) + (value.endsWith('A') ? 'B' : 'A');
  const unsigned = [
    flipped, // broken signature
    value.slice(0, 20), // truncated
    'alt_' + 'A'.repeat(43) + '.' + 'A'.repeat(43), // another instance's or made-up signature
  ];
  const unknown = newLoginTokenValue(api.atrium.services.secrets); // well signed, never stored
  const candidates = [deleted.body.token, expired.body.token, ...unsigned, unknown, ''];
  const bodies = new Set<string>();
  const statements = new Map<string, number>();
  for (const candidate of candidates) {
    const before = api.db.queryCount;
    const res = await signIn(t, candidate);
    statements.set(candidate, api.db.queryCount - before);
    if (candidate === '') {
      t.equal(res.status, 422, 'empty value');
      continue;
    }
    t.equal(res.status, 401);
    bodies.add(res.text);
  }
  t.equal(bodies.size, 1, 'one and the same answer');
  // A value without this instance's signature never reaches the database (the attempt count aside, kept outside transactions).
  t.strictSame(
    unsigned.map((candidate) => statements.get(candidate)),
    unsigned.map(() => 0),
    'no statement for an unsigned value',
  );
  t.ok(statements.get(unknown)! > 0, 'a well-signed unknown value is looked up (the count sees the lookup)');
  t.equal((await tokenRow(valid.body.uuid))!.used_at, null, 'the genuine token is untouched');
  t.equal((await tokenRow(expired.body.uuid))!.deleted_at, null, 'expired stays as it was');
  const state = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: expired.body.uuid } });
  t.equal(state.body.state, 'expired');
  t.equal((await signIn(t, value)).status, 200, 'the genuine token still works');
});

t.test('a token whose user became inactive or deleted signs nobody in and stays unused', async (t) => {
  const employee = await api.createUser(tenant.tenantId, { values: { email: 'soon-inactive@example.com' } });
  const created = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 600, email: 'soon-inactive@example.com' } });
  t.equal(created.status, 201);
  await api.db.owner.execute(sql`update users set active = false where id = ${employee.id}`);
  t.equal((await signIn(t, created.body.token)).status, 401);
  t.equal((await tokenRow(created.body.uuid))!.used_at, null);
  await api.db.owner.execute(sql`update users set active = true where id = ${employee.id}`);
  const res = await signIn(t, created.body.token);
  t.equal(res.status, 200, 'usable again once reactivated');
});

t.test('the e-mail create resolves the address (case-insensitively) to login_user_id', async (t) => {
  const employee = await api.createUser(tenant.tenantId, { values: { email: 'Jane.Doe@Example.com' } });
  const res = await api.call(t, 'createUserLoginTokenForEmail', {
    token: admin,
    body: { expires_in: 120, email: 'jane.doe@example.com', user_id: employee.id },
  });
  t.equal(res.status, 201);
  t.equal(res.body.login_user_id, employee.id);
  t.equal(res.body.user_id, tenant.adminUserId, 'the creator, whatever the body says');
  const signedIn = await signIn(t, res.body.token);
  t.equal(signedIn.status, 200);
  const me = await api.call(t, 'getCurrentUser', { token: signedIn.body.access_token });
  t.equal(me.body.id, employee.id);
});

t.test('every unusable address gets one and the same 422: nothing tells whether it exists or what its user may do', async (t) => {
  const creator = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
  await api.createUser(tenant.tenantId, { values: { email: 'gone@example.com', deletedAt: new Date() } });
  await api.createUser(tenant.tenantId, { values: { email: 'idle@example.com', active: false } });
  await api.createUser(tenant.tenantId, { values: { email: 'twice@example.com' } });
  await api.createUser(tenant.tenantId, { values: { email: 'TWICE@example.com' } });
  await api.createUser(tenant.tenantId, { permissions: [...PERMISSIONS], values: { email: 'mighty@example.com' } });
  await api.createUser(other.tenantId, { values: { email: 'elsewhere@example.com' } });
  const before = await tokenCount();
  const bodies = new Set<string>();
  for (const email of ['nobody@example.com', 'gone@example.com', 'idle@example.com', 'twice@example.com', 'mighty@example.com', 'elsewhere@example.com']) {
    const res = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 60, email } });
    t.equal(res.status, 422, email);
    t.ok(res.body.errors.email);
    t.notMatch(res.text, /(users|tasks|notifications|automations|departments|menu-items)\.[a-z]/, 'names no permission');
    bodies.add(res.text);
  }
  t.equal(bodies.size, 1, 'identical answers');
  t.equal(await tokenCount(), before, 'nothing stored');
});

t.test('the e-mail create needs users.view-personal: without it nothing is looked up', async (t) => {
  const blind = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view'] });
  await api.createUser(tenant.tenantId, { values: { email: 'known@example.com' } });
  const before = await tokenCount();
  const answers = [];
  for (const email of ['known@example.com', 'unknown@example.com']) {
    const res = await api.call(t, 'createUserLoginTokenForEmail', { token: blind.token, body: { expires_in: 60, email } });
    t.equal(res.status, 403, email);
    t.match(res.body.detail, /users\.view-personal/);
    answers.push(res.text);
  }
  t.equal(answers[0], answers[1], 'an existing and an unknown address get the same answer');
  t.equal(await tokenCount(), before);
  t.equal((await create(t, { expires_in: 60 }, blind.token)).status, 201, 'a token for oneself needs no more');
});

t.test('no token for a user holding a permission the creator lacks', async (t) => {
  const creator = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
  await api.createUser(tenant.tenantId, { permissions: ['users.administer'], values: { email: 'above@example.com' } });
  await api.createUser(tenant.tenantId, { permissions: ['users.view'], values: { email: 'peer@example.com' } });
  const before = await tokenCount();
  const refused = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 60, email: 'above@example.com' } });
  t.equal(refused.status, 422);
  t.ok(refused.body.errors.email);
  t.equal(await tokenCount(), before, 'nothing stored');
  const allowed = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 60, email: 'peer@example.com' } });
  t.equal(allowed.status, 201, 'a subset of the creator’s permissions is fine');
  const self = await create(t, { expires_in: 60 }, creator.token);
  t.equal(self.status, 201, 'oneself is always allowed');
});

t.test('an inactive role is judged by what it lists: no token for its holder, and none is consumed once it is assigned', async (t) => {
  const creator = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
  const dormant = await api.createUser(tenant.tenantId, { permissions: ['users.administer'], values: { email: 'dormant@example.com' } });
  await api.db.owner.execute(sql`update roles set active = false where id = (select role_id from users where id = ${dormant.id})`);
  const before = await tokenCount();
  const refused = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 60, email: 'dormant@example.com' } });
  t.equal(refused.status, 422, 'the role grants nothing today, but users.administer once reactivated');
  t.equal(await tokenCount(), before, 'nothing stored');

  const employee = await api.createUser(tenant.tenantId, { permissions: ['users.view'], values: { email: 'soon-dormant@example.com' } });
  const created = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 600, email: 'soon-dormant@example.com' } });
  t.equal(created.status, 201);
  // Named by its tenant: Citus takes a subquery among an update's values only on one shard.
  await api.db.owner.execute(
    sql`update users set role_id = (select role_id from users where tenant_id = ${tenant.tenantId} and id = ${dormant.id}) where tenant_id = ${tenant.tenantId} and id = ${employee.id}`,
  );
  t.equal((await signIn(t, created.body.token)).status, 401, 'the user now holds an inactive role listing a permission the creator lacks');
  t.equal((await tokenRow(created.body.uuid))!.used_at, null, 'left unused');
});

t.test('a token dies with its creator’s authority: creator deleted, deactivated or stripped of a needed permission', async (t) => {
  let n = 0;
  /** A creator, a token it made for an employee holding `users.view`, and the creator's role id. */
  const setUp = async () => {
    const creator = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
    const email = `target-${++n}@example.com`;
    const target = await api.createUser(tenant.tenantId, { permissions: ['users.view'], values: { email } });
    const created = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 600, email } });
    t.equal(created.status, 201);
    const [row] = await api.db.owner.execute<{ role_id: number }>(sql`select role_id from users where id = ${creator.id}`);
    return { creator, target, value: created.body.token as string, uuid: created.body.uuid as string, roleId: row!.role_id };
  };
  const refusedBody = (await signIn(t, newLoginTokenValue(api.atrium.services.secrets))).text;

  const deleted = await setUp();
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: deleted.creator.id } })).status, 204);
  const res = await signIn(t, deleted.value);
  t.equal(res.status, 401, 'creator deleted');
  t.equal(res.text, refusedBody, 'answered like any invalid token');

  const deactivated = await setUp();
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: deactivated.creator.id }, body: { active: false } })).status, 200);
  t.equal((await signIn(t, deactivated.value)).status, 401, 'creator deactivated');

  const demoted = await setUp();
  await api.db.owner.execute(sql`update roles set permissions = array['users.view', 'users.view-personal'] where id = ${demoted.roleId}`);
  t.equal((await signIn(t, demoted.value)).status, 401, 'creator lost login-tokens.administer');

  const outranked = await setUp();
  await api.db.owner.execute(sql`update roles set permissions = array['login-tokens.administer'] where id = ${outranked.roleId}`);
  t.equal((await signIn(t, outranked.value)).status, 401, 'the user holds a permission (users.view) the creator no longer holds');

  const roleOff = await setUp();
  await api.db.owner.execute(sql`update roles set active = false where id = ${roleOff.roleId}`);
  t.equal((await signIn(t, roleOff.value)).status, 401, 'the creator’s role was deactivated (it grants nothing)');

  for (const refused of [deleted, deactivated, demoted, outranked, roleOff]) {
    t.equal((await tokenRow(refused.uuid))!.used_at, null, 'left unused');
  }
  const intact = await setUp();
  const ok = await signIn(t, intact.value);
  t.equal(ok.status, 200, 'a creator who still holds it all signs the user in');
  t.equal((await api.call(t, 'getCurrentUser', { token: ok.body.access_token })).body.id, intact.target.id);
});

t.test('a new role for the creator or the user revokes the pending tokens: the old role given back revives none', async (t) => {
  const delegateRole = await api.call(t, 'createRole', {
    token: admin,
    body: { name: 'Token issuers', permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] },
  });
  const employee = (await api.call(t, 'listRoles', { token: admin })).body.find((role: { name: string }) => role.name === 'Employee');
  const setRole = async (userId: number, roleId: number) =>
    t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: userId }, body: { role_id: roleId } })).status, 200);
  const creator = await api.createUser(tenant.tenantId, { values: { roleId: delegateRole.body.id } });
  const target = await api.createUser(tenant.tenantId, { values: { roleId: employee.id, email: 'role-change@example.com' } });
  const mint = async () => {
    const created = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 600, email: 'role-change@example.com' } });
    t.equal(created.status, 201);
    return created.body as { token: string; uuid: string };
  };
  const creatorsToken = await mint();
  await setRole(creator.id, employee.id);
  await setRole(creator.id, delegateRole.body.id);
  t.equal((await signIn(t, creatorsToken.token)).status, 401, "the creator's role changed and came back: the token stays dead");
  const revoked = (await tokenRow(creatorsToken.uuid))!;
  t.ok(revoked.deleted_at && revoked.used_at === null, 'listed as deleted, never used');

  const usersToken = await mint();
  await setRole(target.id, delegateRole.body.id);
  await setRole(target.id, employee.id);
  t.equal((await signIn(t, usersToken.token)).status, 401, "the user's role changed and came back: the token stays dead");

  const kept = await mint();
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: target.id }, body: { role_id: employee.id } })).status, 200);
  t.equal((await signIn(t, kept.token)).status, 200, 'the same role sent again changes nothing');
});

t.test("a creator's role deactivated or losing a permission revokes the tokens its holders created: giving it back revives none", async (t) => {
  const permissions = ['login-tokens.administer', 'users.view', 'users.view-personal'];
  const role = await api.call(t, 'createRole', { token: admin, body: { name: 'Suspended issuers', permissions } });
  t.equal(role.status, 201);
  const creator = await api.createUser(tenant.tenantId, { values: { roleId: role.body.id } });
  await api.createUser(tenant.tenantId, { values: { email: 'suspended-issuer@example.com' } });
  const mint = async () => {
    const created = await api.call(t, 'createUserLoginTokenForEmail', {
      token: creator.token,
      body: { expires_in: 600, email: 'suspended-issuer@example.com' },
    });
    t.equal(created.status, 201);
    return created.body as { token: string; uuid: string };
  };
  const updateRole = async (body: { active?: boolean; permissions?: string[]; name?: string }) =>
    t.equal((await api.call(t, 'updateRole', { token: admin, params: { role: role.body.id }, body })).status, 200);

  const deactivated = await mint();
  await updateRole({ active: false });
  await updateRole({ active: true });
  t.equal((await signIn(t, deactivated.token)).status, 401, 'the role deactivated and reactivated: the token stays dead');
  const revoked = (await tokenRow(deactivated.uuid))!;
  t.ok(revoked.deleted_at && revoked.used_at === null, 'listed as deleted, never used');

  for (const lost of permissions) {
    const token = await mint();
    await updateRole({ permissions: permissions.filter((permission) => permission !== lost) });
    await updateRole({ permissions });
    t.equal((await signIn(t, token.token)).status, 401, `${lost} taken and given back: the token stays dead`);
  }

  // What takes nothing away revokes nothing: a new name, a permission added, the same permissions in another order.
  const kept = await mint();
  await updateRole({ name: 'Suspended issuers, renamed' });
  await updateRole({ permissions: [...permissions, 'notifications.send'] });
  await updateRole({ permissions: [...permissions, 'notifications.send'].reverse() });
  t.equal((await tokenRow(kept.uuid))!.deleted_at, null, 'a change that takes nothing away leaves the token');
  t.equal((await signIn(t, kept.token)).status, 200, 'and it signs the user in');
});

t.test('a token dies when its user is marked for logout after it was created', async (t) => {
  const employee = await api.createUser(tenant.tenantId, { values: { email: 'marked@example.com' } });
  const before = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 600, email: 'marked@example.com' } });
  t.equal(before.status, 201);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: employee.id } })).status, 204);
  t.equal((await signIn(t, before.body.token)).status, 401, 'created before the mark');
  const after = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 600, email: 'marked@example.com' } });
  t.equal((await signIn(t, after.body.token)).status, 200, 'created after the mark');
});

t.test('malformed UUIDs are 422 and missing ones 404, never 500', async (t) => {
  for (const bad of ['not-a-uuid', '123', "'; drop table users; --"]) {
    t.equal((await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: bad } })).status, 422, bad);
    t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params: { userLoginToken: bad } })).status, 422, bad);
  }
  const missing = '7b0c2a3e-1f6d-4c1e-9a53-2a1f0b6c9d10';
  t.equal((await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: missing } })).status, 404);
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params: { userLoginToken: missing } })).status, 404);
});

t.test('another tenant’s token is answered like a missing one and cannot be deleted', async (t) => {
  const foreign = await create(t, { expires_in: 600 }, other.adminToken);
  t.equal(foreign.status, 201);
  const params = { userLoginToken: foreign.body.uuid };
  t.equal((await api.call(t, 'getUserLoginToken', { token: admin, params })).status, 404);
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params })).status, 404);
  const listed = await api.call(t, 'listUserLoginTokens', { token: admin });
  t.notOk(listed.body.some((row: { uuid: string }) => row.uuid === foreign.body.uuid));
  t.equal((await tokenRow(foreign.body.uuid))!.deleted_at, null, 'untouched');
  // It signs in its own tenant's user, in its own tenant only.
  const res = await signIn(t, foreign.body.token);
  t.equal(res.status, 200);
  const me = await api.call(t, 'getCurrentUser', { token: res.body.access_token });
  t.equal(me.body.id, other.adminUserId);
});

t.test('DELETE soft-deletes; the token stays listed and a second DELETE changes nothing', async (t) => {
  const created = await create(t, { expires_in: 600 });
  const params = { userLoginToken: created.body.uuid };
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params })).status, 204);
  const first = (await tokenRow(created.body.uuid))!.deleted_at;
  t.ok(first);
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params })).status, 204);
  t.strictSame((await tokenRow(created.body.uuid))!.deleted_at, first, 'deletion time kept');
  const listed = await api.call(t, 'listUserLoginTokens', { token: admin });
  const row = listed.body.find((r: { uuid: string }) => r.uuid === created.body.uuid);
  t.equal(row.state, 'deleted');
  t.ok(row.deleted_at);
  t.equal(row.used_at, null);
});

t.test('failed token sign-ins count towards the client-address limit (429 with Retry-After)', async (t) => {
  const created = await create(t, { expires_in: 600 });
  await api.db.owner.execute(sql`
    insert into login_failures (key, failures, window_started_at) values ('ip:127.0.0.1', 1000, now())
    on conflict (key) do update set failures = 1000, window_started_at = now()`);
  const limited = await signIn(t, created.body.token);
  t.equal(limited.status, 429);
  t.ok(Number(limited.headers['retry-after']) > 0);
  t.equal((await tokenRow(created.body.uuid))!.used_at, null, 'not consumed while limited');
  await api.db.owner.execute(sql`delete from login_failures where key = 'ip:127.0.0.1'`);
  const before = await signIn(t, 'alt_' + 'B'.repeat(43) + '.' + 'B'.repeat(43));
  t.equal(before.status, 401);
  const [row] = await api.db.owner.execute<{ failures: number }>(sql`select failures from login_failures where key = 'ip:127.0.0.1'`);
  t.equal(row!.failures, 1, 'the failure was counted');
  t.equal((await signIn(t, created.body.token)).status, 200);
});

t.test('a password change revokes the user’s pending login tokens: own change and administrator reset', async (t) => {
  // A token the user minted for themselves (say, from a stolen session) dies with their own change.
  const self = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer'], password: 'the first password' });
  const minted = await create(t, { expires_in: 86400 }, self.token);
  t.equal(minted.status, 201);
  const changed = await api.call(t, 'updateUser', {
    token: self.token,
    params: { user: self.id },
    body: { password: 'the second password', old_password: 'the first password' },
  });
  t.equal(changed.status, 200);
  t.equal((await signIn(t, minted.body.token)).status, 401, 'own change');
  const shown = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: minted.body.uuid } });
  t.equal(shown.body.state, 'deleted', 'listed as revoked');

  // A token for a user, by an administrator, dies with the user's own change and with a reset.
  const target = await api.createUser(tenant.tenantId, { password: 'the first password', values: { email: 'pw-target@example.com' } });
  const forTarget = async () =>
    (await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 600, email: 'pw-target@example.com' } })).body.token as string;
  const beforeOwn = await forTarget();
  const own = await api.call(t, 'updateUser', {
    token: target.token,
    params: { user: target.id },
    body: { password: 'the second password', old_password: 'the first password' },
  });
  t.equal(own.status, 200);
  t.equal((await signIn(t, beforeOwn)).status, 401, 'the target changed their password');
  const beforeReset = await forTarget();
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: target.id }, body: { password: 'a reset password' } })).status, 200);
  t.equal((await signIn(t, beforeReset)).status, 401, 'an administrator reset the password');
  const afterReset = await forTarget();
  t.equal((await signIn(t, afterReset)).status, 200, 'a token created afterwards works');
  const unrelated = await api.call(t, 'updateUser', { token: admin, params: { user: target.id }, body: { city: 'Bonn' } });
  t.equal(unrelated.status, 200, 'an update without a password revokes nothing');
});

t.test('a creator’s logout mark ends the tokens it created for others, at the mark and at use', async (t) => {
  const creator = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
  await api.createUser(tenant.tenantId, { values: { email: 'creator-marked@example.com' } });
  const mint = async () => {
    const res = await api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 600, email: 'creator-marked@example.com' } });
    t.equal(res.status, 201);
    return res.body as { token: string; uuid: string };
  };
  const revoked = await mint();
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: creator.id } })).status, 204);
  t.equal((await signIn(t, revoked.token)).status, 401, 'the creator was marked for logout');
  const shown = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: revoked.uuid } });
  t.equal(shown.body.state, 'deleted', 'revoked by the mark');

  // At use as well: a mark that did not revoke (set directly) is enough.
  const freshSession = await api.tokenFor(tenant.tenantId, creator.id);
  creator.token = freshSession;
  const pending = await mint();
  await api.db.owner.execute(sql`update users set logout_marked_at = (select clock_timestamp()) where id = ${creator.id}`);
  t.equal((await signIn(t, pending.token)).status, 401, 'refused at use');
  t.equal((await tokenRow(pending.uuid))!.used_at, null, 'left unused');
  creator.token = await api.tokenFor(tenant.tenantId, creator.id);
  const after = await mint();
  t.equal((await signIn(t, after.token)).status, 200, 'a token created after the mark works');
});

t.test('the relations user and loginUser need users.view; the users show only the fields the caller may see', async (t) => {
  const tokensOnly = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer'] });
  const created = await create(t, { expires_in: 600 });
  for (const relations of ['user', 'loginUser', 'user|loginUser']) {
    const listed = await api.call(t, 'listUserLoginTokens', { token: tokensOnly.token, query: { relations } });
    t.equal(listed.status, 422, relations);
    t.ok(listed.body.errors.relations);
    const one = await api.call(t, 'getUserLoginToken', { token: tokensOnly.token, params: { userLoginToken: created.body.uuid }, query: { relations } });
    t.equal(one.status, 422, relations);
  }
  const plain = await api.call(t, 'listUserLoginTokens', { token: tokensOnly.token });
  t.equal(plain.status, 200, 'the tokens themselves stay readable');
  t.notOk(plain.text.includes('"username"'), 'no user is shown');

  await api.db.owner.execute(sql`update users set email = 'admin@tokens.example' where id = ${tenant.adminUserId}`);
  const viewer = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view'] });
  const seen = await api.call(t, 'getUserLoginToken', {
    token: viewer.token,
    params: { userLoginToken: created.body.uuid },
    query: { relations: 'user|loginUser' },
  });
  t.equal(seen.status, 200);
  t.equal(seen.body.loginUser.username, 'admin');
  t.notOk('email' in seen.body.loginUser, 'a personal field needs users.view-personal');
  t.notOk('role_id' in seen.body.user, 'an administrative field needs users.view-administrative');
  const personal = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'] });
  const shown = await api.call(t, 'getUserLoginToken', {
    token: personal.token,
    params: { userLoginToken: created.body.uuid },
    query: { relations: 'loginUser' },
  });
  t.equal(shown.body.loginUser.email, 'admin@tokens.example');
});
