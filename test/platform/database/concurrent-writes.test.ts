/**
 * Writes of one record sent at the same moment (docs/tenancy-and-security.md#concurrent-writes-of-one-record):
 * they run one after the other, so none answers 5xx, none writes over what another left,
 * a record deleted meanwhile is not written, and the tenant keeps an administrator. Each
 * case sends its requests together, for several rounds: an interleaving that breaks the
 * rule shows in most rounds when nothing serialises the writes.
 */
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { eraseAuditTrail } from '../../../src/platform/audit/audit.ts';
import { verifyPassword } from '../../../src/platform/auth/passwords.ts';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { scimSettings, scimTokens } from '../../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../../src/resources/scim/tokens.ts';
import { ownerUser, startTestApi, type CallResult } from '../../helpers/atrium.ts';
import { bearer, holdRows, lockWaiters, PAUSES_WRITES, pauseWrites, roleNamed, rowCount, sleep, storeNotification } from '../../helpers/fixtures.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { eventually } from '../../helpers/eventually.ts';
import { multipart, PNG_1X1 } from '../../helpers/multipart.ts';

// Sign-ins refused because a password changed count as failures: not limited here.
const api = await startTestApi(t, { loginMaxFailures: 1_000_000 });
const tenant = await api.createTenant('concurrent');
const admin = tenant.adminToken;
const ROUNDS = 6;

const scimToken = newScimTokenValue();
await api.db.owner.insert(scimTokens).values({ tenantId: tenant.tenantId, userId: tenant.adminUserId, name: 'IdP', tokenHash: hashToken(scimToken) });
await api.db.owner.insert(scimSettings).values({ tenantId: tenant.tenantId, defaultRoleId: (await roleNamed(api.db, tenant.tenantId, 'Employee')).id });
const scim = (method: 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, body?: unknown, token = scimToken) =>
  api.atrium
    .app!.inject({
      method,
      url: `/scim/v2${url}`,
      headers: { ...bearer(token), ...(body === undefined ? {} : { 'content-type': 'application/scim+json' }) },
      payload: body === undefined ? undefined : JSON.stringify(body),
    })
    .then((answer) => ({ status: answer.statusCode, text: answer.body }) as CallResult);
const countOf = async (action: string, targetType: string, id: number) => (await trail(targetType, id)).filter((recorded) => recorded === action).length;

const statuses = (answers: CallResult[]) => answers.map((answer) => answer.status);
const noServerError = (t: Test, answers: CallResult[]) =>
  t.ok(
    answers.every((answer) => answer.status < 500),
    `no 5xx: ${answers.map((answer) => `${answer.status}${answer.status >= 500 ? ` ${answer.text}` : ''}`).join(', ')}`,
  );
/**
 * Where a session waiting on a row lock shows, and the id `pg_cancel_backend` takes: this server's sessions; on Citus
 * every node's (`citus_stat_activity`), since the row is locked, and waited on, on the worker that holds it, and the
 * waiting session's global id (Citus' `pg_cancel_backend(bigint)` cancels it on its node).
 */
const activity = sql.raw(process.env[CITUS_ENV] ? 'citus_stat_activity' : 'pg_stat_activity');
const waiterId = sql.raw(process.env[CITUS_ENV] ? 'global_pid' : 'pid');
/** Cancels the statement of the session `id` (`waiterId`): Citus' overload takes a bigint, PostgreSQL's an integer. */
const cancel = (id: number) => sql`select pg_cancel_backend(${id}::${sql.raw(process.env[CITUS_ENV] ? 'bigint' : 'integer')})`;

/** The actions the trail recorded on a target, oldest first. */
const trail = async (targetType: string, id: number) =>
  (
    await api.db.owner.execute<{ action: string }>(
      sql`select action from audit_events where tenant_id = ${tenant.tenantId} and target_type = ${targetType} and target_id = ${String(id)} order by occurred_at, id`,
    )
  ).map((row) => row.action);

t.test('an update and a delete of a form: the update finds the form or answers 404, and the process lives', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const form = await api.call(t, 'createForm', { token: admin, body: { title: `Form ${round}`, form_type: 'survey' } });
    t.equal(form.status, 201);
    const answers = await Promise.all([
      api.call(t, 'deleteForm', { token: admin, params: { form: form.body.id } }),
      api.call(t, 'updateForm', { token: admin, params: { form: form.body.id }, body: { title: 'Renamed' } }),
    ]);
    noServerError(t, answers);
    t.equal(answers[0]!.status, 204, 'the delete goes through');
    t.ok([200, 404].includes(answers[1]!.status), `the update answers 200 (before the delete) or 404 (after): ${answers[1]!.status}`);
    const updates = (await trail('form', form.body.id)).filter((action) => action === 'form.updated');
    t.equal(updates.length, answers[1]!.status === 200 ? 1 : 0, 'an update is recorded only when it went through');
  }
});

t.test('an update and a delete of a department answer 200 or 404, never 500', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Department ${round}` } });
    t.equal(department.status, 201);
    const params = { department: department.body.id };
    const answers = await Promise.all([
      api.call(t, 'deleteDepartment', { token: admin, params }),
      api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Other ${round}` } }),
      api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Department ${round}`, tags: ['x'] } }),
    ]);
    noServerError(t, answers);
    t.same(
      statuses(answers.slice(1)).filter((status) => status !== 200 && status !== 404),
      [],
      `updates answer 200 or 404: ${statuses(answers).join(', ')}`,
    );
  }
});

t.test('concurrent updates of one department or menu item each keep what they changed', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Kept ${round}` } });
    const params = { department: department.body.id };
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Kept ${round} renamed` } }),
        api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Kept ${round}`, tags: ['kept'] } }),
      ]),
    );
    // An update without `tags` keeps them: whichever went second, the tags the other set stay.
    const stored = await api.call(t, 'getDepartment', { token: admin, params });
    t.same(stored.body.tags, ['kept'], 'the tags are kept');

    const item = await api.call(t, 'createMenuItem', {
      token: admin,
      body: { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Wiki', link: 'https://wiki.example.com/' },
    });
    t.equal(item.status, 201);
    const menuItem = item.body.id;
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { title: 'Handbook' } }),
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { sort_number: 777 } }),
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { link: 'https://handbook.example.com/' } }),
      ]),
    );
    const kept = await api.call(t, 'getAdministeredMenuItem', { token: admin, params: { menuItem } });
    t.match(kept.body, { title: 'Handbook', sort_number: 777, link: 'https://handbook.example.com/' }, 'all three changes are stored');

    const [deleted, updated] = await Promise.all([
      api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem } }),
      api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { title: 'Too late' } }),
    ]);
    t.equal(deleted.status, 204);
    t.ok([200, 404].includes(updated.status), `the update answers 200 (before the delete) or 404 (after): ${updated.status}`);
  }
});

t.test('a blacked-out account is neither written to nor restored by a request that raced the blackout', async (t) => {
  const personal = async (id: number) =>
    (
      await api.db.owner.execute<{ first_name: string | null; email: string | null; deleted_at: Date | null }>(
        sql`select first_name, email, deleted_at from users where id = ${id}`,
      )
    )[0]!;
  for (let round = 0; round < ROUNDS; round++) {
    const updated = await api.createUser(tenant.tenantId, { username: `updated-${round}`, values: { email: `updated-${round}@example.com` } });
    const answers = await Promise.all([
      api.call(t, 'blackoutUser', { token: admin, params: { user: updated.id } }),
      api.call(t, 'updateUser', { token: admin, params: { user: updated.id }, body: { first_name: 'Resurrected', email: 'new@example.com' } }),
    ]);
    noServerError(t, answers);
    t.match(await personal(updated.id), { first_name: null, email: null }, 'no personal data after the blackout');

    const restored = await api.createUser(tenant.tenantId, { username: `restored-${round}` });
    t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: restored.id } })).status, 204);
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'blackoutUser', { token: admin, params: { user: restored.id } }),
        api.call(t, 'restoreUser', { token: admin, params: { user: restored.id } }),
      ]),
    );
    t.not((await personal(restored.id)).deleted_at, null, 'the blacked-out account stays deleted');
  }
});

t.test('a picture uploaded while its account is blacked out is not kept', async (t) => {
  const pictures = (id: number) => rowCount(api.db, 'user_profile_pictures', sql`user_id = ${id}`);
  for (let round = 0; round < 2 * ROUNDS; round++) {
    const target = await api.createUser(tenant.tenantId, { username: `pictured-${round}` });
    const [blackout, upload] = await Promise.all([
      api.call(t, 'blackoutUser', { token: admin, params: { user: target.id } }),
      api.call(t, 'uploadProfilePicture', {
        token: admin,
        params: { user: target.id },
        ...(await multipart({ profile_picture: { content: PNG_1X1, fileName: 'private.png' } })),
      }),
    ]);
    noServerError(t, [blackout, upload]);
    t.equal(blackout.status, 204);
    t.ok([200, 404].includes(upload.status), `the upload answers 200 (before the blackout) or 404: ${upload.status}`);
    t.equal(await pictures(target.id), 0, 'the blacked-out account holds no picture');
  }
});

t.test("a user's own submission waiting behind the user's blackout is refused and stores nothing", async (t) => {
  const leaver = await api.createUser(tenant.tenantId, { username: 'leaving-submitter' });
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Exit survey', fields: [{ name: 'Note', field_type: 'text' }] } });
  const field = String(template.body.fields[0].id);
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: leaver.id } });
  const stored = await api.call(t, 'createSubmission', { token: leaver.token, body: { task_execution_id: execution.body.id, values: { [field]: 'first' } } });
  t.equal(stored.status, 201);
  // A blackout under way: it holds the user's row (its new username takes the key lock) and has erased the values.
  const blackout = await holdRows(
    api.db,
    sql`with erased as (update form_submissions set values = '{}' where tenant_id = ${tenant.tenantId} and user_id = ${leaver.id})
        update users set username = ${`deleted-user-${leaver.id}`}, deleted_at = now() where tenant_id = ${tenant.tenantId} and id = ${leaver.id}`,
  );
  const created = api.call(t, 'createSubmission', { token: leaver.token, body: { task_execution_id: execution.body.id, values: { [field]: 'secret' } } });
  t.equal(await lockWaiters(api.db, ''), 1, 'the submission waits for the row');
  const changed = api.call(t, 'updateSubmission', { token: leaver.token, params: { formSubmission: stored.body.id }, body: { values: { [field]: 'secret' } } });
  t.equal(
    await eventually(
      () => lockWaiters(api.db, ''),
      (n) => n === 2,
    ),
    2,
    'so does the change',
  );
  await blackout.release();
  t.equal((await created).status, 401, 'the submission is refused');
  t.equal((await changed).status, 401, 'so is the change');
  const kept = await api.db.owner.execute<{ values: unknown }>(sql`select values from form_submissions where user_id = ${leaver.id}`);
  t.same(
    kept.map((row) => row.values),
    [{}],
    'only the erased submission is left',
  );
});

t.test("a user's write waiting behind the user's blackout is refused: no event names them after the erasure", async (t) => {
  // The trail's erasure rewrites the events by the person once the blackout commits (docs/audit.md#erasure);
  // an event of theirs committed after it would keep their name for good.
  const reader = await api.createUser(tenant.tenantId, { username: 'leaving-reader', values: { firstName: 'Rita', lastName: 'Reader' } });
  const notification = await storeNotification(api.db, tenant.tenantId, reader.id, new Date());
  const held = await holdRows(api.db, sql`select id from notifications where tenant_id = ${tenant.tenantId} and id = ${notification.id} for update`);
  let seen: Promise<CallResult>;
  try {
    seen = api.call(t, 'updateNotification', { token: reader.token, params: { notification: notification.id }, body: { seen_at: '2026-01-01 10:00:00' } });
    t.equal(await lockWaiters(api.db, 'notifications'), 1, 'the write waits for the row');
    t.equal((await api.call(t, 'blackoutUser', { token: admin, params: { user: reader.id } })).status, 204, 'the blackout commits meanwhile');
  } finally {
    await held.release();
  }
  t.equal((await seen).status, 401, 'the write is refused');
  const events = await api.db.owner.execute<{ action: string }>(
    sql`select action from audit_events where tenant_id = ${tenant.tenantId} and actor_type = 'user' and actor_id = ${reader.id}`,
  );
  t.same(
    events.map((event) => event.action),
    [],
    'no event by the user',
  );
  const [row] = await api.db.owner.execute<{ seen_at: Date | null }>(sql`select seen_at from notifications where id = ${notification.id}`);
  t.equal(row?.seen_at ?? null, null, 'nothing was marked');
});

t.test("the user's blackout waits for a write of theirs that holds the account: the erasure rewrites its event", PAUSES_WRITES, async (t) => {
  // The other order: the write has taken its hold and is about to commit. A constraint trigger of the test's holds
  // the write's COMMIT (on a lock the test owns) until the blackout has had its chance to run.
  const reader = await api.createUser(tenant.tenantId, { username: 'held-reader', values: { firstName: 'Hilda', lastName: 'Holder' } });
  const notification = await storeNotification(api.db, tenant.tenantId, reader.id, new Date());
  const commitHeld = await pauseWrites(t, api.db, {
    name: 'test_hold_commit',
    trigger: 'constraint trigger test_hold_commit after insert on audit_events deferrable initially deferred',
    condition: `new.actor_id = ${reader.id}`,
    key: 4242,
  });
  let seen!: Promise<CallResult>;
  let blackout!: Promise<CallResult>;
  try {
    seen = api.call(t, 'updateNotification', { token: reader.token, params: { notification: notification.id }, body: { seen_at: '2026-01-01 10:00:00' } });
    t.equal(await lockWaiters(api.db, 'commit'), 1, "the write's commit waits");
    blackout = api.call(t, 'blackoutUser', { token: admin, params: { user: reader.id } });
    t.equal(await lockWaiters(api.db, 'pg_advisory_xact_lock(hashtext'), 1, 'the blackout waits for the account the write holds');
  } finally {
    await commitHeld.release();
  }
  t.equal((await seen).status, 200, 'the write commits first');
  t.equal((await blackout).status, 204, 'then the blackout');
  // The erasure's job, as a worker runs it after the blackout (this file starts none).
  t.ok((await eraseAuditTrail(api.db, tenant.tenantId, reader.id)) > 0, 'the erasure rewrites events');
  const labels = (
    await api.db.owner.execute<{ label: string }>(
      sql`select actor_label as label from audit_events where tenant_id = ${tenant.tenantId} and action = 'notification.seen' and actor_id = ${reader.id}`,
    )
  ).map((row) => row.label);
  t.same(labels, [`deleted-user-${reader.id}`], "the erasure rewrote the write's event");
});

t.test("a user's write of a row their blackout also writes, and that blackout, both go through: no deadlock", PAUSES_WRITES, async (t) => {
  // The delete of a push subscription holds its row, then its event holds the account; the blackout writes the account,
  // then waits for that row (it deletes the person's subscriptions). The blackout takes the account's lock only after
  // its writes, so the delete does not wait for the blackout while the blackout waits for it (PostgreSQL would end one
  // of the two as a deadlock).
  const leaver = await api.createUser(tenant.tenantId, { username: 'busy-subscriber' });
  const [subscription] = await api.db.owner.execute<{ id: number }>(
    sql`insert into push_subscriptions (tenant_id, user_id, endpoint, p256dh, auth)
        values (${tenant.tenantId}, ${leaver.id}, 'https://push.example.test/busy', 'key', 'secret') returning id`,
  );
  // The delete pauses right after removing the row (on a lock the test owns), holding it.
  const paused = await pauseWrites(t, api.db, {
    name: 'test_pause_unsubscribe',
    trigger: 'trigger test_pause_unsubscribe after delete on push_subscriptions',
    condition: `old.user_id = ${leaver.id}`,
    key: 4243,
  });
  let unsubscribed!: Promise<CallResult>;
  let blackout!: Promise<CallResult>;
  try {
    unsubscribed = api.call(t, 'deletePushSubscription', { token: leaver.token, params: { subscription: subscription!.id } });
    t.equal(await lockWaiters(api.db, 'push_subscriptions'), 1, 'the delete holds the subscription');
    blackout = api.call(t, 'blackoutUser', { token: admin, params: { user: leaver.id } });
    t.equal(
      await eventually(
        () => lockWaiters(api.db, 'push_subscriptions'),
        (n) => n === 2,
      ),
      2,
      'the blackout waits for the subscription',
    );
  } finally {
    await paused.release();
  }
  t.equal((await unsubscribed).status, 204, 'the delete commits first');
  t.equal((await blackout).status, 204, 'then the blackout');
});

t.test('an automation run while the automation is deleted answers 404, not a broken reference', async (t) => {
  const created = await api.call(t, 'createAutomation', {
    token: admin,
    body: { name: 'leaving hook', config: { url: 'http://93.184.215.14/hook', headers: {} } }, // an IP literal: valid without DNS, never called
  });
  t.equal(created.status, 201);
  const automation = created.body.id as number;
  const deleting = await holdRows(api.db, sql`delete from automations where id = ${automation}`);
  const run = api.call(t, 'runAutomation', { token: admin, params: { automation }, body: {} });
  t.equal(await lockWaiters(api.db, ''), 1, 'the run waits for the delete');
  await deleting.release();
  t.equal((await run).status, 404);
  t.equal(await rowCount(api.db, 'webhook_deliveries', sql`automation_id = ${automation}`), 0, 'no delivery was stored');
});

t.test('two administrators demoting each other at the same moment: one of them stays an administrator', async (t) => {
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
  for (let round = 0; round < ROUNDS; round++) {
    const [a, b] = await Promise.all(
      ['a', 'b'].map((name) => api.createUser(tenant.tenantId, { username: `admin-${name}-${round}`, values: { roleId: administrator.id } })),
    );
    const answers = await Promise.all([
      api.call(t, 'updateUser', { token: a!.token, params: { user: b!.id }, body: { role_id: employee.id } }),
      api.call(t, 'updateUser', { token: b!.token, params: { user: a!.id }, body: { role_id: employee.id } }),
    ]);
    t.same(statuses(answers).sort(), [200, 403], `one demotion goes through, the other is refused: ${statuses(answers).join(', ')}`);
    t.equal(answers.find((answer) => answer.status === 403)?.body.code, 'permission_missing');
  }
});

/**
 * Holds the commit of the administrator's `updateUser` of `userId` (its writes made, their locks held) until released,
 * so that another write of the same user arrives meanwhile.
 */
const holdAdministratorUpdate = (t: Test, userId: number, key: number) =>
  pauseWrites(t, api.db, {
    name: `test_hold_user_update_${key}`,
    trigger: `constraint trigger test_hold_user_update_${key} after insert on audit_events deferrable initially deferred`,
    condition: `new.actor_id = ${tenant.adminUserId} and new.target_type = 'user' and new.target_id = '${userId}'`,
    key,
  });

t.test('two updates of one user at the same moment: the second is judged on what the first left', PAUSES_WRITES, async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'dates-delegate',
    permissions: ['users.view', 'users.administer', 'users.view-administrative'],
  });
  const joiner = await api.createUser(tenant.tenantId, { username: 'joiner' });
  const commitHeld = await holdAdministratorUpdate(t, joiner.id, 4250);
  let entering!: Promise<CallResult>;
  let leaving!: Promise<CallResult>;
  try {
    entering = api.call(t, 'updateUser', { token: admin, params: { user: joiner.id }, body: { entering_date: '2024-05-01' } });
    t.equal(await lockWaiters(api.db, 'commit'), 1, "the first update's commit waits");
    leaving = api.call(t, 'updateUser', { token: delegate.token, params: { user: joiner.id }, body: { leaving_date: '2024-04-01' } });
    t.equal(await lockWaiters(api.db, '"users"'), 1, 'the second waits for the user');
  } finally {
    await commitHeld.release();
  }
  t.equal((await entering).status, 200, 'the first goes through');
  const refused = await leaving;
  t.equal(refused.status, 422, 'the second is refused: it would leave the leaving date before the entering date');
  t.ok(refused.body.errors?.leaving_date, 'on leaving_date');
  const row = await ownerUser(api.db, tenant.tenantId, joiner.id);
  t.equal(row!.enteringDate, '2024-05-01');
  t.equal(row!.leavingDate, null, 'no leaving date before the entering date is stored');
});

t.test("a delegate's update of a user promoted at the same moment is judged on the promotion: 403, no password set", PAUSES_WRITES, async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'password-delegate', permissions: ['users.view', 'users.administer'] });
  const rising = await api.createUser(tenant.tenantId, { username: 'rising', password: 'the rising password' });
  const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
  const commitHeld = await holdAdministratorUpdate(t, rising.id, 4251);
  let promotion!: Promise<CallResult>;
  let takeover!: Promise<CallResult>;
  try {
    promotion = api.call(t, 'updateUser', { token: admin, params: { user: rising.id }, body: { role_id: administrator.id } });
    t.equal(await lockWaiters(api.db, 'commit'), 1, "the promotion's commit waits");
    takeover = api.call(t, 'updateUser', { token: delegate.token, params: { user: rising.id }, body: { password: 'taken-over-password' } });
    t.equal(await lockWaiters(api.db, '"users"'), 1, "the delegate's update waits for the user");
  } finally {
    await commitHeld.release();
  }
  t.equal((await promotion).status, 200, 'the promotion goes through');
  t.equal((await takeover).status, 403, 'the update of an administrator is refused to the delegate');
  const row = await ownerUser(api.db, tenant.tenantId, rising.id);
  t.equal(row!.roleId, administrator.id);
  t.ok(await verifyPassword(row!.passwordHash, 'the rising password'), 'the password was not replaced');
});

// A logout mark waits for the user's row; a deletion and a blackout take the administration lock the promotion holds.
for (const [operationId, what, key, unchanged, waitsFor] of [
  ['markUserForLogout', 'logout mark', 4252, 'no logout mark', '"users"'],
  ['deleteUser', 'deletion', 4253, 'not deleted', 'pg_advisory_xact_lock'],
  ['blackoutUser', 'blackout', 4254, 'not blacked out', 'pg_advisory_xact_lock'],
] as const) {
  t.test(`a delegate's ${what} of a user promoted at the same moment is judged on the promotion: 403, ${unchanged}`, PAUSES_WRITES, async (t) => {
    const delegate = await api.createUser(tenant.tenantId, { username: `${operationId}-delegate`, permissions: ['users.view', 'users.administer'] });
    const rising = await api.createUser(tenant.tenantId, { username: `${operationId}-rising` });
    const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
    const commitHeld = await holdAdministratorUpdate(t, rising.id, key);
    let promotion!: Promise<CallResult>;
    let act!: Promise<CallResult>;
    try {
      promotion = api.call(t, 'updateUser', { token: admin, params: { user: rising.id }, body: { role_id: administrator.id } });
      t.equal(await lockWaiters(api.db, 'commit'), 1, "the promotion's commit waits");
      act = api.call(t, operationId, { token: delegate.token, params: { user: rising.id } });
      t.equal(await lockWaiters(api.db, waitsFor), 1, `the delegate's ${what} waits`);
    } finally {
      await commitHeld.release();
    }
    t.equal((await promotion).status, 200, 'the promotion goes through');
    t.equal((await act).status, 403, `the ${what} of an administrator is refused to the delegate`);
    const row = await ownerUser(api.db, tenant.tenantId, rising.id);
    t.strictSame(
      { logoutMarkedAt: row!.logoutMarkedAt, deletedAt: row!.deletedAt, blackedOutAt: row!.blackedOutAt, username: row!.username },
      { logoutMarkedAt: null, deletedAt: null, blackedOutAt: null, username: `${operationId}-rising` },
      unchanged,
    );
    t.equal((await api.call(t, 'getCurrentUser', { token: rising.token })).status, 200, 'the session still works');
  });
}

t.test('a sign-in that raced a password change yields no session that outlives the change', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const user = await api.createUser(tenant.tenantId, { username: `signing-in-${round}`, password: 'the old password' });
    const logins = Array.from({ length: 12 }, () =>
      api.call(t, 'login', { body: { tenant: tenant.slug, username: user.username, password: 'the old password' } }),
    );
    // The change starts once the first sign-in is answered: at least that one wins a session,
    // while the others are still under way.
    await Promise.race(logins);
    const change = api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { password: 'the brand new password' } });
    const answers = await Promise.all([...logins, change]);
    noServerError(t, answers);
    t.equal(answers.at(-1)!.status, 200, 'the password changes');
    const tokens = answers.slice(0, -1).flatMap((answer) => (answer.status === 200 ? [answer.body.access_token as string] : []));
    t.ok(tokens.length > 0, `sign-ins won sessions before the change: ${statuses(answers).join(', ')}`);
    const usable = await Promise.all(tokens.map(async (token) => (await api.call(t, 'getCurrentUser', { token })).status === 200));
    t.equal(usable.filter(Boolean).length, 0, `none of the ${tokens.length} sessions begun with the old password is usable`);
    // A sign-in with the password now the user's goes through: the check refuses only stale ones.
    const signedIn = await api.call(t, 'login', { body: { tenant: tenant.slug, username: user.username, password: 'the brand new password' } });
    t.equal(signedIn.status, 200, 'the new password signs in');
    t.equal((await api.call(t, 'getCurrentUser', { token: signedIn.body.access_token })).status, 200);
  }
});

t.test('sign-ins of one account at the same moment, right and wrong, answer no 5xx', async (t) => {
  // Each counts, withdraws and clears the account's failure counts: rows locked in one order.
  for (let round = 0; round < ROUNDS * 2; round++) {
    const user = await api.createUser(tenant.tenantId, { username: `busy-account-${round}`, password: 'the right password' });
    const answers = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        api.call(t, 'login', { body: { tenant: tenant.slug, username: user.username, password: i % 4 === 0 ? 'a wrong one' : 'the right password' } }),
      ),
    );
    noServerError(t, answers);
    t.same(
      answers.flatMap((answer, i) => (answer.status === (i % 4 === 0 ? 401 : 200) ? [] : [answer.status])),
      [],
      'the right password signs in, the wrong one is refused',
    );
  }
});

t.test('a user update through /api and SCIM group writes of the same memberships answer no 5xx', async (t) => {
  for (let round = 0; round < 3; round++) {
    const group = await api.call(t, 'createDepartment', { token: admin, body: { name: `Group ${round}` } });
    const members = await Promise.all(Array.from({ length: 10 }, (_, i) => api.createUser(tenant.tenantId, { username: `member-${round}-${i}` })));
    const answers = await Promise.all(
      members.flatMap((member, i) => [
        scim('PATCH', `/Groups/${group.body.id}`, {
          schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
          Operations: [{ op: 'add', path: 'members', value: [{ value: String(member.id) }] }],
        }),
        // Renamed too: a new username locks the user's row as a key (FOR UPDATE).
        ...(i % 2 === 0
          ? [
              api.call(t, 'updateUser', {
                token: admin,
                params: { user: member.id },
                body: { username: `${member.username}-renamed`, department_ids: [group.body.id] },
              }),
            ]
          : []),
      ]),
    );
    t.same(
      answers.filter((answer) => answer.status >= 300),
      [],
      'every write goes through',
    );
    t.equal(await rowCount(api.db, 'department_users', sql`department_id = ${group.body.id}`), members.length, 'every member once');
  }
});

t.test('a SCIM group write that renames the group and a user update naming it, at the same moment: both go through', PAUSES_WRITES, async (t) => {
  const group = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Renamed group' } });
  const member = await api.createUser(tenant.tenantId, { username: 'renamed-group-member' });
  // The rename pauses once it has written the group's row (on a lock the test owns), holding it.
  const paused = await pauseWrites(t, api.db, {
    name: 'test_pause_group_rename',
    trigger: 'trigger test_pause_group_rename after update on departments',
    condition: `new.id = ${group.body.id} and new.name <> old.name`,
    key: 4261,
  });
  let renamed!: Promise<CallResult>;
  let updated!: Promise<CallResult>;
  try {
    renamed = scim('PUT', `/Groups/${group.body.id}`, {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName: 'Renamed group, renamed',
      members: [{ value: String(member.id) }],
    });
    t.equal(await lockWaiters(api.db, 'update "departments"'), 1, 'the rename holds the group');
    updated = api.call(t, 'updateUser', { token: admin, params: { user: member.id }, body: { department_ids: [group.body.id] } });
    t.equal(
      await eventually(
        () => lockWaiters(api.db, ''),
        (n) => n === 2,
      ),
      2,
      'the user update waits too',
    );
  } finally {
    await paused.release();
  }
  const answers = [await renamed, await updated];
  t.strictSame(statuses(answers), [200, 200], `both go through: ${answers.map((answer) => answer.text).join('; ')}`);
  t.equal(await rowCount(api.db, 'department_users', sql`department_id = ${group.body.id} and user_id = ${member.id}`), 1, 'the member once');
});

t.test('a field or task execution created while its form or task template is deleted is refused on the id it sent', async (t) => {
  const assignee = await api.createUser(tenant.tenantId, { username: 'assigned-while-deleted' });
  const cases: [string, 'forms' | 'task_templates', (id: number) => Promise<CallResult>, string][] = [
    [
      'a field of a form',
      'forms',
      (id) => api.call(t, 'createFormField', { token: admin, body: { form_id: id, name: 'Late', field_type: 'text' } }),
      'form_id',
    ],
    [
      'a field of a task template',
      'task_templates',
      (id) => api.call(t, 'createFormField', { token: admin, body: { task_template_id: id, name: 'Late', field_type: 'text' } }),
      'task_template_id',
    ],
    [
      'a task execution',
      'task_templates',
      (id) => api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: id, user_id: assignee.id } }),
      'task_template_id',
    ],
  ];
  for (const [what, table, create, key] of cases) {
    const parent =
      table === 'forms'
        ? await api.call(t, 'createForm', { token: admin, body: { title: `Going ${what}`, form_type: 'survey' } })
        : await api.call(t, 'createTaskTemplate', { token: admin, body: { title: `Going ${what}`, fields: [] } });
    // The parent's delete in flight: its row deleted, not yet committed.
    const deleting = await holdRows(api.db, sql`delete from ${sql.identifier(table)} where id = ${parent.body.id}`);
    let created!: Promise<CallResult>;
    try {
      created = create(parent.body.id);
      t.equal(await lockWaiters(api.db, ''), 1, `${what}: the create waits for the delete`);
    } finally {
      await deleting.release();
    }
    const answer = await created;
    t.equal(answer.status, 422, `${what}: refused`);
    t.strictSame(answer.body.error_codes, { [key]: ['missing_reference'] }, `${what}: on ${key}, as for a parent deleted before`);
  }
});

t.test('fields created at the same moment without a sort number get distinct ones', async (t) => {
  const form = await api.call(t, 'createForm', { token: admin, body: { title: 'Numbered', form_type: 'survey' } });
  const created = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      api.call(t, 'createFormField', { token: admin, body: { form_id: form.body.id, name: `Field ${i}`, field_type: 'text' } }),
    ),
  );
  t.same(
    statuses(created).filter((status) => status !== 201),
    [],
  );
  t.equal(new Set(created.map((field) => field.body.sort_number)).size, created.length, 'every field its own number');
});

t.test('a menu item restricted to a department created while the department is deleted: one of the two is refused', async (t) => {
  for (let round = 0; round < ROUNDS * 2; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Audience ${round}` } });
    // Deleted through /api and, every other round, as a SCIM group.
    const viaScim = round % 2 === 1;
    const [item, deleted] = await Promise.all([
      api.call(t, 'createMenuItem', {
        token: admin,
        body: {
          icon_id: 3,
          menu_identifier: 'main',
          type: 'link',
          title: 'Restricted',
          link: 'https://wiki.example.com/',
          entity_permissions: { department_ids: [department.body.id] },
        },
      }),
      viaScim ? scim('DELETE', `/Groups/${department.body.id}`) : api.call(t, 'deleteDepartment', { token: admin, params: { department: department.body.id } }),
    ]);
    // The delete's refusal: 422 through /api, 409 through SCIM.
    const refusedDelete = viaScim ? 409 : 422;
    t.same(
      statuses([item, deleted]).sort(),
      item.status === 201 ? [201, refusedDelete] : [204, 422],
      `one is refused${viaScim ? ' (SCIM)' : ''}: ${item.status}, ${deleted.status}`,
    );
    t.equal(
      await rowCount(api.db, 'entity_permissions', sql`subject_type = 'department' and subject_id = ${department.body.id}`),
      item.status === 201 ? 1 : 0,
      'no permission names a department that is gone',
    );
  }
});

t.test('a login token redeemed while its user is marked for logout: no 5xx, and no session outlives the mark', async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'redeeming', values: { email: 'redeeming@example.com' } });
  for (let round = 0; round < ROUNDS * 2; round++) {
    const created = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 600, email: 'redeeming@example.com' } });
    t.equal(created.status, 201);
    // The mark must be later than the token's creation to end it: a moment apart.
    await sleep(5);
    const [redeemed, marked] = await Promise.all([
      api.call(t, 'loginWithToken', { body: { token: created.body.token } }),
      api.call(t, 'markUserForLogout', { token: admin, params: { user: user.id } }),
    ]);
    noServerError(t, [redeemed, marked]);
    t.equal(marked.status, 204);
    t.ok([200, 401].includes(redeemed.status), `the token signs in (before the mark) or is refused (after it): ${redeemed.status}`);
    if (redeemed.status === 200) {
      t.equal((await api.call(t, 'getCurrentUser', { token: redeemed.body.access_token })).status, 401, 'the session it began is ended by the mark');
    }
  }
});

t.test('a default value source updated while its field is deleted: no 5xx, and the source goes with the field', async (t) => {
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Filled', fields: [] } });
  for (let round = 0; round < ROUNDS * 2; round++) {
    const field = await api.call(t, 'createFormField', {
      token: admin,
      body: { task_template_id: template.body.id, name: `Filled ${round}`, field_type: 'text' },
    });
    const source = await api.call(t, 'createDefaultValueSource', {
      token: admin,
      body: { type: 'systemVariable', form_field_id: field.body.id, config: { variable: 'username' } },
    });
    t.equal(source.status, 201);
    const [updated, deleted] = await Promise.all([
      api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id }, body: { config: { variable: 'email' } } }),
      api.call(t, 'deleteFormField', { token: admin, params: { formField: field.body.id } }),
    ]);
    noServerError(t, [updated, deleted]);
    t.equal(deleted.status, 204, 'the field is deleted');
    t.ok([200, 404].includes(updated.status), `the update goes through (before the delete) or finds nothing: ${updated.status}`);
    t.equal(await rowCount(api.db, 'default_value_sources', sql`id = ${source.body.id}`), 0, 'the source went with its field');
  }
});

t.test('a submission stored or changed while its execution or its task template is deleted: no 5xx', async (t) => {
  const assignee = await api.createUser(tenant.tenantId, { username: 'submitting' });
  for (let round = 0; round < ROUNDS * 2; round++) {
    const template = await api.call(t, 'createTaskTemplate', {
      token: admin,
      body: { title: `Submitted ${round}`, fields: [{ name: 'Note', field_type: 'text' }] },
    });
    const field = String(template.body.fields[0].id);
    const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee.id } });
    const taskExecution = execution.body.id;
    // Changed while its execution is deleted (the delete's cascade takes the submission).
    const stored = await api.call(t, 'createSubmission', { token: assignee.token, body: { task_execution_id: taskExecution, values: { [field]: 'first' } } });
    t.equal(stored.status, 201);
    const [changed, executionDeleted] = await Promise.all([
      api.call(t, 'updateSubmission', { token: assignee.token, params: { formSubmission: stored.body.id }, body: { values: { [field]: 'second' } } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
    ]);
    noServerError(t, [changed, executionDeleted]);
    t.equal(executionDeleted.status, 204);
    t.ok([200, 404].includes(changed.status), `the update goes through (before the delete) or finds nothing: ${changed.status}`);
    // Stored while the task template is deleted (the submission's key holds the template).
    const next = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee.id } });
    const [created, templateDeleted] = await Promise.all([
      api.call(t, 'createSubmission', { token: assignee.token, body: { task_execution_id: next.body.id, values: { [field]: 'late' } } }),
      api.call(t, 'deleteTaskTemplate', { token: admin, params: { taskTemplate: template.body.id } }),
    ]);
    noServerError(t, [created, templateDeleted]);
    t.equal(templateDeleted.status, 204);
    t.ok([201, 422].includes(created.status), `the submission is stored (before the delete) or names its execution gone: ${created.status}`);
    t.equal(await rowCount(api.db, 'form_submissions', sql`task_template_id = ${template.body.id}`), 0, 'nothing of the template is left');
  }
});

t.test('task executions, default value sources and attribute sets: an update and two deletes at once', async (t) => {
  const [assignee, next] = await Promise.all(['assignee', 'next-assignee'].map((username) => api.createUser(tenant.tenantId, { username })));
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Template', fields: [{ name: 'Name', field_type: 'text' }] } });
  t.equal(template.status, 201);
  for (let round = 0; round < ROUNDS; round++) {
    const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee!.id } });
    const taskExecution = execution.body.id;
    const executions = await Promise.all([
      api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution }, body: { user_id: next!.id } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
    ]);
    noServerError(t, executions);
    t.same(statuses(executions.slice(1)).sort(), [204, 404], 'one delete goes through, the other finds nothing');
    t.equal(await countOf('task_execution.deleted', 'task_execution', taskExecution), 1, 'one delete recorded');

    const created = await api.call(t, 'createDefaultValueSource', {
      token: admin,
      body: { type: 'systemVariable', form_field_id: template.body.fields[0].id, config: { variable: 'username' } },
    });
    t.equal(created.status, 201);
    const defaultValueSource = created.body.id;
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { config: { variable: 'email' } } }),
        api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { sort_number: 100 + round } }),
      ]),
    );
    const kept = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: {} });
    t.match(kept.body, { config: { variable: 'email' }, sort_number: 100 + round }, 'both changes are stored');
    const sources = await Promise.all([
      api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { config: { variable: 'username' } } }),
      api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource } }),
      api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource } }),
    ]);
    noServerError(t, sources);
    t.same(statuses(sources.slice(1)).sort(), [204, 404], 'one delete goes through, the other finds nothing');

    const set = await api.call(t, 'createAttributeSet', { token: admin, body: { name: `Set ${round}`, fields: [{ key: 'budget', type: 'number' }] } });
    const sets = await Promise.all([
      api.call(t, 'deleteAttributeSet', { token: admin, params: { attributeSet: set.body.id } }),
      api.call(t, 'deleteAttributeSet', { token: admin, params: { attributeSet: set.body.id } }),
    ]);
    t.same(statuses(sets).sort(), [204, 404], 'one delete goes through, the other finds nothing');
    t.equal(await countOf('attribute_set.deleted', 'attribute_set', set.body.id), 1, 'one delete recorded');
  }
});

t.test('a write whose statement the database cancels answers 503 and changes nothing', async (t) => {
  // A statement_timeout the operator set, or an operator's pg_cancel_backend, ends the
  // statement (57014): the server's doing, not the request's, so no 500.
  const department = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Cancelled' } });
  const params = { department: department.body.id };
  const held = await holdRows(api.db, sql`select id from departments where tenant_id = ${tenant.tenantId} and id = ${params.department} for update`);
  let answer: CallResult;
  try {
    const pending = api.call(t, 'updateDepartment', { token: admin, params, body: { name: 'Renamed while held' } });
    t.equal(await lockWaiters(api.db, 'departments'), 1, 'the update waits for the row');
    const [waiter] = await api.db.owner.execute<{ pid: number }>(
      sql`select ${waiterId} as pid from ${activity} where wait_event_type = 'Lock' and datname = current_database() and strpos(query, 'departments') > 0`,
    );
    await api.db.owner.execute(cancel(waiter!.pid));
    answer = await pending;
  } finally {
    await held.release();
  }
  t.equal(answer.status, 503, 'a 503');
  t.equal(answer.body.code, 'service_unavailable');
  t.equal(answer.headers['retry-after'], '1', 'with Retry-After');
  const stored = await api.call(t, 'getDepartment', { token: admin, params });
  t.equal(stored.body.name, 'Cancelled', 'the department is unchanged');
  t.same(await trail('department', params.department), ['department.created'], 'no update is recorded');
});

t.test('a SCIM write does not commit after its token was revoked', async (t) => {
  const value = newScimTokenValue();
  const [token] = await api.db.owner
    .insert(scimTokens)
    .values({ tenantId: tenant.tenantId, userId: tenant.adminUserId, name: 'Revoked', tokenHash: hashToken(value) })
    .returning({ id: scimTokens.id });
  const user = { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: 'created-while-revoked', name: { givenName: 'A', familyName: 'B' } };
  // A revocation under way: its row lock is held while the write, its token looked up, begins.
  const write = await api.db.owner.transaction(async (revocation) => {
    await revocation.execute(sql`select id from scim_tokens where tenant_id = ${tenant.tenantId} and id = ${token!.id} for update`);
    const pending = scim('POST', '/Users', user, value);
    // Until the write waits for the token's row (or 5 s: a write that does not wait is done by then).
    const waiting = async () =>
      (
        await api.db.owner.execute<{ n: number }>(
          sql`select count(*)::int as n from ${activity} where wait_event_type = 'Lock' and query ilike '%scim_tokens%'`,
        )
      )[0]!.n;
    for (let waited = 0; (await waiting()) === 0 && waited < 5_000; waited += 50) await sleep(50);
    await revocation.execute(sql`delete from scim_tokens where id = ${token!.id}`);
    return { pending };
  });
  const answer = await write.pending;
  t.equal(answer.status, 401, `refused once the revocation committed: ${answer.text}`);
  t.equal(await rowCount(api.db, 'users', sql`username = 'created-while-revoked'`), 0, 'no user was created');
});

t.test("a SCIM write whose token's hold fails is answered, creates nothing, and the process lives", async (t) => {
  // The hold leaves with the write's first statements. Cancelled while it waits (an operator's
  // pg_cancel_backend, a statement_timeout), it fails before the statements behind it do: its
  // failure must be the answer, not a rejection nobody handles (which would end the process).
  for (let round = 0; round < 3; round++) {
    const user = { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: `cancelled-${round}`, name: { givenName: 'A', familyName: 'B' } };
    const pending = await api.db.owner.transaction(async (revocation) => {
      await revocation.execute(sql`select id from scim_tokens where tenant_id = ${tenant.tenantId} and token_hash = ${hashToken(scimToken)} for update`);
      const pending = scim('POST', '/Users', user);
      const waiting = async () =>
        api.db.owner.execute<{ pid: number }>(sql`select ${waiterId} as pid from ${activity} where wait_event_type = 'Lock' and query ilike '%scim_tokens%'`);
      let waiters = await waiting();
      for (let waited = 0; waiters.length === 0 && waited < 5_000; waited += 20) {
        await sleep(20);
        waiters = await waiting();
      }
      t.equal(waiters.length, 1, 'the hold waits for the token row');
      await api.db.owner.execute(cancel(waiters[0]!.pid));
      return pending;
    });
    const answer = await pending;
    t.equal(answer.status, 503, `a 503, as an error document: ${answer.text}`);
    t.match(JSON.parse(answer.text), { schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '503' });
    t.equal(await rowCount(api.db, 'users', sql`username = ${user.userName}`), 0, 'no user was created');
  }
  const after = await scim('POST', '/Users', {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'after-cancel',
    name: { givenName: 'A', familyName: 'B' },
  });
  t.equal(after.status, 201, 'the process still serves writes');
});

t.test('concurrent updates of the user settings: each event records what the one before left', async (t) => {
  const keys = ['phone', 'city', 'street', 'zipcode', 'staff_number'];
  // Twelve different sets of keys, none of them the tenant's first (none).
  const answers = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: keys.filter((_key, k) => ((i + 1) >> k) % 2 === 1) } }),
    ),
  );
  noServerError(t, answers);
  const events = await api.db.owner.execute<{ changes: { required_profile_keys?: { from: string[]; to: string[] } } }>(
    sql`select changes from audit_events where tenant_id = ${tenant.tenantId} and action = 'user_settings.updated' order by occurred_at, id`,
  );
  const steps = events.map((event) => event.changes.required_profile_keys).filter((step) => step !== undefined);
  t.ok(steps.length > 1, `${steps.length} changes recorded`);
  // Every update asks for other keys: run in turn, each starts from what the one before left,
  // so no two start from the same settings (read before the others, all would start from none).
  const froms = steps.map((step) => JSON.stringify(step.from));
  t.equal(new Set(froms).size, froms.length, `each event starts from other settings: ${froms.join(' ')}`);
});

t.test("a department's delete and a user update naming it answer no 5xx", async (t) => {
  for (let round = 0; round < ROUNDS * 2; round++) {
    const [gone, kept] = await Promise.all(
      ['Leaving', 'Staying'].map((name) => api.call(t, 'createDepartment', { token: admin, body: { name: `${name} ${round}` } })),
    );
    const member = await api.createUser(tenant.tenantId, { username: `moving-${round}` });
    await api.call(t, 'updateUser', { token: admin, params: { user: member.id }, body: { department_ids: [gone!.body.id] } });
    const answers = await Promise.all([
      api.call(t, 'updateUser', { token: admin, params: { user: member.id }, body: { department_ids: [gone!.body.id, kept!.body.id] } }),
      round % 2 === 1 ? scim('DELETE', `/Groups/${gone!.body.id}`) : api.call(t, 'deleteDepartment', { token: admin, params: { department: gone!.body.id } }),
    ]);
    noServerError(t, answers);
    t.ok([200, 422].includes(answers[0]!.status), `the update goes through or names the department gone: ${answers[0]!.status}`);
  }
});

// A token for a user whose new role (or deactivation) commits meanwhile: judged on what that write left, or revoked by it.
for (const [what, change, key] of [
  ['promoted', 'role', 4255],
  ['deactivated', 'active', 4256],
] as const) {
  t.test(`a login token for a user ${what} at the same moment is judged on that write: 422, no pending token`, PAUSES_WRITES, async (t) => {
    const creator = await api.createUser(tenant.tenantId, {
      username: `token-creator-${what}`,
      permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'],
    });
    const email = `token-target-${what}@example.com`;
    const target = await api.createUser(tenant.tenantId, { username: `token-target-${what}`, values: { email } });
    const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
    const commitHeld = await holdAdministratorUpdate(t, target.id, key);
    let write!: Promise<CallResult>;
    let created!: Promise<CallResult>;
    try {
      write = api.call(t, 'updateUser', {
        token: admin,
        params: { user: target.id },
        body: change === 'role' ? { role_id: administrator.id } : { active: false },
      });
      t.equal(await lockWaiters(api.db, 'commit'), 1, "the user's write's commit waits");
      created = api.call(t, 'createUserLoginTokenForEmail', { token: creator.token, body: { expires_in: 600, email } });
      t.equal(await lockWaiters(api.db, '"users"'), 1, 'the token waits for the user');
    } finally {
      await commitHeld.release();
    }
    t.equal((await write).status, 200, `the user is ${what}`);
    const answer = await created;
    t.equal(answer.status, 422, 'the token is refused: it is judged on the user as that write left them');
    t.equal(
      await rowCount(api.db, 'user_login_tokens', sql`login_user_id = ${target.id} and deleted_at is null`),
      0,
      `no pending token signs in the ${what} user`,
    );
  });
}

t.test("a delegate's SCIM group write adding a user promoted at the same moment is judged on the promotion: 403, no membership", PAUSES_WRITES, async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'scim-group-delegate',
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative', 'departments.manage'],
  });
  const delegateToken = newScimTokenValue();
  await api.db.owner.insert(scimTokens).values({ tenantId: tenant.tenantId, userId: delegate.id, name: 'Delegate IdP', tokenHash: hashToken(delegateToken) });
  const group = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Promoted members' } });
  const rising = await api.createUser(tenant.tenantId, { username: 'scim-group-rising' });
  const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
  const commitHeld = await holdAdministratorUpdate(t, rising.id, 4257);
  let promotion!: Promise<CallResult>;
  let added!: Promise<CallResult>;
  try {
    promotion = api.call(t, 'updateUser', { token: admin, params: { user: rising.id }, body: { role_id: administrator.id } });
    t.equal(await lockWaiters(api.db, 'commit'), 1, "the promotion's commit waits");
    added = scim(
      'PATCH',
      `/Groups/${group.body.id}`,
      { schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'], Operations: [{ op: 'add', path: 'members', value: [{ value: String(rising.id) }] }] },
      delegateToken,
    );
    t.equal(await lockWaiters(api.db, '"users"'), 1, 'the group write waits for the user');
  } finally {
    await commitHeld.release();
  }
  t.equal((await promotion).status, 200, 'the promotion goes through');
  const answer = await added;
  t.equal(answer.status, 403, `the membership of an administrator is refused to the delegate's token: ${answer.text}`);
  t.equal(await rowCount(api.db, 'department_users', sql`department_id = ${group.body.id}`), 0, 'no membership was stored');
});

// A delete waiting behind a rename of the same record: its event names the record as the rename left it.
for (const [what, targetType, table, key] of [
  ['menu item', 'menu_item', '"menu_items"', 4258],
  ['automation', 'automation', '"automations"', 4259],
  ['user', 'user', '"users"', 4260],
] as const) {
  t.test(`${what === 'automation' ? 'an' : 'a'} ${what} deleted while it is renamed: the delete's event names it as renamed`, PAUSES_WRITES, async (t) => {
    let id: number;
    let rename: () => Promise<CallResult>;
    let remove: () => Promise<CallResult>;
    if (what === 'menu item') {
      const item = await api.call(t, 'createMenuItem', {
        token: admin,
        body: { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Old title', link: 'https://old.example.com/' },
      });
      id = item.body.id;
      rename = () => api.call(t, 'updateMenuItem', { token: admin, params: { menuItem: id }, body: { title: 'New title' } });
      remove = () => api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem: id } });
    } else if (what === 'automation') {
      const created = await api.call(t, 'createAutomation', {
        token: admin,
        body: { name: 'Old title', config: { url: 'http://93.184.215.14/hook', headers: {} } },
      });
      id = created.body.id;
      rename = () => api.call(t, 'updateAutomation', { token: admin, params: { automation: id }, body: { name: 'New title' } });
      remove = () => api.call(t, 'deleteAutomation', { token: admin, params: { automation: id } });
    } else {
      id = (await api.createUser(tenant.tenantId, { username: 'renamed-leaver', values: { firstName: 'Old', lastName: 'title' } })).id;
      rename = () => api.call(t, 'updateUser', { token: admin, params: { user: id }, body: { first_name: 'New' } });
      remove = () => api.call(t, 'deleteUser', { token: admin, params: { user: id } });
    }
    const commitHeld = await pauseWrites(t, api.db, {
      name: `test_hold_rename_${key}`,
      trigger: `constraint trigger test_hold_rename_${key} after insert on audit_events deferrable initially deferred`,
      condition: `new.target_type = '${targetType}' and new.target_id = '${id}' and new.action = '${targetType}.updated'`,
      key,
    });
    let renamed!: Promise<CallResult>;
    let deleted!: Promise<CallResult>;
    try {
      renamed = rename();
      t.equal(await lockWaiters(api.db, 'commit'), 1, "the rename's commit waits");
      deleted = remove();
      t.equal(await lockWaiters(api.db, table), 1, `the delete waits for the ${what}`);
    } finally {
      await commitHeld.release();
    }
    t.equal((await renamed).status, 200, 'the rename goes through');
    t.equal((await deleted).status, 204, 'then the delete');
    const [event] = await api.db.owner.execute<{ label: string | null }>(
      sql`select target_label as label from audit_events
          where tenant_id = ${tenant.tenantId} and target_type = ${targetType} and target_id = ${String(id)} and action = ${`${targetType}.deleted`}`,
    );
    t.equal(event?.label, 'New title', 'the delete names it as the rename left it');
  });
}
