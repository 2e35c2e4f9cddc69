/**
 * No self-granted entity rights: a user administrator may not change memberships
 * (departments, role) so that a user — themselves included — becomes named by an
 * entity's permissions (a form, a task template, a menu item) that do not already
 * name the caller, unless the caller holds the permission that administers that kind
 * of entity anyway.
 */
import { eq } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { ownerUser, startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, createEntitiesNaming, importUsersCsv, newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { departmentUsers } from '../../../src/resources/departments/table.ts';
import { roles } from '../../../src/resources/roles/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('entity-rights');
const admin = tenant.adminToken;
const delegate = await api.createUser(tenant.tenantId, { username: 'delegate', permissions: ['users.view', 'users.administer', 'users.view-administrative'] });
const menuAdmin = await api.createUser(tenant.tenantId, {
  username: 'menu-admin',
  permissions: ['users.view', 'users.administer', 'users.view-administrative', 'menu-items.administer'],
});

const payroll = await createDepartment(api.db, tenant.tenantId, 'Payroll');
const board = await createDepartment(api.db, tenant.tenantId, 'Board');
const canteen = await createDepartment(api.db, tenant.tenantId, 'Canteen');
const [auditors] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Auditors', permissions: [] }).returning();
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const employee = await api.createUser(tenant.tenantId, { username: 'employee', values: { roleId: employeeRole!.id } });

let salaries: { id: number };
let audit: { id: number };
let boardItem: { id: number };
const membership = async (userId: number) =>
  (await api.db.owner.select({ id: departmentUsers.departmentId }).from(departmentUsers).where(eq(departmentUsers.userId, userId))).map((row) => row.id).sort();
const newUserBody = newUserBodies(employeeRole.id, 'recruit');
const importCsv = (t: Test, csv: string, token: string) => importUsersCsv(api, t, token, csv, { update_users: 'true' });

t.test('setup: a form, a task template and a menu item name a department or a role', async (t) => {
  const [form, template, item] = await createEntitiesNaming(api, t, admin, {
    formDepartmentId: payroll.id,
    templateRoleId: auditors!.id,
    menuDepartmentId: board.id,
  });
  t.strictSame([form.status, template.status, item.status], [201, 201, 201]);
  [salaries, audit, boardItem] = [form.body, template.body, item.body];
});

t.test('a delegate cannot add themselves to a department a form names (422 on the department), and still cannot see the form', async (t) => {
  const res = await api.call(t, 'updateUser', { token: delegate.token, params: { user: delegate.id }, body: { department_ids: [canteen.id, payroll.id] } });
  t.equal(res.status, 422);
  t.ok(res.body.errors?.['department_ids.1'], 'names the offending department');
  t.strictSame(res.body.error_codes?.['department_ids.1'], ['confers_rights']);
  t.notOk(res.body.errors?.['department_ids.0'], 'not the harmless one');
  t.notOk(JSON.stringify(res.body).includes('Salaries'), 'does not reveal the entity');
  t.strictSame(await membership(delegate.id), [], 'membership unchanged');
  t.equal(
    (await api.call(t, 'getForm', { token: delegate.token, params: { form: salaries.id } })).status,
    404,
    'the form stays out of reach (answered like a missing one)',
  );
});

t.test('nor add another user to it, on update or create', async (t) => {
  const update = await api.call(t, 'updateUser', { token: delegate.token, params: { user: employee.id }, body: { department_ids: [payroll.id] } });
  t.equal(update.status, 422);
  t.ok(update.body.errors?.['department_ids.0']);
  t.strictSame(await membership(employee.id), []);
  const before = await rowCount(api.db, 'users');
  const create = await api.call(t, 'createUser', { token: delegate.token, body: newUserBody({ department_ids: [payroll.id] }) });
  t.equal(create.status, 422);
  t.ok(create.body.errors?.['department_ids.0']);
  t.equal(await rowCount(api.db, 'users'), before, 'no user stored');
});

t.test('a role a task template names cannot be assigned by create, update or restore (422 on role_id)', async (t) => {
  const create = await api.call(t, 'createUser', { token: delegate.token, body: newUserBody({ role_id: auditors!.id }) });
  t.equal(create.status, 422);
  t.ok(create.body.errors?.role_id);
  const update = await api.call(t, 'updateUser', { token: delegate.token, params: { user: employee.id }, body: { role_id: auditors!.id } });
  t.equal(update.status, 422);
  t.ok(update.body.errors?.role_id);
  t.equal((await ownerUser(api.db, tenant.tenantId, employee.id))!.roleId, employeeRole!.id);
  const gone = await api.createUser(tenant.tenantId, { values: { roleId: employeeRole!.id, deletedAt: new Date() } });
  const restore = await api.call(t, 'restoreUser', { token: delegate.token, params: { user: gone.id }, body: { role_id: auditors!.id } });
  t.equal(restore.status, 422);
  t.ok(restore.body.errors?.role_id);
  t.strictSame(restore.body.error_codes, { role_id: ['confers_rights'] });
  const row = await ownerUser(api.db, tenant.tenantId, gone.id);
  t.ok(row!.deletedAt, 'still deleted');
  t.equal(row!.roleId, employeeRole!.id);
});

t.test('a department a menu item names: refused for a delegate, allowed with menu-items.administer', async (t) => {
  const refused = await api.call(t, 'updateUser', { token: delegate.token, params: { user: employee.id }, body: { department_ids: [board.id] } });
  t.equal(refused.status, 422);
  t.ok(refused.body.errors?.['department_ids.0']);
  const allowed = await api.call(t, 'updateUser', { token: menuAdmin.token, params: { user: employee.id }, body: { department_ids: [board.id] } });
  t.equal(allowed.status, 200);
  t.strictSame(await membership(employee.id), [board.id]);
  const menu = await api.call(t, 'listMenuItems', { token: employee.token });
  t.ok(
    menu.body.some((row: { id: number }) => row.id === boardItem.id),
    "the item is now within the employee's reach",
  );
  const toPayroll = await api.call(t, 'updateUser', { token: menuAdmin.token, params: { user: employee.id }, body: { department_ids: [payroll.id] } });
  t.equal(toPayroll.status, 422, 'menu-items.administer does not cover forms');
  await api.call(t, 'updateUser', { token: admin, params: { user: employee.id }, body: { department_ids: [] } });
});

t.test('callers who already have the right may pass it on: named by the entity, or holding tasks.administer', async (t) => {
  const payrollClerk = await api.createUser(tenant.tenantId, { username: 'clerk', permissions: ['users.view', 'users.administer'] });
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: payroll.id, userId: payrollClerk.id });
  const byClerk = await api.call(t, 'updateUser', { token: payrollClerk.token, params: { user: employee.id }, body: { department_ids: [payroll.id] } });
  t.equal(byClerk.status, 200, 'the clerk is named by the form through Payroll');
  const byAdmin = await api.call(t, 'updateUser', { token: admin, params: { user: employee.id }, body: { role_id: auditors!.id } });
  t.equal(byAdmin.status, 200, 'the administrator holds tasks.administer');
  t.equal((await api.call(t, 'getForm', { token: employee.token, params: { form: salaries.id } })).status, 200);
  t.equal((await api.call(t, 'getTaskTemplate', { token: employee.token, params: { taskTemplate: audit.id } })).status, 200);
});

t.test('a change that confers nothing new passes: the user already had the right, or no entity names the subject', async (t) => {
  // employee is in Payroll and holds Auditors now; the delegate keeps both and adds Canteen.
  const keep = await api.call(t, 'updateUser', {
    token: delegate.token,
    params: { user: employee.id },
    body: { department_ids: [payroll.id, canteen.id], role_id: auditors!.id, first_name: 'Kept' },
  });
  t.equal(keep.status, 200);
  t.strictSame(await membership(employee.id), [payroll.id, canteen.id].sort());
  const leave = await api.call(t, 'updateUser', {
    token: delegate.token,
    params: { user: employee.id },
    body: { department_ids: [], role_id: employeeRole!.id },
  });
  t.equal(leave.status, 200, 'taking rights away is always allowed');
  const rejoin = await api.call(t, 'updateUser', { token: delegate.token, params: { user: employee.id }, body: { department_ids: [payroll.id] } });
  t.equal(rejoin.status, 422, "once gone, the right is not the delegate's to give back");
});

t.test('the CSV preview applies the same rule to its role column', async (t) => {
  const csv = [
    'username,password,first_name,last_name,role_id',
    `csv-new,a long enough password,C,New,${auditors!.id}`,
    `employee,,Test,employee,${auditors!.id}`,
    `csv-plain,a long enough password,C,Plain,${employeeRole!.id}`,
  ].join('\n');
  const res = await importCsv(t, csv, delegate.token);
  t.equal(res.status, 200);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(
    invalid.map((row) => [row.line, Object.keys(row.errors)]),
    [
      [2, ['role_id']],
      [3, ['role_id']],
    ],
  );
  t.strictSame(
    res.body.new_users.map((row: { user: { username: string } }) => row.user.username),
    ['csv-plain'],
  );
  const byAdmin = await importCsv(t, csv, admin);
  t.strictSame(byAdmin.body.invalid_rows, [], 'the administrator may');
  t.equal(byAdmin.body.update_users[0].changes.role_id.to, auditors!.id);
});

t.test('the CSV rule is set-based: 2 or 40 role-assigning rows cost the same number of queries', async (t) => {
  const cost = async (rows: number) => {
    const lines = Array.from({ length: rows }, (_, i) => `bulk-${rows}-${i},a long enough password,B,Ulk,${i % 2 ? auditors!.id : employeeRole!.id}`);
    const before = api.db.queryCount;
    const res = await importCsv(t, ['username,password,first_name,last_name,role_id', ...lines].join('\n'), delegate.token);
    t.equal(res.status, 200);
    t.equal(res.body.invalid_rows.length, rows / 2, 'every Auditors row is refused');
    return api.db.queryCount - before;
  };
  t.equal(await cost(40), await cost(2));
});

t.test('the CSV rule holds in every batch of a long file: a role or department first met in a later batch, or met again', async (t) => {
  // Batches hold 500 rows: Auditors appears only from row 700 on; Payroll (a form names it) on every third row.
  const rows = Array.from({ length: 1_300 }, (_, i) => ({
    username: `long-${i}`,
    role: i >= 700 && i % 2 === 1 ? auditors!.id : employeeRole!.id,
    department: i % 3 === 0 ? payroll.id : canteen.id,
  }));
  const csv = [
    'username,password,first_name,last_name,role_id,department_ids',
    ...rows.map((row) => `${row.username},a long enough password,L,Ong,${row.role},${row.department}`),
  ].join('\n');
  const res = await importCsv(t, csv, delegate.token);
  t.equal(res.status, 200);
  const expected = rows.flatMap((row, i) => {
    const keys = [...(row.role === auditors!.id ? ['role_id'] : []), ...(row.department === payroll.id ? ['department_ids.0'] : [])];
    return keys.length > 0 ? [[i + 2, keys.sort()]] : [];
  });
  t.strictSame(
    (res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[]).map((row) => [row.line, Object.keys(row.errors).sort()]),
    expected,
  );
  t.equal(res.body.new_users.length, rows.length - expected.length);
});

t.test('a delegate who may not see roles is answered alike for users alike but for their role or being named: these exempt nothing then', async (t) => {
  const archive = await createDepartment(api.db, tenant.tenantId, 'Archive');
  const [archivists] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Archivists', permissions: [] }).returning();
  // role_id and the entity permissions naming a user are administrative: this delegate sees neither.
  const blind = await api.createUser(tenant.tenantId, { username: 'blind-delegate', permissions: ['users.view', 'users.administer'] });
  const named = await api.createUser(tenant.tenantId, { username: 'archivist', values: { roleId: archivists!.id } });
  const other = await api.createUser(tenant.tenantId, { username: 'filer', values: { roleId: employeeRole.id } });
  const curator = await api.createUser(tenant.tenantId, { username: 'curator', values: { roleId: employeeRole.id } });
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Archive review',
      form_type: 'survey',
      entity_permissions: { department_ids: [archive.id], role_ids: [archivists!.id], user_ids: [curator.id] },
    },
  });
  t.equal(form.status, 201);
  t.equal(
    (await api.call(t, 'getUser', { token: blind.token, params: { user: named.id }, query: { selects: 'role_id' } })).status,
    422,
    'the role is hidden from the delegate',
  );

  const verdicts = async (token: string) => {
    const csv = `username,department_ids\narchivist,${archive.id}\nfiler,${archive.id}\ncurator,${archive.id}\n`;
    const preview = await importCsv(t, csv, token);
    t.equal(preview.status, 200);
    const refused = new Set((preview.body.invalid_rows as { username?: string; line: number }[]).map((row) => row.line));
    const verdict = (line: number) => (refused.has(line) ? 'refused' : 'accepted');
    return { archivist: verdict(2), filer: verdict(3), curator: verdict(4) };
  };
  t.strictSame(await verdicts(blind.token), { archivist: 'refused', filer: 'refused', curator: 'refused' }, 'the preview refuses the rows alike');
  t.strictSame(
    await verdicts(delegate.token),
    { archivist: 'accepted', filer: 'refused', curator: 'accepted' },
    'a delegate who sees roles and entity permissions is spared the false refusals',
  );

  for (const user of [named, other, curator]) {
    const res = await api.call(t, 'updateUser', { token: blind.token, params: { user: user.id }, body: { department_ids: [archive.id] } });
    t.equal(res.status, 422, `the update of ${user.id} is refused alike`);
    t.strictSame(res.body.error_codes?.['department_ids.0'], ['confers_rights']);
    t.strictSame(await membership(user.id), [], 'and changes nothing');
  }
  const seen = await api.call(t, 'updateUser', { token: delegate.token, params: { user: named.id }, body: { department_ids: [archive.id] } });
  t.equal(seen.status, 200, 'the delegate who sees the role adds it: it confers nothing the role had not');
});
