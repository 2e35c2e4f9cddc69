import t from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { backdateUpdatedAt, roleNamed, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('roles');
const other = await api.createTenant('roles-other');
const employee = await api.createUser(tenant.tenantId);
const delegate = await api.createUser(tenant.tenantId, { permissions: ['users.administer', 'users.view'] });
const count = () => rowCount(api.db, 'roles', sql`tenant_id = ${tenant.tenantId}`);

t.test('every signed-in user lists the roles, ordered by name, with filters and selects', async (t) => {
  const res = await api.call(t, 'listRoles', { token: employee.token });
  t.equal(res.status, 200);
  const names = res.body.map((r: { name: string }) => r.name);
  t.ok(names.includes('Administrator') && names.includes('Employee'));
  t.strictSame(names, [...names].sort());
  const admin = res.body.find((r: { name: string }) => r.name === 'Administrator');
  t.equal(admin.permissions.length, 12);
  const inactive = async () => (await api.call(t, 'listRoles', { token: employee.token, query: { filter: { active: false }, selects: 'name' } })).body;
  t.strictSame(await inactive(), [], 'every role is active');
  await api.db.owner.execute(sql`insert into roles (tenant_id, name, permissions, active) values (${tenant.tenantId}, 'Retired', '{}', false)`);
  t.strictSame(await inactive(), [{ name: 'Retired' }], 'the one inactive role');
  const active = await api.call(t, 'listRoles', { token: employee.token, query: { filter: { active: true }, selects: 'name' } });
  t.strictSame(
    active.body.map((r: { name: string }) => r.name),
    names,
    'active: every role listed before',
  );
  const unknown = await api.call(t, 'listRoles', { token: employee.token, query: { filter: { name: 'x' } } });
  t.equal(unknown.status, 422);
});

t.test('administering roles needs users.administer', async (t) => {
  const res = await api.call(t, 'createRole', { token: employee.token, body: { name: 'Nope' } });
  t.equal(res.status, 403);
  const put = await api.call(t, 'updateRole', { token: employee.token, params: { role: 1 }, body: {} });
  t.equal(put.status, 403);
});

t.test('an administrator creates and updates a role', async (t) => {
  const created = await api.call(t, 'createRole', {
    token: tenant.adminToken,
    body: { name: 'Editors', permissions: ['users.view', 'departments.manage'] },
  });
  t.equal(created.status, 201);
  t.match(created.body, { name: 'Editors', active: true });
  t.strictSame(created.body.permissions, ['users.view', 'departments.manage']);
  const updated = await api.call(t, 'updateRole', {
    token: tenant.adminToken,
    params: { role: created.body.id },
    body: { active: false, permissions: ['users.view'] },
  });
  t.equal(updated.status, 200);
  t.match(updated.body, { name: 'Editors', active: false });
  t.strictSame(updated.body.permissions, ['users.view'], 'departments.manage removed');
  const [stored] = await api.db.owner.execute<{ permissions: string[] }>(sql`select permissions from roles where id = ${created.body.id}`);
  t.strictSame(stored!.permissions, ['users.view'], 'and removed as stored');
  const shown = await api.call(t, 'getRole', { token: employee.token, params: { role: created.body.id }, query: { selects: 'name,active' } });
  t.strictSame(shown.body, { name: 'Editors', active: false });
});

t.test('an update that changes nothing leaves updated_at as it was and records no event', async (t) => {
  const created = await api.call(t, 'createRole', {
    token: tenant.adminToken,
    body: { name: 'Unchanged', permissions: ['users.view', 'departments.manage', 'audit.view'] },
  });
  t.equal(created.status, 201);
  const role = created.body.id;
  const past = await backdateUpdatedAt(api.db, 'roles', role);
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const read = (await api.call(t, 'getRole', { token: tenant.adminToken, params: { role } })).body;
  const same = await api.call(t, 'updateRole', {
    token: tenant.adminToken,
    params: { role },
    body: { name: read.name, active: read.active, permissions: read.permissions },
  });
  t.equal(same.status, 200);
  t.equal(same.body.updated_at, past, 'the role sent back as read answers the updated_at it had');
  t.strictSame(same.body, read, 'and the role as it was');
  t.equal((await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role }, body: {} })).body.updated_at, past, 'so does an empty body');
  // Permissions are a set: the same ones in another order are no change.
  const reordered = await api.call(t, 'updateRole', {
    token: tenant.adminToken,
    params: { role },
    body: { permissions: ['audit.view', 'users.view', 'departments.manage'] },
  });
  t.equal(reordered.status, 200);
  t.equal(reordered.body.updated_at, past, 'so do its permissions in another order');
  t.strictSame(reordered.body.permissions, read.permissions, 'which are answered as they were');
  t.equal(await events(), eventsBefore, 'and none of them records an event');
  const changed = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role }, body: { active: false } });
  t.not(changed.body.updated_at, past, 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
});

t.test('a name is at most 255 characters as stored (NFC), counted in characters, not UTF-16 units', async (t) => {
  const before = await count();
  // U+0958 is excluded from composition: NFC writes each as two code points, so 200 of them are stored as 400.
  const decomposing = '\u0958'.repeat(200);
  const created = await api.call(t, 'createRole', { token: tenant.adminToken, body: { name: decomposing } });
  t.equal(created.status, 422);
  t.strictSame(created.body.error_codes, { name: ['max_length'] });
  const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const renamed = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: employeeRole.id }, body: { name: decomposing } });
  t.equal(renamed.status, 422, 'a rename too');
  t.equal(await count(), before, 'nothing stored');
  // 200 emoji are 200 characters (400 UTF-16 units): within the limit.
  const emoji = await api.call(t, 'createRole', { token: tenant.adminToken, body: { name: '😀'.repeat(200) } });
  t.equal(emoji.status, 201);
});

t.test('a role cannot grant what its creator lacks, nor lock its editor out', async (t) => {
  const before = await count();
  const escalate = await api.call(t, 'createRole', {
    token: delegate.token,
    body: { name: 'Escalation', permissions: ['users.administer', 'notifications.administer'] },
  });
  t.equal(escalate.status, 422);
  t.match(escalate.body.errors.permissions[0], /notifications\.administer/);
  t.equal(await count(), before, 'nothing created');
  const [own] = await api.db.owner.execute<{ role_id: number }>(sql`select role_id::int from users where id = ${delegate.id}`);
  const lockOut = await api.call(t, 'updateRole', { token: delegate.token, params: { role: own!.role_id }, body: { active: false } });
  t.equal(lockOut.status, 422);
  t.ok(lockOut.body.errors.active);
  const strip = await api.call(t, 'updateRole', { token: delegate.token, params: { role: own!.role_id }, body: { permissions: ['users.view'] } });
  t.equal(strip.status, 422);
  const [still] = await api.db.owner.execute<{ active: boolean; permissions: string[] }>(sql`select active, permissions from roles where id = ${own!.role_id}`);
  t.strictSame(still, { active: true, permissions: ['users.administer', 'users.view'] }, 'unchanged');
});

t.test('a delegate cannot change a role granting more than it holds: not its name, active flag or permissions (403)', async (t) => {
  const [admin] = await api.db.owner.execute<{ id: number; name: string; active: boolean; permissions: string[] }>(
    sql`select id::int, name, active, permissions from roles where tenant_id = ${tenant.tenantId} and name = 'Administrator'`,
  );
  const attempts: [string, unknown][] = [
    ['rename', { name: 'Powerless' }],
    ['strip a permission the delegate holds', { permissions: admin!.permissions.filter((p) => p !== 'users.view') }],
    ['strip permissions the delegate lacks', { permissions: ['users.view', 'users.administer'] }],
    ['deactivate', { active: false }],
    ['resend the current values', { name: admin!.name, active: true, permissions: admin!.permissions }],
    ['empty update', {}],
  ];
  for (const [what, body] of attempts) {
    const res = await api.call(t, 'updateRole', { token: delegate.token, params: { role: admin!.id }, body });
    t.equal(res.status, 403, what);
    t.match(res.body.detail, /automations\.administer/, `${what}: names what the delegate lacks`);
  }
  const [still] = await api.db.owner.execute<{ name: string; active: boolean; permissions: string[] }>(
    sql`select name, active, permissions from roles where id = ${admin!.id}`,
  );
  t.strictSame(still, { name: admin!.name, active: admin!.active, permissions: admin!.permissions }, 'the Administrator role is unchanged');
  t.equal((await api.call(t, 'listAutomations', { token: tenant.adminToken })).status, 200, 'the administrator keeps their rights');
});

t.test('an inactive role is judged by its permissions too: a delegate may neither rename nor re-activate it', async (t) => {
  const [retired] = await api.db.owner.execute<{ id: number }>(
    sql`insert into roles (tenant_id, name, active, permissions) values (${tenant.tenantId}, 'Retired admins', false, '{users.administer,automations.administer}') returning id::int`,
  );
  const on = await api.call(t, 'updateRole', { token: delegate.token, params: { role: retired!.id }, body: { active: true } });
  t.equal(on.status, 403, 're-activating is refused');
  const rename = await api.call(t, 'updateRole', { token: delegate.token, params: { role: retired!.id }, body: { name: 'Former admins' } });
  t.equal(rename.status, 403, 'renaming is refused');
  const [still] = await api.db.owner.execute<{ name: string; active: boolean }>(sql`select name, active from roles where id = ${retired!.id}`);
  t.strictSame(still, { name: 'Retired admins', active: false });
  const byAdmin = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: retired!.id }, body: { name: 'Former admins' } });
  t.equal(byAdmin.status, 200, 'an administrator holding every permission may');
});

t.test('a delegate edits a role within its own permissions', async (t) => {
  const [subset] = await api.db.owner.execute<{ id: number }>(
    sql`insert into roles (tenant_id, name, permissions) values (${tenant.tenantId}, 'Viewers only', '{users.view}') returning id::int`,
  );
  const renamed = await api.call(t, 'updateRole', {
    token: delegate.token,
    params: { role: subset!.id },
    body: { name: 'Readers', permissions: ['users.view', 'users.administer'] },
  });
  t.equal(renamed.status, 200);
  t.match(renamed.body, { name: 'Readers', active: true, permissions: ['users.view', 'users.administer'] });
  const off = await api.call(t, 'updateRole', { token: delegate.token, params: { role: subset!.id }, body: { active: false } });
  t.equal(off.status, 200, 'and may deactivate it');
  const grant = await api.call(t, 'updateRole', {
    token: delegate.token,
    params: { role: subset!.id },
    body: { permissions: ['users.view', 'automations.administer'] },
  });
  t.equal(grant.status, 422, 'but not grant what it lacks');
  t.match(grant.body.errors?.permissions?.[0], /automations\.administer/);
  const [still] = await api.db.owner.execute<{ name: string; active: boolean; permissions: string[] }>(
    sql`select name, active, permissions from roles where id = ${subset!.id}`,
  );
  t.strictSame(still, { name: 'Readers', active: false, permissions: ['users.view', 'users.administer'] });
});

t.test('bad input is a 422 problem and changes nothing', async (t) => {
  const before = await count();
  const cases: [unknown, string][] = [
    [{}, 'name'],
    [{ name: '' }, 'name'],
    [{ name: 'X', permissions: ['users.fly'] }, 'permissions.0'],
    [{ name: 'X', permissions: 'users.view' }, 'permissions'],
    [{ name: 'X', permissions: ['users.view', 'users.view'] }, 'permissions'],
    [{ name: 'X', active: 'yes' }, 'active'],
    [{ name: 'X', tenant_id: 2 }, 'tenant_id'],
    [{ name: 'Administrator' }, 'name'],
  ];
  for (const [body, field] of cases) {
    const res = await api.call(t, 'createRole', { token: tenant.adminToken, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[field], `names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await count(), before);
});

t.test('concurrent creates of one name give one 201 and 422s, never a 500', async (t) => {
  const results = await Promise.all(Array.from({ length: 4 }, () => api.call(t, 'createRole', { token: tenant.adminToken, body: { name: 'Racers' } })));
  t.strictSame(results.map((r) => r.status).sort(), [201, 422, 422, 422]);
});

t.test('role names: no look-alikes of another role (case, Unicode form, spacing), no surrounding whitespace or control characters', async (t) => {
  const before = await count();
  const lookAlikes: [string, string][] = [
    ['Administrator ', 'trailing space'],
    [' Administrator', 'leading space'],
    ['Administrator\u00a0', 'trailing no-break space'],
    ['administrator', 'other case'],
    ['ADMINISTRATOR', 'upper case'],
    ['\uff21dministrator', 'full-width letter'],
    ['Admin\u200bistrator', 'zero-width space'],
    ['Administrator\u202e', 'bidi override'],
    ['Admin\tistrator', 'tab'],
    ['Admin\u0007', 'control character'],
    // Letters of other scripts drawn as Latin ones (Unicode's confusables, UTS #39).
    ['Administr\u0430tor', 'Cyrillic a'],
    ['\u0410dministrator', 'Cyrillic capital A'],
    ['Adm\u0456nistrat\u03bfr', 'Cyrillic i and Greek o'],
    // Capitals whose lower case looks like no Latin letter: Cyrillic М and Т, Greek Ε.
    ['AD\u041cINIS\u0422RATOR', 'Cyrillic capital M and T'],
    ['\u0395mployee', 'Greek capital E'],
  ];
  for (const [name, what] of lookAlikes) {
    const res = await api.call(t, 'createRole', { token: delegate.token, body: { name } });
    t.equal(res.status, 422, what);
    t.ok(res.body.errors?.name, `${what}: names name: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await count(), before, 'nothing created');

  const decomposed = await api.call(t, 'createRole', { token: delegate.token, body: { name: 'Cafe\u0301 staff' } });
  t.equal(decomposed.status, 201);
  t.equal(decomposed.body.name, 'Caf\u00e9 staff', 'stored in the composed (NFC) form');
  const composed = await api.call(t, 'createRole', { token: delegate.token, body: { name: 'CAF\u00c9  STAFF' } });
  t.equal(composed.status, 422, 'the same name in another form, case and spacing');

  const renamed = await api.call(t, 'updateRole', { token: delegate.token, params: { role: decomposed.body.id }, body: { name: 'employee' } });
  t.equal(renamed.status, 422, 'a rename into a look-alike of another role');
  t.ok(renamed.body.errors?.name);
  const recased = await api.call(t, 'updateRole', { token: delegate.token, params: { role: decomposed.body.id }, body: { name: 'CAF\u00c9 Staff' } });
  t.equal(recased.status, 200, 'a role may change the case of its own name');
  const spaced = await api.call(t, 'updateRole', { token: delegate.token, params: { role: decomposed.body.id }, body: { name: 'Caf\u00e9 Staff ' } });
  t.equal(spaced.status, 422, 'nor may a rename end with whitespace');

  const results = await Promise.all(
    ['Night shift', 'night shift', 'NIGHT SHIFT', 'Night  shift'].map((name) => api.call(t, 'createRole', { token: delegate.token, body: { name } })),
  );
  t.strictSame(results.map((r) => r.status).sort(), [201, 422, 422, 422], 'concurrent look-alikes: exactly one is created');
});

t.test("another tenant's role is answered like a missing one", async (t) => {
  const [foreign] = await api.db.owner.execute<{ id: number }>(sql`select id::int from roles where tenant_id = ${other.tenantId} limit 1`);
  const hidden = await api.call(t, 'getRole', { token: tenant.adminToken, params: { role: foreign!.id } });
  const missing = await api.call(t, 'getRole', { token: tenant.adminToken, params: { role: 987654 } });
  t.equal(hidden.status, 404);
  t.strictSame(hidden.body, missing.body);
  const put = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: foreign!.id }, body: { name: 'Hijack' } });
  t.equal(put.status, 404);
});
