import { eq, sql } from 'drizzle-orm';
import t from 'tap';
import { ownerUser, startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { departments, departmentUsers } from '../../../src/resources/departments/table.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';
import { verifyPassword } from '../../../src/platform/auth/passwords.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('users');
const other = await api.createTenant('users-other');
const admin = { id: tenant.adminUserId, token: tenant.adminToken };
const viewer = await api.createUser(tenant.tenantId, { username: 'viewer', permissions: ['users.view'] });
const personalViewer = await api.createUser(tenant.tenantId, { username: 'personal', permissions: ['users.view', 'users.view-personal'] });
const employee = await api.createUser(tenant.tenantId, {
  username: 'employee',
  values: { email: 'employee@example.com', staffNumber: 'E-1', firstName: 'Erin', lastName: 'Employee' },
});
const stranger = await api.createUser(other.tenantId, { username: 'stranger', permissions: ['users.administer', 'users.view'] });
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const otherRole = await roleNamed(api.db, other.tenantId, 'Employee');
const department = await createDepartment(api.db, tenant.tenantId, 'Sales');
const otherDepartment = await createDepartment(api.db, other.tenantId, 'Elsewhere');

const userCount = () => rowCount(api.db, 'users');
let counter = 0;
const newUserBody = newUserBodies(employeeRole.id);

// ---- bad input first: every one is a 4xx problem and changes nothing ----

t.test('create: bad inputs are 4xx problem documents and store nothing', async (t) => {
  const before = await userCount();
  const cases: [string, unknown, number, string][] = [
    ['missing username', { ...newUserBody(), username: undefined }, 422, 'username'],
    ['password too short', newUserBody({ password: 'short' }), 422, 'password'],
    ['personal account without names', newUserBody({ first_name: null, last_name: undefined }), 422, 'first_name'],
    ['unknown role', newUserBody({ role_id: 999999 }), 422, 'role_id'],
    ["another tenant's role", newUserBody({ role_id: otherRole!.id }), 422, 'role_id'],
    ['unknown language', newUserBody({ lang_id: 'xx-XX' }), 422, 'lang_id'],
    ["another tenant's department", newUserBody({ department_ids: [otherDepartment!.id] }), 422, 'department_ids.0'],
    ['bad gender', newUserBody({ gender: 'other' }), 422, 'gender'],
    ['bad e-mail', newUserBody({ email: 'not-an-address' }), 422, 'email'],
    ['bad date', newUserBody({ birthdate: '31.12.1990' }), 422, 'birthdate'],
    ['leaving before entering', newUserBody({ entering_date: '2024-05-01', leaving_date: '2024-04-01' }), 422, 'leaving_date'],
    ['string for a boolean', newUserBody({ active: 'true' }), 422, 'active'],
    ['unknown key', newUserBody({ is_admin: true }), 422, 'is_admin'],
    ['taken username', newUserBody({ username: 'employee' }), 422, 'username'],
    ['a picture as a JSON string', newUserBody({ profile_picture: 'aGVsbG8=' }), 422, 'profile_picture'],
    ['a blackout username', newUserBody({ username: 'deleted-user-77' }), 422, 'username'],
    ['an empty language', newUserBody({ lang_id: '' }), 422, 'lang_id'],
    ['a department twice', newUserBody({ department_ids: [department!.id, department!.id] }), 422, 'department_ids'],
  ];
  for (const [name, body, status, field] of cases) {
    const res = await api.call(t, 'createUser', { token: admin.token, body });
    t.equal(res.status, status, name);
    t.ok(res.body.errors?.[field], `${name}: names ${field}`);
  }
  const malformed = await api.call(t, 'createUser', { token: admin.token, payload: '{"username":', contentType: 'application/json' });
  t.equal(malformed.status, 400, 'malformed JSON');
  const unsupported = await api.call(t, 'createUser', { token: admin.token, payload: 'username=x', contentType: 'text/plain' });
  t.equal(unsupported.status, 415, 'unsupported media type');
  t.equal(await userCount(), before, 'no user was stored');
});

t.test('concurrent creates of one username give one 201 and 422s on username, never a 500', async (t) => {
  const [racers] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Racers' }).returning();
  const body = newUserBody({ username: 'racer', role_id: racers!.id });
  const results = await Promise.all([1, 2, 3, 4].map(() => api.call(t, 'createUser', { token: admin.token, body })));
  const statuses = results.map((r) => r.status).sort();
  t.strictSame(statuses, [201, 422, 422, 422]);
  for (const refused of results.filter((r) => r.status === 422)) t.strictSame(refused.body.errors, { username: ['is already taken'] });
});

t.test('create needs users.administer; no token is 401', async (t) => {
  t.equal((await api.call(t, 'createUser', { token: viewer.token, body: newUserBody() })).status, 403);
  t.equal((await api.call(t, 'createUser', { body: newUserBody() })).status, 401);
});

t.test('update, delete, restore, blackout, logout: ids of another tenant are 404 and change nothing', async (t) => {
  const before = await ownerUser(api.db, other.tenantId, stranger.id);
  const params = { user: stranger.id };
  t.equal((await api.call(t, 'getUser', { token: admin.token, params })).status, 404);
  t.equal((await api.call(t, 'updateUser', { token: admin.token, params, body: { first_name: 'Hacked' } })).status, 404);
  t.equal((await api.call(t, 'deleteUser', { token: admin.token, params })).status, 404);
  t.equal((await api.call(t, 'restoreUser', { token: admin.token, params })).status, 404);
  t.equal((await api.call(t, 'blackoutUser', { token: admin.token, params })).status, 404);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin.token, params })).status, 404);
  t.strictSame(await ownerUser(api.db, other.tenantId, stranger.id), before);
});

t.test('update: bad inputs are 422 and change nothing', async (t) => {
  const before = await ownerUser(api.db, tenant.tenantId, employee.id);
  const params = { user: employee.id };
  for (const [name, body, field] of [
    ['taken username', { username: 'viewer' }, 'username'],
    ['removing the name of a personal account', { last_name: null }, 'last_name'],
    ['short password', { password: 'x' }, 'password'],
    ['unknown role', { role_id: 424242 }, 'role_id'],
    ['leading whitespace in username', { username: ' padded' }, 'username'],
    ['a reserved username in another case', { username: 'Deleted-User-77' }, 'username'],
    ['a zero-width space in the username', { username: 'viewer\u200b' }, 'username'],
    ['a bidirectional override in the username', { username: '\u202eemployee' }, 'username'],
  ] as const) {
    const res = await api.call(t, 'updateUser', { token: admin.token, params, body });
    t.equal(res.status, 422, name);
    t.ok(res.body.errors?.[field], `${name}: names ${field}`);
  }
  t.strictSame(await ownerUser(api.db, tenant.tenantId, employee.id), before);
});

t.test('a stored username with an invisible character, sent back as it is, is no error', async (t) => {
  // Stored before such names were refused: a client saving the user it read keeps working.
  const legacy = await api.createUser(tenant.tenantId, { username: 'legacy\u200b' });
  const read = (await api.call(t, 'getUser', { token: admin.token, params: { user: legacy.id } })).body;
  const saved = await api.call(t, 'updateUser', { token: admin.token, params: { user: legacy.id }, body: { username: read.username, city: 'Bonn' } });
  t.equal(saved.status, 200);
  t.equal(saved.body.username, 'legacy\u200b');
  const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ username: 'fresh\u200b' }) });
  t.equal(created.status, 422, 'a new user may not take such a name');
  t.strictSame(created.body.error_codes, { username: ['pattern'] });
});

t.test('default_route: javascript: and other non-navigation targets are 422 on create and update, and change nothing', async (t) => {
  const unsafe = [
    'javascript:alert(1)',
    'JavaScript:alert(1)',
    ' javascript:alert(1)',
    'data:text/html,<script>alert(1)</script>',
    'vbscript:msgbox(1)',
    '//evil.example.com/',
    '/\\evil.example.com/',
    '/\t/evil.example.com/',
    'https:evil.example.com',
    'ftp://files.example.com/',
    'mailto:a@example.com',
    'dashboard',
    '',
  ];
  const before = await userCount();
  const self = await api.createUser(tenant.tenantId, { username: 'route-setter' });
  const selfBefore = await ownerUser(api.db, tenant.tenantId, self.id);
  const employeeBefore = await ownerUser(api.db, tenant.tenantId, employee.id);
  for (const route of unsafe) {
    const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ default_route: route }) });
    t.equal(created.status, 422, `create ${JSON.stringify(route)}`);
    t.ok(created.body.errors?.default_route, 'names default_route');
    const updated = await api.call(t, 'updateUser', { token: admin.token, params: { user: employee.id }, body: { default_route: route } });
    t.equal(updated.status, 422, `update ${JSON.stringify(route)}`);
    t.ok(updated.body.errors?.default_route, 'names default_route');
  }
  const own = await api.call(t, 'updateUser', { token: self.token, params: { user: self.id }, body: { default_route: 'javascript:alert(1)' } });
  t.equal(own.status, 422, "on one's own record too");
  t.equal(await userCount(), before + 1, 'no user stored');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, employee.id), employeeBefore);
  t.strictSame(await ownerUser(api.db, tenant.tenantId, self.id), selfBefore);
  for (const route of ['/dashboard', '/tasks?tab=open#top', 'https://intranet.example.com/start', 'http://legacy.example.com/', null]) {
    const res = await api.call(t, 'updateUser', { token: self.token, params: { user: self.id }, body: { default_route: route } });
    t.equal(res.status, 200, `accepts ${JSON.stringify(route)}`);
    t.equal(res.body.default_route, route);
  }
});

t.test('result controls: unknown or hidden selects, unknown relations and filters are 422', async (t) => {
  for (const [token, query, field] of [
    [admin.token, { selects: 'id,nope' }, 'selects'],
    [viewer.token, { selects: 'id,email' }, 'selects'],
    [viewer.token, { relations: 'role' }, 'relations'],
    [admin.token, { relations: 'friends' }, 'relations'],
    [admin.token, { filter: { colour: 'red' } }, 'filter.colour'],
    [viewer.token, { filter: { role_id: employeeRole!.id } }, 'filter.role_id'],
  ] as const) {
    const res = await api.call(t, 'listUsers', { token, query });
    t.equal(res.status, 422, JSON.stringify(query));
    t.ok(
      Object.keys(res.body.errors ?? {}).some((key) => key.startsWith(field)),
      `names ${field}`,
    );
  }
  t.equal((await api.call(t, 'listUsers', { token: admin.token, query: { limit: 0 } })).status, 422, 'limit 0');
});

// ---- reading ----

t.test('listing needs users.view', async (t) => {
  t.equal((await api.call(t, 'listUsers', { token: employee.token })).status, 403);
  t.equal((await api.call(t, 'listDeletedUsers', { token: employee.token })).status, 403);
});

t.test('personal and administrative fields are shown only with their permission', async (t) => {
  const plain = await api.call(t, 'getUser', { token: viewer.token, params: { user: employee.id } });
  t.equal(plain.status, 200);
  t.equal(plain.body.username, 'employee');
  t.equal(plain.body.full_name, 'Erin Employee');
  t.notOk('email' in plain.body, 'no personal field');
  t.notOk('staff_number' in plain.body, 'no administrative field');
  t.notOk('role' in plain.body, 'no role relation (administrative)');
  t.strictSame(plain.body.language, null, 'language relation by default');

  const personal = await api.call(t, 'getUser', { token: personalViewer.token, params: { user: employee.id } });
  t.equal(personal.body.email, 'employee@example.com');
  t.notOk('staff_number' in personal.body);

  const full = await api.call(t, 'getUser', { token: admin.token, params: { user: employee.id } });
  t.equal(full.body.staff_number, 'E-1');
  t.equal(full.body.role.name, 'role-employee');
  t.notOk(
    Object.keys(full.body).some((key) => /^(password|old_password|password_hash)$/.test(key)),
    'never a password',
  );
});

t.test('a user without permissions reads their own record in full, but not others', async (t) => {
  const own = await api.call(t, 'getUser', { token: employee.token, params: { user: employee.id }, query: { selects: 'id,email,staff_number' } });
  t.strictSame(own.body, { id: employee.id, email: 'employee@example.com', staff_number: 'E-1', role: own.body.role, language: null });
  t.equal((await api.call(t, 'getUser', { token: employee.token, params: { user: viewer.id } })).status, 403);
});

t.test('selects returns exactly the selected fields; url fields only when selected', async (t) => {
  const all = await api.call(t, 'getUser', { token: admin.token, params: { user: employee.id }, query: { relations: '' } });
  t.notOk('url' in all.body || 'static_url' in all.body || 'url_context' in all.body, 'not by default');
  const res = await api.call(t, 'getUser', {
    token: admin.token,
    params: { user: employee.id },
    query: { selects: 'id,url,static_url,url_context', relations: '' },
  });
  t.strictSame(res.body, {
    id: employee.id,
    url: `/users/${employee.id}`,
    static_url: `/users/${employee.id}`,
    url_context: { type: 'user', id: employee.id },
  });
});

t.test('filters: text, group_account, department_id, role_id, active', async (t) => {
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: department!.id, userId: employee.id });
  const names = async (query: Record<string, unknown>) =>
    ((await api.call(t, 'listUsers', { token: admin.token, query: { ...query, selects: 'username' } })).body as { username: string }[]).map((u) => u.username);
  t.strictSame(await names({ filter: { text: 'EMPLOYEE@example' } }), ['employee'], 'e-mail, case-insensitive');
  t.strictSame(await names({ filter: { text: 'e-1' } }), ['employee'], 'staff number');
  t.strictSame(await names({ filter: { text: 'erin' } }), ['employee'], 'first name');
  t.strictSame(await names({ filter: { text: '%' } }), [], 'wildcards are literal');
  t.strictSame(await names({ filter: { department_id: department!.id } }), ['employee']);
  // One user for each remaining filter to find, and to leave out of the others.
  const group = await api.createUser(tenant.tenantId, { username: 'filter-group', values: { groupAccount: true } });
  const inRole = await api.createUser(tenant.tenantId, { username: 'filter-employee', values: { roleId: employeeRole!.id } });
  const inactive = await api.createUser(tenant.tenantId, { username: 'filter-inactive', values: { active: false } });
  const everyone = await names({});
  t.ok(
    [group, inRole, inactive, employee].every((u) => everyone.includes(u.username)),
    'all listed without a filter',
  );
  t.strictSame(await names({ filter: { group_account: true } }), ['filter-group'], 'group accounts');
  t.strictSame(
    await names({ filter: { group_account: false } }),
    everyone.filter((name) => name !== 'filter-group'),
    'personal accounts: everyone but the group account',
  );
  t.strictSame(await names({ filter: { role_id: employeeRole!.id } }), ['filter-employee'], "the role's one user");
  t.strictSame(await names({ filter: { active: false } }), ['filter-inactive'], 'inactive users');
  t.strictSame(
    await names({ filter: { active: true } }),
    everyone.filter((name) => name !== 'filter-inactive'),
    'active: everyone but the inactive user',
  );
  t.strictSame(await names({ filter: { active: true, role_id: employeeRole!.id, group_account: false } }), ['filter-employee'], 'filters combine');
  const limited = await names({ limit: 2 });
  t.equal(limited.length, 2, 'limit');
  const ordered = await api.call(t, 'listUsers', { token: admin.token, query: { selects: 'last_name' } });
  const lastNames = (ordered.body as { last_name: string }[]).map((u) => u.last_name);
  t.strictSame(
    lastNames,
    [...lastNames].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    'ordered by last name',
  );
  t.notOk((await names({})).includes('stranger'), 'never another tenant');
});

t.test('relations departments, entityPermissions and acceptedPolicies', async (t) => {
  const res = await api.call(t, 'getUser', {
    token: admin.token,
    params: { user: employee.id },
    query: { relations: 'departments|entityPermissions|acceptedPolicies|role|language' },
  });
  t.equal(res.status, 200);
  t.strictSame(res.body.departments, [{ id: department!.id, name: 'Sales' }]);
  t.strictSame(res.body.entityPermissions, []);
  t.strictSame(res.body.acceptedPolicies, []);
});

// ---- writing ----

t.test('create: defaults of the create keys, password hashed and never returned', async (t) => {
  const body = newUserBody({ department_ids: [department!.id] });
  const res = await api.call(t, 'createUser', { token: admin.token, body });
  t.equal(res.status, 201);
  t.match(res.body, {
    username: body.username,
    active: true,
    group_account: false,
    request_password_change: false,
    wants_email_notifications: false,
    prevent_logout: false,
    lang_id: null,
    email: null,
    profile_picture_url: null,
    role_id: employeeRole!.id,
  });
  t.notOk(JSON.stringify(res.body).includes(body.password), 'password not in the answer');
  const row = await ownerUser(api.db, tenant.tenantId, res.body.id);
  t.match(row!.passwordHash, /^\$argon2id\$/);
  t.ok(await verifyPassword(row!.passwordHash, body.password, 0));
  const members = await api.db.owner.select().from(departmentUsers).where(eq(departmentUsers.userId, res.body.id));
  t.equal(members.length, 1, 'department membership stored');
});

t.test('create: active is derived from the dates when not sent', async (t) => {
  const future = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ entering_date: '2999-01-01' }) });
  t.equal(future.body.active, false, 'not entered yet');
  const left = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ leaving_date: '2000-01-01' }) });
  t.equal(left.body.active, false, 'left');
  const explicit = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ leaving_date: '2000-01-01', active: true }) });
  t.equal(explicit.body.active, true, 'sent value wins');
});

t.test('create: group accounts need no names', async (t) => {
  const res = await api.call(t, 'createUser', {
    token: admin.token,
    body: { username: `group-${++counter}`, password: 'a long enough password', role_id: employeeRole!.id, group_account: true },
  });
  t.equal(res.status, 201);
  t.equal(res.body.full_name, '');
});

t.test('update: an administrator changes another user, including password and departments', async (t) => {
  const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ department_ids: [department!.id] }) });
  const res = await api.call(t, 'updateUser', {
    token: admin.token,
    params: { user: created.body.id },
    body: { city: 'Berlin', prevent_logout: true, password: 'another long password', department_ids: [] },
  });
  t.equal(res.status, 200);
  t.equal(res.body.city, 'Berlin');
  t.equal(res.body.prevent_logout, true);
  t.equal(res.body.username, created.body.username, 'other keys keep their value');
  const row = await ownerUser(api.db, tenant.tenantId, created.body.id);
  t.ok(await verifyPassword(row!.passwordHash, 'another long password', 0));
  t.equal((await api.db.owner.select().from(departmentUsers).where(eq(departmentUsers.userId, created.body.id))).length, 0);
});

t.test('update: a user changes their own record, but not role, active or prevent_logout', async (t) => {
  const self = await api.createUser(tenant.tenantId, { username: 'selfie' });
  const before = await ownerUser(api.db, tenant.tenantId, self.id);
  const res = await api.call(t, 'updateUser', {
    token: self.token,
    params: { user: self.id },
    body: { city: 'Hamburg', role_id: employeeRole!.id, active: false, prevent_logout: true, department_ids: [department!.id], group_account: true },
  });
  t.equal(res.status, 200);
  const after = await ownerUser(api.db, tenant.tenantId, self.id);
  t.equal(after!.city, 'Hamburg');
  t.equal(after!.roleId, before!.roleId, 'role ignored');
  t.equal(after!.active, true, 'active ignored');
  t.equal(after!.preventLogout, false, 'prevent_logout ignored');
  // A group account is out of the identity provider's reach (docs/scim.md): no one takes their own account out of it.
  t.equal(after!.groupAccount, false, 'group_account ignored');
  t.equal(res.body.group_account, false, 'and answered as stored');
  t.equal((await api.db.owner.select().from(departmentUsers).where(eq(departmentUsers.userId, self.id))).length, 0, 'departments ignored');
});

t.test("update: an administrator's own prevent_logout is ignored too", async (t) => {
  const res = await api.call(t, 'updateUser', { token: admin.token, params: { user: admin.id }, body: { prevent_logout: true, active: false } });
  t.equal(res.status, 200);
  t.equal(res.body.prevent_logout, false);
  t.equal(res.body.active, true);
});

t.test('update: the stored values sent back change nothing: updated_at stays and no event is recorded, for oneself or an administrator', async (t) => {
  const self = await api.createUser(tenant.tenantId, {
    username: 'echo',
    values: { email: 'echo@example.com', city: 'Kiel', birthdate: '1985-06-07', gender: 'female', langId: 'de-DE' },
  });
  // A time well before the requests, so that a moved updated_at shows whatever the clock's resolution.
  await api.db.owner
    .update(users)
    .set({ updatedAt: new Date('2026-01-02T03:04:05.678Z') })
    .where(eq(users.id, self.id));
  const before = await ownerUser(api.db, tenant.tenantId, self.id);
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const record = (await api.call(t, 'getCurrentUser', { token: self.token })).body;
  const writable = ['username', 'first_name', 'last_name', 'lang_id', 'email', 'phone', 'street', 'zipcode', 'city', 'birthdate', 'gender'] as const;
  const own = Object.fromEntries(writable.map((key) => [key, record[key]]));
  const mine = await api.call(t, 'updateUser', { token: self.token, params: { user: self.id }, body: own });
  t.equal(mine.status, 200);
  t.equal(mine.body.updated_at, '2026-01-02T03:04:05.678Z', 'one’s own update answers the updated_at it had');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, self.id), before, 'and stores nothing');
  const shown = (await api.call(t, 'getUser', { token: admin.token, params: { user: self.id } })).body;
  const administrative = ['staff_number', 'entering_date', 'leaving_date', 'active', 'role_id', 'request_password_change', 'prevent_logout'] as const;
  const all = { ...own, ...Object.fromEntries(administrative.map((key) => [key, shown[key]])), department_ids: [] };
  const theirs = await api.call(t, 'updateUser', { token: admin.token, params: { user: self.id }, body: all });
  t.equal(theirs.status, 200);
  t.equal(theirs.body.updated_at, '2026-01-02T03:04:05.678Z', 'an administrator’s update too');
  t.strictSame(await ownerUser(api.db, tenant.tenantId, self.id), before);
  t.equal(await events(), eventsBefore, 'and neither records an event');
  const changed = await api.call(t, 'updateUser', { token: self.token, params: { user: self.id }, body: { ...own, city: 'Lübeck' } });
  t.equal(changed.status, 200);
  t.not(changed.body.updated_at, '2026-01-02T03:04:05.678Z', 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
});

t.test('a picture removed from a user who has none is no change: no event, updated_at stays', async (t) => {
  // `profile_picture: null` was recorded as a changed picture whether or not one was stored: any user could fill the
  // trail with false events about themselves.
  const self = await api.createUser(tenant.tenantId, { username: 'nopicture' });
  await api.db.owner
    .update(users)
    .set({ updatedAt: new Date('2026-01-02T03:04:05.678Z') })
    .where(eq(users.id, self.id));
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId} and target_id = ${String(self.id)}`);
  const eventsBefore = await events();
  for (const token of [self.token, admin.token]) {
    const res = await api.call(t, 'updateUser', { token, params: { user: self.id }, body: { profile_picture: null } });
    t.equal(res.status, 200);
    t.equal(res.body.updated_at, '2026-01-02T03:04:05.678Z', 'updated_at stays');
  }
  t.equal(await events(), eventsBefore, 'and no event is recorded');
  const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody({ profile_picture: null }) });
  t.equal(created.status, 201);
  const [event] = await api.db.owner.execute<{ changes: Record<string, unknown> }>(
    sql`select changes from audit_events where action = 'user.created' and target_id = ${String(created.body.id)}`,
  );
  t.notOk('profile_picture' in event!.changes, 'a create without a picture records none');
});

t.test("update: changing one's own password needs the current one without users.administer", async (t) => {
  const self = await api.createUser(tenant.tenantId, { username: 'pw-self', password: 'the first password' });
  const params = { user: self.id };
  const missing = await api.call(t, 'updateUser', { token: self.token, params, body: { password: 'the second password' } });
  t.equal(missing.status, 422);
  t.ok(missing.body.errors.old_password);
  const wrong = await api.call(t, 'updateUser', { token: self.token, params, body: { password: 'the second password', old_password: 'nope nope nope' } });
  t.equal(wrong.status, 422);
  t.ok(await verifyPassword((await ownerUser(api.db, tenant.tenantId, self.id))!.passwordHash, 'the first password', 0), 'unchanged');
  const ok = await api.call(t, 'updateUser', { token: self.token, params, body: { password: 'the second password', old_password: 'the first password' } });
  t.equal(ok.status, 200);
  t.ok(await verifyPassword((await ownerUser(api.db, tenant.tenantId, self.id))!.passwordHash, 'the second password', 0));
});

t.test('update: another user needs users.administer', async (t) => {
  const res = await api.call(t, 'updateUser', { token: viewer.token, params: { user: employee.id }, body: { city: 'X' } });
  t.equal(res.status, 403);
  t.equal((await ownerUser(api.db, tenant.tenantId, employee.id))!.city, null);
});

t.test('delete: soft, listed as deleted, shown by id, not updatable; refused on oneself', async (t) => {
  t.equal((await api.call(t, 'deleteUser', { token: admin.token, params: { user: admin.id } })).status, 403, 'oneself');
  t.equal((await ownerUser(api.db, tenant.tenantId, admin.id))!.deletedAt, null);
  const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody() });
  const id = created.body.id;
  const token = await api.tokenFor(tenant.tenantId, id);
  t.equal((await api.call(t, 'deleteUser', { token: viewer.token, params: { user: id } })).status, 403, 'needs users.administer');
  t.equal((await api.call(t, 'deleteUser', { token: admin.token, params: { user: id } })).status, 204);
  t.ok((await ownerUser(api.db, tenant.tenantId, id))!.deletedAt, 'row kept with deleted_at');
  t.equal((await api.call(t, 'getCurrentUser', { token })).status, 401, 'its tokens stop working');
  const listed = await api.call(t, 'listUsers', { token: admin.token, query: { selects: 'id' } });
  t.notOk(
    listed.body.some((u: { id: number }) => u.id === id),
    'not in the list',
  );
  const deleted = await api.call(t, 'listDeletedUsers', { token: admin.token, query: { selects: 'id,deleted_at' } });
  t.ok(
    deleted.body.some((u: { id: number; deleted_at: string }) => u.id === id && u.deleted_at),
    'in the deleted list',
  );
  const shown = await api.call(t, 'getUser', { token: admin.token, params: { user: id } });
  t.equal(shown.status, 200, 'show includes deleted users');
  t.equal((await api.call(t, 'updateUser', { token: admin.token, params: { user: id }, body: { city: 'X' } })).status, 404);
  t.equal((await api.call(t, 'deleteUser', { token: admin.token, params: { user: id } })).status, 404, 'twice');
});

t.test('restore: role must be an active role; replaces the role when sent', async (t) => {
  const created = await api.call(t, 'createUser', { token: admin.token, body: newUserBody() });
  const id = created.body.id;
  const notDeleted = await api.call(t, 'restoreUser', { token: admin.token, params: { user: id } });
  t.equal(notDeleted.status, 422, 'not deleted');
  t.strictSame(notDeleted.body.error_codes, { user: ['not_deleted'] });
  await api.call(t, 'deleteUser', { token: admin.token, params: { user: id } });
  const [inactive] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Retired', active: false }).returning();
  const bad = await api.call(t, 'restoreUser', { token: admin.token, params: { user: id }, body: { role_id: inactive!.id } });
  t.equal(bad.status, 422);
  t.ok(bad.body.errors.role_id);
  t.equal(
    (await api.call(t, 'restoreUser', { token: admin.token, params: { user: id }, body: { role_id: otherRole!.id } })).status,
    422,
    "other tenant's role",
  );
  t.ok((await ownerUser(api.db, tenant.tenantId, id))!.deletedAt, 'still deleted');
  t.equal((await api.call(t, 'restoreUser', { token: viewer.token, params: { user: id } })).status, 403);
  const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
  const ok = await api.call(t, 'restoreUser', { token: admin.token, params: { user: id }, body: { role_id: administrator!.id } });
  t.equal(ok.status, 200);
  t.equal(ok.body.deleted_at, null);
  t.equal(ok.body.role_id, administrator!.id);
  const again = await api.call(t, 'deleteUser', { token: admin.token, params: { user: id } });
  t.equal(again.status, 204);
  const keep = await api.call(t, 'restoreUser', { token: admin.token, params: { user: id } });
  t.equal(keep.body.role_id, administrator!.id, 'role kept when not sent');
});

t.test('restore does not revive the sessions a delete ended', async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'revived' });
  await api.call(t, 'deleteUser', { token: admin.token, params: { user: user.id } });
  t.equal((await api.call(t, 'restoreUser', { token: admin.token, params: { user: user.id } })).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401, 'old token');
  t.equal((await api.call(t, 'getCurrentUser', { token: await api.tokenFor(tenant.tenantId, user.id) })).status, 200, 'new token');
  const listed = await api.call(t, 'listDeletedUsers', { token: admin.token, query: { filter: { text: 'revived' } } });
  t.strictSame(listed.body, [], 'no longer in the deleted list');
});

t.test('blackout: anonymises irreversibly, keeps the id, refuses restore', async (t) => {
  const created = await api.call(t, 'createUser', {
    token: admin.token,
    body: newUserBody({
      email: 'gone@example.com',
      phone: '123',
      staff_number: 'S-9',
      birthdate: '1980-01-01',
      gender: 'female',
      department_ids: [department!.id],
    }),
  });
  const id = created.body.id;
  const token = await api.tokenFor(tenant.tenantId, id);
  const [authored] = await api.db.owner.insert(departments).values({ tenantId: tenant.tenantId, name: 'Authored', userId: id }).returning();
  t.equal((await api.call(t, 'blackoutUser', { token: admin.token, params: { user: admin.id } })).status, 403, 'not oneself');
  t.equal((await api.call(t, 'blackoutUser', { token: viewer.token, params: { user: id } })).status, 403);
  t.equal((await api.call(t, 'blackoutUser', { token: admin.token, params: { user: id } })).status, 204);
  const row = (await ownerUser(api.db, tenant.tenantId, id))!;
  t.match(row, {
    username: `deleted-user-${id}`,
    passwordHash: null,
    firstName: null,
    lastName: null,
    email: null,
    phone: null,
    staffNumber: null,
    birthdate: null,
    gender: null,
    active: false,
  });
  t.ok(row.deletedAt && row.blackedOutAt);
  t.equal((await api.call(t, 'getCurrentUser', { token })).status, 401, 'tokens revoked');
  const [stillAuthored] = await api.db.owner.select().from(departments).where(eq(departments.id, authored!.id));
  t.equal(stillAuthored!.userId, id, 'authored records stay linked');
  const restore = await api.call(t, 'restoreUser', { token: admin.token, params: { user: id } });
  t.equal(restore.status, 422, 'cannot be restored');
  t.strictSame(restore.body.error_codes, { user: ['blacked_out'] });
  t.ok((await ownerUser(api.db, tenant.tenantId, id))!.deletedAt);
  t.equal((await api.call(t, 'blackoutUser', { token: admin.token, params: { user: id } })).status, 204, 'repeating is harmless');
  const deleted = await api.call(t, 'createUser', { token: admin.token, body: newUserBody() });
  await api.call(t, 'deleteUser', { token: admin.token, params: { user: deleted.body.id } });
  t.equal((await api.call(t, 'blackoutUser', { token: admin.token, params: { user: deleted.body.id } })).status, 204, 'a deleted user');
});

t.test('logout marking: existing tokens stop working, new ones work', async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'marked' });
  t.equal((await api.call(t, 'markUserForLogout', { token: admin.token, params: { user: user.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401);
  const fresh = await api.tokenFor(tenant.tenantId, user.id);
  t.equal((await api.call(t, 'getCurrentUser', { token: fresh })).status, 200);
});

t.test('logout marking: a protected user cannot mark themselves; an administrator can', async (t) => {
  const guarded = await api.createUser(tenant.tenantId, { username: 'guarded', values: { preventLogout: true } });
  const res = await api.call(t, 'markUserForLogout', { token: guarded.token, params: { user: guarded.id } });
  t.equal(res.status, 403);
  t.equal((await ownerUser(api.db, tenant.tenantId, guarded.id))!.logoutMarkedAt, null);
  t.equal((await api.call(t, 'getCurrentUser', { token: guarded.token })).status, 200);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin.token, params: { user: guarded.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: guarded.token })).status, 401);
});

t.test('logout marking: an unprotected user may mark themselves, not others', async (t) => {
  const user = await api.createUser(tenant.tenantId, { username: 'self-logout' });
  t.equal((await api.call(t, 'markUserForLogout', { token: user.token, params: { user: employee.id } })).status, 403);
  t.equal((await api.call(t, 'markUserForLogout', { token: user.token, params: { user: user.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401);
});

t.test('renaming oneself needs users.view: without it no username can be probed (one 422 whatever the name)', async (t) => {
  const self = await api.createUser(tenant.tenantId, { username: 'prober' });
  await api.createUser(tenant.tenantId, { username: 'quietly-deleted', values: { deletedAt: new Date() } });
  const params = { user: self.id };
  const answers = new Set<string>();
  for (const username of ['viewer', 'quietly-deleted', 'a-name-nobody-has']) {
    const res = await api.call(t, 'updateUser', { token: self.token, params, body: { username } });
    t.equal(res.status, 422, username);
    t.match(res.body.errors.username[0], /users\.view/);
    answers.add(res.text);
  }
  t.equal(answers.size, 1, 'a taken, a deleted user’s and a free name get the same answer');
  t.equal((await ownerUser(api.db, tenant.tenantId, self.id))!.username, 'prober', 'not renamed');
  const same = await api.call(t, 'updateUser', { token: self.token, params, body: { username: 'prober', city: 'Kiel' } });
  t.equal(same.status, 200, 'sending one’s current username is no change');
  t.equal(same.body.city, 'Kiel');

  const seer = await api.createUser(tenant.tenantId, { username: 'seer', permissions: ['users.view'] });
  const taken = await api.call(t, 'updateUser', { token: seer.token, params: { user: seer.id }, body: { username: 'viewer' } });
  t.equal(taken.status, 422);
  t.strictSame(taken.body.errors, { username: ['is already taken'] }, 'with users.view the conflict is named (listing users tells it anyway)');
  const renamed = await api.call(t, 'updateUser', { token: seer.token, params: { user: seer.id }, body: { username: 'seer-renamed' } });
  t.equal(renamed.status, 200);
  t.equal(renamed.body.username, 'seer-renamed');
});

// ---- users.administer unless one's own record: the operations' x-permission ----

t.test("updating or marking another user for logout needs users.administer: the binding's 403, whether the user exists or not", async (t) => {
  const forbidden = 'This requires the permission "users.administer".';
  const plain = await api.createUser(tenant.tenantId, { username: 'plain-self' });
  const before = await ownerUser(api.db, tenant.tenantId, employee.id);
  const update = (token: string, user: number) => api.call(t, 'updateUser', { token, params: { user }, body: { city: 'Kiel' } });
  const mark = (token: string, user: number) => api.call(t, 'markUserForLogout', { token, params: { user } });
  for (const [name, call] of [
    ['updateUser', update],
    ['markUserForLogout', mark],
  ] as const) {
    const other = await call(plain.token, employee.id);
    t.equal(other.status, 403, `${name}: another user`);
    t.equal(other.body.detail, forbidden, `${name}: the refusal names the permission`);
    const missing = await call(plain.token, 987654);
    t.equal(missing.status, 403, `${name}: a missing user is refused alike, so nothing tells it apart`);
    t.equal(missing.body.detail, forbidden);
    t.equal((await call(admin.token, 987654)).status, 404, `${name}: with the permission a missing user is 404`);
  }
  t.strictSame(await ownerUser(api.db, tenant.tenantId, employee.id), before, 'the other user is unchanged');
  const own = await update(plain.token, plain.id);
  t.equal(own.status, 200, "one's own record needs no permission");
  t.equal(own.body.city, 'Kiel');
  t.equal((await mark(plain.token, plain.id)).status, 204, 'nor does marking oneself');
  t.equal((await api.call(t, 'getCurrentUser', { token: plain.token })).status, 401, 'which ended the session');
});

t.test(
  "updating or marking another user without users.administer: an invalid request is a 422 before the 403, the operation's own rules after it",
  async (t) => {
    const plain = await api.createUser(tenant.tenantId, { username: 'plain-invalid' });
    const badBody = await api.call(t, 'updateUser', { token: plain.token, params: { user: employee.id }, body: { city: 5 } });
    t.equal(badBody.status, 422);
    t.ok(badBody.body.errors?.city, JSON.stringify(badBody.body));
    t.equal((await api.call(t, 'markUserForLogout', { token: plain.token, params: { user: '1e3' } })).status, 422, 'a malformed user id');
    const shortPassword = await api.call(t, 'updateUser', { token: plain.token, params: { user: employee.id }, body: { password: 'x' } });
    t.equal(shortPassword.status, 403, "the password rule is the operation's: judged only for callers the permission admits");
    t.equal((await api.call(t, 'getCurrentUser', { token: employee.token })).status, 200, 'the other user is still signed in');
  },
);

t.test('a role, language or department naming nothing in the tenant is 422 "does not exist" on its key', async (t) => {
  const before = await userCount();
  const created = await api.call(t, 'createUser', {
    token: admin.token,
    body: newUserBody({ role_id: otherRole!.id, lang_id: 'xx-XX', department_ids: [department!.id, otherDepartment!.id] }),
  });
  t.equal(created.status, 422);
  t.strictSame(created.body.errors, { role_id: ['does not exist'], lang_id: ['does not exist'], 'department_ids.1': ['does not exist'] });
  t.equal(await userCount(), before, 'no user stored');
  const updated = await api.call(t, 'updateUser', { token: admin.token, params: { user: employee.id }, body: { role_id: 424242, lang_id: 'xx-XX' } });
  t.equal(updated.status, 422);
  t.strictSame(updated.body.errors, { role_id: ['does not exist'], lang_id: ['does not exist'] });
});
