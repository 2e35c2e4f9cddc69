/**
 * No escalation through user administration: a holder of `users.administer` may not give
 * anyone (or themselves, through another account) a permission they lack, nor take over
 * an account that holds more than they do.
 */
import { eq, sql } from 'drizzle-orm';
import t from 'tap';
import { ownerUser, startTestApi } from '../../helpers/atrium.ts';
import { newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';
import { verifyPassword } from '../../../src/platform/auth/passwords.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('privileges');
const delegate = await api.createUser(tenant.tenantId, { username: 'delegate', permissions: ['users.administer', 'users.view'] });
const employee = await api.createUser(tenant.tenantId, { username: 'employee' });
/** Like the delegate, but may see (and so change) another user's role_id. */
const roleDelegate = await api.createUser(tenant.tenantId, {
  username: 'role-delegate',
  permissions: ['users.administer', 'users.view', 'users.view-administrative'],
});
const adminRole = await roleNamed(api.db, tenant.tenantId, 'Administrator');
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const [inactiveAdminLike] = await api.db.owner
  .insert(roles)
  .values({ tenantId: tenant.tenantId, name: 'Retired administrators', active: false, permissions: ['automations.administer', 'users.administer'] })
  .returning();
const userCount = () => rowCount(api.db, 'users', sql`tenant_id = ${tenant.tenantId}`);
let counter = 0;
const userBody = newUserBodies(employeeRole.id);
const newUserBody = (extra: Record<string, unknown> = {}) => userBody({ username: `sock-${++counter}`, password: 'sockpuppet-password', ...extra });

t.test('create: without users.view a delegate is refused (403) before any username is judged', async (t) => {
  // "is already taken" would tell whether a username exists, which only users.view may learn.
  const blind = await api.createUser(tenant.tenantId, { permissions: ['users.administer'] });
  const before = await userCount();
  const taken = await api.call(t, 'createUser', { token: blind.token, body: newUserBody({ username: 'employee' }) });
  const free = await api.call(t, 'createUser', { token: blind.token, body: newUserBody() });
  t.same([taken.status, free.status], [403, 403]);
  t.equal(taken.body.detail, 'This requires the permission "users.view".');
  t.same(taken.body, free.body, 'a taken username and a free one answer alike');
  t.equal(await userCount(), before, 'no user was stored');
});

t.test('create: a role granting permissions the caller lacks is 422 on role_id and stores nothing', async (t) => {
  const before = await userCount();
  const res = await api.call(t, 'createUser', { token: delegate.token, body: newUserBody({ role_id: adminRole.id }) });
  t.equal(res.status, 422);
  t.match(res.body.errors?.role_id?.[0], /automations\.administer/, 'names what the caller lacks');
  t.equal(await userCount(), before, 'no user was stored');
  const login = await api.call(t, 'login', { body: { tenant: 'privileges', username: `sock-${counter}`, password: 'sockpuppet-password' } });
  t.equal(login.status, 401, 'no account to sign in with');
});

t.test("create: a role within the caller's permissions is accepted; an administrator may assign any", async (t) => {
  const [subset] = await api.db.owner
    .insert(roles)
    .values({ tenantId: tenant.tenantId, name: 'Viewers', permissions: ['users.view'] })
    .returning();
  t.equal((await api.call(t, 'createUser', { token: delegate.token, body: newUserBody({ role_id: subset!.id }) })).status, 201);
  t.equal((await api.call(t, 'createUser', { token: tenant.adminToken, body: newUserBody({ role_id: adminRole.id }) })).status, 201, 'an administrator may');
  t.equal(
    (await api.call(t, 'createUser', { token: tenant.adminToken, body: newUserBody({ role_id: inactiveAdminLike!.id }) })).status,
    201,
    'an inactive one too',
  );
});

t.test('an inactive role is judged by the permissions it would grant once reactivated: create and update refuse it (422)', async (t) => {
  const before = await userCount();
  const puppet = newUserBody({ role_id: inactiveAdminLike!.id });
  const create = await api.call(t, 'createUser', { token: delegate.token, body: puppet });
  t.equal(create.status, 422);
  t.match(create.body.errors?.role_id?.[0], /automations\.administer/);
  t.equal(await userCount(), before, 'no user stored');
  const employeeBefore = await ownerUser(api.db, tenant.tenantId, employee.id);
  const update = await api.call(t, 'updateUser', { token: roleDelegate.token, params: { user: employee.id }, body: { role_id: inactiveAdminLike!.id } });
  t.equal(update.status, 422);
  t.match(update.body.errors?.role_id?.[0], /automations\.administer/);
  t.strictSame(await ownerUser(api.db, tenant.tenantId, employee.id), employeeBefore, 'the employee is unchanged');
  // Reactivating the role must not hand the delegate's sock puppet administrator rights.
  // A user placed in the role is the control: the filter finds who holds it.
  const retired = await api.createUser(tenant.tenantId, { username: 'retired-admin', values: { roleId: inactiveAdminLike!.id } });
  await api.db.owner.update(roles).set({ active: true }).where(eq(roles.id, inactiveAdminLike!.id));
  const reactivated = await api.call(t, 'listUsers', {
    token: tenant.adminToken,
    query: { filter: { role_id: inactiveAdminLike!.id }, selects: 'id,username' },
  });
  t.ok(
    reactivated.body.some((u: { id: number }) => u.id === retired.id),
    'the filter finds a user who holds it',
  );
  t.notOk(
    reactivated.body.some((u: { username: string }) => u.username === puppet.username),
    "the delegate's sock puppet does not hold it",
  );
  t.notOk(
    reactivated.body.some((u: { id: number }) => u.id === employee.id),
    'nor the employee',
  );
  await api.db.owner.update(roles).set({ active: false }).where(eq(roles.id, inactiveAdminLike!.id));
});

t.test('update: assigning a role granting permissions the caller lacks is 422 on role_id and changes nothing', async (t) => {
  const before = await ownerUser(api.db, tenant.tenantId, employee.id);
  const res = await api.call(t, 'updateUser', {
    token: roleDelegate.token,
    params: { user: employee.id },
    body: { role_id: adminRole.id, first_name: 'Changed' },
  });
  t.equal(res.status, 422);
  t.match(res.body.errors?.role_id?.[0], /automations\.administer/, 'names what the caller lacks');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, employee.id), before, 'unchanged');
});

t.test('update: another user whose role grants permissions the caller lacks is 403, password included', async (t) => {
  const before = await ownerUser(api.db, tenant.tenantId, tenant.adminUserId);
  for (const body of [{ password: 'taken-over-admin' }, { first_name: 'Mallory' }, { role_id: employeeRole.id }]) {
    const res = await api.call(t, 'updateUser', { token: delegate.token, params: { user: tenant.adminUserId }, body });
    t.equal(res.status, 403, `refused: ${Object.keys(body).join(', ')}`);
  }
  const after = await ownerUser(api.db, tenant.tenantId, tenant.adminUserId);
  t.strictSame(after, before, 'the administrator is unchanged');
  t.notOk(await verifyPassword(after!.passwordHash, 'taken-over-admin', 0), 'the password was not replaced');
});

t.test('delete, blackout and restore of a user whose role grants permissions the caller lacks are 403', async (t) => {
  const boss = await api.createUser(tenant.tenantId, { username: 'boss', values: { roleId: adminRole.id } });
  t.equal((await api.call(t, 'deleteUser', { token: delegate.token, params: { user: boss.id } })).status, 403, 'delete');
  t.equal((await api.call(t, 'blackoutUser', { token: delegate.token, params: { user: boss.id } })).status, 403, 'blackout');
  t.equal((await ownerUser(api.db, tenant.tenantId, boss.id))!.deletedAt, null, 'still there');
  await api.db.owner.update(users).set({ deletedAt: new Date() }).where(eq(users.id, boss.id));
  t.equal((await api.call(t, 'restoreUser', { token: delegate.token, params: { user: boss.id }, body: {} })).status, 403, 'restore');
  const restoreDemoted = await api.call(t, 'restoreUser', { token: delegate.token, params: { user: boss.id }, body: { role_id: employeeRole.id } });
  t.equal(restoreDemoted.status, 403, 'restore, even with a lesser role');
  const row = await ownerUser(api.db, tenant.tenantId, boss.id);
  t.ok(row!.deletedAt, 'still deleted');
  t.equal(row!.roleId, adminRole.id, 'role unchanged');
});

t.test('restore: assigning a role granting permissions the caller lacks is 422 on role_id', async (t) => {
  const gone = await api.createUser(tenant.tenantId, { username: 'gone', values: { roleId: employeeRole.id, deletedAt: new Date() } });
  const res = await api.call(t, 'restoreUser', { token: delegate.token, params: { user: gone.id }, body: { role_id: adminRole.id } });
  t.equal(res.status, 422);
  t.ok(res.body.errors?.role_id);
  const row = await ownerUser(api.db, tenant.tenantId, gone.id);
  t.ok(row!.deletedAt, 'still deleted');
  t.equal(row!.roleId, employeeRole.id, 'role unchanged');
  t.equal((await api.call(t, 'restoreUser', { token: delegate.token, params: { user: gone.id }, body: {} })).status, 200, 'a lesser user is restored');
});

t.test('a user whose role is inactive but would grant more than the delegate holds cannot be administered by them (403)', async (t) => {
  const retired = await api.createUser(tenant.tenantId, { username: 'retired', values: { roleId: inactiveAdminLike!.id } });
  const before = await ownerUser(api.db, tenant.tenantId, retired.id);
  t.equal((await api.call(t, 'updateUser', { token: delegate.token, params: { user: retired.id }, body: { first_name: 'Retired' } })).status, 403, 'update');
  t.equal((await api.call(t, 'deleteUser', { token: delegate.token, params: { user: retired.id } })).status, 403, 'delete');
  t.equal((await api.call(t, 'blackoutUser', { token: delegate.token, params: { user: retired.id } })).status, 403, 'blackout');
  t.equal((await api.call(t, 'markUserForLogout', { token: delegate.token, params: { user: retired.id } })).status, 403, 'logout marking');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, retired.id), before, 'unchanged');
  const [lesser] = await api.db.owner
    .insert(roles)
    .values({ tenantId: tenant.tenantId, name: 'Retired viewers', active: false, permissions: ['users.view'] })
    .returning();
  const viewerRetired = await api.createUser(tenant.tenantId, { values: { roleId: lesser!.id } });
  t.equal(
    (await api.call(t, 'updateUser', { token: delegate.token, params: { user: viewerRetired.id }, body: { first_name: 'Fine' } })).status,
    200,
    "an inactive role within the delegate's permissions is fine",
  );
});

t.test('logout marking: a delegate cannot sign out a user whose role grants more (403); the administrator stays signed in', async (t) => {
  const res = await api.call(t, 'markUserForLogout', { token: delegate.token, params: { user: tenant.adminUserId } });
  t.equal(res.status, 403);
  t.notOk(res.text.includes('automations.administer'), "the refusal names none of the hidden role's permissions");
  t.equal((await ownerUser(api.db, tenant.tenantId, tenant.adminUserId))!.logoutMarkedAt, null, 'not marked');
  t.equal((await api.call(t, 'getCurrentUser', { token: tenant.adminToken })).status, 200, "the administrator's session still works");
  const peer = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  t.equal((await api.call(t, 'markUserForLogout', { token: delegate.token, params: { user: peer.id } })).status, 204, 'a lesser user may be signed out');
  t.equal((await api.call(t, 'getCurrentUser', { token: peer.token })).status, 401);
});

t.test('a delegate still updates their own record as before', async (t) => {
  const res = await api.call(t, 'updateUser', { token: delegate.token, params: { user: delegate.id }, body: { first_name: 'Dee' } });
  t.equal(res.status, 200);
  t.equal(res.body.first_name, 'Dee');
});

t.test('filter[text] matches e-mail and staff number only for callers who may see them', async (t) => {
  const hidden = await api.createUser(tenant.tenantId, { username: 'hidden', values: { email: 'secret.person@hidden-corp.example', staffNumber: 'S-4711' } });
  const viewer = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  const personal = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.view-personal'] });
  const administrative = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.view-administrative'] });
  const ids = async (token: string, text: string) => {
    const res = await api.call(t, 'listUsers', { token, query: { filter: { text }, selects: 'id' } });
    t.equal(res.status, 200);
    return (res.body as { id: number }[]).map((u) => u.id);
  };
  t.strictSame(await ids(viewer.token, 'hidden-corp'), [], 'no e-mail match without users.view-personal');
  t.strictSame(await ids(viewer.token, 'S-4711'), [], 'no staff number match without users.view-administrative');
  t.strictSame(await ids(viewer.token, 'hidden'), [hidden.id], 'the username still matches');
  t.strictSame(await ids(personal.token, 'hidden-corp'), [hidden.id], 'e-mail with users.view-personal');
  t.strictSame(await ids(personal.token, 'S-4711'), [], 'still no staff number');
  t.strictSame(await ids(administrative.token, 'S-4711'), [hidden.id], 'staff number with users.view-administrative');
  t.strictSame(await ids(administrative.token, 'hidden-corp'), [], 'but no e-mail');
});
