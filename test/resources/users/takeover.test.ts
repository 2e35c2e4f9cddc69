/**
 * No takeover of entity rights: a caller may not obtain another user's credentials — set
 * their password, or create a login token that signs them in — while that user holds
 * rights through entity permissions (of a form, task template or menu item) that the
 * caller lacks; a login token is judged again when it is used. And a user administrator
 * may not write another user's fields it may not see.
 */
import { eq, sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { ownerUser, startTestApi } from '../../helpers/atrium.ts';
import { assertServedAnswer } from '../../helpers/contract.ts';
import { wireClient } from '../../helpers/http-client.ts';
import { createDepartment, createEntitiesNaming, loginTokenRow, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { multipart, PNG_1X1 } from '../../helpers/multipart.ts';
import { departmentUsers } from '../../../src/resources/departments/table.ts';
import { roles } from '../../../src/resources/roles/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('takeover');
const admin = tenant.adminToken;
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const join = (userId: number, departmentId: number) => api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId, userId });
const leave = (userId: number, departmentId: number) =>
  api.db.owner.delete(departmentUsers).where(sql`${departmentUsers.userId} = ${userId} and ${departmentUsers.departmentId} = ${departmentId}`);

const payroll = await createDepartment(api.db, tenant.tenantId, 'Payroll');
const board = await createDepartment(api.db, tenant.tenantId, 'Board');
const [auditors] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Auditors', permissions: [] }).returning();

/** A user administrator with every view permission, but no entity right. */
const delegate = await api.createUser(tenant.tenantId, {
  username: 'delegate',
  permissions: ['users.view', 'users.administer', 'users.view-personal', 'users.view-administrative'],
});
/** A login-token administrator who may look users up by e-mail, but has no entity right. */
const minter = await api.createUser(tenant.tenantId, {
  username: 'minter',
  permissions: ['login-tokens.administer', 'users.view', 'users.view-personal'],
});
const clerk = await api.createUser(tenant.tenantId, {
  username: 'payroll-clerk',
  password: 'the clerk’s own password',
  values: { roleId: employeeRole.id, email: 'clerk@example.com' },
});
await join(clerk.id, payroll.id);

let salaries: { id: number };
let audit: { id: number };
let minutes: { id: number };

type Tt = Test;
const signIn = (tt: Tt, token: string) => api.call(tt, 'loginWithToken', { body: { token } });
const tokenByEmail = (tt: Tt, token: string, email: string) => api.call(tt, 'createUserLoginTokenForEmail', { token, body: { expires_in: 600, email } });
const tokenRow = (uuid: string) => loginTokenRow(api.db, uuid);

t.test('setup: a form names Payroll, a task template the role Auditors, a menu item Board and one user', async (t) => {
  const [form, template, item] = await createEntitiesNaming(api, t, admin, {
    formDepartmentId: payroll.id,
    templateRoleId: auditors!.id,
    menuDepartmentId: board.id,
  });
  t.strictSame([form.status, template.status, item.status], [201, 201, 201]);
  [salaries, audit, minutes] = [form.body, template.body, item.body];
  t.equal((await api.call(t, 'getForm', { token: clerk.token, params: { form: salaries.id } })).status, 200, 'the clerk may administer the form');
  t.equal(
    (await api.call(t, 'getForm', { token: delegate.token, params: { form: salaries.id } })).status,
    404,
    'the delegate may not (answered like a missing form)',
  );
});

t.test('a delegate cannot set the password of a user holding entity rights it lacks: 422 on password, nothing changes', async (t) => {
  const before = await ownerUser(api.db, tenant.tenantId, clerk.id);
  const res = await api.call(t, 'updateUser', {
    token: delegate.token,
    params: { user: clerk.id },
    body: { password: 'taken over password', city: 'Elsewhere' },
  });
  t.equal(res.status, 422);
  t.strictSame(Object.keys(res.body.errors), ['password'], 'only the password is refused');
  t.match(res.body.errors.password[0], /entity permissions/);
  t.notOk(res.text.includes('Salaries') || res.text.includes('Payroll'), 'names no entity or department');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, clerk.id), before, 'unchanged');
  const login = await api.call(t, 'login', { body: { tenant: 'takeover', username: 'payroll-clerk', password: 'taken over password' } });
  t.equal(login.status, 401, 'the delegate cannot sign in as the clerk');
  t.equal((await api.call(t, 'getCurrentUser', { token: clerk.token })).status, 200, 'the clerk’s session is untouched');
});

t.test('the other administration of such a user stays allowed: it gives no access as them', async (t) => {
  const res = await api.call(t, 'updateUser', { token: delegate.token, params: { user: clerk.id }, body: { city: 'Bonn', request_password_change: true } });
  t.equal(res.status, 200);
  t.equal(res.body.city, 'Bonn');
  const reset = await api.call(t, 'updateUser', { token: delegate.token, params: { user: clerk.id }, body: { request_password_change: false } });
  t.equal(reset.status, 200);
  const peer = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id } });
  await join(peer.id, payroll.id);
  t.equal((await api.call(t, 'markUserForLogout', { token: delegate.token, params: { user: peer.id } })).status, 204, 'logout marking');
  t.equal((await api.call(t, 'deleteUser', { token: delegate.token, params: { user: peer.id } })).status, 204, 'deletion');
  t.equal((await api.call(t, 'restoreUser', { token: delegate.token, params: { user: peer.id }, body: {} })).status, 200, 'restore');
  t.equal((await api.call(t, 'blackoutUser', { token: delegate.token, params: { user: peer.id } })).status, 204, 'blackout');
});

t.test('rights through a role or a direct naming count too; the administering permission of the type covers it', async (t) => {
  const auditor = await api.createUser(tenant.tenantId, { values: { roleId: auditors!.id } });
  const named = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id } });
  await join(named.id, board.id);
  const reset = (token: string, userId: number) => api.call(t, 'updateUser', { token, params: { user: userId }, body: { password: 'a reset password' } });
  t.equal((await reset(delegate.token, auditor.id)).status, 422, 'named through the role');
  t.equal((await reset(delegate.token, named.id)).status, 422, 'named by the menu item through a department');
  const menuDelegate = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer', 'menu-items.administer'] });
  t.equal((await reset(menuDelegate.token, named.id)).status, 200, 'menu-items.administer covers menu items');
  t.equal((await reset(menuDelegate.token, auditor.id)).status, 422, 'but not task templates');
  const tasksDelegate = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer', 'tasks.administer'] });
  t.equal((await reset(tasksDelegate.token, auditor.id)).status, 200, 'tasks.administer covers task templates');
  t.equal((await reset(tasksDelegate.token, clerk.id)).status, 200, 'and forms');
  const directly = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id } });
  t.equal(
    (
      await api.call(t, 'updateMenuItem', {
        token: admin,
        params: { menuItem: minutes.id },
        body: { entity_permissions: { department_ids: [board.id], user_ids: [directly.id] } },
      })
    ).status,
    200,
  );
  t.equal((await reset(delegate.token, directly.id)).status, 422, 'named directly');
  t.equal((await reset(admin, directly.id)).status, 200, 'the administrator holds every administering permission');
  t.ok(audit, 'the task template exists');
});

t.test('nor through SCIM: a token sets a password only where its minter may', async (t) => {
  const scimToken = (await api.call(t, 'createScimToken', { token: delegate.token, body: { name: 'IdP' } })).body.token as string;
  const wire = await wireClient(api.atrium.app!);
  const send = async (method: 'PATCH' | 'PUT', userId: number, body: unknown) => {
    const url = `/scim/v2/Users/${userId}`;
    const headers = { authorization: `Bearer ${scimToken}`, 'content-type': 'application/scim+json' };
    const answer = await wire.send({ method, url, headers, payload: JSON.stringify(body) });
    assertServedAnswer(method, url, answer);
    return answer;
  };
  const patch = {
    schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
    Operations: [{ op: 'replace', path: 'password', value: 'a password the delegate chose' }],
  };
  const signsIn = async (username: string) =>
    (await api.call(t, 'login', { body: { tenant: tenant.slug, username, password: 'a password the delegate chose' } })).status;

  const refused = await send('PATCH', clerk.id, patch);
  t.equal(refused.statusCode, 400);
  t.equal(refused.json().scimType, 'invalidValue');
  t.match(refused.json().detail, /^password this user holds rights through entity permissions/);
  const current = (await wire.send({ method: 'GET', url: `/scim/v2/Users/${clerk.id}`, headers: { authorization: `Bearer ${scimToken}` } })).json();
  const put = await send('PUT', clerk.id, { ...current, password: 'a password the delegate chose' });
  t.equal(put.statusCode, 400, 'nor by a PUT');
  t.equal(await signsIn('payroll-clerk'), 401, 'the clerk’s password is unchanged');

  const plain = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id } });
  t.equal((await send('PATCH', plain.id, patch)).statusCode, 200, 'a user without such rights: the token may');
  t.equal(await signsIn(plain.username), 200);
});

t.test('a caller named by the same entity may set the password', async (t) => {
  const colleague = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  await join(colleague.id, payroll.id);
  const res = await api.call(t, 'updateUser', { token: colleague.token, params: { user: clerk.id }, body: { password: 'the clerk’s own password' } });
  t.equal(res.status, 200);
  await leave(colleague.id, payroll.id);
  const again = await api.call(t, 'updateUser', { token: colleague.token, params: { user: clerk.id }, body: { password: 'the clerk’s own password' } });
  t.equal(again.status, 422, 'no longer once it left the department');
});

t.test('no login token by e-mail for a user holding entity rights the creator lacks; the same 422 as an unknown address', async (t) => {
  const unknown = await tokenByEmail(t, minter.token, 'nobody-at-all@example.com');
  t.equal(unknown.status, 422);
  const before = await rowCount(api.db, 'user_login_tokens');
  const res = await tokenByEmail(t, minter.token, 'clerk@example.com');
  t.equal(res.status, 422);
  t.equal(res.text, unknown.text, 'identical to an unusable address');
  t.equal(await rowCount(api.db, 'user_login_tokens'), before, 'nothing stored');
  const plain = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id, email: 'plain@example.com' } });
  t.equal((await tokenByEmail(t, minter.token, 'plain@example.com')).status, 201, 'a user without entity rights is fine');
  t.ok(plain);
  await join(minter.id, payroll.id);
  t.equal((await tokenByEmail(t, minter.token, 'clerk@example.com')).status, 201, 'a creator named by the form may');
  await leave(minter.id, payroll.id);
});

t.test('at use: a token whose user gained entity rights the creator lacks signs nobody in and stays unused', async (t) => {
  const newcomer = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id, email: 'newcomer@example.com' } });
  const created = await tokenByEmail(t, minter.token, 'newcomer@example.com');
  t.equal(created.status, 201);
  await join(newcomer.id, payroll.id);
  const refused = await signIn(t, created.body.token);
  t.equal(refused.status, 401);
  t.equal((await tokenRow(created.body.uuid))!.used_at, null, 'left unused');
  await join(minter.id, payroll.id);
  const ok = await signIn(t, created.body.token);
  t.equal(ok.status, 200, 'usable once the creator holds the same right');
  t.equal((await api.call(t, 'getCurrentUser', { token: ok.body.access_token })).body.id, newcomer.id);
});

t.test('at use: a creator who lost the entity right no longer signs the user in', async (t) => {
  // The minter is in Payroll now (previous test) and may create a token for the clerk.
  const created = await tokenByEmail(t, minter.token, 'clerk@example.com');
  t.equal(created.status, 201);
  await leave(minter.id, payroll.id);
  t.equal((await signIn(t, created.body.token)).status, 401, 'the creator left Payroll');
  await api.db.owner
    .update(roles)
    .set({ permissions: ['login-tokens.administer', 'users.view', 'users.view-personal', 'tasks.administer'] })
    .where(eq(roles.id, (await ownerUser(api.db, tenant.tenantId, minter.id))!.roleId));
  t.equal((await signIn(t, created.body.token)).status, 200, 'tasks.administer covers forms at use too');
});

t.test('the token for oneself is never refused for one’s own entity rights', async (t) => {
  const named = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer'] });
  await join(named.id, payroll.id);
  const created = await api.call(t, 'createUserLoginToken', { token: named.token, body: { expires_in: 600 } });
  t.equal(created.status, 201);
  t.equal((await signIn(t, created.body.token)).status, 200);
});

// ---- writing fields the caller may not see ----

t.test('a delegate cannot write another user’s fields it may not see: 422 per key naming the permission, whatever the value', async (t) => {
  const blind = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  const victim = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id, email: 'victim@example.com', wantsEmailNotifications: false } });
  const before = await ownerUser(api.db, tenant.tenantId, victim.id);
  const redirect = await api.call(t, 'updateUser', {
    token: blind.token,
    params: { user: victim.id },
    body: { email: 'attacker@evil.example', wants_email_notifications: true, first_name: 'Vic' },
  });
  t.equal(redirect.status, 422);
  t.strictSame(Object.keys(redirect.body.errors).sort(), ['email', 'wants_email_notifications']);
  t.match(redirect.body.errors.email[0], /users\.view-personal/);
  t.match(redirect.body.errors.wants_email_notifications[0], /users\.view-administrative/);
  const same = await api.call(t, 'updateUser', { token: blind.token, params: { user: victim.id }, body: { email: 'victim@example.com' } });
  t.equal(same.status, 422, 'the stored value is refused the same way: nothing is confirmed');
  t.strictSame(same.body.errors, { email: redirect.body.errors.email }, 'the same answer as for another value');
  for (const body of [
    { phone: null },
    { birthdate: '2000-01-01' },
    { role_id: employeeRole.id },
    { active: true },
    { staff_number: 'S-1' },
    { default_route: '/home' },
    { request_password_change: true },
  ]) {
    const res = await api.call(t, 'updateUser', { token: blind.token, params: { user: victim.id }, body });
    t.equal(res.status, 422, Object.keys(body)[0]!);
    t.strictSame(Object.keys(res.body.errors), Object.keys(body));
  }
  t.strictSame(await ownerUser(api.db, tenant.tenantId, victim.id), before, 'nothing changed');
  const visible = await api.call(t, 'updateUser', { token: blind.token, params: { user: victim.id }, body: { first_name: 'Vic', department_ids: [] } });
  t.equal(visible.status, 200, 'public fields may be written');
  // Nor by deleting the user and restoring them with a role.
  t.equal((await api.call(t, 'deleteUser', { token: blind.token, params: { user: victim.id } })).status, 204);
  const deleted = await ownerUser(api.db, tenant.tenantId, victim.id);
  const restore = await api.call(t, 'restoreUser', { token: blind.token, params: { user: victim.id }, body: { role_id: employeeRole.id } });
  t.equal(restore.status, 422, 'restore with a role');
  t.strictSame(restore.body.error_codes, { role_id: ['permission_missing'] });
  t.strictSame(await ownerUser(api.db, tenant.tenantId, victim.id), deleted, 'still deleted, role unchanged');
  t.equal((await api.call(t, 'restoreUser', { token: blind.token, params: { user: victim.id }, body: {} })).status, 200, 'restore without one');
});

t.test('without users.view, no operation answers another user’s record: update, restore, picture upload', async (t) => {
  const unseeing = await api.createUser(tenant.tenantId, { permissions: ['users.administer'] });
  const victim = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id } });
  const before = await ownerUser(api.db, tenant.tenantId, victim.id);
  const empty = await api.call(t, 'updateUser', { token: unseeing.token, params: { user: victim.id }, body: {} });
  t.equal(empty.status, 403, 'an empty update reads nothing');
  t.equal(empty.body.code, 'permission_missing');
  t.notOk(JSON.stringify(empty.body).includes(victim.username), 'names nothing of the user');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, victim.id), before, 'and writes nothing (updated_at included)');
  const picture = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'p.png', type: 'image/png' } });
  const upload = await api.call(t, 'uploadProfilePicture', { token: unseeing.token, params: { user: victim.id }, ...picture });
  t.equal(upload.status, 403, 'a picture upload');
  t.equal((await api.call(t, 'deleteUser', { token: unseeing.token, params: { user: victim.id } })).status, 204, 'deleting answers no record');
  t.equal((await api.call(t, 'restoreUser', { token: unseeing.token, params: { user: victim.id }, body: {} })).status, 403, 'a restore answers it');
  t.equal(
    (await api.call(t, 'updateUser', { token: unseeing.token, params: { user: unseeing.id }, body: { first_name: 'Self' } })).status,
    200,
    'one’s own record',
  );
});

t.test('with the view permissions the same writes pass; one’s own record and a new user are unaffected', async (t) => {
  const victim = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole.id, email: 'seen@example.com' } });
  const res = await api.call(t, 'updateUser', {
    token: delegate.token,
    params: { user: victim.id },
    body: { email: 'new@example.com', wants_email_notifications: true },
  });
  t.equal(res.status, 200);
  t.equal(res.body.email, 'new@example.com');
  const blind = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  const own = await api.call(t, 'updateUser', {
    token: blind.token,
    params: { user: blind.id },
    body: { email: 'me@example.com', wants_email_notifications: true },
  });
  t.equal(own.status, 200, 'one’s own record');
  t.equal(own.body.email, 'me@example.com');
  const created = await api.call(t, 'createUser', {
    token: blind.token,
    body: {
      username: 'fresh',
      password: 'a long enough password',
      first_name: 'F',
      last_name: 'Resh',
      role_id: employeeRole.id,
      email: 'fresh@example.com',
      wants_email_notifications: true,
    },
  });
  t.equal(created.status, 201, 'creating a user');
  t.equal((await ownerUser(api.db, tenant.tenantId, created.body.id))!.email, 'fresh@example.com');
});
