import { eq } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { importUsersCsv, roleNamed } from '../../helpers/fixtures.ts';
import { multipart } from '../../helpers/multipart.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';
import { IMPORTABLE_KEYS } from '../../../src/resources/users/fields.ts';
import { MAX_CSV_ROWS } from '../../../src/resources/users/csv-import.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('csv');
const other = await api.createTenant('csv-other');
const admin = tenant.adminToken;
const viewer = await api.createUser(tenant.tenantId, { username: 'viewer', permissions: ['users.view'] });
const anna = await api.createUser(tenant.tenantId, { username: 'anna', values: { firstName: 'Anna', lastName: 'Alt', city: 'Bonn' } });
const gone = await api.createUser(tenant.tenantId, { username: 'gone', values: { deletedAt: new Date() } });
const role = await roleNamed(api.db, tenant.tenantId, 'Employee');
const otherRole = await roleNamed(api.db, other.tenantId, 'Employee');

// A delegated user administrator, and a user whose personal and administrative fields they may not see.
const delegate = await api.createUser(tenant.tenantId, { username: 'delegate', permissions: ['users.view', 'users.administer'] });
const secrets = {
  email: 'secret.person@hidden.example',
  phone: '+49 30 555 0199',
  birthdate: '1971-04-05',
  street: 'Geheimweg 7',
  gender: 'female' as const,
  staffNumber: 'S-99887',
};
const secretive = await api.createUser(tenant.tenantId, {
  username: 'secretive',
  values: { ...secrets, firstName: 'Sam', lastName: 'Secret', active: true, preventLogout: true },
});
const administrator = await roleNamed(api.db, tenant.tenantId, 'Administrator');
const [retiredAdmins] = await api.db.owner
  .insert(roles)
  .values({ tenantId: tenant.tenantId, name: 'Retired administrators', active: false, permissions: ['users.administer', 'automations.administer'] })
  .returning();
const hiddenValues = [...Object.values(secrets), 'Geheimweg'];

/** True when the answer holds none of the stored values the delegate may not see. */
const leaksNothing = (t: Test, body: unknown) => {
  const text = JSON.stringify(body);
  for (const value of hiddenValues) t.notOk(text.includes(value), `does not reveal ${value}`);
};

/** Every user row of the database, to prove an import preview changes nothing. */
const snapshot = () => api.db.owner.select().from(users).orderBy(users.id);

const importCsv = (t: Test, csv: string | Buffer, fields: Record<string, string> = {}, token = admin) => importUsersCsv(api, t, token, csv, fields);

t.test('bad files are 422 problem documents and change nothing', async (t) => {
  const before = await snapshot();
  const cases: [string, string | Buffer][] = [
    ['unknown header', 'username,shoe_size\nx,42\n'],
    ['duplicate header', 'username,city,city\nx,a,b\n'],
    ['no username column', 'first_name,last_name\nA,B\n'],
    ['ragged rows', 'username,city\nx,Bonn\ny\n'],
    ['wrong encoding', Buffer.concat([Buffer.from('username,city\nx,K'), Buffer.from([0xf6]), Buffer.from('ln\n')])],
    ['header only', 'username,city\n'],
    ['empty file', ''],
    ['duplicate usernames', `username,password,first_name,last_name,role_id\nx,long enough pw,A,B,${role!.id}\nx,long enough pw,C,D,${role!.id}\n`],
    ['a line longer than 64 KiB', `username,city\nx,${'a'.repeat(70_000)}\n`],
    ['a header longer than 64 KiB, no line break', 'h'.repeat(1024 * 1024)],
    ['more header columns than importable keys', `username,${'x,'.repeat(5000)}y\nname\n`],
    ['an unknown header of 60,000 characters', `username,${'k'.repeat(60_000)}\nx,1\n`],
    ['a quote left open to the end', 'username,city\nx,"Bonn\ny,Köln\n'],
  ];
  for (const [name, csv] of cases) {
    const res = await importCsv(t, csv);
    t.equal(res.status, 422, name);
    t.ok(res.body.errors?.user_data_csv?.length, `${name}: explains itself`);
    const code = name === 'header only' || name === 'empty file' ? 'csv_empty' : 'csv_malformed';
    t.ok(
      res.body.error_codes?.user_data_csv?.every((c: string) => c === code),
      `${name}: ${code}`,
    );
    t.ok(JSON.stringify(res.body).length < 2048, `${name}: the problem does not repeat the file`);
  }
  // A stray quote in a cell (a password, say): the refusal names the line, never the cell's text.
  for (const csv of [`username,password,role_id\njoe,SECRET-PW-1-"quoted,${role!.id}\n`, `username,password,role_id\njoe,"SECRET-PW-2"x,${role!.id}\n`]) {
    const res = await importCsv(t, csv);
    t.equal(res.status, 422);
    t.strictSame(res.body.error_codes, { user_data_csv: ['csv_malformed'] });
    t.match(res.body.errors.user_data_csv[0], /at line 2/);
    if (csv.includes('-"quoted')) t.match(res.body.errors.user_data_csv[0], /inside field 2 /, 'the password is the second field');
    t.notMatch(JSON.stringify(res.body), /SECRET|got "/, 'no text of the cell');
  }
  const noFile = await multipart({ update_users: 'true' });
  t.equal((await api.call(t, 'importUsersCsv', { token: admin, ...noFile })).status, 422, 'no file');
  const badFlag = await importCsv(t, 'username\nx\n', { update_users: 'maybe' });
  t.equal(badFlag.status, 422, 'flag not a boolean');
  t.equal((await importCsv(t, 'username\nx\n', {}, viewer.token)).status, 403, 'needs users.administer');
  t.strictSame(await snapshot(), before);
});

t.test('groups: new, unchanged, update and delete users, invalid rows with line numbers; nothing persisted', async (t) => {
  const before = await snapshot();
  const csv = [
    'username;password;first_name;last_name;role_id;city;birthdate',
    `neo;a long password;Neo;New;${role!.id};Köln;1990-01-02`,
    `anna;;Anna;Alt;;Berlin;`,
    `bad;short;B;Ad;${otherRole!.id};;31.12.1999`,
    `gone;a long password;G;One;${role!.id};;`,
  ].join('\r\n');
  const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(csv)]);
  const res = await importCsv(t, withBom, { update_users: 'true', delete_users: 'true' });
  t.equal(res.status, 200);
  t.strictSame(res.body.new_users, [
    { line: 2, user: { username: 'neo', first_name: 'Neo', last_name: 'New', role_id: role!.id, city: 'Köln', birthdate: '1990-01-02' } },
  ]);
  t.strictSame(res.body.update_users, [{ line: 3, id: anna.id, username: 'anna', changes: { city: { from: 'Bonn', to: 'Berlin' } } }]);
  t.strictSame(res.body.unchanged_users, []);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(
    invalid.map((row) => row.line),
    [4, 5],
  );
  t.strictSame(Object.keys(invalid[0]!.errors).sort(), ['birthdate', 'password', 'role_id'], "short password, other tenant's role, bad date");
  t.ok(invalid[1]!.errors.username, "a deleted user's name");
  t.equal((invalid[1] as { username?: string }).username, 'gone');
  t.notOk(
    res.body.delete_users.some((u: { id: number }) => u.id === gone.id),
    'deleted users are not proposed for deletion',
  );
  const deletions = (res.body.delete_users as { username: string }[]).map((u) => u.username).sort();
  t.strictSame(deletions, ['delegate', 'secretive', 'viewer'], 'absent users, never the caller or deleted ones');
  t.notOk(JSON.stringify(res.body).includes('a long password'), 'passwords are never shown');
  t.strictSame(await snapshot(), before, 'nothing persisted');
});

t.test('row rules: reserved usernames, names of personal accounts on update, overlong cells', async (t) => {
  const res = await importCsv(t, `username,last_name,city\ndeleted-user-3,X,\nanna,,\nneo,Y,${'x'.repeat(300)}\n`, { update_users: 'true' });
  t.equal(res.status, 200);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(
    invalid.map((row) => [row.line, Object.keys(row.errors).sort()]),
    [
      [2, ['first_name', 'password', 'role_id', 'username']],
      [3, ['last_name']],
      [4, ['city', 'first_name', 'password', 'role_id']],
    ],
  );
});

t.test('a new name may not be reserved in any case nor hold an invisible character; a stored one is matched as it is', async (t) => {
  // Stored before usernames with invisible characters were refused.
  const legacy = await api.createUser(tenant.tenantId, { username: 'legacy\u200b', values: { firstName: 'Leg', lastName: 'Acy' } });
  const csv = `username,password,first_name,last_name,role_id,city\nDeleted-User-4,a password 4,A,B,${role.id},\nzed\u200b,a password 5,A,B,${role.id},\n\u202eoen,a password 6,A,B,${role.id},\nlegacy\u200b,,Leg,Acy,,Köln\n`;
  const res = await importCsv(t, csv, { update_users: 'true' });
  t.equal(res.status, 200);
  t.strictSame(
    (res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[]).map((row) => [row.line, row.errors]),
    [
      [2, { username: ['is reserved for blacked-out accounts'] }],
      [3, { username: ['may not contain control, format or other invisible characters'] }],
      [4, { username: ['may not contain control, format or other invisible characters'] }],
    ],
  );
  t.strictSame(res.body.new_users, []);
  t.strictSame(
    (res.body.update_users as { id: number; changes: object }[]).map((row) => [row.id, row.changes]),
    [[legacy.id, { city: { from: null, to: 'Köln' } }]],
    'the stored name matches its user',
  );
});

t.test('a NUL character, which no text column can store, makes its cell invalid: never a 500, never an offered row', async (t) => {
  const before = await snapshot();
  const csv = `username,password,first_name,last_name,role_id,city\nne\u0000w1,a password 1,A,B,${role.id},\nnew2,a password 2,A\u0000,B,${role.id},Bonn\nanna,,Anna,Alt,,Bo\u0000nn\n`;
  // The username's cell once reached PostgreSQL, and the batch's statements failed in an order that sometimes answered 500.
  for (let attempt = 0; attempt < 5; attempt++) {
    const res = await importCsv(t, csv, { update_users: 'true' });
    t.equal(res.status, 200);
    t.strictSame(res.body.new_users, []);
    t.strictSame(res.body.update_users, []);
    t.strictSame(
      (res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[]).map((row) => [row.line, Object.keys(row.errors)]),
      [
        [2, ['username']],
        [3, ['first_name']],
        [4, ['city']],
      ],
    );
  }
  t.strictSame(await snapshot(), before);
});

t.test('without update_users matching users are unchanged; without delete_users none are listed', async (t) => {
  const res = await importCsv(t, 'username,city\nanna,Berlin\n');
  t.equal(res.status, 200);
  t.strictSame(res.body.update_users, []);
  t.strictSame(res.body.unchanged_users, [{ line: 2, id: anna.id, username: 'anna' }]);
  t.strictSame(res.body.delete_users, []);
});

t.test('headers are remapped by multipart values; whitespace_to_null turns blanks into null', async (t) => {
  const csv = 'Login,Stadt\nanna,  \n';
  const plain = await importCsv(t, csv, { username: 'Login', city: 'Stadt', update_users: 'true' });
  t.equal(plain.status, 200);
  t.strictSame(plain.body.update_users[0].changes, { city: { from: 'Bonn', to: '' } });
  const nulled = await importCsv(t, csv, { username: 'Login', city: 'Stadt', update_users: 'true', whitespace_to_null: 'true' });
  t.strictSame(nulled.body.update_users[0].changes, { city: { from: 'Bonn', to: null } });
});

t.test('import template: English keys, each header replaceable by a query parameter', async (t) => {
  const res = await api.call(t, 'getUserImportTemplate', { token: admin });
  t.equal(res.status, 200);
  t.match(String(res.headers['content-type']), /^text\/csv/);
  t.equal(res.text, IMPORTABLE_KEYS.join(',') + '\r\n');
  const renamed = await api.call(t, 'getUserImportTemplate', { token: admin, query: { username: 'Login', city: 'Stadt, Land' } });
  t.equal(renamed.text.split(',')[0], 'Login');
  t.match(renamed.text, /,"Stadt, Land",/);
  t.equal((await api.call(t, 'getUserImportTemplate', { token: admin, query: { shoe_size: 'x' } })).status, 422, 'unknown key');
  // A header from a link an administrator follows must not run as a formula in their spreadsheet.
  const formulas = await api.call(t, 'getUserImportTemplate', {
    token: admin,
    query: { username: '=HYPERLINK("https://evil.example")', city: '+1', email: '@x', phone: '-2' },
  });
  t.equal(formulas.text.split(',')[0], `"'=HYPERLINK(""https://evil.example"")"`, 'a formula is written as text, quoted');
  t.match(formulas.text, /,'\+1,/);
  t.match(formulas.text, /,'-2,/);
  t.match(formulas.text, /,'@x,/);
  t.equal((await api.call(t, 'getUserImportTemplate', { token: viewer.token })).status, 403);
});

t.test('a template whose headers a spreadsheet would run as formulas imports with the same headers', async (t) => {
  const headers = { username: '=Login', email: '@Mail' };
  const template = (await api.call(t, 'getUserImportTemplate', { token: admin, query: headers })).text;
  t.equal(template.split(',')[0], "'=Login");
  const row = IMPORTABLE_KEYS.map(
    (key) =>
      ({ username: 'formula-header', password: 'a long password', first_name: 'F', last_name: 'H', role_id: String(role!.id), email: 'fh@example.com' })[
        key as string
      ] ?? '',
  );
  const res = await importCsv(t, template + row.join(',') + '\r\n', headers);
  t.equal(res.status, 200);
  t.strictSame(res.body.invalid_rows, []);
  t.equal(res.body.new_users[0].user.username, 'formula-header');
  t.equal(res.body.new_users[0].user.email, 'fh@example.com');
});

t.test('a template filled in imports as new users', async (t) => {
  const template = (await api.call(t, 'getUserImportTemplate', { token: admin })).text;
  const row = IMPORTABLE_KEYS.map(
    (key) =>
      ({ username: 'filled', password: 'a long password', first_name: 'F', last_name: 'L', role_id: String(role!.id), active: 'yes', email: 'f@example.com' })[
        key as string
      ] ?? '',
  );
  const res = await importCsv(t, template + row.join(',') + '\r\n');
  t.equal(res.status, 200);
  t.strictSame(res.body.invalid_rows, []);
  t.equal(res.body.new_users[0].user.email, 'f@example.com');
  t.equal(res.body.new_users[0].user.active, true);
});

// ---- what a delegate may see and change through the preview ----

t.test('a delegate without view permissions: hidden columns of existing users are refused per row, whatever the value', async (t) => {
  const header = 'username,first_name,email,phone,birthdate,street,gender,staff_number,active,prevent_logout,role_id';
  const different = `secretive,Sam,x@example.com,1,2000-01-01,Elsewhere 1,male,S-1,no,no,${role!.id}`;
  const same = `secretive,Sam,${secrets.email},${secrets.phone},${secrets.birthdate},${secrets.street},${secrets.gender},${secrets.staffNumber},yes,yes,${role!.id}`;
  for (const [name, row] of [
    ['different values', different],
    ['the stored values', same],
  ] as const) {
    const res = await importCsv(t, `${header}\n${row}\n`, { update_users: 'true' }, delegate.token);
    t.equal(res.status, 200, name);
    leaksNothing(t, res.body);
    t.strictSame(res.body.update_users, [], `${name}: nothing offered`);
    t.strictSame(res.body.unchanged_users, [], `${name}: nor called unchanged (that would confirm the stored values)`);
    const [invalid] = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
    t.strictSame(
      Object.keys(invalid!.errors).sort(),
      ['active', 'birthdate', 'email', 'gender', 'phone', 'prevent_logout', 'role_id', 'staff_number', 'street'],
      `${name}: every hidden column is named, the visible one is not`,
    );
    t.match(invalid!.errors.email![0], /users\.view-personal/);
    t.match(invalid!.errors.staff_number![0], /users\.view-administrative/);
  }
});

t.test('a delegate sees changes to the fields they may see, and an empty boolean or role cell is no change', async (t) => {
  const res = await importCsv(t, `username,first_name,active,role_id\nsecretive,Samantha,,\n`, { update_users: 'true' }, delegate.token);
  t.equal(res.status, 200);
  t.strictSame(res.body.invalid_rows, []);
  t.strictSame(res.body.update_users, [{ line: 2, id: secretive.id, username: 'secretive', changes: { first_name: { from: 'Sam', to: 'Samantha' } } }]);
  leaksNothing(t, res.body);
});

t.test('with the view permissions the same rows show their changes and values', async (t) => {
  const seer = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer', 'users.view-personal', 'users.view-administrative'] });
  const res = await importCsv(t, `username,email,staff_number\nsecretive,new@example.com,${secrets.staffNumber}\n`, { update_users: 'true' }, seer.token);
  t.equal(res.status, 200);
  t.strictSame(res.body.update_users[0].changes, { email: { from: secrets.email, to: 'new@example.com' } });
});

t.test('users the caller may not administer are never offered for change or deletion', async (t) => {
  const res = await importCsv(t, `username,first_name\nadmin,Mallory\nsecretive,Sam\n`, { update_users: 'true', delete_users: 'true' }, delegate.token);
  t.equal(res.status, 200);
  const [row] = res.body.invalid_rows as { line: number; username: string; errors: Record<string, string[]> }[];
  t.equal(row!.line, 2);
  t.equal(row!.username, 'admin');
  t.strictSame(Object.keys(row!.errors), ['username']);
  t.match(row!.errors.username![0], /permissions you do not hold/);
  t.notOk(JSON.stringify(row!.errors).includes('automations.administer'), 'without users.view-administrative the role stays hidden');
  t.notOk(res.body.update_users.some((u: { username: string }) => u.username === 'admin'));
  const boss = await api.createUser(tenant.tenantId, { username: 'boss', values: { roleId: administrator!.id } });
  const retired = await api.createUser(tenant.tenantId, { username: 'retired-boss', values: { roleId: retiredAdmins!.id } });
  const again = await importCsv(t, `username\nsecretive\n`, { delete_users: 'true' }, delegate.token);
  const offered = (again.body.delete_users as { id: number }[]).map((u) => u.id);
  t.notOk(offered.includes(tenant.adminUserId), 'not the administrator');
  t.notOk(offered.includes(boss.id), 'not another administrator');
  t.notOk(offered.includes(retired.id), 'not a holder of an inactive role granting more');
  t.ok(offered.includes(anna.id), 'a user they may administer is offered');
  const byAdmin = await importCsv(t, `username\nsecretive\n`, { delete_users: 'true' });
  t.ok(
    (byAdmin.body.delete_users as { id: number }[]).some((u) => u.id === boss.id),
    'the administrator is offered everyone else',
  );
});

t.test('role cells obey the no-escalation rule of the API, inactive roles included', async (t) => {
  const csv = [
    'username,password,first_name,last_name,role_id',
    `climber,a long password,C,Limber,${administrator!.id}`,
    `sleeper,a long password,S,Leeper,${retiredAdmins!.id}`,
    `plain,a long password,P,Lain,${role!.id}`,
  ].join('\n');
  const res = await importCsv(t, csv, {}, delegate.token);
  t.equal(res.status, 200);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(
    invalid.map((row) => [row.line, Object.keys(row.errors)]),
    [
      [2, ['role_id']],
      [3, ['role_id']],
    ],
  );
  t.match(invalid[0]!.errors.role_id![0], /automations\.administer/);
  t.strictSame(
    res.body.new_users.map((u: { user: { username: string } }) => u.user.username),
    ['plain'],
  );
});

t.test("a caller's own row: role, active and prevent_logout cannot change (as on PUT /api/users/{user})", async (t) => {
  const res = await importCsv(t, `username,role_id,active,city\nadmin,${role!.id},no,Bonn\n`, { update_users: 'true' });
  t.equal(res.status, 200);
  const [row] = res.body.invalid_rows as { errors: Record<string, string[]> }[];
  t.strictSame(Object.keys(row!.errors).sort(), ['active', 'role_id']);
});

t.test('the preview needs users.view besides users.administer (it shows existing users)', async (t) => {
  const blind = await api.createUser(tenant.tenantId, { permissions: ['users.administer'] });
  const res = await importCsv(t, 'username\nsecretive\n', { delete_users: 'true' }, blind.token);
  t.equal(res.status, 403);
  t.notOk(res.text.includes('anna'));
});

t.test('default_route cells follow the rule of the API: a same-origin path or an http(s) URL; an empty cell is none', async (t) => {
  const csv = [
    'username,password,first_name,last_name,role_id,default_route',
    `routed,a long password,R,Outed,${role!.id},javascript:alert(1)`,
    `pathed,a long password,P,Athed,${role!.id},/dashboard`,
    `blank,a long password,B,Lank,${role!.id},`,
    `anna,,Anna,Alt,,//evil.example.com/`,
  ].join('\n');
  const res = await importCsv(t, csv, { update_users: 'true' });
  t.equal(res.status, 200);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(
    invalid.map((row) => [row.line, Object.keys(row.errors)]),
    [
      [2, ['default_route']],
      [5, ['default_route']],
    ],
  );
  t.strictSame(
    res.body.new_users.map((u: { user: { default_route: string | null } }) => u.user.default_route),
    ['/dashboard', null],
  );
});

// ---- the rules of the create and update operations, on the rows that would write ----

t.test('a leaving date before the entering date is an invalid row, on an update judged with the stored dates (as PUT /api/users/{user} does)', async (t) => {
  const dated = await api.createUser(tenant.tenantId, { username: 'dated', values: { firstName: 'D', lastName: 'Ated', enteringDate: '2024-05-01' } });
  const csv = [
    'username,password,first_name,last_name,role_id,entering_date,leaving_date',
    `leaver,a long password,L,Eaver,${role!.id},2024-05-01,2024-04-30`,
    `stayer,a long password,S,Tayer,${role!.id},2024-05-01,2024-05-01`,
  ].join('\n');
  const created = await importCsv(t, csv);
  t.equal(created.status, 200);
  t.strictSame(
    created.body.invalid_rows.map((row: { line: number; errors: Record<string, string[]> }) => [row.line, row.errors]),
    [[2, { leaving_date: ['must not be before entering_date'] }]],
  );
  t.strictSame(
    created.body.new_users.map((u: { user: { username: string } }) => u.user.username),
    ['stayer'],
  );

  const early = await importCsv(t, 'username,leaving_date\ndated,2024-04-01\n', { update_users: 'true' });
  t.strictSame(early.body.invalid_rows, [{ line: 2, username: 'dated', errors: { leaving_date: ['must not be before entering_date'] } }]);
  t.strictSame(early.body.update_users, []);
  const api422 = await api.call(t, 'updateUser', { token: admin, params: { user: dated.id }, body: { leaving_date: '2024-04-01' } });
  t.strictSame(api422.body.errors, { leaving_date: ['must not be before entering_date'] }, 'the API refuses the same write alike');
  const later = await importCsv(t, 'username,leaving_date\ndated,2024-06-01\n', { update_users: 'true' });
  t.strictSame(later.body.update_users, [{ line: 2, id: dated.id, username: 'dated', changes: { leaving_date: { from: null, to: '2024-06-01' } } }]);
});

t.test('a row that turns a group account into a personal one needs both names, as PUT /api/users/{user} does', async (t) => {
  const team = await api.createUser(tenant.tenantId, { username: 'team', values: { groupAccount: true, firstName: null, lastName: null } });
  const nameless = await importCsv(t, 'username,group_account\nteam,no\n', { update_users: 'true' });
  t.equal(nameless.status, 200);
  t.strictSame(nameless.body.invalid_rows, [
    { line: 2, username: 'team', errors: { first_name: ['is required for personal accounts'], last_name: ['is required for personal accounts'] } },
  ]);
  const api422 = await api.call(t, 'updateUser', { token: admin, params: { user: team.id }, body: { group_account: false } });
  t.strictSame(Object.keys(api422.body.errors).sort(), ['first_name', 'last_name'], 'the API refuses the same write alike');
  const named = await importCsv(t, 'username,group_account,first_name,last_name\nteam,no,Team,Work\n', { update_users: 'true' });
  t.strictSame(named.body.invalid_rows, []);
  t.strictSame(named.body.update_users[0].changes, {
    group_account: { from: true, to: false },
    first_name: { from: null, to: 'Team' },
    last_name: { from: null, to: 'Work' },
  });
});

t.test('a changed role_id of an existing user obeys the no-escalation rule; the role it has is no change', async (t) => {
  const seer = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer', 'users.view-administrative'] });
  const climbing = await importCsv(t, `username,role_id\nanna,${administrator!.id}\n`, { update_users: 'true' }, seer.token);
  t.equal(climbing.status, 200);
  const [row] = climbing.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.strictSame(Object.keys(row!.errors), ['role_id']);
  t.match(row!.errors.role_id![0], /automations\.administer/);
  t.strictSame(climbing.body.update_users, []);
  const annaRole = (await api.db.owner.select({ roleId: users.roleId }).from(users).where(eq(users.id, anna.id)))[0]!.roleId;
  const same = await importCsv(t, `username,role_id\nanna,${annaRole}\n`, { update_users: 'true' }, seer.token);
  t.strictSame(same.body.invalid_rows, []);
  t.strictSame(same.body.unchanged_users, [{ line: 2, id: anna.id, username: 'anna' }]);
});

t.test('role and language cells naming nothing of the tenant are invalid on every row: "does not exist"', async (t) => {
  const csv = [`username,password,first_name,last_name,role_id,lang_id`, `newbie,a long password,N,Ew,${otherRole!.id},de-DE`, `anna,,,,,xx-XX`].join('\n');
  const res = await importCsv(t, csv);
  t.equal(res.status, 200);
  t.strictSame(res.body.invalid_rows, [
    { line: 2, username: 'newbie', errors: { role_id: ['does not exist'] } },
    { line: 3, username: 'anna', errors: { lang_id: ['does not exist'] } },
  ]);
});

t.test('a file longer than one batch of rows: groups, line order, a repeated username and absent users across batches', async (t) => {
  const big = await api.createTenant('csv-batches');
  const employee = await roleNamed(api.db, big.tenantId, 'Employee');
  const name = (i: number) => `bulk${String(i).padStart(4, '0')}`;
  await api.db.owner
    .insert(users)
    .values(
      Array.from({ length: 1200 }, (_, i) => ({ tenantId: big.tenantId, username: name(i), roleId: employee!.id, firstName: 'Bulk', lastName: String(i) })),
    );
  const stored = await api.db.owner.select({ id: users.id, username: users.username }).from(users).where(eq(users.tenantId, big.tenantId)).orderBy(users.id);
  const before = await snapshot();

  // Lines 2–101 name existing users; lines 102–1101 new ones, every 250th with a role of another tenant.
  const lines = ['username,password,first_name,last_name,role_id'];
  for (let i = 0; i < 100; i++) lines.push(`${name(i)},,Bulk,${i},`);
  for (let i = 0; i < 1000; i++) lines.push(`new${i},a long password,N,Ew,${i % 250 === 0 ? otherRole!.id : employee!.id}`);
  const res = await importCsv(t, lines.join('\n'), { delete_users: 'true' }, big.adminToken);
  t.equal(res.status, 200);
  const body = res.body as {
    new_users: { line: number }[];
    unchanged_users: { line: number; username: string }[];
    invalid_rows: { line: number; username: string; errors: object }[];
    delete_users: { id: number; username: string }[];
  };
  t.strictSame(
    body.unchanged_users.map((row) => row.username),
    Array.from({ length: 100 }, (_, i) => name(i)),
  );
  t.strictSame(
    body.invalid_rows.map((row) => [row.line, row.username, row.errors]),
    [0, 250, 500, 750].map((i) => [102 + i, `new${i}`, { role_id: ['does not exist'] }]),
    'invalid rows of both batches, by line',
  );
  t.equal(body.new_users.length, 996);
  t.strictSame(
    body.new_users.map((row) => row.line),
    Array.from({ length: 1000 }, (_, i) => 102 + i).filter((line) => (line - 102) % 250 !== 0),
    'new users of both batches, by line',
  );
  t.strictSame(
    body.delete_users.map((user) => user.username),
    stored.filter((user) => !/^bulk00\d\d$/.test(user.username) && user.username !== 'admin').map((user) => user.username),
    'every absent user, more than one page of them, by id; never the caller',
  );

  const repeated = [...lines.slice(0, 1002), `${name(0)},,Again,0,`].join('\n');
  const twice = await importCsv(t, repeated, {}, big.adminToken);
  t.equal(twice.status, 422);
  t.strictSame(twice.body.errors, { user_data_csv: [`username "${name(0)}" appears on line 2 and line 1003`] }, 'found across batches');
  t.strictSame(await snapshot(), before, 'nothing written');
});

t.test(
  'many batches judged at once: entries in line order, lines counted across quoted line breaks and empty lines, the first repeated username refuses the file',
  async (t) => {
    const many = await api.createTenant('csv-many-batches');
    const employee = await roleNamed(api.db, many.tenantId, 'Employee');
    const before = await snapshot();
    const lines = ['username,password,first_name,last_name,role_id,city'];
    for (let i = 0; i < 5200; i++) {
      if (i === 10) lines.push(`multi${i},a long password,M,L,${employee!.id},"Line one`, 'line two"');
      else if (i === 20) lines.push('', '');
      else lines.push(`many${i},${i % 700 === 0 ? 'short' : 'a long password'},M,L,${employee!.id},Bonn`);
    }
    const csv = lines.join('\n') + '\n';
    const res = await importCsv(t, csv, {}, many.adminToken);
    t.equal(res.status, 200);
    const body = res.body as { new_users: { line: number; user: { username: string; city: string } }[]; invalid_rows: { line: number; username: string }[] };
    // Line 1 is the header, the row of i = 10 spans lines 12 and 13, and i = 20 is two empty lines.
    const lineOf = (i: number) => (i < 10 ? i + 2 : i < 20 ? i + 3 : i + 4);
    const rows = Array.from({ length: 5200 }, (_, i) => i).filter((i) => i !== 20);
    t.strictSame(
      body.invalid_rows.map((row) => [row.line, row.username]),
      rows.filter((i) => i % 700 === 0).map((i) => [lineOf(i), `many${i}`]),
      'short passwords of every batch, by line',
    );
    t.strictSame(
      body.new_users.map((row) => row.line),
      rows.filter((i) => i % 700 !== 0).map(lineOf),
      'new users of every batch, by line',
    );
    t.equal(body.new_users.find((row) => row.user.username === 'multi10')?.user.city, 'Line one\nline two');

    const repeated = [...lines, `many4000,a long password,M,L,${employee!.id},Bonn`, `many4001,a long password,M,L,${employee!.id},Bonn`].join('\n');
    const twice = await importCsv(t, repeated, {}, many.adminToken);
    t.equal(twice.status, 422);
    t.strictSame(
      twice.body.errors,
      { user_data_csv: [`username "many4000" appears on line ${lineOf(4000)} and line ${lines.length + 1}`] },
      'the first repeated row',
    );
    t.strictSame(await snapshot(), before, 'nothing written');
  },
);

t.test(`a file of more than ${MAX_CSV_ROWS} data rows is refused as a whole, however short its rows`, async (t) => {
  // One-character usernames fit millions of rows into the upload's 20 MiB, each judged and answered with an entry of its own.
  const lines = Array.from({ length: MAX_CSV_ROWS + 1 }, (_, i) => i.toString(36));
  const res = await importCsv(t, `username\n${lines.join('\n')}\n`);
  t.equal(res.status, 422);
  t.strictSame(res.body.errors, { user_data_csv: [`has more than ${MAX_CSV_ROWS} data rows`] });
  t.strictSame(res.body.error_codes, { user_data_csv: ['csv_malformed'] });
});

t.test('UTF-8 is judged across the chunks the file is read in: a character split between two is accepted, a file cut inside one is not', async (t) => {
  const header = 'username,first_name,last_name\n';
  // Each character ends up split at the first 64 KiB boundary: 1, 2 and 3 of its bytes before it.
  for (const character of ['ö', '€', '😀']) {
    for (let before = 1; before < Buffer.byteLength(character); before++) {
      const filler = 'a'.repeat(64 * 1024 - header.length - 'split,'.length - before);
      const csv = Buffer.from(`${header}split,${filler}${character},Name\n`);
      t.equal(csv.indexOf(Buffer.from(character)), 64 * 1024 - before, `${character} straddles the boundary`);
      const res = await importCsv(t, csv);
      t.equal(res.status, 200, `${character} split after ${before} byte(s)`);
      t.equal(res.body.new_users.length + res.body.invalid_rows.length, 1, 'the row is judged');
    }
  }
  const cut = Buffer.from(`${header}cut,Jörg,X€`).subarray(0, -1);
  const refused = await importCsv(t, cut);
  t.equal(refused.status, 422);
  t.strictSame(refused.body.errors, { user_data_csv: ['must be UTF-8 encoded'] });
  t.strictSame(refused.body.error_codes, { user_data_csv: ['csv_malformed'] });
});
