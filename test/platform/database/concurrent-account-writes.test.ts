/**
 * Writes of accounts, sessions and SCIM sent at the same moment (docs/tenancy-and-security.md#concurrent-writes-of-one-record):
 * none answers 5xx, a write is judged on what a write before it left, no session outlives
 * what ended it, and the tenant keeps an administrator. Writes of other records:
 * concurrent-writes.test.ts.
 */
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { eraseAuditTrail } from '../../../src/platform/audit/audit.ts';
import { verifyPassword } from '../../../src/platform/auth/passwords.ts';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { scimTokens } from '../../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../../src/resources/scim/tokens.ts';
import { ownerUser, type CallResult } from '../../helpers/atrium.ts';
import { activity, cancel, noServerError, ROUNDS, startConcurrentWrites, statuses, waiterId } from '../../helpers/concurrent-writes.ts';
import { holdRows, lockWaiters, PAUSES_WRITES, pauseWrites, roleNamed, rowCount, sleep, storeNotification } from '../../helpers/fixtures.ts';
import { eventually } from '../../helpers/eventually.ts';
import { multipart, PNG_1X1 } from '../../helpers/multipart.ts';

const { api, tenant, admin, scimToken, scim } = await startConcurrentWrites(t, 'concurrent-accounts');

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
    t.equal(await lockWaiters(api.db, 'pg_advisory_xact_lock'), 1, "the delegate's update waits for the promotion's administration lock");
  } finally {
    await commitHeld.release();
  }
  t.equal((await promotion).status, 200, 'the promotion goes through');
  t.equal((await takeover).status, 403, 'the update of an administrator is refused to the delegate');
  const row = await ownerUser(api.db, tenant.tenantId, rising.id);
  t.equal(row!.roleId, administrator.id);
  t.ok(await verifyPassword(row!.passwordHash, 'the rising password', 0), 'the password was not replaced');
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
          sql`select count(*)::int as n from ${activity} where wait_event_type = 'Lock' and datname = current_database() and query ilike '%scim_tokens%'`,
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
        api.db.owner.execute<{ pid: number }>(
          sql`select ${waiterId} as pid from ${activity} where wait_event_type = 'Lock' and datname = current_database() and query ilike '%scim_tokens%'`,
        );
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
    t.equal(await lockWaiters(api.db, 'pg_advisory_xact_lock_shared'), 1, "the group write waits for the promotion's administration lock");
  } finally {
    await commitHeld.release();
  }
  t.equal((await promotion).status, 200, 'the promotion goes through');
  const answer = await added;
  t.equal(answer.status, 403, `the membership of an administrator is refused to the delegate's token: ${answer.text}`);
  t.equal(await rowCount(api.db, 'department_users', sql`department_id = ${group.body.id}`), 0, 'no membership was stored');
});
