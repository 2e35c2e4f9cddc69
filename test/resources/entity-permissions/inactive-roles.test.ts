/**
 * An inactive role grants nothing (docs/permissions.md#permission-keys-and-seeded-roles):
 * neither its permission keys nor the rights that entity permissions naming it confer.
 * Wherever Atrium asks what a role could grant, it still counts with them: it can be
 * reactivated at any time.
 */
import t, { type Test } from 'tap';
import { eq } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { createDepartment } from '../../helpers/fixtures.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('inactive-roles');
const admin = tenant.adminToken;
const delegate = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer', 'users.view-administrative'] });
const payroll = await createDepartment(api.db, tenant.tenantId, 'Payroll');
const [auditors] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Auditors', permissions: [] }).returning();
const auditor = await api.createUser(tenant.tenantId);
await api.db.owner.update(users).set({ roleId: auditors!.id }).where(eq(users.id, auditor.id));

let form: { id: number };
let item: { id: number };

t.test('setup: a form and a menu item name the role Auditors', async (t) => {
  const created = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Audit findings', form_type: 'survey', entity_permissions: { role_ids: [auditors!.id], department_ids: [payroll.id] } },
  });
  const shown = await api.call(t, 'createMenuItem', {
    token: admin,
    body: {
      icon_id: 3,
      menu_identifier: 'main',
      type: 'link',
      title: 'Audit wiki',
      link: 'https://audit.example.com/',
      entity_permissions: { role_ids: [auditors!.id] },
    },
  });
  t.strictSame([created.status, shown.status], [201, 201]);
  [form, item] = [created.body, shown.body];
});

const setActive = (t: Test, active: boolean, token = admin) => api.call(t, 'updateRole', { token, params: { role: auditors!.id }, body: { active } });
const reach = async (t: Test) => ({
  form: (await api.call(t, 'getForm', { token: auditor.token, params: { form: form.id } })).status,
  listed: (await api.call(t, 'listForms', { token: auditor.token })).body.some((row: { id: number }) => row.id === form.id),
  item: (await api.call(t, 'listMenuItems', { token: auditor.token })).body.some((row: { id: number }) => row.id === item.id),
});

t.test('entity permissions naming a role reach its holders only while it is active', async (t) => {
  t.strictSame(await reach(t), { form: 200, listed: true, item: true }, 'active: the form is theirs, the item shown');
  t.equal((await setActive(t, false)).status, 200);
  t.strictSame(await reach(t), { form: 404, listed: false, item: false }, 'inactive: neither the form nor the item');
  t.equal((await setActive(t, true)).status, 200);
  t.strictSame(await reach(t), { form: 200, listed: true, item: true }, 'active again: both back');
});

t.test('while the role is inactive, a membership naming its holder again confers the right anew', async (t) => {
  t.equal((await setActive(t, false)).status, 200);
  const res = await api.call(t, 'updateUser', { token: delegate.token, params: { user: auditor.id }, body: { department_ids: [payroll.id] } });
  t.equal(res.status, 422, 'the department would give the form back: the delegate lacks it');
  t.strictSame(res.body.error_codes?.['department_ids.0'], ['confers_rights']);
  // What the role could grant still counts: the holder's password stays out of the delegate's reach.
  const password = await api.call(t, 'updateUser', { token: delegate.token, params: { user: auditor.id }, body: { password: 'another good password' } });
  t.equal(password.status, 422);
  t.strictSame(password.body.error_codes?.password, ['confers_rights']);
});

t.test('reactivating a role needs the rights entity permissions give its holders', async (t) => {
  t.equal((await setActive(t, false)).status, 200);
  const refused = await setActive(t, true, delegate.token);
  t.equal(refused.status, 422, 'the delegate lacks the form and the item the role would give back');
  t.strictSame(refused.body.error_codes?.active, ['confers_rights']);
  const [stored] = await api.db.owner.select({ active: roles.active }).from(roles).where(eq(roles.id, auditors!.id));
  t.equal(stored!.active, false, 'the role stays inactive');
  t.equal((await setActive(t, true)).status, 200, 'an administrator holds them (tasks.administer, menu-items.administer)');
});
