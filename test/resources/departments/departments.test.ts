import t, { type Test } from 'tap';
import { eq, sql } from 'drizzle-orm';
import { departmentUsers, departments } from '../../../src/resources/departments/table.ts';
import { tenants } from '../../../src/platform/database/tenancy.ts';
import { entityPermissions } from '../../../src/resources/entity-permissions/table.ts';
import { MAX_MEMBERS_SHOWN } from '../../../src/resources/departments/view.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { backdateUpdatedAt, holdRows, lockWaiters, rowCount } from '../../helpers/fixtures.ts';
import { eventually } from '../../helpers/eventually.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('departments');
const other = await api.createTenant('departments-other');
const manager = await api.createUser(tenant.tenantId, { permissions: ['departments.manage'] });
const employee = await api.createUser(tenant.tenantId);
const userViewer = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });

const departmentCount = (tenantId = tenant.tenantId) => rowCount(api.db, 'departments', sql`tenant_id = ${tenantId}`);
const settingIds = async (tenantId: number) =>
  (await api.db.owner.execute<{ id: number }>(sql`select id::int from notification_settings where tenant_id = ${tenantId} order by sort_number`)).map(
    (r) => r.id,
  );
const create = (t: Test, body: unknown, token = manager.token) => api.call(t, 'createDepartment', { token, body });
const createSet = async (t: Test, name: string, fields: unknown[], token = tenant.adminToken) => {
  const res = await api.call(t, 'createAttributeSet', { token, body: { name, fields } });
  t.equal(res.status, 201);
  return res.body.id as number;
};
/** `updateAttributeSet` of `set` with a name and fields; answers the response. */
const redefineSet = (t: Test, set: number, name: string, fields: unknown[], token = tenant.adminToken) =>
  api.call(t, 'updateAttributeSet', { token, params: { attributeSet: set }, body: { name, fields } });

t.test('bad department input is a 422 problem and stores nothing', async (t) => {
  const foreignSetting = (await settingIds(other.tenantId))[0]!;
  const before = await departmentCount();
  const cases: [unknown, string][] = [
    [{}, 'name'],
    [{ name: '' }, 'name'],
    [{ name: '   ' }, 'name'],
    [{ name: 5 }, 'name'],
    [{ name: 'X', notification_setting_ids: [999999] }, 'notification_setting_ids.0'],
    [{ name: 'X', notification_setting_ids: [foreignSetting] }, 'notification_setting_ids.0'],
    [{ name: 'X', notification_setting_ids: ['1'] }, 'notification_setting_ids.0'],
    [{ name: 'X', attribute_set_ids: [999999] }, 'attribute_set_ids.0'],
    [{ name: 'X', attribute_set_ids: [{ id: 1, extra: 1 }] }, 'attribute_set_ids.0.extra'],
    [{ name: 'X', cost_center: 'A1' }, 'cost_center'],
    [{ name: 'X', user_id: employee.id }, 'user_id'],
    [{ name: 'X', created_at: '2020-01-01' }, 'created_at'],
    [{ name: 'X', 'Bad Key': 'A1' }, 'Bad Key'],
    [{ name: 'X', nested: { a: 1 } }, 'nested'],
    [{ name: 'X', tags: ['#hash'] }, 'tags.0'],
  ];
  for (const [body, field] of cases) {
    const res = await create(t, body);
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(
      Object.keys(res.body.errors ?? {}).some((key) => key.startsWith(field)),
      `errors name ${field}: ${JSON.stringify(res.body.errors)}`,
    );
  }
  const malformed = await api.call(t, 'createDepartment', { token: manager.token, payload: '{"name":', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  t.equal(await departmentCount(), before, 'nothing was stored');
});

t.test('a name of 255 characters is taken whatever UTF-16 makes of it; 256 are not', async (t) => {
  const emoji = await create(t, { name: '😀'.repeat(255) });
  t.equal(emoji.status, 201, '255 emoji (510 UTF-16 units)');
  const longer = await create(t, { name: '😀'.repeat(256) });
  t.equal(longer.status, 422);
  // The tests below start from no department.
  t.equal((await api.call(t, 'deleteDepartment', { token: manager.token, params: { department: emoji.body.id } })).status, 204);
});

t.test('writing needs departments.manage; reading needs only a signed-in user', async (t) => {
  const denied = await create(t, { name: 'Denied' }, employee.token);
  t.equal(denied.status, 403);
  const anonymous = await api.call(t, 'createDepartment', { body: { name: 'Anonymous' } });
  t.equal(anonymous.status, 401);
  t.equal((await api.call(t, 'listDepartments', {})).status, 401);
  t.equal(await departmentCount(), 0);
  const list = await api.call(t, 'listDepartments', { token: employee.token });
  t.equal(list.status, 200);
});

t.test('create sets user_id to the caller and assigns nothing by default', async (t) => {
  const res = await create(t, { name: 'Sales', tags: ['north', 'Field'] });
  t.equal(res.status, 201);
  t.match(res.body, { name: 'Sales', user_id: manager.id });
  // strictSame: t.match would take any list for [] and any object for {}.
  t.strictSame(
    [res.body.tags, res.body.notification_setting_ids, res.body.attribute_set_ids, res.body.attributes],
    [['north', 'Field'], [], [], {}],
    'the tags sent; no setting, no set, no attribute',
  );
  const shown = await api.call(t, 'getDepartment', { token: employee.token, params: { department: res.body.id } });
  t.strictSame(shown.body, res.body);
});

t.test('names are unique per tenant, not across tenants', async (t) => {
  const first = await create(t, { name: 'Unique' });
  t.equal(first.status, 201);
  const again = await create(t, { name: 'Unique' });
  t.equal(again.status, 422);
  t.ok(again.body.errors.name);
  const elsewhere = await api.call(t, 'createDepartment', { token: other.adminToken, body: { name: 'Unique' } });
  t.equal(elsewhere.status, 201);
  const renamed = await api.call(t, 'updateDepartment', { token: manager.token, params: { department: first.body.id }, body: { name: 'Sales' } });
  t.equal(renamed.status, 422, 'renaming onto a taken name');
  const same = await api.call(t, 'updateDepartment', { token: manager.token, params: { department: first.body.id }, body: { name: 'Unique' } });
  t.equal(same.status, 200, 'keeping its own name');
});

t.test('update: id lists default to the current values; sent lists replace them', async (t) => {
  const [s1, s2, s3] = await settingIds(tenant.tenantId);
  const created = await create(t, { name: 'Support', notification_setting_ids: [s2, s1, s1] });
  t.strictSame(
    created.body.notification_setting_ids,
    [s1, s2].sort((a, b) => a! - b!),
  );
  const department = created.body.id;
  const kept = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { name: 'Support desk' } });
  t.equal(kept.status, 200);
  t.strictSame(kept.body.notification_setting_ids, created.body.notification_setting_ids, 'omitted → current values');
  t.strictSame(kept.body.tags, []);
  const replaced = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Support desk', notification_setting_ids: [s3] },
  });
  t.strictSame(replaced.body.notification_setting_ids, [s3]);
  const cleared = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Support desk', notification_setting_ids: [] },
  });
  t.strictSame(cleared.body.notification_setting_ids, []);
  const missingName = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { tags: ['x'] } });
  t.equal(missingName.status, 422, 'name is required on update');
  const [row] = await api.db.owner.select().from(departments).where(eq(departments.id, department));
  t.strictSame(row!.tags, [], 'the refused update changed nothing');
});

t.test('update: the stored values sent back change nothing: updated_at stays and no event is recorded', async (t) => {
  const [s1, s2, s3] = await settingIds(tenant.tenantId);
  const kept = await createSet(t, 'Kept profile', [
    { key: 'kept_code', type: 'string' },
    { key: 'kept_size', type: 'integer' },
  ]);
  const rate = await createSet(t, 'Kept rate', [{ key: 'kept_rate', type: 'number' }]);
  const created = await create(t, {
    name: 'Kept',
    tags: ['north', 'Field'],
    notification_setting_ids: [s2, s1],
    attribute_set_ids: [
      { id: rate, sort_number: 2 },
      { id: kept, sort_number: 1 },
    ],
    kept_code: 'K-1',
    kept_size: 3,
    kept_rate: 0.5,
  });
  t.equal(created.status, 201);
  const department = created.body.id;
  const backdate = () => backdateUpdatedAt(api.db, 'departments', department);
  const past = await backdate();
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const read = (await api.call(t, 'getDepartment', { token: manager.token, params: { department } })).body;
  // As a form saves the record it read: every key, the setting ids in another order.
  const form = {
    name: read.name,
    tags: read.tags,
    notification_setting_ids: [...read.notification_setting_ids].reverse(),
    attribute_set_ids: read.attribute_set_ids,
    ...read.attributes,
  };
  const same = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: form });
  t.equal(same.status, 200);
  t.equal(same.body.updated_at, past, 'the update answers the updated_at it had');
  t.strictSame(same.body, read, 'and the record as it was');
  const named = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { name: 'Kept' } });
  t.equal(named.body.updated_at, past, 'the name alone, as it is');
  const [row] = await api.db.owner.select({ updatedAt: departments.updatedAt }).from(departments).where(eq(departments.id, department));
  t.equal(row!.updatedAt.toISOString(), past, 'stored so');
  t.equal(await events(), eventsBefore, 'and no event is recorded');

  const retagged = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { ...form, tags: ['north'] } });
  t.equal(retagged.status, 200);
  t.not(retagged.body.updated_at, past, 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
  await backdate();
  const assigned = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Kept', notification_setting_ids: [s3] },
  });
  t.not(assigned.body.updated_at, past, 'so does a change of an assignment alone');
  t.equal(await events(), eventsBefore + 2);
});

t.test('attribute sets define which extra keys a department takes, validated by type', async (t) => {
  const profile = await createSet(t, 'Profile', [
    { key: 'cost_center', type: 'string' },
    { key: 'head_count', type: 'integer' },
    { key: 'remote', type: 'boolean' },
    { key: 'founded', type: 'date' },
  ]);
  const budget = await createSet(t, 'Budget', [{ key: 'budget', type: 'number' }]);
  const created = await create(t, {
    name: 'Engineering',
    attribute_set_ids: [
      { id: budget, sort_number: 2 },
      { id: profile, sort_number: 1 },
    ],
    cost_center: 'ENG-1',
    head_count: 12,
    remote: true,
    founded: '2020-02-29',
    budget: 1.5,
  });
  t.equal(created.status, 201);
  t.strictSame(created.body.attribute_set_ids, [profile, budget], 'ordered by sort_number');
  t.strictSame(created.body.attributes, { cost_center: 'ENG-1', head_count: 12, remote: true, founded: '2020-02-29', budget: 1.5 });
  const department = created.body.id;

  const bad: [Record<string, unknown>, string][] = [
    [{ head_count: 1.5 }, 'head_count'],
    [{ head_count: '12' }, 'head_count'],
    [{ remote: 'yes' }, 'remote'],
    [{ founded: '2021-02-29' }, 'founded'],
    [{ founded: '29.02.2020' }, 'founded'],
    [{ cost_center: 7 }, 'cost_center'],
    [{ cost_center: ['ENG-1'] }, 'cost_center'],
    [{ cost_center: { code: 'ENG-1' } }, 'cost_center'],
    [{ cost_center: 'x'.repeat(10001) }, 'cost_center'],
    [{ unknown_key: 1 }, 'unknown_key'],
  ];
  for (const [extra, key] of bad) {
    const res = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { name: 'Engineering', ...extra } });
    t.equal(res.status, 422, JSON.stringify(extra));
    t.ok(res.body.errors[key], `error keyed ${key}`);
  }
  const kept = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Engineering', head_count: null, remote: false },
  });
  t.equal(kept.status, 200);
  t.strictSame(kept.body.attributes, { cost_center: 'ENG-1', remote: false, founded: '2020-02-29', budget: 1.5 }, 'null clears, unsent values stay');
  const detached = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Engineering', attribute_set_ids: [budget] },
  });
  t.strictSame(detached.body.attributes, { budget: 1.5 }, "a detached set's values go");
  const notAttached = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { name: 'Engineering', cost_center: 'X' } });
  t.equal(notAttached.status, 422, 'a key of a detached set is refused');

  const inUse = await api.call(t, 'deleteAttributeSet', { token: tenant.adminToken, params: { attributeSet: budget } });
  t.equal(inUse.status, 422, 'an attached set cannot be deleted');
  const unused = await api.call(t, 'deleteAttributeSet', { token: tenant.adminToken, params: { attributeSet: profile } });
  t.equal(unused.status, 204);
});

t.test('a value stored before its field changed type is refused at the next update until it is replaced', async (t) => {
  const set = await createSet(t, 'Counted', [{ key: 'count', type: 'integer' }]);
  const created = await create(t, { name: 'Retyped', attribute_set_ids: [set], count: 99999999999 });
  t.equal(created.status, 201);
  const department = created.body.id as number;
  const retyped = await redefineSet(t, set, 'Counted', [{ key: 'count', type: 'date' }]);
  t.equal(retyped.status, 200);
  const rename = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { name: 'Retyped, renamed' } });
  t.equal(rename.status, 422);
  t.strictSame(rename.body.error_codes, { count: ['format'] });
  const replaced = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department },
    body: { name: 'Retyped, renamed', count: '2020-01-01' },
  });
  t.equal(replaced.status, 200);
  t.strictSame(replaced.body.attributes, { count: '2020-01-01' });
});

t.test('a value of a field its set no longer defines is answered until the next update drops it, the department sent back as read too', async (t) => {
  const set = await createSet(t, 'Shrinking', [
    { key: 'budget', type: 'integer' },
    { key: 'open', type: 'boolean' },
  ]);
  const created = await create(t, { name: 'Shrunk', attribute_set_ids: [set], budget: 7, open: true });
  t.equal(created.status, 201);
  const department = created.body.id as number;
  const shrunk = await redefineSet(t, set, 'Shrinking', [{ key: 'open', type: 'boolean' }]);
  t.equal(shrunk.status, 200);
  const read = (await api.call(t, 'getDepartment', { token: manager.token, params: { department } })).body;
  t.strictSame(read.attributes, { budget: 7, open: true }, 'the value stays stored until the next update');
  const { id: _id, attributes, created_at: _created, updated_at: _updated, user_id: _user, ...writable } = read;
  const refused = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { ...writable, ...attributes, budget: 8 } });
  t.equal(refused.status, 422, 'another value for the field no set defines is refused');
  t.strictSame(refused.body.error_codes, { budget: ['unknown_property'] });
  const saved = await api.call(t, 'updateDepartment', { token: manager.token, params: { department }, body: { ...writable, ...attributes } });
  t.equal(saved.status, 200, 'the department sent back as read is accepted');
  t.strictSame(saved.body.attributes, { open: true }, 'and the update drops the value');
});

t.test('a set may not change a type so that it clashes with a set attached beside it (422), which would lock the department', async (t) => {
  const money = await createSet(t, 'Money', [{ key: 'amount', type: 'number' }]);
  const extra = await createSet(t, 'Extra', [{ key: 'note', type: 'string' }]);
  const created = await create(t, { name: 'Clashing', attribute_set_ids: [money, extra], amount: 2.5 });
  t.equal(created.status, 201);
  const retyped = await redefineSet(
    t,
    extra,
    'Extra',
    [
      { key: 'note', type: 'string' },
      { key: 'amount', type: 'string' },
    ],
    manager.token,
  );
  t.equal(retyped.status, 422, 'amount is a number beside it');
  t.strictSame(retyped.body.error_codes, { 'fields.1.type': ['mismatch'] });
  const [stored] = await api.db.owner.execute<{ fields: unknown }>(sql`select fields from attribute_sets where id = ${extra}`);
  t.strictSame(stored!.fields, [{ key: 'note', type: 'string' }], 'the set is unchanged');
  const renamed = await api.call(t, 'updateDepartment', { token: manager.token, params: { department: created.body.id }, body: { name: 'Clashing, renamed' } });
  t.equal(renamed.status, 200, 'the department stays writable');
  const sameType = await redefineSet(t, extra, 'Extra', [{ key: 'amount', type: 'number', label: 'Amount' }], manager.token);
  t.equal(sameType.status, 200, 'the same key with the same type is no clash');
  const alone = await createSet(t, 'Alone', [{ key: 'amount', type: 'number' }]);
  const free = await redefineSet(t, alone, 'Alone', [{ key: 'amount', type: 'string' }], manager.token);
  t.equal(free.status, 200, 'a set attached nowhere beside another changes freely');
});

t.test('a department attaching a set while its update is under way judges the set by its new fields', async (t) => {
  const money = await createSet(t, 'Money race', [{ key: 'amount', type: 'number' }]);
  const extra = await createSet(t, 'Extra race', [{ key: 'note', type: 'string' }]);
  // An update of Extra in flight: locked as updateAttributeSet locks it, its new fields written, not yet committed.
  const held = await holdRows(
    api.db,
    sql`with locked as (select id from attribute_sets where tenant_id = ${tenant.tenantId} and id = ${extra} for update)
        update attribute_sets set fields = '[{"key": "amount", "type": "string"}]'
        where tenant_id = ${tenant.tenantId} and id in (select id from locked)`,
  );
  let pending;
  try {
    pending = create(t, { name: 'Raced', attribute_set_ids: [money, extra] });
    t.equal(await lockWaiters(api.db, 'attribute_sets'), 1, 'the department write waits for the set');
  } finally {
    await held.release();
  }
  const attached = await pending;
  t.equal(attached.status, 422, 'judged by the fields the update left');
  t.ok(attached.body.errors?.attribute_set_ids);
});

t.test('two sets attached together and updated at the same moment are both stored: no deadlock, no 503', async (t) => {
  const first = await createSet(t, 'First together', [{ key: 'first', type: 'string' }]);
  const second = await createSet(t, 'Second together', [{ key: 'second', type: 'string' }]);
  t.equal((await create(t, { name: 'Together', attribute_set_ids: [first, second] })).status, 201);
  // The attachments held away for a moment: each update gets as far as it can before it reads the set beside its own.
  const held = await holdRows(api.db, sql`lock table department_attribute_sets in access exclusive mode`);
  let updates;
  try {
    updates = [first, second].map((id, i) =>
      api.call(t, 'updateAttributeSet', {
        token: manager.token,
        params: { attributeSet: id },
        body: { name: i === 0 ? 'First together' : 'Second together', fields: [{ key: i === 0 ? 'first' : 'second', type: 'string', label: 'Labelled' }] },
      }),
    );
    const waiting = await eventually(
      async () =>
        (
          await api.db.owner.execute<{ n: number }>(
            sql`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`,
          )
        )[0]!.n,
      (n) => n >= 2,
    );
    t.equal(waiting, 2, 'both updates wait');
  } finally {
    await held.release();
  }
  const answers = await Promise.all(updates);
  t.strictSame(
    answers.map((answer) => answer.status),
    [200, 200],
    `both go through: ${answers.map((answer) => answer.body.detail ?? answer.status).join('; ')}`,
  );
  const stored = await api.db.owner.execute<{ label: string }>(
    sql`select f->>'label' as label from attribute_sets, jsonb_array_elements(fields) f where id in (${first}, ${second})`,
  );
  t.strictSame(
    stored.map((row) => row.label),
    ['Labelled', 'Labelled'],
    'both changes are stored',
  );
});

t.test('attribute set administration validates fields and needs departments.manage', async (t) => {
  const denied = await api.call(t, 'createAttributeSet', { token: employee.token, body: { name: 'S', fields: [] } });
  t.equal(denied.status, 403);
  for (const fields of [
    [{ key: 'name', type: 'string' }],
    [
      { key: 'a', type: 'string' },
      { key: 'a', type: 'integer' },
    ],
    [{ key: 'a', type: 'money' }],
    [{ key: 'A b', type: 'string' }],
  ]) {
    const res = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: 'Bad', fields } });
    t.equal(res.status, 422, JSON.stringify(fields));
  }
  const id = await createSet(t, 'Location', [{ key: 'city', type: 'string', label: 'City' }], manager.token);
  const dup = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: 'Location', fields: [] } });
  t.equal(dup.status, 422);
  t.strictSame(dup.body.error_codes, { name: ['taken'] });
  // As the spec says: stored trimmed, never blank, and compared as stored.
  const blank = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: ' \t ', fields: [] } });
  t.strictSame([blank.status, blank.body.error_codes], [422, { name: ['required'] }]);
  const padded = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: '  Padded  ', fields: [] } });
  t.strictSame([padded.status, padded.body.name], [201, 'Padded']);
  const paddedAgain = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: 'Padded ', fields: [] } });
  t.strictSame([paddedAgain.status, paddedAgain.body.error_codes], [422, { name: ['taken'] }]);
  const updated = await api.call(t, 'updateAttributeSet', { token: manager.token, params: { attributeSet: id }, body: { name: 'Place', fields: [] } });
  t.match(updated.body, { id, name: 'Place' });
  t.strictSame(updated.body.fields, [], 'the fields replaced by none');
  const list = await api.call(t, 'listAttributeSets', { token: manager.token, query: { selects: 'name' } });
  t.ok(list.body.some((s: { name: string }) => s.name === 'Place'));
  const foreign = await api.call(t, 'getAttributeSet', { token: other.adminToken, params: { attributeSet: id } });
  t.equal(foreign.status, 404);
  const conflicting = await createSet(t, 'Conflict', [{ key: 'budget', type: 'string' }], manager.token);
  const budgetSet = (await api.call(t, 'listAttributeSets', { token: manager.token })).body.find((s: { name: string }) => s.name === 'Budget').id;
  const clash = await create(t, { name: 'Clash', attribute_set_ids: [budgetSet, conflicting] });
  t.equal(clash.status, 422, 'two sets defining one key with different types');
  t.ok(clash.body.errors.attribute_set_ids);
});

t.test('an attribute set update that changes nothing leaves updated_at as it was and records no event', async (t) => {
  const id = await createSet(t, 'Unchanged set', [
    { key: 'unchanged_code', type: 'string', label: 'Code' },
    { key: 'unchanged_size', type: 'integer' },
  ]);
  const past = await backdateUpdatedAt(api.db, 'attribute_sets', id);
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const read = (await api.call(t, 'getAttributeSet', { token: manager.token, params: { attributeSet: id } })).body;
  const same = await api.call(t, 'updateAttributeSet', { token: manager.token, params: { attributeSet: id }, body: { name: read.name, fields: read.fields } });
  t.equal(same.status, 200);
  t.equal(same.body.updated_at, past, 'the set sent back as read answers the updated_at it had');
  t.strictSame(same.body, read, 'and the set as it was');
  t.equal(await events(), eventsBefore, 'and no event is recorded');
  const changed = await api.call(t, 'updateAttributeSet', {
    token: manager.token,
    params: { attributeSet: id },
    body: { name: read.name, fields: read.fields.slice(1) },
  });
  t.equal(changed.status, 200);
  t.not(changed.body.updated_at, past, 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
});

t.test('URL context: static_url, url and url_context only when selected, as for users', async (t) => {
  const id = (await create(t, { name: 'Routed' })).body.id as number;
  const plain = await api.call(t, 'getDepartment', { token: employee.token, params: { department: id } });
  t.equal(plain.status, 200);
  t.notOk('url' in plain.body || 'static_url' in plain.body || 'url_context' in plain.body, 'not by default');
  const selects = 'id,url,static_url,url_context';
  const shown = await api.call(t, 'getDepartment', { token: employee.token, params: { department: id }, query: { selects } });
  const routed = { id, url: `/departments/${id}`, static_url: `/departments/${id}`, url_context: { type: 'department', id } };
  t.strictSame(shown.body, routed, 'any signed-in user, with no permission');
  const listed = await api.call(t, 'listDepartments', { token: employee.token, query: { selects, filter: { text: 'Routed' } } });
  t.strictSame(listed.body, [routed]);
  const user = await api.call(t, 'getUser', { token: employee.token, params: { user: employee.id }, query: { selects: 'url,url_context', relations: '' } });
  t.strictSame(user.body, { url: `/users/${employee.id}`, url_context: { type: 'user', id: employee.id } }, 'the same shape as a user');
  const typo = await api.call(t, 'getDepartment', { token: employee.token, params: { department: id }, query: { selects: 'id,url_ctx' } });
  t.equal(typo.status, 422);
  t.match(typo.body.errors.selects[0], /unknown or not visible: url_ctx; allowed: .*static_url, url, url_context/);
  const foreign = await api.call(t, 'getDepartment', { token: other.adminToken, params: { department: id }, query: { selects } });
  t.equal(foreign.status, 404, "another tenant's department is missing, URL fields or not");
  const attribute = await api.call(t, 'createAttributeSet', { token: manager.token, body: { name: 'Links', fields: [{ key: 'url', type: 'string' }] } });
  t.equal(attribute.status, 422, 'an attribute field may not take the name url');
  t.ok(attribute.body.errors['fields.0.key']);
});

t.test('the text filter matches name parts and #tags; unknown filters are 422', async (t) => {
  await create(t, { name: 'Logistics North', tags: ['Warehouse', 'night'] });
  await create(t, { name: 'Logistics South', tags: ['warehouse'] });
  const names = async (text: string) =>
    (await api.call(t, 'listDepartments', { token: employee.token, query: { filter: { text }, selects: 'name' } })).body.map((d: { name: string }) => d.name);
  t.strictSame(await names('logistics'), ['Logistics North', 'Logistics South']);
  t.strictSame(await names('#WAREHOUSE'), ['Logistics North', 'Logistics South'], 'tags match case-insensitively');
  t.strictSame(await names('#night logist'), ['Logistics North'], 'every word must match');
  t.strictSame(await names('#ware'), [], 'a tag matches whole');
  t.strictSame(await names('100%'), [], 'LIKE wildcards are literal');
  const unknown = await api.call(t, 'listDepartments', { token: employee.token, query: { filter: { name: 'x' } } });
  t.equal(unknown.status, 422);
  t.ok(unknown.body.errors['filter.name']);
  const selects = await api.call(t, 'listDepartments', { token: employee.token, query: { selects: 'name,secret' } });
  t.equal(selects.status, 422);
  const limited = await api.call(t, 'listDepartments', { token: employee.token, query: { limit: 1, selects: 'id' } });
  t.equal(limited.body.length, 1);
});

t.test('relation users lists members with a constant number of queries', async (t) => {
  const a = await create(t, { name: 'Members A' });
  const b = await create(t, { name: 'Members B' });
  const members = await Promise.all([1, 2, 3].map(() => api.createUser(tenant.tenantId)));
  const gone = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  await api.db.owner
    .insert(departmentUsers)
    .values([
      ...members.map((m) => ({ tenantId: tenant.tenantId, departmentId: a.body.id, userId: m.id })),
      { tenantId: tenant.tenantId, departmentId: b.body.id, userId: members[0]!.id },
      { tenantId: tenant.tenantId, departmentId: a.body.id, userId: gone.id },
    ]);
  const before = api.db.queryCount;
  const res = await api.call(t, 'listDepartments', { token: userViewer.token, query: { relations: 'users', filter: { text: 'Members' } } });
  const queries = api.db.queryCount - before;
  t.equal(res.status, 200);
  const byName = Object.fromEntries(res.body.map((d: { name: string; users: { id: number }[] }) => [d.name, d.users.map((u) => u.id).sort()]));
  t.strictSame(byName['Members A'], members.map((m) => m.id).sort(), 'deleted members are left out');
  t.strictSame(byName['Members B'], [members[0]!.id]);
  t.notOk('email' in res.body[0].users[0], 'user fields as the caller may see them');
  const all = api.db.queryCount;
  await api.call(t, 'listDepartments', { token: userViewer.token, query: { relations: 'users' } });
  t.equal(api.db.queryCount - all, queries, 'same number of queries for more departments');
  const unknown = await api.call(t, 'listDepartments', { token: userViewer.token, query: { relations: 'owners' } });
  t.equal(unknown.status, 422);
});

t.test('relation users needs users.view: named without it is 422, never shown to such callers', async (t) => {
  const dep = await create(t, { name: 'Hidden members' });
  const member = await api.createUser(tenant.tenantId, { values: { email: 'member@example.com' } });
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: dep.body.id, userId: member.id });
  const named = await api.call(t, 'listDepartments', { token: employee.token, query: { relations: 'users' } });
  t.equal(named.status, 422);
  t.match(named.body.errors?.relations?.[0], /users/);
  const one = await api.call(t, 'getDepartment', { token: employee.token, params: { department: dep.body.id }, query: { relations: 'users' } });
  t.equal(one.status, 422, 'the same for one department');
  const plain = await api.call(t, 'listDepartments', { token: employee.token });
  t.equal(plain.status, 200);
  t.ok(
    plain.body.every((d: Record<string, unknown>) => !('users' in d)),
    'not shown by default',
  );
  const allowed = await api.call(t, 'listDepartments', { token: userViewer.token, query: { relations: 'users', filter: { text: 'Hidden' } } });
  t.strictSame(
    allowed.body[0].users.map((u: { id: number }) => u.id),
    [member.id],
    'shown with users.view',
  );
});

t.test(`relation users loads at most ${MAX_MEMBERS_SHOWN} members in one answer: more are refused (422), not loaded`, async (t) => {
  // Departments repeat their members: each membership is a user in the answer, so a few departments of a large
  // tenant answered millions of users (60 of 20,000 members held the process for half a minute and ended in a 500).
  const crowd = await api.createTenant('departments-crowd');
  const viewer = await api.createUser(crowd.tenantId, { permissions: ['users.view'] });
  const perDepartment = MAX_MEMBERS_SHOWN / 2 + 1;
  await api.db.owner.execute(sql`insert into users (tenant_id, username, role_id)
    select ${crowd.tenantId}, 'crowd' || g, (select id from roles where tenant_id = ${crowd.tenantId} and name = 'Employee') from generate_series(1, ${perDepartment}) g`);
  // Planned without statistics, the memberships' foreign-key checks took most of a minute.
  await api.db.owner.execute(sql`analyze users`);
  await api.db.owner.execute(sql`insert into departments (tenant_id, name) values (${crowd.tenantId}, 'Crowd A'), (${crowd.tenantId}, 'Crowd B')`);
  await api.db.owner.execute(sql`insert into department_users (tenant_id, department_id, user_id)
    select ${crowd.tenantId}, d.id, u.id from departments d, users u
    where d.tenant_id = ${crowd.tenantId} and u.tenant_id = ${crowd.tenantId} and u.username like 'crowd%'`);
  const both = await api.call(t, 'listDepartments', { token: viewer.token, query: { relations: 'users' } });
  t.equal(both.status, 422, `${2 * perDepartment} members in all`);
  t.match(both.body.errors, { relations: [new RegExp(`more than ${MAX_MEMBERS_SHOWN} members`)] });
  const one = await api.call(t, 'listDepartments', { token: viewer.token, query: { relations: 'users', limit: 1 } });
  t.equal(one.status, 200, 'a page of fewer departments');
  t.equal(one.body[0].users.length, perDepartment);
});

t.test('relations notification_settings and attribute_sets show the assigned records in order', async (t) => {
  const [s1, s2] = await settingIds(tenant.tenantId);
  const first = await createSet(t, 'First', [{ key: 'first_field', type: 'string' }]);
  const second = await createSet(t, 'Second', [{ key: 'second_field', type: 'integer' }]);
  const created = await create(t, { name: 'Related', notification_setting_ids: [s2, s1], attribute_set_ids: [second, first] });
  const res = await api.call(t, 'getDepartment', {
    token: manager.token,
    params: { department: created.body.id },
    query: { relations: 'notification_settings|attribute_sets', selects: 'id' },
  });
  t.equal(res.status, 200);
  t.strictSame(
    res.body.notification_settings.map((s: { id: number }) => s.id),
    [s1, s2],
  );
  t.strictSame(
    res.body.attribute_sets.map((s: { id: number }) => s.id),
    [second, first],
  );
  t.strictSame(res.body.attribute_sets[0].fields, [{ key: 'second_field', type: 'integer' }]);
});

t.test('attribute set definitions need departments.manage, through departments too: the relation is 422 without it', async (t) => {
  const secret = await createSet(t, 'Confidential HR set', [{ key: 'salary_band', type: 'string', label: 'Salary band' }]);
  const dep = await create(t, { name: 'Payroll office', attribute_set_ids: [secret] });
  t.equal(dep.status, 201);
  t.equal((await api.call(t, 'listAttributeSets', { token: employee.token })).status, 403, 'listing the definitions needs departments.manage');
  const listed = await api.call(t, 'listDepartments', { token: employee.token, query: { relations: 'attribute_sets' } });
  t.equal(listed.status, 422, 'the relation is refused like a hidden one');
  t.ok(listed.body.errors?.relations);
  const shown = await api.call(t, 'getDepartment', { token: employee.token, params: { department: dep.body.id }, query: { relations: 'attribute_sets' } });
  t.equal(shown.status, 422, 'the same for one department');
  t.notMatch(listed.text + shown.text, /Confidential|Salary band/, 'no answer names the set or its fields');
  const plain = await api.call(t, 'getDepartment', { token: employee.token, params: { department: dep.body.id } });
  t.equal(plain.status, 200);
  t.notOk('attribute_sets' in plain.body, 'not shown by default');
  t.strictSame(plain.body.attribute_set_ids, [secret], 'the ids stay part of the department');
  const managed = await api.call(t, 'getDepartment', { token: manager.token, params: { department: dep.body.id }, query: { relations: 'attribute_sets' } });
  t.equal(managed.status, 200);
  t.match(
    managed.body.attribute_sets,
    [{ id: secret, name: 'Confidential HR set', fields: [{ key: 'salary_band', label: 'Salary band' }] }],
    'shown with departments.manage',
  );
});

t.test('department names: no look-alikes of another department (case, Unicode form, spacing), no control characters', async (t) => {
  const sales = await create(t, { name: 'Field sales' });
  t.equal(sales.status, 201);
  const before = await departmentCount();
  for (const [name, what] of [
    ['field sales', 'other case'],
    ['FIELD  SALES', 'upper case and a double space'],
    ['\uff26ield sales', 'full-width letter'],
    ['Field\u00a0sales', 'no-break space'],
    ['Field sales\u200b', 'zero-width space'],
    ['Field\u202esales', 'bidi override'],
    ['Field\u0007sales', 'control character'],
    // Letters of other scripts drawn as Latin ones (Unicode's confusables, UTS #39).
    ['Fi\u0435ld s\u0430les', 'Cyrillic e and a'],
    // A capital whose lower case looks like no Latin letter (Cyrillic Т), and a capital I for an l.
    ['FIELD SALES'.replace('I', '\u0406'), 'Cyrillic capital I'],
    ['Fie\u0406d sa\u0406es'.replace(/\u0406/g, 'I'), 'capital I for l'],
  ] as const) {
    const res = await create(t, { name });
    t.equal(res.status, 422, what);
    t.ok(res.body.errors?.name, `${what}: names name: ${JSON.stringify(res.body.errors)}`);
  }
  t.equal(await departmentCount(), before, 'nothing created');
  const decomposed = await create(t, { name: 'Re\u0301ception' });
  t.equal(decomposed.status, 201);
  t.equal(decomposed.body.name, 'R\u00e9ception', 'stored in the composed (NFC) form');
  t.equal((await create(t, { name: 'R\u00c9CEPTION' })).status, 422);
  const renamed = await api.call(t, 'updateDepartment', { token: manager.token, params: { department: decomposed.body.id }, body: { name: 'FIELD sales' } });
  t.equal(renamed.status, 422, 'a rename into a look-alike of another department');
  const recased = await api.call(t, 'updateDepartment', { token: manager.token, params: { department: decomposed.body.id }, body: { name: 'r\u00e9ception' } });
  t.equal(recased.status, 200, 'a department may change the case of its own name');
  const results = await Promise.all(['Night desk', 'night desk', 'NIGHT DESK'].map((name) => create(t, { name })));
  t.strictSame(results.map((r) => r.status).sort(), [201, 422, 422], 'concurrent look-alikes: exactly one is created');
});

t.test('availability reports count, limit and remaining; creating beyond the limit is 422', async (t) => {
  const limited = await api.createTenant('departments-limited');
  const unlimited = await api.call(t, 'getDepartmentAvailability', { token: limited.adminToken });
  t.strictSame(unlimited.body, { count: 0, limit: null, remaining: null });
  await api.db.owner.update(tenants).set({ departmentLimit: 2 }).where(eq(tenants.id, limited.tenantId));
  t.equal((await api.call(t, 'createDepartment', { token: limited.adminToken, body: { name: 'One' } })).status, 201);
  const one = await api.call(t, 'getDepartmentAvailability', { token: limited.adminToken });
  t.strictSame(one.body, { count: 1, limit: 2, remaining: 1 });
  const results = await Promise.all(['Two', 'Three'].map((name) => api.call(t, 'createDepartment', { token: limited.adminToken, body: { name } })));
  t.strictSame(results.map((r) => r.status).sort(), [201, 422], 'concurrent creates cannot both take the last slot');
  t.equal(await departmentCount(limited.tenantId), 2);
  const full = await api.call(t, 'getDepartmentAvailability', { token: limited.adminToken });
  t.strictSame(full.body, { count: 2, limit: 2, remaining: 0 });
});

t.test("delete removes the department and its memberships; another tenant's is a 404 like a missing one", async (t) => {
  const created = await create(t, { name: 'Temporary' });
  const member = await api.createUser(tenant.tenantId);
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: created.body.id, userId: member.id });
  const foreign = await api.call(t, 'deleteDepartment', { token: other.adminToken, params: { department: created.body.id } });
  const missing = await api.call(t, 'deleteDepartment', { token: other.adminToken, params: { department: 999999 } });
  t.equal(foreign.status, 404);
  t.strictSame(foreign.body, missing.body);
  const shownElsewhere = await api.call(t, 'getDepartment', { token: other.adminToken, params: { department: created.body.id } });
  t.equal(shownElsewhere.status, 404);
  const updatedElsewhere = await api.call(t, 'updateDepartment', {
    token: other.adminToken,
    params: { department: created.body.id },
    body: { name: 'Hijack' },
  });
  t.equal(updatedElsewhere.status, 404);
  t.equal((await api.call(t, 'deleteDepartment', { token: employee.token, params: { department: created.body.id } })).status, 403);
  const deleted = await api.call(t, 'deleteDepartment', { token: manager.token, params: { department: created.body.id } });
  t.equal(deleted.status, 204);
  t.equal((await api.call(t, 'getDepartment', { token: manager.token, params: { department: created.body.id } })).status, 404);
  const memberships = await api.db.owner.select().from(departmentUsers).where(eq(departmentUsers.departmentId, created.body.id));
  t.equal(memberships.length, 0);
  t.equal((await api.call(t, 'getDepartment', { token: manager.token, params: { department: 'abc' } })).status, 422);
});

t.test('a department that entity permissions name cannot be deleted (422); restricted items stay restricted', async (t) => {
  const outsider = await api.createUser(tenant.tenantId);
  const department = await create(t, { name: 'Restricted HR' });
  const item = await api.call(t, 'createMenuItem', {
    token: tenant.adminToken,
    body: {
      icon_id: 1,
      menu_identifier: 'main',
      type: 'link',
      title: 'Salaries',
      link: 'https://hr.example/salaries',
      entity_permissions: { department_ids: [department.body.id] },
    },
  });
  t.equal(item.status, 201);
  const titles = async () => (await api.call(t, 'listMenuItems', { token: outsider.token })).body.map((i: { title: string }) => i.title);
  t.notOk((await titles()).includes('Salaries'), 'the outsider does not see the restricted item');
  const refused = await api.call(t, 'deleteDepartment', { token: manager.token, params: { department: department.body.id } });
  t.equal(refused.status, 422);
  t.ok(refused.body.errors?.department, 'the problem names the department');
  t.equal((await api.call(t, 'getDepartment', { token: manager.token, params: { department: department.body.id } })).status, 200, 'still there');
  t.notOk((await titles()).includes('Salaries'), 'the outsider still sees nothing after the refused delete');
  const grants = await api.db.owner.select().from(entityPermissions).where(eq(entityPermissions.subjectId, department.body.id));
  t.equal(grants.length, 1, 'the restriction row is kept');
});

t.test('the refused delete names only the records the caller may administer', async (t) => {
  const department = await create(t, { name: 'Payroll' });
  const item = await api.call(t, 'createMenuItem', {
    token: tenant.adminToken,
    body: {
      icon_id: 1,
      menu_identifier: 'main',
      type: 'link',
      title: 'Hidden',
      link: 'https://hr.example/x',
      entity_permissions: { department_ids: [department.body.id] },
    },
  });
  const form = await api.call(t, 'createForm', {
    token: tenant.adminToken,
    body: { title: 'Payroll survey', form_type: 'survey', entity_permissions: { department_ids: [department.body.id] } },
  });
  t.equal(item.status + form.status, 402);
  const refused = await api.call(t, 'deleteDepartment', { token: manager.token, params: { department: department.body.id } });
  t.equal(refused.status, 422);
  const text = JSON.stringify(refused.body);
  t.notMatch(
    text,
    new RegExp(`menuItem|form ${form.body.id}|\\b${item.body.id}\\b`),
    'a departments manager learns no ids or kinds of records hidden from them',
  );
  t.match(refused.body.errors?.department?.[0], /records you cannot administer/);
  const byAdmin = await api.call(t, 'deleteDepartment', { token: tenant.adminToken, params: { department: department.body.id } });
  t.equal(byAdmin.status, 422);
  t.match(byAdmin.body.errors?.department?.[0], new RegExp(`menuItem ${item.body.id}`), 'an administrator is told which ones');
  t.match(byAdmin.body.errors?.department?.[0], new RegExp(`form ${form.body.id}`));
});

t.test('a list whose relations name more ids than a statement takes parameters loads them', async (t) => {
  // PostgreSQL takes at most 65,535 parameters in a statement: a relation that named each department, or each
  // department's set or setting, as one answered 500.
  const crowd = await api.createTenant('departments-many-ids');
  const count = 65_536;
  await api.db.owner.execute(sql`insert into departments (tenant_id, name) select ${crowd.tenantId}, 'Crowd ' || g from generate_series(1, ${count}) g`);
  await api.db.owner.execute(sql`insert into attribute_sets (tenant_id, name) values (${crowd.tenantId}, 'Shared set')`);
  await api.db.owner.execute(sql`insert into notification_settings (tenant_id, key, sort_number) values (${crowd.tenantId}, 'shared', 1)`);
  await api.db.owner.execute(sql`insert into department_attribute_sets (tenant_id, department_id, attribute_set_id)
    select d.tenant_id, d.id, s.id from departments d, attribute_sets s where d.tenant_id = ${crowd.tenantId} and s.tenant_id = ${crowd.tenantId}`);
  await api.db.owner.execute(sql`insert into department_notification_settings (tenant_id, department_id, notification_setting_id)
    select d.tenant_id, d.id, s.id from departments d, notification_settings s where d.tenant_id = ${crowd.tenantId} and s.tenant_id = ${crowd.tenantId} and s.key = 'shared'`);
  const listed = await api.call(t, 'listDepartments', {
    token: crowd.adminToken,
    query: { selects: 'id', relations: 'users|attribute_sets|notification_settings' },
  });
  t.equal(listed.status, 200);
  t.equal(listed.body.length, count);
  t.match(listed.body.at(-1), { users: [], attribute_sets: [{ name: 'Shared set' }], notification_settings: [{ key: 'shared' }] });
});
