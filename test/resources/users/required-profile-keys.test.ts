/**
 * Required profile keys: a tenant setting (administered with users.administer) listing
 * the profile keys that personal accounts must fill, enforced on create and update and
 * reported per row by the CSV preview; group accounts are exempt, and stored users are
 * not invalidated by a key becoming required.
 */
import { eq } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { importUsersCsv, newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { multipart, PNG_1X1 } from '../../helpers/multipart.ts';
import { requiredProfileKeys, users } from '../../../src/resources/users/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('required-keys');
const other = await api.createTenant('required-keys-other');
const admin = tenant.adminToken;
const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
const employee = await api.createUser(tenant.tenantId, { username: 'employee', values: { roleId: employeeRole.id, firstName: 'Emma', lastName: 'Employee' } });
const viewer = await api.createUser(tenant.tenantId, { username: 'viewer', permissions: ['users.view', 'users.view-personal', 'users.view-administrative'] });
const delegate = await api.createUser(tenant.tenantId, { username: 'delegate', permissions: ['users.administer'] });
// Stored before any key is required: no phone, no city, no picture.
const legacy = await api.createUser(tenant.tenantId, { username: 'legacy', values: { roleId: employeeRole.id, firstName: 'Lea', lastName: 'Legacy' } });
const group = await api.createUser(tenant.tenantId, { username: 'front-desk', values: { roleId: employeeRole.id, groupAccount: true } });
const newUser = newUserBodies(employeeRole.id, 'hire');

const settings = (t: Test, token: string | null) => api.call(t, 'getUserSettings', { token });
const setKeys = (t: Test, token: string | null, body: unknown) => api.call(t, 'updateUserSettings', { token, body });
const storedKeys = async (tenantId: number) =>
  (await api.db.owner.select().from(requiredProfileKeys).where(eq(requiredProfileKeys.tenantId, tenantId))).map((row) => row.key).sort();
const userRow = async (id: number) => (await api.db.owner.select().from(users).where(eq(users.id, id)))[0]!;

t.test('a new tenant requires no profile key', async (t) => {
  const res = await settings(t, admin);
  t.equal(res.status, 200);
  t.strictSame(res.body, { required_profile_keys: [], default_role_id: null });
});

t.test('bad settings are 422 problem documents and change nothing', async (t) => {
  t.equal((await setKeys(t, admin, { required_profile_keys: ['phone'] })).status, 200);
  const cases: [string, unknown][] = [
    ['unknown key', { required_profile_keys: ['phone', 'shoe_size'] }],
    ['a key that is not a profile key', { required_profile_keys: ['username'] }],
    ['a key twice', { required_profile_keys: ['city', 'city'] }],
    ['not an array', { required_profile_keys: 'phone' }],
    ['not strings', { required_profile_keys: [1] }],
    ['null', { required_profile_keys: null }],
    ['missing', {}],
    ['unknown property', { required_profile_keys: [], also: true }],
  ];
  for (const [name, body] of cases) {
    const res = await setKeys(t, admin, body);
    t.equal(res.status, 422, name);
    t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8', `${name}: a problem document`);
  }
  t.equal((await api.call(t, 'updateUserSettings', { token: admin, payload: '{"required_profile_keys": [', contentType: 'application/json' })).status, 400);
  t.equal((await api.call(t, 'updateUserSettings', { token: admin, payload: 'phone', contentType: 'text/plain' })).status, 415);
  t.strictSame(await storedKeys(tenant.tenantId), ['phone'], 'unchanged');
  t.equal((await setKeys(t, admin, { required_profile_keys: [] })).status, 200);
});

t.test('reading and changing the setting needs users.administer: not an employee, not a viewer; a delegate with only users.administer may', async (t) => {
  for (const [name, token] of [
    ['employee', employee.token],
    ['viewer', viewer.token],
  ] as const) {
    const read = await settings(t, token);
    t.equal(read.status, 403, `${name} cannot read`);
    t.match(read.body.detail, /users\.administer/);
    t.equal((await setKeys(t, token, { required_profile_keys: ['phone'] })).status, 403, `${name} cannot change`);
    t.equal((await setKeys(t, token, { required_profile_keys: 'not even valid' })).status, 403, `${name}: refused before validation`);
  }
  t.equal((await settings(t, null)).status, 401);
  t.equal((await setKeys(t, null, { required_profile_keys: [] })).status, 401);
  t.strictSame(await storedKeys(tenant.tenantId), [], 'nothing stored');

  const changed = await setKeys(t, delegate.token, { required_profile_keys: ['phone', 'email', 'city'] });
  t.equal(changed.status, 200);
  t.strictSame(changed.body, { required_profile_keys: ['city', 'email', 'phone'], default_role_id: null }, 'answered in the documented order');
  t.strictSame((await settings(t, delegate.token)).body, { required_profile_keys: ['city', 'email', 'phone'], default_role_id: null });
  t.strictSame((await setKeys(t, delegate.token, { required_profile_keys: [] })).body, { required_profile_keys: [], default_role_id: null }, 'emptied again');
});

t.test("tenants' settings are apart", async (t) => {
  t.equal((await setKeys(t, admin, { required_profile_keys: ['phone', 'gender'] })).status, 200);
  t.strictSame((await settings(t, other.adminToken)).body, { required_profile_keys: [], default_role_id: null }, "the other tenant's setting is its own");
  const otherRole = await roleNamed(api.db, other.tenantId, 'Employee');
  const created = await api.call(t, 'createUser', { token: other.adminToken, body: newUserBodies(otherRole.id, 'elsewhere')() });
  t.equal(created.status, 201, 'and the other tenant requires nothing');
  t.equal((await setKeys(t, other.adminToken, { required_profile_keys: ['street'] })).status, 200);
  t.strictSame(
    (await settings(t, admin)).body,
    { required_profile_keys: ['phone', 'gender'], default_role_id: null },
    'changing it there changes nothing here',
  );
  t.strictSame(await storedKeys(tenant.tenantId), ['gender', 'phone']);
});

t.test('create: a personal account must fill every required key (422 naming the missing ones); nothing is stored', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['city', 'phone', 'gender'] });
  const before = await rowCount(api.db, 'users');
  const missing = await api.call(t, 'createUser', { token: admin, body: newUser({ phone: '   ', gender: null }) });
  t.equal(missing.status, 422);
  t.strictSame(Object.keys(missing.body.errors).sort(), ['city', 'gender', 'phone'], 'absent, null and blank are all missing');
  t.strictSame(missing.body.errors.city, ["is required by this tenant's settings"]);
  t.match(missing.body.detail, /require: city, phone, gender/, 'the detail names the keys');
  const mixed = await api.call(t, 'createUser', {
    token: admin,
    body: newUser({ city: 'Bonn', phone: '+49 1', gender: 'diverse', leaving_date: '2000-01-01', entering_date: '2001-01-01' }),
  });
  t.equal(mixed.status, 422, 'other errors are not hidden by the setting');
  t.strictSame(Object.keys(mixed.body.errors), ['leaving_date']);
  t.equal(await rowCount(api.db, 'users'), before, 'no user stored');

  const complete = await api.call(t, 'createUser', { token: admin, body: newUser({ city: 'Bonn', phone: '+49 1', gender: 'female' }) });
  t.equal(complete.status, 201);
  const shared = await api.call(t, 'createUser', {
    token: admin,
    body: { username: 'kiosk', password: 'a long enough password', role_id: employeeRole.id, group_account: true },
  });
  t.equal(shared.status, 201, 'group accounts are exempt');
});

t.test('create: a required profile picture must be uploaded', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['profile_picture'] });
  const fields = (): Record<string, string> => {
    const body = newUser();
    return { ...body, role_id: String(body.role_id) };
  };
  const without = await api.call(t, 'createUser', { token: admin, ...(await multipart(fields())) });
  t.equal(without.status, 422);
  t.strictSame(without.body.errors, { profile_picture: ["is required by this tenant's settings"] });
  const json = await api.call(t, 'createUser', { token: admin, body: newUser({ profile_picture: null }) });
  t.equal(json.status, 422, 'null is no picture');
  const withPicture = await api.call(t, 'createUser', {
    token: admin,
    ...(await multipart({ ...fields(), profile_picture: { content: PNG_1X1, fileName: 'me.png', type: 'image/png' } })),
  });
  t.equal(withPicture.status, 201);
  t.ok(withPicture.body.profile_picture_url);
  const removed = await api.call(t, 'updateUser', { token: admin, params: { user: withPicture.body.id }, body: { profile_picture: null } });
  t.equal(removed.status, 422, 'a required picture cannot be removed');
  t.strictSame(Object.keys(removed.body.errors), ['profile_picture']);
  t.ok((await api.call(t, 'getUser', { token: admin, params: { user: withPicture.body.id } })).body.profile_picture_url, 'the picture stays');
});

t.test('update: stored users are not invalidated, but no update may empty a required key', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['city', 'phone'] });
  const untouched = await api.call(t, 'updateUser', { token: admin, params: { user: legacy.id }, body: { first_name: 'Leah' } });
  t.equal(untouched.status, 200, 'a user lacking required keys can still be updated without them');
  const self = await api.call(t, 'updateUser', { token: legacy.token, params: { user: legacy.id }, body: { wants_email_notifications: true } });
  t.equal(self.status, 200, 'and update their own record');
  t.equal((await api.call(t, 'getCurrentUser', { token: legacy.token })).status, 200, 'and keep signing in');

  const before = await userRow(legacy.id);
  for (const [name, body] of [
    ['null', { phone: null, last_name: 'Changed' }],
    ['blank', { phone: '  ', last_name: 'Changed' }],
    ['empty', { city: '', last_name: 'Changed' }],
  ] as const) {
    const res = await api.call(t, 'updateUser', { token: admin, params: { user: legacy.id }, body });
    t.equal(res.status, 422, name);
    t.strictSame(Object.values(res.body.errors), [["is required by this tenant's settings"]], `${name}: on the key sent`);
  }
  const selfEmpty = await api.call(t, 'updateUser', { token: legacy.token, params: { user: legacy.id }, body: { city: null } });
  t.equal(selfEmpty.status, 422, 'nor can the user themselves');
  t.strictSame(await userRow(legacy.id), before, 'nothing changed');

  const filled = await api.call(t, 'updateUser', { token: admin, params: { user: legacy.id }, body: { city: 'Bonn' } });
  t.equal(filled.status, 200, 'filling one required key is fine while another is still empty');
  t.equal(filled.body.city, 'Bonn');
});

t.test('update: a group account is exempt, until it becomes a personal account', async (t) => {
  const renamed = await api.call(t, 'updateUser', { token: admin, params: { user: group.id }, body: { city: null, phone: '' } });
  t.equal(renamed.status, 200, 'a group account may leave required keys empty');
  const turned = await api.call(t, 'updateUser', {
    token: admin,
    params: { user: group.id },
    body: { group_account: false, first_name: 'Front', last_name: 'Desk', city: 'Bonn' },
  });
  t.equal(turned.status, 422, 'a group account turned personal must fill every required key');
  t.strictSame(Object.keys(turned.body.errors), ['phone']);
  t.equal((await userRow(group.id)).groupAccount, true, 'unchanged');
  const complete = await api.call(t, 'updateUser', {
    token: admin,
    params: { user: group.id },
    body: { group_account: false, first_name: 'Front', last_name: 'Desk', city: 'Bonn', phone: '+49 2' },
  });
  t.equal(complete.status, 200);
});

t.test('a session that must change its password can still change it while required keys are empty', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['street'] });
  const restricted = await api.createUser(tenant.tenantId, {
    username: 'restricted',
    values: { roleId: employeeRole.id, firstName: 'Rita', lastName: 'Restricted', requestPasswordChange: true },
  });
  const res = await api.call(t, 'updateUser', {
    token: restricted.token,
    params: { user: restricted.id },
    body: { password: 'a brand new password', old_password: restricted.password },
  });
  t.equal(res.status, 200);
});

t.test('the CSV preview reports the missing keys per row; group accounts exempt', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['city', 'phone'] });
  const csv = [
    'username,password,first_name,last_name,role_id,group_account,city,phone',
    `csv-complete,a long enough password,C,Complete,${employeeRole.id},,Bonn,+49 3`,
    `csv-missing,a long enough password,M,Missing,${employeeRole.id},,, `,
    `csv-group,a long enough password,,,${employeeRole.id},true,,`,
    `legacy,,Leah,Legacy,,,Bonn,`,
  ].join('\n');
  const before = await rowCount(api.db, 'users');
  const res = await importUsersCsv(api, t, admin, csv, { update_users: 'true' });
  t.equal(res.status, 200);
  t.strictSame(
    res.body.new_users.map((row: { user: { username: string } }) => row.user.username),
    ['csv-complete', 'csv-group'],
  );
  t.strictSame(res.body.invalid_rows, [
    { line: 3, username: 'csv-missing', errors: { city: ["is required by this tenant's settings"], phone: ["is required by this tenant's settings"] } },
    { line: 5, username: 'legacy', errors: { phone: ["is required by this tenant's settings"] } },
  ]);
  const withoutColumns = await importUsersCsv(api, t, admin, `username,first_name,last_name\nlegacy,Leah,Legacy\n`, { update_users: 'true' });
  t.strictSame(
    withoutColumns.body.unchanged_users.map((row: { username: string }) => row.username),
    ['legacy'],
    'a row without the columns leaves them as stored',
  );
  t.equal(await rowCount(api.db, 'users'), before, 'nothing written');
  await setKeys(t, admin, { required_profile_keys: ['profile_picture'] });
  const picture = await importUsersCsv(
    api,
    t,
    admin,
    `username,password,first_name,last_name,role_id\ncsv-pic,a long enough password,P,Pic,${employeeRole.id}\n`,
  );
  t.strictSame(
    picture.body.invalid_rows,
    [{ line: 2, username: 'csv-pic', errors: { profile_picture: ["is required by this tenant's settings"] } }],
    'a CSV cannot carry a required picture',
  );
  await setKeys(t, admin, { required_profile_keys: [] });
});

t.test('a group account turned personal by a caller who may not see its required keys: refused on them whatever they hold', async (t) => {
  await setKeys(t, admin, { required_profile_keys: ['email', 'phone'] });
  // Without users.view-personal: the two accounts' e-mail and phone are hidden from the caller.
  const blind = await api.createUser(tenant.tenantId, { username: 'blind-delegate', permissions: ['users.view', 'users.administer'] });
  const withEmail = await api.createUser(tenant.tenantId, {
    username: 'desk-with-email',
    values: { roleId: employeeRole.id, groupAccount: true, email: 'desk@example.com' },
  });
  const withPhone = await api.createUser(tenant.tenantId, {
    username: 'desk-with-phone',
    values: { roleId: employeeRole.id, groupAccount: true, phone: '+49 4' },
  });
  const hidden = ['is required by this tenant\'s settings, and seeing it needs the permission "users.view-personal"'];
  const answers = [];
  for (const desk of [withEmail, withPhone]) {
    const before = await userRow(desk.id);
    const res = await api.call(t, 'updateUser', {
      token: blind.token,
      params: { user: desk.id },
      body: { group_account: false, first_name: 'Front', last_name: 'Desk' },
    });
    t.equal(res.status, 422);
    t.strictSame(res.body.error_codes, { email: ['permission_missing'], phone: ['permission_missing'] }, `${desk.username}: on both keys`);
    t.strictSame(await userRow(desk.id), before, `${desk.username}: unchanged`);
    answers.push({ errors: res.body.errors, detail: res.body.detail });
  }
  t.strictSame(answers[0], answers[1], 'the same answer, whichever key the account has filled');
  t.strictSame(answers[0]!.errors, { email: hidden, phone: hidden });

  const csv = ['username,group_account,first_name,last_name', 'desk-with-email,false,Front,Desk', 'desk-with-phone,false,Front,Desk'].join('\n');
  const preview = await importUsersCsv(api, t, blind.token, csv, { update_users: 'true' });
  t.equal(preview.status, 200);
  t.strictSame(
    preview.body.invalid_rows,
    [
      { line: 2, username: 'desk-with-email', errors: { email: hidden, phone: hidden } },
      { line: 3, username: 'desk-with-phone', errors: { email: hidden, phone: hidden } },
    ],
    'the CSV preview answers alike',
  );

  // One who may see them is told which are empty, and may turn an account that fills them personal.
  const seen = await api.call(t, 'updateUser', {
    token: admin,
    params: { user: withEmail.id },
    body: { group_account: false, first_name: 'Front', last_name: 'Desk' },
  });
  t.strictSame(seen.body.errors, { phone: ["is required by this tenant's settings"] });
  await setKeys(t, admin, { required_profile_keys: [] });
});
