/**
 * What a session hands out while it is being ended. A logout mark, a password change or a
 * deactivation is held at its COMMIT (its writes made, their locks held) by a trigger of
 * the test's own, while a request of the ending session asks for something the end must
 * take back: a SCIM token, a login token, a push subscription, another password change.
 * That request must wait for the end and then be refused (401); nothing it could have
 * handed out may work afterwards.
 */
import { eq, sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { pushSubscriptions } from '../../../src/resources/push/table.ts';
import { startTestApi, type CallResult } from '../../helpers/atrium.ts';
import { lockTenantScope } from '../../../src/platform/database/locks.ts';
import {
  bearer,
  createDepartment,
  holdRows,
  lockWaiters,
  newUserBodies,
  PAUSES_WRITES,
  pauseWrites,
  roleNamed,
  sleep,
  storeNotification,
} from '../../helpers/fixtures.ts';
import { browserSubscription } from '../../helpers/push-service.ts';
import { PNG_1X1, multipart } from '../../helpers/multipart.ts';
import { wireClient } from '../../helpers/http-client.ts';
import { eventually } from '../../helpers/eventually.ts';

const api = await startTestApi(t, { webhookAllowedCidrs: ['127.0.0.1/32'], pushAllowedCidrs: ['127.0.0.1/32'] });
const tenant = await api.createTenant('session-races');
const admin = tenant.adminToken;
const wire = await wireClient(api.atrium.app!);
let pauses = 0;

/**
 * Holds the COMMIT of the request whose audit event is `action` on user `userId` until
 * `release()`; answers once that request is waiting there.
 */
async function holdCommitOf(t: Test, action: string, userId: number, start: () => Promise<CallResult>) {
  const n = ++pauses;
  const paused = await pauseWrites(t, api.db, {
    name: `test_hold_end_${n}`,
    trigger: `constraint trigger test_hold_end_${n} after insert on audit_events deferrable initially deferred`,
    condition: `new.action = '${action}' and new.target_id = '${userId}'`,
    key: 7100 + n,
  });
  const ending = start();
  t.ok((await lockWaiters(api.db, 'commit')) > 0, `the ${action} is held at its commit`);
  return { ending, release: paused.release };
}

/** Waits until `request` answers or waits for a lock on a statement containing `text` (the session's hold). */
async function answeredOrWaiting(request: Promise<CallResult>, text: string): Promise<void> {
  await Promise.race([request, lockWaiters(api.db, text).catch(() => 0), sleep(5_000)]);
}

const SCIM_MINTER = ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'] as const;

t.test('a SCIM token minted while its minter is marked for logout is refused, and none works', PAUSES_WRITES, async (t) => {
  const minter = await api.createUser(tenant.tenantId, { username: 'scim-minter', permissions: [...SCIM_MINTER] });
  const { ending, release } = await holdCommitOf(t, 'user.marked_for_logout', minter.id, () =>
    api.call(t, 'markUserForLogout', { token: admin, params: { user: minter.id } }),
  );
  const mint = api.call(t, 'createScimToken', { token: minter.token, body: { name: 'raced' } });
  await answeredOrWaiting(mint, 'for share');
  await release();
  const [marked, minted] = await Promise.all([ending, mint]);
  t.equal(marked.status, 204);
  t.equal(minted.status, 401, 'the mint waited for the mark, then found its session ended');
  if (minted.status === 201) {
    const answer = await wire.send({ method: 'GET', url: '/scim/v2/Users', headers: bearer(minted.body.token) });
    t.equal(answer.statusCode, 401, 'a token minted in the race does not work');
  }
});

t.test("a login token made while its creator's password is changed by another session is refused, and none signs in", PAUSES_WRITES, async (t) => {
  const creator = await api.createUser(tenant.tenantId, { username: 'token-creator', permissions: ['login-tokens.administer'] });
  const other = await api.call(t, 'login', { body: { tenant: 'session-races', username: creator.username, password: creator.password } });
  t.equal(other.status, 200);
  const { ending, release } = await holdCommitOf(t, 'user.password_changed', creator.id, () =>
    api.call(t, 'updateUser', {
      token: other.body.access_token,
      params: { user: creator.id },
      body: { password: 'a brand new password', old_password: creator.password },
    }),
  );
  const create = api.call(t, 'createUserLoginToken', { token: creator.token, body: { expires_in: 600 } });
  await answeredOrWaiting(create, 'for share');
  await release();
  const [changed, created] = await Promise.all([ending, create]);
  t.equal(changed.status, 200);
  t.equal(created.status, 401, 'the token waited for the change, then found its session ended');
  if (created.status === 201) t.equal((await api.call(t, 'loginWithToken', { body: { token: created.body.token } })).status, 401, 'it signs nobody in');
});

t.test("a login token made while its creator's role loses login-tokens.administer is refused, and giving it back revives none", PAUSES_WRITES, async (t) => {
  const creator = await api.createUser(tenant.tenantId, { username: 'token-stripped', permissions: ['login-tokens.administer'] });
  const role = await roleNamed(api.db, tenant.tenantId, 'role-token-stripped');
  const setPermissions = (permissions: string[]) => api.call(t, 'updateRole', { token: admin, params: { role: role.id }, body: { permissions } });
  // Authenticated with the permission, the create reaches the creator's role while the update that takes it holds its commit.
  const { ending, release } = await holdCommitOf(t, 'role.updated', role.id, () => setPermissions([]));
  const create = api.call(t, 'createUserLoginToken', { token: creator.token, body: { expires_in: 600 } });
  await answeredOrWaiting(create, 'for share');
  await release();
  const [stripped, created] = await Promise.all([ending, create]);
  t.equal(stripped.status, 200);
  t.equal(created.status, 403, 'the create waited for the update, then found the permission gone');
  t.equal((await setPermissions(['login-tokens.administer'])).status, 200);
  if (created.status === 201) t.equal((await api.call(t, 'loginWithToken', { body: { token: created.body.token } })).status, 401, 'it signs nobody in');
  const [pending] = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from user_login_tokens where user_id = ${creator.id} and deleted_at is null and used_at is null`,
  );
  t.equal(pending?.n, 0, 'no token of the creator is left to revive');
});

t.test('a push subscription registered while its user is deactivated is refused, and a reactivation revives none', PAUSES_WRITES, async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'push-leaver' });
  const { ending, release } = await holdCommitOf(t, 'user.updated', user.id, () =>
    api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { active: false } }),
  );
  const register = api.call(t, 'createPushSubscription', {
    token: user.token,
    body: { endpoint: 'http://127.0.0.1:9/push/raced', keys: browserSubscription().keys },
  });
  await answeredOrWaiting(register, 'for update');
  await release();
  const [deactivated, registered] = await Promise.all([ending, register]);
  t.equal(deactivated.status, 200);
  t.equal(registered.status, 401, 'the registration waited for the deactivation, then found its session ended');
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { active: true } })).status, 200);
  const held = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.userId, user.id));
  t.equal(held.length, 0, 'no subscription came back with the reactivation');
});

t.test('two sessions change their own password at once: one change is made, the other session has ended', PAUSES_WRITES, async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'two-sessions' });
  const second = await api.call(t, 'login', { body: { tenant: 'session-races', username: user.username, password: user.password } });
  const change = (token: string, password: string) =>
    api.call(t, 'updateUser', { token, params: { user: user.id }, body: { password, old_password: user.password } });
  const { ending, release } = await holdCommitOf(t, 'user.password_changed', user.id, () => change(user.token, 'first new password'));
  const later = change(second.body.access_token, 'second new password');
  await answeredOrWaiting(later, 'for update');
  await release();
  const [first, other] = await Promise.all([ending, later]);
  t.equal(first.status, 200);
  t.equal(other.status, 401, 'the later change waited, then found its session ended by the first');
  const signIn = (password: string) => api.call(t, 'login', { body: { tenant: 'session-races', username: user.username, password } });
  t.equal((await signIn('first new password')).status, 200, 'the change that was answered 200 holds');
  t.equal((await signIn('second new password')).status, 401);
});

t.test('one session sends its password change twice at once: the second is checked against the new password', PAUSES_WRITES, async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'double-send' });
  const change = (password: string) =>
    api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { password, old_password: user.password } });
  const { ending, release } = await holdCommitOf(t, 'user.password_changed', user.id, () => change('first new password'));
  const later = change('second new password');
  await answeredOrWaiting(later, 'for update');
  await release();
  const [first, second] = await Promise.all([ending, later]);
  t.equal(first.status, 200);
  t.equal(second.status, 422, 'old_password no longer matches');
  t.strictSame(second.body.error_codes, { old_password: ['mismatch'] });
  t.equal((await api.call(t, 'login', { body: { tenant: 'session-races', username: user.username, password: 'first new password' } })).status, 200);
});

t.test("a password set for another user by a session ended before it commits is refused: the session's holder gets no account", async (t) => {
  // The victim first: a caller whose row comes after the user's holds its session once the user's row is held (key order).
  const victim = await api.createUser(tenant.tenantId, { username: 'reset-victim' });
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-delegate', permissions: ['users.administer', 'users.view'] });
  // The victim's row is held, so the reset, authenticated already, waits in its transaction while the delegate's
  // session is ended and that end commits.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${victim.id} for no key update`);
  const reset = api.call(t, 'updateUser', { token: delegate.token, params: { user: victim.id }, body: { password: 'a password of my choosing' } });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the reset waits for the victim');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, "the delegate's session has ended");
  await held.release();
  t.equal((await reset).status, 401, 'the reset found its session ended');
  const signIn = (password: string) => api.call(t, 'login', { body: { tenant: 'session-races', username: victim.username, password } });
  t.equal((await signIn('a password of my choosing')).status, 401, 'the password was not set');
  t.equal((await signIn(victim.password)).status, 200, 'the old one still signs in');
});

t.test('a user created by a session ended before the create commits is refused: no account to sign in with', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-creator', permissions: ['users.administer', 'users.view'] });
  const department = await createDepartment(api.db, tenant.tenantId, 'Waiting room');
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const body = newUserBodies(employee.id, 'puppet')({ password: 'a password of my choosing', department_ids: [department.id] });
  // The department's row is held, so the create, authenticated already, waits in its transaction while the
  // delegate's session is ended and that end commits.
  const held = await holdRows(api.db, sql`select 1 from departments where tenant_id = ${tenant.tenantId} and id = ${department.id} for update`);
  const create = api.call(t, 'createUser', { token: delegate.token, body });
  t.ok((await lockWaiters(api.db, 'for key share')) > 0, 'the create waits for the department');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, "the delegate's session has ended");
  await held.release();
  t.equal((await create).status, 401, 'the create found its session ended');
  const signIn = await api.call(t, 'login', { body: { tenant: 'session-races', username: body.username, password: 'a password of my choosing' } });
  t.equal(signIn.status, 401, 'no account was created');
});

t.test('a delegate demoted while its create is under way: the demotion is acknowledged only after that create', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'demoted-creator', permissions: ['users.administer', 'users.view'] });
  const department = await createDepartment(api.db, tenant.tenantId, 'Antechamber');
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const body = newUserBodies(employee.id, 'shadow')({ password: 'a password of my choosing', department_ids: [department.id] });
  const answered: string[] = [];
  // The department's row is held, so the create, judged already, waits in its transaction.
  const held = await holdRows(api.db, sql`select 1 from departments where tenant_id = ${tenant.tenantId} and id = ${department.id} for update`);
  const create = api.call(t, 'createUser', { token: delegate.token, body }).then((res) => (answered.push('create'), res));
  t.ok((await lockWaiters(api.db, 'for key share')) > 0, 'the create waits for the department');
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  // Published at once, the demotion would let the create commit afterwards under the permissions it removed.
  await Promise.race([demote, lockWaiters(api.db, 'pg_advisory_xact_lock')]);
  await held.release();
  const [created, demoted] = await Promise.all([create, demote]);
  t.equal(created.status, 201, 'the create was judged before the demotion');
  t.equal(demoted.status, 200);
  t.strictSame(answered, ['create', 'demotion'], 'and the demotion waited for it');
  t.equal((await api.call(t, 'createUser', { token: delegate.token, body: { ...body, username: 'shadow-after' } })).status, 403, 'the next create is refused');
});

t.test('a delegate demoted while its new role is under way: the demotion is acknowledged only after that role', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'demoted-role-maker', permissions: ['users.administer', 'users.view'] });
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const answered: string[] = [];
  // The tenant's role names are held, so the create, judged already, waits in its transaction.
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const holder = api.db.tenant(tenant.tenantId, async (tx) => {
    await lockTenantScope(tx, 'roles.name');
    await released;
  });
  const create = api
    .call(t, 'createRole', { token: delegate.token, body: { name: 'Shadow administrators', permissions: ['users.administer', 'users.view'] } })
    .then((res) => (answered.push('create'), res));
  t.ok((await lockWaiters(api.db, 'pg_advisory_xact_lock')) > 0, 'the create waits for the role names');
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  await Promise.race([
    demote,
    eventually(
      () => lockWaiters(api.db, 'pg_advisory_xact_lock'),
      (n) => n > 1,
    ),
  ]);
  release();
  await holder;
  const [created, demoted] = await Promise.all([create, demote]);
  t.equal(created.status, 201, 'the role was judged before the demotion');
  t.equal(demoted.status, 200);
  t.strictSame(answered, ['create', 'demotion'], 'and the demotion waited for it');
});

t.test('a delegate demoted while its default role for provisioned users is under way: the demotion waits for it', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'demoted-defaulter',
    permissions: ['users.administer', 'users.view', 'notifications.send'],
  });
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const senders = await api.call(t, 'createRole', { token: admin, body: { name: 'Default senders', permissions: ['notifications.send'] } });
  t.equal(senders.status, 201);
  const answered: string[] = [];
  // The settings are held, so the update, authenticated already, waits in its transaction.
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const holder = api.db.tenant(tenant.tenantId, async (tx) => {
    await lockTenantScope(tx, 'required-profile-keys');
    await released;
  });
  const update = api
    .call(t, 'updateUserSettings', { token: delegate.token, body: { required_profile_keys: [], default_role_id: senders.body.id } })
    .then((res) => (answered.push('settings'), res));
  t.ok((await lockWaiters(api.db, 'pg_advisory_xact_lock')) > 0, 'the update waits for the settings');
  // The demotion takes notifications.send away: new users may not be given a role listing it by this delegate.
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  await Promise.race([demote, sleep(1_000)]);
  release();
  await holder;
  const [updated, demoted] = await Promise.all([update, demote]);
  t.equal(demoted.status, 200);
  t.equal(updated.status, 200, 'the default role was judged before the demotion');
  t.strictSame(answered, ['settings', 'demotion'], 'and the demotion waited for it');
  const next = await api.call(t, 'updateUserSettings', { token: delegate.token, body: { required_profile_keys: [], default_role_id: null } });
  t.equal(next.status, 403, 'the demoted delegate administers users no more');
});

t.test('a delegate demoted while its restore with a role is under way: the demotion is acknowledged only after that restore', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'demoted-restorer',
    permissions: ['users.administer', 'users.view', 'users.view-administrative', 'notifications.send'],
  });
  const returning = await api.createUser(tenant.tenantId, { username: 'restored-sender' });
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const senders = await api.call(t, 'createRole', { token: admin, body: { name: 'Restored senders', permissions: ['notifications.send'] } });
  t.equal(senders.status, 201);
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: returning.id } })).status, 204);
  const answered: string[] = [];
  // The deleted user's row is held, so the restore, authenticated already, waits in its transaction.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${returning.id} for no key update`);
  const restore = api
    .call(t, 'restoreUser', { token: delegate.token, params: { user: returning.id }, body: { role_id: senders.body.id } })
    .then((res) => (answered.push('restore'), res));
  t.ok((await lockWaiters(api.db, 'for')) > 0, 'the restore waits');
  // The demotion takes notifications.send away: a restore judged after it may not give a role listing it.
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  await Promise.race([demote, sleep(1_000)]);
  await held.release();
  const [restored, demoted] = await Promise.all([restore, demote]);
  t.equal(demoted.status, 200);
  const [row] = await api.db.owner.execute<{ roleId: number; deleted: boolean }>(
    sql`select role_id::int as "roleId", deleted_at is not null as deleted from users where tenant_id = ${tenant.tenantId} and id = ${returning.id}`,
  );
  t.strictSame(answered, ['restore', 'demotion'], 'the demotion waited for the restore');
  t.equal(restored.status, 200, 'the restore was judged before the demotion');
  t.equal(row!.roleId, senders.body.id);
});

t.test('a delegate demoted while its password set is under way: the demotion is acknowledged only after that set', async (t) => {
  // The user first: a caller whose row comes after the user's holds its session only once the user's row is held.
  const holder = await api.createUser(tenant.tenantId, { username: 'sender-holder', permissions: ['notifications.send'] });
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'demoted-resetter',
    permissions: ['users.administer', 'users.view', 'notifications.send'],
  });
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const answered: string[] = [];
  // The user's row is held, so the password set, authenticated already, waits in its transaction.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${holder.id} for no key update`);
  const reset = api
    .call(t, 'updateUser', { token: delegate.token, params: { user: holder.id }, body: { password: 'a password of my choosing' } })
    .then((res) => (answered.push('reset'), res));
  t.ok((await lockWaiters(api.db, 'for')) > 0, 'the password set waits');
  // The demotion takes notifications.send away: a password set judged after it may not take over a user holding it.
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  await Promise.race([demote, sleep(1_000)]);
  await held.release();
  const [set, demoted] = await Promise.all([reset, demote]);
  t.equal(demoted.status, 200);
  const signIn = (password: string) => api.call(t, 'login', { body: { tenant: 'session-races', username: holder.username, password } });
  t.strictSame(answered, ['reset', 'demotion'], 'the demotion waited for the password set');
  t.equal(set.status, 200, 'the password set was judged before the demotion');
  t.equal((await signIn('a password of my choosing')).status, 200, 'and made');
  const next = await api.call(t, 'updateUser', { token: delegate.token, params: { user: holder.id }, body: { password: 'another of my choosing' } });
  t.equal(next.status, 403, 'the next password set is refused');
});

t.test("a delegate demoted while its upload of another user's picture is under way: the demotion waits for it", async (t) => {
  const pictured = await api.createUser(tenant.tenantId, { username: 'pictured-sender', permissions: ['notifications.send'] });
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'demoted-photographer',
    permissions: ['users.administer', 'users.view', 'notifications.send'],
  });
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const answered: string[] = [];
  // The user's row is held, so the upload, authenticated already, waits in its transaction.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${pictured.id} for no key update`);
  const form = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'p.png', type: 'image/png' } });
  const upload = api
    .call(t, 'uploadProfilePicture', { token: delegate.token, params: { user: pictured.id }, ...form })
    .then((res) => (answered.push('upload'), res));
  t.ok((await lockWaiters(api.db, 'for')) > 0, 'the upload waits');
  const demote = api
    .call(t, 'updateUser', { token: admin, params: { user: delegate.id }, body: { role_id: employee.id } })
    .then((res) => (answered.push('demotion'), res));
  await Promise.race([demote, sleep(1_000)]);
  await held.release();
  const [uploaded, demoted] = await Promise.all([upload, demote]);
  t.equal(demoted.status, 200);
  t.strictSame(answered, ['upload', 'demotion'], 'the demotion waited for the upload');
  t.equal(uploaded.status, 200, 'the upload was judged before the demotion');
  const next = await api.call(t, 'uploadProfilePicture', { token: delegate.token, params: { user: pictured.id }, ...form });
  t.equal(next.status, 403, 'the next upload is refused');
});

t.test("a role given to another user by a session ended before it commits is refused: the session's holder gains nothing", async (t) => {
  const accomplice = await api.createUser(tenant.tenantId, { username: 'promoted-accomplice' });
  const delegate = await api.createUser(tenant.tenantId, {
    username: 'ending-promoter',
    permissions: ['users.administer', 'users.view', 'users.view-administrative'],
  });
  const [delegateRow] = await api.db.owner.execute<{ roleId: number }>(
    sql`select role_id::int as "roleId" from users where tenant_id = ${tenant.tenantId} and id = ${delegate.id}`,
  );
  const roleId = delegateRow!.roleId;
  // The accomplice's row is held, so the update, authenticated already, waits in its transaction while the delegate's
  // session is ended and that end commits.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${accomplice.id} for no key update`);
  const promote = api.call(t, 'updateUser', { token: delegate.token, params: { user: accomplice.id }, body: { role_id: roleId } });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the update waits for the accomplice');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, "the delegate's session has ended");
  await held.release();
  t.equal((await promote).status, 401, 'the update found its session ended');
  const [after] = await api.db.owner.execute<{ roleId: number }>(
    sql`select role_id::int as "roleId" from users where tenant_id = ${tenant.tenantId} and id = ${accomplice.id}`,
  );
  t.not(after!.roleId, roleId, 'the accomplice keeps the role they had');
});

t.test('a membership given to another user by a session ended before it commits is refused', async (t) => {
  const accomplice = await api.createUser(tenant.tenantId, { username: 'member-accomplice' });
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-member-maker', permissions: ['users.administer', 'users.view'] });
  const department = await createDepartment(api.db, tenant.tenantId, 'Inner circle');
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${accomplice.id} for no key update`);
  const join = api.call(t, 'updateUser', { token: delegate.token, params: { user: accomplice.id }, body: { department_ids: [department.id] } });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the update waits for the accomplice');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  await held.release();
  t.equal((await join).status, 401, 'the update found its session ended');
  const [members] = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from department_users where tenant_id = ${tenant.tenantId} and department_id = ${department.id}`,
  );
  t.equal(members!.n, 0, 'the accomplice was not made a member');
});

t.test("permissions given to another user's role by a session ended before it commits are refused", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-role-editor', permissions: ['users.administer', 'users.view'] });
  const accomplice = await api.createUser(tenant.tenantId, { username: 'role-accomplice' });
  const [row] = await api.db.owner.execute<{ roleId: number }>(
    sql`select role_id::int as "roleId" from users where tenant_id = ${tenant.tenantId} and id = ${accomplice.id}`,
  );
  const roleId = row!.roleId;
  // The role's row is held, so the update, authenticated already, waits in its transaction while the delegate's
  // session is ended and that end commits.
  const held = await holdRows(api.db, sql`select 1 from roles where tenant_id = ${tenant.tenantId} and id = ${roleId} for update`);
  const grant = api.call(t, 'updateRole', { token: delegate.token, params: { role: roleId }, body: { permissions: ['users.administer', 'users.view'] } });
  t.ok((await lockWaiters(api.db, 'for update')) > 0, 'the update waits for the role');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, "the delegate's session has ended");
  await held.release();
  t.equal((await grant).status, 401, 'the update found its session ended');
  const [after] = await api.db.owner.execute<{ permissions: string[] }>(
    sql`select permissions from roles where tenant_id = ${tenant.tenantId} and id = ${roleId}`,
  );
  t.strictSame(after!.permissions, [], 'the role grants nothing more');
});

t.test('a user restored by a session ended before the restore commits is refused: the account stays deleted', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-restorer', permissions: ['users.administer', 'users.view'] });
  const accomplice = await api.createUser(tenant.tenantId, { username: 'restored-accomplice' });
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: accomplice.id } })).status, 204);
  // The deleted user's row is held, so the restore, authenticated already, waits in its transaction while the
  // delegate's session is ended and that end commits.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${accomplice.id} for no key update`);
  const restore = api.call(t, 'restoreUser', { token: delegate.token, params: { user: accomplice.id } });
  t.ok((await lockWaiters(api.db, 'update')) > 0, 'the restore waits for the user');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, "the delegate's session has ended");
  await held.release();
  t.equal((await restore).status, 401, 'the restore found its session ended');
  const signIn = await api.call(t, 'login', { body: { tenant: 'session-races', username: accomplice.username, password: accomplice.password } });
  t.equal(signIn.status, 401, 'the account was not restored');
});

t.test("two administrators set each other's password at once: they wait for each other, neither deadlocks", async (t) => {
  const first = await api.createUser(tenant.tenantId, { username: 'mutual-first', permissions: ['users.administer', 'users.view'] });
  const second = await api.createUser(tenant.tenantId, { username: 'mutual-second', permissions: ['users.administer', 'users.view'] });
  // The first's row is held: the second's reset of the first waits for it, then the first's reset of the second,
  // which has the second's row by then, waits for it too (holding the first's session). Released, the second's
  // reset has the first's row, and each then wants the row the other holds unless both take them in one order.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${first.id} for update`);
  const ofFirst = api.call(t, 'updateUser', { token: second.token, params: { user: first.id }, body: { password: 'chosen by the second' } });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, "the second's reset waits for the first");
  const ofSecond = api.call(t, 'updateUser', { token: first.token, params: { user: second.id }, body: { password: 'chosen by the first' } });
  t.ok((await lockWaiters(api.db, 'for share')) > 0, "the first's reset waits for its own row");
  await held.release();
  const statuses = [(await ofFirst).status, (await ofSecond).status];
  t.notOk(statuses.includes(503), `no deadlock (${statuses.join(', ')})`);
  t.ok(statuses.includes(200), 'one of them is made');
});

t.test("a caller whose row comes first holds its session before the user's row: an end waits for the write", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'early-delegate', permissions: ['users.administer', 'users.view'] });
  const user = await api.createUser(tenant.tenantId, { username: 'later-user' });
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${user.id} for no key update`);
  const update = api.call(t, 'updateUser', { token: delegate.token, params: { user: user.id }, body: { first_name: 'Renamed' } });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the update waits for the user, holding its session');
  const mark = api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } });
  const waiters = () =>
    eventually(
      () => lockWaiters(api.db, 'for'),
      (n) => n >= 2,
    );
  t.ok((await waiters()) >= 2, 'the logout mark waits for the update');
  await held.release();
  t.equal((await update).status, 200, 'the update committed before the mark');
  t.equal((await mark).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, 'the mark ended the session after it');
});

t.test("a reset of the tenant's notifications holds its session: an end waits for it", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-resetter', permissions: ['notifications.administer'] });
  const recipient = await api.createUser(tenant.tenantId, { username: 'reset-recipient' });
  const notification = await storeNotification(api.db, tenant.tenantId, recipient.id, new Date());
  // A notification's row is held, so the reset, authenticated already, waits in its transaction for it.
  const held = await holdRows(api.db, sql`select 1 from notifications where tenant_id = ${tenant.tenantId} and id = ${notification.id} for update`);
  const reset = api.call(t, 'resetNotifications', { token: delegate.token });
  t.ok((await lockWaiters(api.db, 'delete')) > 0, 'the reset waits for the notification');
  let marked = false;
  const mark = api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } }).finally(() => (marked = true));
  await Promise.race([mark, sleep(1_000)]);
  t.notOk(marked, 'the logout mark waits for the reset');
  await held.release();
  t.equal((await reset).status, 200, 'the reset committed before the mark');
  t.equal((await mark).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, 'the mark ended the session after it');
});

t.test('a notification sent by a session being ended holds its session: an end waits for it', PAUSES_WRITES, async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { username: 'ending-sender', permissions: ['notifications.send'] });
  const recipient = await api.createUser(tenant.tenantId, { username: 'send-recipient' });
  // The dispatch's insert is held, so the send, authenticated already, waits in its transaction.
  const paused = await pauseWrites(t, api.db, {
    name: 'test_hold_dispatch',
    trigger: 'trigger test_hold_dispatch after insert on notification_dispatches',
    condition: `new.created_by = ${delegate.id}`,
    key: 7199,
  });
  const send = api.call(t, 'createNotification', {
    token: delegate.token,
    body: { user_ids: [recipient.id], title: 'Click here', body: '<p>x</p>', url: '/x' },
  });
  t.ok((await lockWaiters(api.db, 'notification_dispatches')) > 0, 'the send waits');
  let marked = false;
  const mark = api.call(t, 'markUserForLogout', { token: admin, params: { user: delegate.id } }).finally(() => (marked = true));
  await Promise.race([mark, sleep(1_000)]);
  t.notOk(marked, 'the logout mark waits for the send');
  await paused.release();
  t.equal((await send).status, 202, 'the send committed before the mark');
  t.equal((await mark).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: delegate.token })).status, 401, 'the mark ended the session after it');
});
