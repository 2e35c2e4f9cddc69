/**
 * CSV import parity with the API: a CSV row may change exactly what `PUT /api/users/{user}`
 * (or, for a new user, `POST /api/users`) lets the same caller change. The same inputs
 * go through the preview and through the API, and both must accept or refuse them alike,
 * on the same keys. Also: `department_ids` cells, and passwords of existing users.
 */
import { eq } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, createEntitiesNaming, importUsersCsv, roleNamed } from '../../helpers/fixtures.ts';
import { departmentUsers } from '../../../src/resources/departments/table.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('csv-parity');
const other = await api.createTenant('csv-parity-other');
const admin = { id: tenant.adminUserId, token: tenant.adminToken };
// A delegated user administrator: no personal fields, no rights over forms, templates or menu items.
const delegate = await api.createUser(tenant.tenantId, { username: 'delegate', permissions: ['users.view', 'users.administer', 'users.view-administrative'] });
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const administratorRole = await roleNamed(api.db, tenant.tenantId, 'Administrator');
const payroll = await createDepartment(api.db, tenant.tenantId, 'Payroll');
const board = await createDepartment(api.db, tenant.tenantId, 'Board');
const canteen = await createDepartment(api.db, tenant.tenantId, 'Canteen');
const elsewhere = await createDepartment(api.db, other.tenantId, 'Elsewhere');
const [auditors] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Auditors', permissions: [] }).returning();
// A member of Payroll, which the form "Salaries" names: they hold rights the delegate lacks.
const insider = await api.createUser(tenant.tenantId, { username: 'insider', values: { roleId: employeeRole.id, firstName: 'Ines', lastName: 'Insider' } });
await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: payroll.id, userId: insider.id });

const memberships = async (userId: number) =>
  (await api.db.owner.select({ id: departmentUsers.departmentId }).from(departmentUsers).where(eq(departmentUsers.userId, userId))).map((row) => row.id).sort();

/** A CSV cell for an API value: department IDs joined by `|`, null as an empty cell. */
const cell = (value: unknown) => (Array.isArray(value) ? value.join('|') : value === null || value === undefined ? '' : String(value));

/**
 * The preview of one row `{username, ...body}` (update_users on): the row's errors (none when
 * it is offered), and its entry in update_users or new_users (none when it is not offered).
 */
async function preview(t: Test, token: string, username: string, body: Record<string, unknown>) {
  const keys = Object.keys(body);
  const csv = [['username', ...keys].join(','), [username, ...keys.map((key) => cell(body[key]))].join(',')].join('\n') + '\n';
  const res = await importUsersCsv(api, t, token, csv, { update_users: 'true' });
  t.equal(res.status, 200, 'the preview answers');
  return {
    errors: (res.body.invalid_rows[0]?.errors ?? {}) as Record<string, string[]>,
    updated: (res.body.update_users as { username: string; changes: Record<string, { from: unknown; to: unknown }> }[]).find(
      (row) => row.username === username,
    ),
    created: (res.body.new_users as { user: Record<string, unknown> }[]).find((row) => row.user.username === username),
  };
}

/** What the preview shows a row's accepted body as: department IDs ascending, the password never. */
const shown = (body: Record<string, unknown>) =>
  Object.fromEntries(
    Object.entries(body).map(([key, value]) => [
      key,
      key === 'password' ? null : Array.isArray(value) ? [...(value as number[])].sort((a, b) => a - b) : value,
    ]),
  );

const errorKeys = (errors: Record<string, string[]> | undefined) => Object.keys(errors ?? {}).sort();

let counter = 0;
/** A fresh personal account, so that every case starts from the same state. */
const target = (values: Partial<typeof users.$inferInsert> = {}) =>
  api.createUser(tenant.tenantId, {
    username: `target-${++counter}`,
    values: { roleId: employeeRole.id, firstName: 'Tara', lastName: `Target ${counter}`, enteringDate: '2020-01-01', ...values },
  });

/** A fresh member of Payroll, which the form "Salaries" names. */
async function makeInsider() {
  const user = await target();
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: payroll.id, userId: user.id });
  return user;
}

t.test('setup: a form, a task template and a menu item name departments and a role', async (t) => {
  const created = await createEntitiesNaming(api, t, admin.token, { formDepartmentId: payroll.id, templateRoleId: auditors!.id, menuDepartmentId: board.id });
  t.strictSame(
    created.map((res) => res.status),
    [201, 201, 201],
  );
});

interface Case {
  name: string;
  caller: { id: number; token: string };
  /** The user the row updates (default: a fresh one); 'new' makes the row create a user. */
  user?: () => Promise<{ id: number; username: string }>;
  body: Record<string, unknown>;
  /** The keys both refuse; [] when both accept. */
  refused: string[];
  /** Required profile keys in force for the case. */
  required?: string[];
}

const cases: Case[] = [
  { name: 'an administrator sets a password', caller: admin, body: { password: 'a brand new password' }, refused: [] },
  { name: 'a password below the minimum length', caller: admin, body: { password: 'short' }, refused: ['password'] },
  {
    name: 'a delegate sets the password of a user holding entity rights they lack',
    caller: delegate,
    user: makeInsider,
    body: { password: 'a brand new password' },
    refused: ['password'],
  },
  { name: 'a delegate sets the password of a plain user', caller: delegate, body: { password: 'a brand new password' }, refused: [] },
  { name: 'a delegate sets a harmless department', caller: delegate, body: { department_ids: [canteen.id] }, refused: [] },
  { name: 'a delegate adds a department a form names', caller: delegate, body: { department_ids: [canteen.id, payroll.id] }, refused: ['department_ids.1'] },
  {
    name: "a delegate keeps a member's department that a form names",
    caller: delegate,
    user: makeInsider,
    body: { department_ids: [payroll.id, canteen.id] },
    refused: [],
  },
  { name: "another tenant's department", caller: admin, body: { department_ids: [elsewhere.id] }, refused: ['department_ids.0'] },
  { name: 'an administrator adds a department a form names', caller: admin, body: { department_ids: [payroll.id] }, refused: [] },
  { name: 'no departments', caller: delegate, user: makeInsider, body: { department_ids: [] }, refused: [] },
  { name: 'a delegate writes a personal field they cannot see', caller: delegate, body: { city: 'Bonn' }, refused: ['city'] },
  { name: 'a delegate assigns a role granting more than they hold', caller: delegate, body: { role_id: administratorRole.id }, refused: ['role_id'] },
  { name: 'a delegate assigns a role a task template names', caller: delegate, body: { role_id: auditors!.id }, refused: ['role_id'] },
  { name: 'a leaving date before the stored entering date', caller: admin, body: { leaving_date: '2019-12-31' }, refused: ['leaving_date'] },
  { name: 'emptying a required profile key', caller: admin, body: { phone: null, city: 'Bonn' }, refused: ['phone'], required: ['phone'] },
  { name: 'filling a required profile key', caller: admin, body: { phone: '+49 4' }, refused: [], required: ['phone', 'city'] },
  { name: 'clearing a name of a personal account', caller: admin, body: { last_name: null }, refused: ['last_name'] },
];

t.test('the same update through the CSV preview and PUT /api/users/{user}: accepted or refused alike, on the same keys', async (t) => {
  for (const testCase of cases) {
    await api.call(t, 'updateUserSettings', { token: admin.token, body: { required_profile_keys: testCase.required ?? [] } });
    const user = await (testCase.user ?? target)();
    const { errors, updated } = await preview(t, testCase.caller.token, user.username, testCase.body);
    const put = await api.call(t, 'updateUser', { token: testCase.caller.token, params: { user: user.id }, body: testCase.body });
    t.equal(put.status, testCase.refused.length === 0 ? 200 : 422, `${testCase.name}: PUT`);
    t.strictSame(errorKeys(errors), testCase.refused, `${testCase.name}: CSV preview`);
    t.strictSame(errorKeys(put.body.errors), errorKeys(errors), `${testCase.name}: same keys`);
    if (testCase.refused.length === 0) {
      // Accepted means offered with every change the row asks for, not a row that was ignored.
      const to = updated && Object.fromEntries(Object.entries(updated.changes).map(([key, change]) => [key, change.to]));
      t.strictSame(to, shown(testCase.body), `${testCase.name}: the preview offers the changes`);
    } else t.notOk(updated, `${testCase.name}: the preview offers no change`);
  }
  await api.call(t, 'updateUserSettings', { token: admin.token, body: { required_profile_keys: [] } });
});

const newCases: Omit<Case, 'user'>[] = [
  { name: 'a complete new user', caller: delegate, body: { department_ids: [canteen.id] }, refused: [] },
  {
    name: 'a delegate puts a new user into a department a form names',
    caller: delegate,
    body: { department_ids: [payroll.id] },
    refused: ['department_ids.0'],
  },
  { name: 'a department that does not exist', caller: admin, body: { department_ids: [canteen.id, elsewhere.id + 1000] }, refused: ['department_ids.1'] },
  { name: 'a short password', caller: admin, body: { password: 'short' }, refused: ['password'] },
  { name: 'a required profile key left out', caller: admin, body: { city: 'Bonn' }, refused: ['phone'], required: ['city', 'phone'] },
  { name: 'a group account needs no required key', caller: admin, body: { group_account: true }, refused: [], required: ['city', 'phone'] },
];

t.test('the same new user through the CSV preview and POST /api/users: accepted or refused alike, on the same keys', async (t) => {
  for (const testCase of newCases) {
    await api.call(t, 'updateUserSettings', { token: admin.token, body: { required_profile_keys: testCase.required ?? [] } });
    const username = `recruit-${++counter}`;
    const body = { password: 'a long enough password', first_name: 'Rob', last_name: 'Recruit', role_id: employeeRole.id, ...testCase.body };
    const { errors, created } = await preview(t, testCase.caller.token, username, body);
    const post = await api.call(t, 'createUser', { token: testCase.caller.token, body: { username, ...body } });
    t.equal(post.status, testCase.refused.length === 0 ? 201 : 422, `${testCase.name}: POST`);
    t.strictSame(errorKeys(errors), testCase.refused, `${testCase.name}: CSV preview`);
    t.strictSame(errorKeys(post.body.errors), errorKeys(errors), `${testCase.name}: same keys`);
    if (testCase.refused.length === 0) {
      // Accepted means offered with every value of the row, the password left out.
      const { password: _password, ...values } = shown(body);
      t.strictSame(created?.user, { username, ...values }, `${testCase.name}: the preview offers the user`);
    } else t.notOk(created, `${testCase.name}: the preview offers no user`);
  }
  await api.call(t, 'updateUserSettings', { token: admin.token, body: { required_profile_keys: [] } });
});

t.test('department_ids cells: changes as sorted ID lists, an empty cell means none; bad cells are invalid rows; nothing is written', async (t) => {
  const member = await target();
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: board.id, userId: member.id });
  const csv = [
    'username;department_ids',
    `${member.username};${canteen.id} | ${board.id}`,
    `${insider.username};`,
    `fresh-user;${board.id}|${canteen.id}`,
    `bad-cell;1,2`,
    `twice;${canteen.id}|${canteen.id}`,
  ].join('\n');
  const res = await importUsersCsv(api, t, admin.token, csv, { update_users: 'true' });
  t.equal(res.status, 200);
  const changes = Object.fromEntries(res.body.update_users.map((row: { username: string; changes: object }) => [row.username, row.changes]));
  t.strictSame(changes[member.username], { department_ids: { from: [board.id], to: [board.id, canteen.id].sort((a, b) => a - b) } });
  t.strictSame(changes[insider.username], { department_ids: { from: [payroll.id], to: [] } }, 'an empty cell removes every membership');
  t.strictSame(res.body.new_users, [], 'a new user needs more than departments');
  t.strictSame(
    res.body.invalid_rows.map((row: { username: string; errors: object }) => [row.username, Object.keys(row.errors).sort()]),
    [
      ['fresh-user', ['first_name', 'last_name', 'password', 'role_id']],
      ['bad-cell', ['department_ids', 'first_name', 'last_name', 'password', 'role_id']],
      ['twice', ['department_ids', 'first_name', 'last_name', 'password', 'role_id']],
    ],
  );
  t.strictSame(await memberships(member.id), [board.id], 'nothing written');
  t.strictSame(await memberships(insider.id), [payroll.id]);

  const unchanged = await importUsersCsv(api, t, admin.token, `username,department_ids\n${member.username},${board.id}\n`, { update_users: 'true' });
  t.strictSame(
    unchanged.body.unchanged_users.map((row: { username: string }) => row.username),
    [member.username],
    'the same departments are no change',
  );
  const foreign = await importUsersCsv(api, t, other.adminToken, `username,department_ids\nsomeone,${canteen.id}\n`);
  t.strictSame(foreign.body.invalid_rows[0].errors['department_ids.0'], ['does not exist'], "another tenant's department does not exist there");
});

t.test('passwords of existing users: listed as a change, never shown; an empty cell changes nothing', async (t) => {
  const user = await target();
  const secret = 'a secret new password';
  const res = await importUsersCsv(api, t, admin.token, `username,password\n${user.username},${secret}\n${insider.username},\n`, { update_users: 'true' });
  t.equal(res.status, 200);
  t.strictSame(res.body.update_users, [{ line: 2, id: user.id, username: user.username, changes: { password: { from: null, to: null } } }]);
  t.strictSame(
    res.body.unchanged_users.map((row: { username: string }) => row.username),
    [insider.username],
  );
  t.notOk(res.text.includes(secret), 'the password is not in the answer');
  const [row] = await api.db.owner.select({ passwordHash: users.passwordHash }).from(users).where(eq(users.id, user.id));
  const login = await api.call(t, 'login', { token: null, body: { tenant: tenant.slug, username: user.username, password: user.password } });
  t.equal(login.status, 200, 'the old password still works: nothing written');
  t.ok(row!.passwordHash);
});

t.test('the import template lists exactly the importable keys, department_ids included and no picture', async (t) => {
  const res = await api.call(t, 'getUserImportTemplate', { token: admin.token });
  t.equal(res.status, 200);
  const header = res.text.trim().split(',');
  t.equal(header.at(-1), 'department_ids');
  t.notOk(header.includes('profile_picture'));
  const renamed = await api.call(t, 'getUserImportTemplate', { token: admin.token, query: { department_ids: 'Abteilungen' } });
  t.equal(renamed.text.trim().split(',').at(-1), 'Abteilungen');
  const remapped = await importUsersCsv(api, t, admin.token, `username,Abteilungen\n${insider.username},${payroll.id}\n`, {
    update_users: 'true',
    department_ids: 'Abteilungen',
  });
  t.strictSame(
    remapped.body.unchanged_users.map((row: { username: string }) => row.username),
    [insider.username],
    'a remapped header holds the key',
  );
});

t.test('a new username holding a line break (a quoted cell) is refused, as POST /api/users refuses it', async (t) => {
  const csv = `username,password,first_name,last_name,role_id\n"line\nbreak",long-enough-password,A,B,${employeeRole.id}\n"sep\u2028arator",long-enough-password,A,B,${employeeRole.id}\n`;
  const res = await importUsersCsv(api, t, admin.token, csv, {});
  t.equal(res.status, 200);
  t.strictSame(res.body.new_users, [], 'no such user is offered');
  t.equal(res.body.invalid_rows.length, 2);
  for (const row of res.body.invalid_rows as { errors: Record<string, string[]> }[]) t.match(row.errors.username, [/^must match pattern/]);
  for (const username of ['line\nbreak', 'sep\u2028arator']) {
    const created = await api.call(t, 'createUser', {
      token: admin.token,
      body: { username, password: 'long-enough-password', first_name: 'A', last_name: 'B', role_id: employeeRole.id },
    });
    t.equal(created.status, 422, 'the API refuses it alike');
    t.ok(created.body.errors.username);
  }
});
