import t from 'tap';
import { sql } from 'drizzle-orm';
import { departmentUsers } from '../../../src/resources/departments/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { backdateUpdatedAt, createDepartment, FIELDS_OF_EVERY_TYPE, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('dvs');
const other = await api.createTenant('dvs-other');
const admin = tenant.adminToken;
const employee = await api.createUser(tenant.tenantId, { values: { langId: 'de-DE' } });
const outsider = await api.createUser(tenant.tenantId);

type Field = { id: number; name: string };
const byName = (fields: Field[]) => Object.fromEntries(fields.map((f) => [f.name, f.id])) as Record<string, number>;

let template: any, profile: any, checklist: any, foreignForm: any;
let T: Record<string, number>, P: Record<string, number>, C: Record<string, number>;

t.test('setup: a task template and forms with fields of every type', async (t) => {
  template = (
    await api.call(t, 'createTaskTemplate', {
      token: admin,
      body: {
        title: 'Onboarding task',
        fields: [...FIELDS_OF_EVERY_TYPE, { name: 'Note', field_type: 'text' }],
        entity_permissions: { user_ids: [employee.id] },
      },
    })
  ).body;
  T = byName(template.fields);
  profile = (
    await api.call(t, 'createForm', {
      token: admin,
      body: {
        title: 'Profile',
        form_type: 'survey',
        fields: [
          { name: 'Full name', field_type: 'text' },
          { name: 'Age', field_type: 'number' },
          { name: 'Birthday', field_type: 'date' },
          { name: 'Shirt', field_type: 'select', options: ['S', 'M'] },
        ],
        entity_permissions: { user_ids: [employee.id] },
      },
    })
  ).body;
  P = byName(profile.fields);
  checklist = (
    await api.call(t, 'createForm', {
      token: admin,
      body: {
        title: 'Checklist',
        form_type: 'checklist',
        fields: [
          { name: 'Done', field_type: 'boolean' },
          { name: 'Comment', field_type: 'text' },
        ],
      },
    })
  ).body;
  C = byName(checklist.fields);
  foreignForm = (
    await api.call(t, 'createForm', { token: other.adminToken, body: { title: 'Foreign', form_type: 'survey', fields: [{ name: 'X', field_type: 'text' }] } })
  ).body;
  t.ok(template.id && profile.id && checklist.id && foreignForm.id);
});

const sourceCount = () => rowCount(api.db, 'default_value_sources');
const create = (body: Record<string, unknown>, token = admin) => api.call(t, 'createDefaultValueSource', { token, body });

t.test('bad source input is a 422 problem and stores nothing', async (t) => {
  const before = await sourceCount();
  const [deleted] = await api.db.owner.execute<{ id: number }>(
    sql`insert into form_fields (tenant_id, form_id, name, field_type, sort_number, deleted_at)
        values (${tenant.tenantId}, ${profile.id}, 'Old', 'text', 9, now()) returning id::int`,
  );
  const cases: [string, Record<string, unknown>, string][] = [
    ['unknown source type', { type: 'webhook', form_field_id: T.Name, config: {} }, 'type'],
    ['missing source type', { form_field_id: T.Name, config: {} }, 'type'],
    ['system variable without variable', { type: 'systemVariable', form_field_id: T.Name, config: {} }, 'config.variable'],
    ['unknown system variable', { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'password' } }, 'config.variable'],
    [
      'formFieldValue config with options',
      { type: 'formFieldValue', form_field_id: T.Name, config: { variable: 'username' }, source_entity_type: 'formField', source_entity_id: P['Full name'] },
      'config',
    ],
    [
      'source_entity_id without source_entity_type',
      { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_id: P['Full name'] },
      'source_entity_type',
    ],
    [
      'wrong source entity type',
      { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'user', source_entity_id: P['Full name'] },
      'source_entity_type',
    ],
    ['formFieldValue without a source field', { type: 'formFieldValue', form_field_id: T.Name, config: {} }, 'source_entity_id'],
    [
      "another tenant's field",
      { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: foreignForm.fields[0].id },
      'source_entity_id',
    ],
    [
      'a deleted field',
      { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: deleted!.id },
      'source_entity_id',
    ],
    [
      'a field that is its own default',
      { type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: T.Note },
      'source_entity_id',
    ],
    [
      'incompatible field types',
      { type: 'formFieldValue', form_field_id: T.Count, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] },
      'source_entity_id',
    ],
    [
      'a text into a select',
      { type: 'formFieldValue', form_field_id: T.Size, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] },
      'source_entity_id',
    ],
    ['a variable that does not fit', { type: 'systemVariable', form_field_id: T.Count, config: { variable: 'username' } }, 'config'],
    [
      'system variable with a source entity',
      { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' }, source_entity_type: 'formField', source_entity_id: P['Full name'] },
      'source_entity_id',
    ],
    ['a target field of a form', { type: 'systemVariable', form_field_id: P['Full name'], config: { variable: 'username' } }, 'form_field_id'],
    ['an unknown target field', { type: 'systemVariable', form_field_id: 999999, config: { variable: 'username' } }, 'form_field_id'],
    ['another tenant’s target field', { type: 'systemVariable', form_field_id: foreignForm.fields[0].id, config: { variable: 'username' } }, 'form_field_id'],
    ['a string as id', { type: 'systemVariable', form_field_id: String(T.Name), config: { variable: 'username' } }, 'form_field_id'],
    ['sort_number below 0', { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' }, sort_number: -1 }, 'sort_number'],
  ];
  for (const [rule, body, key] of cases) {
    const res = await create(body);
    t.equal(res.status, 422, rule);
    t.ok(
      Object.keys(res.body.errors ?? {}).some((k) => k === key || k.startsWith(`${key}.`)),
      `${rule}: names ${key} in ${JSON.stringify(res.body.errors)}`,
    );
  }
  t.equal(await sourceCount(), before, 'nothing stored');
});

t.test('a cycle through another field is refused', async (t) => {
  const first = await create({ type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: T.Name });
  t.equal(first.status, 201);
  const before = await sourceCount();
  const cycle = await create({ type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: T.Note });
  t.equal(cycle.status, 422);
  t.match(cycle.body.errors.source_entity_id[0], /cycle/);
  t.equal(await sourceCount(), before);
  t.equal((await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: first.body.id } })).status, 204);
});

t.test('create answers the source with its keys; sort_number is automatic per target field', async (t) => {
  const a = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'full_name' } });
  t.equal(a.status, 201);
  t.match(a.body, {
    type: 'systemVariable',
    form_field_id: T.Name,
    config: { variable: 'full_name' },
    source_entity_type: null,
    source_entity_id: null,
    sort_number: 1,
  });
  t.type(a.body.id, 'number');
  t.match(a.body.created_at, /^\d{4}-\d\d-\d\dT/);
  const b = await create({ type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
  t.equal(b.status, 201);
  t.equal(b.body.sort_number, 2);
  t.strictSame(b.body.config, {});
  const c = await create({ type: 'systemVariable', form_field_id: T.Start, config: { variable: 'current_date' } });
  t.equal(c.body.sort_number, 1, 'another field counts on its own');
  const explicit = await create({ type: 'systemVariable', form_field_id: T.Start, config: { variable: 'current_date' }, sort_number: 10 });
  t.equal(explicit.body.sort_number, 10);
  const next = await create({ type: 'systemVariable', form_field_id: T.Start, config: { variable: 'current_date' } });
  t.equal(next.body.sort_number, 11);
  for (const s of [a, b, c, explicit, next]) await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: s.body.id } });
});

t.test('concurrent creates on one field take one sort_number each', async (t) => {
  const created = await Promise.all(
    Array.from({ length: 10 }, () => create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'full_name' } })),
  );
  t.ok(
    created.every((res) => res.status === 201),
    'all created',
  );
  t.strictSame(
    created.map((res) => res.body.sort_number).sort((a, b) => a - b),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    '"last + 1", each its own',
  );
  for (const res of created) await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: res.body.id } });
});

t.test('update changes the named keys (200); bad updates are 422 and change nothing', async (t) => {
  const source = await create({ type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
  const id = source.body.id;
  const bad: [Record<string, unknown>, string][] = [
    // The pair as the update would leave it: the stored source_entity_id without a type.
    [{ source_entity_type: null }, 'source_entity_type'],
    [{ config: { variable: 'username' } }, 'config'],
    [{ config: { colour: 'red' } }, 'config'],
    [{ source_entity_type: 'formField', source_entity_id: T.Name }, 'source_entity_id'],
    [{ form_field_id: T.Count }, 'source_entity_id'],
    [{ type: 'systemVariable' }, 'type'],
  ];
  for (const [body, key] of bad) {
    const res = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: id }, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[key], `names ${key}: ${JSON.stringify(res.body.errors)}`);
  }
  const [stored] = await api.db.owner.execute<{ source_entity_id: number; form_field_id: number }>(
    sql`select source_entity_id::int, form_field_id::int from default_value_sources where id = ${id}`,
  );
  t.strictSame(stored, { source_entity_id: P['Full name'], form_field_id: T.Name }, 'unchanged');

  // Every key defaults to its current value: the stored source_entity_type holds for a new source_entity_id.
  const repoint = await api.call(t, 'updateDefaultValueSource', {
    token: admin,
    params: { defaultValueSource: id },
    body: { source_entity_id: P.Shirt, sort_number: 5 },
  });
  t.equal(repoint.status, 200);
  t.match(repoint.body, { id, source_entity_type: 'formField', source_entity_id: P.Shirt, sort_number: 5, form_field_id: T.Name });
  await create({ type: 'systemVariable', form_field_id: T.Note, config: { variable: 'email' } });
  const moved = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: id }, body: { form_field_id: T.Note } });
  t.equal(moved.status, 200);
  t.equal(moved.body.form_field_id, T.Note);
  t.equal(moved.body.sort_number, 2, 'appended after the sources of its new field');
  const foreign = await api.call(t, 'updateDefaultValueSource', { token: other.adminToken, params: { defaultValueSource: id }, body: {} });
  const missing = await api.call(t, 'updateDefaultValueSource', { token: other.adminToken, params: { defaultValueSource: 999999 }, body: {} });
  t.equal(foreign.status, 404);
  t.strictSame(foreign.body, missing.body, "another tenant's source is answered like a missing one");
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

t.test('an update that changes nothing leaves updated_at as it was and records no event', async (t) => {
  const source = await create({ type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
  t.equal(source.status, 201);
  const id = source.body.id;
  const past = await backdateUpdatedAt(api.db, 'default_value_sources', id);
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const { id: _id, type: _type, created_at: _created, updated_at: _updated, ...writable } = source.body;
  const same = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: id }, body: writable });
  t.equal(same.status, 200);
  t.equal(same.body.updated_at, past, 'the source sent back as read answers the updated_at it had');
  t.strictSame(same.body, { ...source.body, updated_at: past }, 'and the source as it was');
  const empty = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: id }, body: {} });
  t.equal(empty.body.updated_at, past, 'so does an empty body');
  t.equal(await events(), eventsBefore, 'and neither records an event');
  const reordered = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: id }, body: { sort_number: 7 } });
  t.equal(reordered.status, 200);
  t.not(reordered.body.updated_at, past, 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

t.test('delete answers 204 and removes the source; a second delete is 404', async (t) => {
  const source = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } });
  const foreign = await api.call(t, 'deleteDefaultValueSource', { token: other.adminToken, params: { defaultValueSource: source.body.id } });
  t.equal(foreign.status, 404);
  const res = await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id } });
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(await sourceCount(), 0);
  t.equal((await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id } })).status, 404);
  // Recorded once, changing no field (docs/audit.md).
  const events = await api.db.owner.execute<{ action: string; changes: object }>(
    sql`select action, changes from audit_events where target_type = 'default_value_source' and target_id = ${String(source.body.id)} order by occurred_at`,
  );
  t.strictSame(
    events.map((event) => [event.action, event.changes]),
    [
      ['default_value_source.created', events[0]!.changes],
      ['default_value_source.deleted', {}],
    ],
  );
});

t.test('only those who can administer the target template manage its sources', async (t) => {
  const body = { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } };
  const denied = await create(body, outsider.token);
  t.equal(denied.status, 422);
  t.strictSame(denied.body.errors, { form_field_id: ['does not exist'] }, 'a field of a template the caller cannot administer is unknown to them');
  t.equal(await sourceCount(), 0);
  const allowed = await create(body, employee.token);
  t.equal(allowed.status, 201, 'a user named by the template entity permissions');
  t.equal((await api.call(t, 'updateDefaultValueSource', { token: outsider.token, params: { defaultValueSource: allowed.body.id }, body: {} })).status, 404);
  t.equal((await api.call(t, 'deleteDefaultValueSource', { token: outsider.token, params: { defaultValueSource: allowed.body.id } })).status, 404);
  const notTheirs = await create(
    { type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: C.Comment },
    employee.token,
  );
  t.equal(notTheirs.status, 422, 'the source field must belong to a form the caller administers');
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

t.test('a template administrator who may not read e-mails or staff numbers cannot have them pre-filled; the refusal changes nothing', async (t) => {
  // The employee administers the template through its entity permissions and holds no permission.
  for (const variable of ['email', 'staff_number']) {
    const refused = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable } }, employee.token);
    t.equal(refused.status, 422, variable);
    t.equal(refused.body.error_codes?.config?.[0], 'permission_missing', `${variable}: the permission is named`, { body: refused.body });
  }
  t.equal(await sourceCount(), 0, 'nothing stored');
  const kept = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } }, employee.token);
  t.equal(kept.status, 201, 'a public field needs no permission');
  const changed = await api.call(t, 'updateDefaultValueSource', {
    token: employee.token,
    params: { defaultValueSource: kept.body.id },
    body: { config: { variable: 'email' } },
  });
  t.equal(changed.status, 422, 'nor can a source be changed to one');
  const [stored] = await api.db.owner.execute<{ config: unknown }>(sql`select config from default_value_sources where id = ${kept.body.id}`);
  t.strictSame(stored?.config, { variable: 'username' }, 'the source is as it was');
  const byAdministrator = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'email' } });
  t.equal(byAdministrator.status, 201, 'the administrator, who reads them, may');
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

t.test('a field, source or execution the caller cannot administer is answered exactly like a missing one: no type, no existence', async (t) => {
  // The outsider administers nothing: not the checklist form (Done: boolean, Comment: text), not the template.
  const same = (label: string, hidden: { status: number; body: unknown }, missing: { status: number; body: unknown }, status: number) => {
    t.equal(hidden.status, status, `${label}: ${status}`);
    t.strictSame(hidden.body, missing.body, `${label}: the same answer as for a missing record`);
  };
  const variable = (formFieldId: number, token = outsider.token) =>
    create({ type: 'systemVariable', form_field_id: formFieldId, config: { variable: 'username' } }, token);
  const missingTarget = await variable(999999);
  same('a boolean field of a hidden form', await variable(C.Done!), missingTarget, 422);
  same('a text field of a hidden form', await variable(C.Comment!), missingTarget, 422);
  same('a date field of a hidden template', await variable(T.Start!), missingTarget, 422);
  same('a text field of a hidden template', await variable(T.Name!), missingTarget, 422);
  t.notMatch(JSON.stringify(missingTarget.body), /boolean|date|number|task template/, 'no answer names a type');

  const copy = (sourceId: number) =>
    create({ type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: sourceId }, employee.token);
  same('a source field of a form the caller cannot administer', await copy(C.Comment!), await copy(999999), 422);
  same('an incompatible source field of such a form', await copy(C.Done!), await copy(999999), 422);
  t.equal(await sourceCount(), 0, 'nothing stored');

  const source = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } });
  t.equal(source.status, 201);
  const update = (id: number, body: Record<string, unknown> = {}, token = outsider.token) =>
    api.call(t, 'updateDefaultValueSource', { token, params: { defaultValueSource: id }, body });
  same('update of a hidden source', await update(source.body.id), await update(999999), 404);
  const remove = (id: number) => api.call(t, 'deleteDefaultValueSource', { token: outsider.token, params: { defaultValueSource: id } });
  same('delete of a hidden source', await remove(source.body.id), await remove(999999), 404);
  const mine = await create({ type: 'systemVariable', form_field_id: T.Note, config: { variable: 'username' } }, employee.token);
  same(
    'moving a source onto a field the caller cannot administer',
    await update(mine.body.id, { form_field_id: C.Comment }, employee.token),
    await update(mine.body.id, { form_field_id: 999999 }, employee.token),
    422,
  );

  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: employee.id } });
  const values = (id: number) => api.call(t, 'getTaskExecutionDefaultValues', { token: outsider.token, params: { taskExecution: id } });
  same('default values of an execution the caller may not see', await values(execution.body.id), await values(999999), 404);
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

// ---- source-field preview, its filters and their options ----

let roleForm: any, departmentForm: any;

t.test('setup: forms administrable through the role and a department', async (t) => {
  const [role] = await api.db.owner.execute<{ role_id: number }>(sql`select role_id::int from users where id = ${employee.id}`);
  roleForm = (
    await api.call(t, 'createForm', {
      token: admin,
      body: { title: 'Role form', form_type: 'survey', fields: [{ name: 'Role text', field_type: 'text' }], entity_permissions: { role_ids: [role!.role_id] } },
    })
  ).body;
  const department = await createDepartment(api.db, tenant.tenantId, 'Ops', [employee.id]);
  departmentForm = (
    await api.call(t, 'createForm', {
      token: admin,
      body: {
        title: 'Department form',
        form_type: 'checklist',
        fields: [
          { name: 'Dept date', field_type: 'date' },
          { name: 'Dept text', field_type: 'text' },
        ],
        entity_permissions: { department_ids: [department!.id] },
      },
    })
  ).body;
  t.equal(roleForm.fields.length + departmentForm.fields.length, 3);
});

const preview = (body: unknown, token = employee.token) => api.call(t, 'previewFormFieldValueSourceFields', { token, body });

t.test('bad pages and unknown filters are 422', async (t) => {
  for (const body of [
    { page: 0 },
    { page: 10001 },
    { per_page: 0 },
    { per_page: 101 },
    { page: '1' },
    { filter: { colour: 'red' } },
    { filter: { form_id: 'x' } },
  ]) {
    const res = await preview(body);
    t.equal(res.status, 422, JSON.stringify(body));
  }
  const options = await api.call(t, 'listFormFieldValueSourceFieldFilterOptions', { token: employee.token, params: { filterKey: 'text' }, body: {} });
  t.equal(options.status, 422, 'text is not a multi-select filter');
  const badPage = await api.call(t, 'listFormFieldValueSourceFieldFilterOptions', {
    token: employee.token,
    params: { filterKey: 'form_id' },
    body: { per_page: 1000 },
  });
  t.equal(badPage.status, 422);
});

t.test('the preview holds only fields of forms and templates the caller can administer, labelled in their language', async (t) => {
  const res = await preview({ per_page: 100 });
  t.equal(res.status, 200);
  t.equal(res.body.total, null);
  t.equal(res.body.current_page, 1);
  t.equal(res.body.per_page, 100);
  t.equal(res.body.has_more, false);
  t.strictSame(
    res.body.data.map((e: { title: string; sub_title: string; description: string }) => [e.description, e.sub_title, e.title]),
    [
      ['Department form', 'Formular', 'Dept date'],
      ['Department form', 'Formular', 'Dept text'],
      ['Profile', 'Formular', 'Full name'],
      ['Profile', 'Formular', 'Age'],
      ['Profile', 'Formular', 'Birthday'],
      ['Profile', 'Formular', 'Shirt'],
      ['Role form', 'Formular', 'Role text'],
      ...['Name', 'Count', 'Start', 'Flag', 'Size', 'Note'].map((name) => ['Onboarding task', 'Aufgabenvorlage', name]),
    ],
    'by user, role and department; not the checklist, not the other tenant, not deleted fields',
  );
  t.match(res.body.data[2], {
    id: P['Full name'],
    source_entity_type: 'formField',
    source_entity_id: P['Full name'],
    parent_type: 'form',
    parent_id: profile.id,
    field_type: 'text',
  });
  const english = await preview({ filter: { form_id: [checklist.id] } }, admin);
  t.strictSame(
    english.body.data.map((e: { sub_title: string; title: string }) => [e.sub_title, e.title]),
    [
      ['Form', 'Done'],
      ['Form', 'Comment'],
    ],
  );
  const none = await preview({}, outsider.token);
  t.strictSame(none.body.data, [], 'a user without rights sees nothing');
});

t.test('count-less pagination walks the whole list without a total', async (t) => {
  const all = (await preview({ per_page: 100 })).body.data.map((e: { id: number }) => e.id);
  const seen: number[] = [];
  for (let page = 1; ; page++) {
    const res = await preview({ page, per_page: 5 });
    t.equal(res.body.total, null);
    seen.push(...res.body.data.map((e: { id: number }) => e.id));
    if (!res.body.has_more) break;
    t.equal(res.body.data.length, 5);
  }
  t.strictSame(seen, all);
  const beyond = await preview({ page: 100, per_page: 5 });
  t.strictSame([beyond.status, beyond.body.data, beyond.body.has_more], [200, [], false]);
  const defaults = await preview(undefined);
  t.equal(defaults.body.per_page, 15, 'per_page defaults to 15');
});

t.test('preview filters: form_type, text, ids, parent and field type, compatibility', async (t) => {
  const titles = async (filter: Record<string, unknown>) => (await preview({ filter, per_page: 100 })).body.data.map((e: { title: string }) => e.title);
  t.strictSame(await titles({ form_type: ['checklist'] }), ['Dept date', 'Dept text'], 'form_type (the checklist itself is not administrable)');
  t.strictSame(await titles({ form_type: ['survey'], field_type: ['text'] }), ['Full name', 'Role text']);
  t.strictSame(await titles({ text: 'dEPT' }), ['Dept date', 'Dept text'], 'text matches field names case-insensitively');
  t.strictSame(await titles({ text: 'onboarding' }), ['Name', 'Count', 'Start', 'Flag', 'Size', 'Note'], 'and parent titles');
  t.strictSame(await titles({ text: '%' }), [], 'LIKE wildcards are literal');
  t.strictSame(await titles({ form_id: [roleForm.id], task_template_id: [] }), ['Role text'], 'an empty multi-select is no filter');
  t.strictSame(await titles({ parent_type: ['taskTemplate'], field_type: ['date', 'boolean'] }), ['Start', 'Flag']);
  t.strictSame(
    await titles({ compatible_with_form_field_id: T.Note }),
    ['Dept text', 'Full name', 'Shirt', 'Role text', 'Name', 'Size'],
    'text ← text or select, never itself',
  );
});

t.test('compatible_with_form_field_id reveals nothing about a field the caller cannot administer', async (t) => {
  const titles = async (filter: Record<string, unknown>) => (await preview({ filter, per_page: 100 })).body.data.map((e: { title: string }) => e.title);
  // The checklist is administered by tasks.administer holders only: its field types are not the employee's to learn.
  t.strictSame(await titles({ compatible_with_form_field_id: C.Done }), [], 'a hidden boolean field matches nothing');
  t.strictSame(await titles({ compatible_with_form_field_id: C.Comment }), [], 'a hidden text field matches nothing');
  t.strictSame(await titles({ compatible_with_form_field_id: 999999 }), [], 'like a missing one');
  const options = await api.call(t, 'listFormFieldValueSourceFieldFilterOptions', {
    token: employee.token,
    params: { filterKey: 'field_type' },
    body: { filter: { compatible_with_form_field_id: C.Done } },
  });
  t.strictSame(options.body.data, [], 'nor do the filter options');
  t.strictSame(await titles({ compatible_with_form_field_id: C.Done }), await titles({ compatible_with_form_field_id: 999999 }));
  const byAdmin = await preview({ filter: { compatible_with_form_field_id: C.Done, field_type: ['boolean'] }, per_page: 100 }, admin);
  t.strictSame(
    byAdmin.body.data.map((e: { title: string }) => e.title),
    ['Flag'],
    'an administrator of the checklist gets its compatible fields',
  );
});

t.test('the filters endpoint lists every filter with its kind, labelled in the caller’s language', async (t) => {
  const res = await api.call(t, 'listFormFieldValueSourceFieldFilters', { token: employee.token });
  t.equal(res.status, 200);
  t.strictSame(
    res.body.data.map((f: { key: string; kind: string }) => [f.key, f.kind]),
    [
      ['text', 'text'],
      ['form_type', 'multiSelect'],
      ['form_id', 'multiSelect'],
      ['task_template_id', 'multiSelect'],
      ['parent_type', 'multiSelect'],
      ['field_type', 'multiSelect'],
      ['compatible_with_form_field_id', 'number'],
    ],
  );
  t.equal(res.body.data[1].title, 'Formulartyp');
});

t.test('filter options: paged, with the other filters applied first and their own left out', async (t) => {
  const options = (filterKey: string, body: unknown, token = employee.token) =>
    api.call(t, 'listFormFieldValueSourceFieldFilterOptions', { token, params: { filterKey }, body });
  const forms = await options('form_id', { filter: { form_type: ['survey'], form_id: [roleForm.id] } });
  t.equal(forms.status, 200);
  t.strictSame(forms.body, {
    data: [
      { value: profile.id, label: 'Profile' },
      { value: roleForm.id, label: 'Role form' },
    ],
    current_page: 1,
    per_page: 15,
    has_more: false,
    total: null,
  });
  const paged = await options('form_id', { per_page: 2 });
  t.strictSame(
    paged.body.data.map((o: { label: string }) => o.label),
    ['Department form', 'Profile'],
  );
  t.equal(paged.body.has_more, true);
  const second = await options('form_id', { per_page: 2, page: 2 });
  t.strictSame([second.body.data.map((o: { label: string }) => o.label), second.body.has_more], [['Role form'], false]);
  const types = await options('form_type', { filter: { text: 'dept' } });
  t.strictSame(types.body.data, [{ value: 'checklist', label: 'checklist' }]);
  const parents = await options('parent_type', {});
  t.strictSame(parents.body.data, [
    { value: 'form', label: 'Formular' },
    { value: 'taskTemplate', label: 'Aufgabenvorlage' },
  ]);
  const templates = await options('task_template_id', {}, outsider.token);
  t.strictSame(templates.body.data, [], 'only what the caller can administer');
  const fieldTypes = await options('field_type', { filter: { form_id: [profile.id] } });
  t.strictSame(
    fieldTypes.body.data.map((o: { value: string }) => o.value),
    ['date', 'number', 'select', 'text'],
  );
});

t.test('the preview costs the same number of queries for 2 or 15 entries', async (t) => {
  const before = api.db.queryCount;
  await preview({ per_page: 2 });
  const small = api.db.queryCount - before;
  const middle = api.db.queryCount;
  await preview({ per_page: 15 });
  t.equal(api.db.queryCount - middle, small);
});

// ---- resolution of an execution's default values ----

const VARIABLES = [
  'username',
  'first_name',
  'last_name',
  'full_name',
  'email',
  'staff_number',
  'language',
  'department_names',
  'current_date',
  'current_datetime',
  'tenant_name',
];

t.test('default values: sources in sort_number order, first non-null value wins', async (t) => {
  await api.db.owner.execute(sql`delete from default_value_sources`);
  const ffv = (target: number | undefined, source: number | undefined, sort_number?: number) =>
    create({
      type: 'formFieldValue',
      form_field_id: target,
      config: {},
      source_entity_type: 'formField',
      source_entity_id: source,
      ...(sort_number ? { sort_number } : {}),
    });
  const variable = (target: number | undefined, name: string, sort_number?: number) =>
    create({ type: 'systemVariable', form_field_id: target, config: { variable: name }, ...(sort_number ? { sort_number } : {}) });
  const nameFromVariable = await variable(T.Name, 'full_name', 2);
  const nameFromForm = await ffv(T.Name, P['Full name'], 1);
  const count = await ffv(T.Count, P.Age);
  const start = await variable(T.Start, 'current_date');
  const size = await ffv(T.Size, P.Shirt);
  await variable(T.Note, 'email');
  const note = await variable(T.Note, 'department_names');

  // The employee's submissions: the latest one lacks Age. Someone else submitted later.
  const submit = (token: string, values: Record<string, unknown>) =>
    api.call(t, 'createSubmission', {
      token,
      body: { form_id: profile.id, values: Object.fromEntries(Object.entries(values).map(([k, v]) => [String(P[k]), v])) },
    });
  t.equal((await submit(employee.token, { 'Full name': 'Old name', Age: 30, Shirt: 'S' })).status, 201);
  t.equal((await submit(employee.token, { 'Full name': 'Ada Lovelace', Shirt: 'M' })).status, 201);
  t.equal((await submit(admin, { 'Full name': 'Not the assignee', Age: 99, Shirt: 'S' })).status, 201);

  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: employee.id } });
  const res = await api.call(t, 'getTaskExecutionDefaultValues', { token: employee.token, params: { taskExecution: execution.body.id } });
  t.equal(res.status, 200);
  t.equal(res.body.task_execution_id, execution.body.id);
  const today = new Date().toISOString().slice(0, 10);
  t.strictSame(res.body.data, [
    { form_field_id: T.Name, name: 'Name', field_type: 'text', value: 'Ada Lovelace', default_value_source_id: nameFromForm.body.id, type: 'formFieldValue' },
    { form_field_id: T.Count, name: 'Count', field_type: 'number', value: null, default_value_source_id: null, type: null },
    { form_field_id: T.Start, name: 'Start', field_type: 'date', value: today, default_value_source_id: start.body.id, type: 'systemVariable' },
    { form_field_id: T.Flag, name: 'Flag', field_type: 'boolean', value: null, default_value_source_id: null, type: null },
    { form_field_id: T.Size, name: 'Size', field_type: 'select', value: 'M', default_value_source_id: size.body.id, type: 'formFieldValue' },
    { form_field_id: T.Note, name: 'Note', field_type: 'text', value: 'Ops', default_value_source_id: note.body.id, type: 'systemVariable' },
  ]);
  t.ok(count.body.id && nameFromVariable.body.id);

  // Reordering makes the system variable win.
  await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: nameFromVariable.body.id }, body: { sort_number: 0 } });
  const again = await api.call(t, 'getTaskExecutionDefaultValues', { token: admin, params: { taskExecution: execution.body.id } });
  t.match(again.body.data[0], { value: `Test ${employee.username}`, default_value_source_id: nameFromVariable.body.id });
});

t.test('default values: a copied choice that is not among the target select field’s options is skipped', async (t) => {
  await api.db.owner.execute(sql`delete from default_value_sources`);
  const sizes = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Sizes',
      form_type: 'survey',
      fields: [{ name: 'Size', field_type: 'select', options: ['M', 'XL'] }],
      entity_permissions: { user_ids: [employee.id] },
    },
  });
  const wide = sizes.body.fields[0].id;
  const fromSizes = await create({ type: 'formFieldValue', form_field_id: T.Size, source_entity_type: 'formField', source_entity_id: wide, sort_number: 1 });
  const fromProfile = await create({
    type: 'formFieldValue',
    form_field_id: T.Size,
    source_entity_type: 'formField',
    source_entity_id: P.Shirt,
    sort_number: 2,
  });
  t.equal(fromSizes.status, 201);
  t.equal(fromProfile.status, 201);
  t.equal(
    (
      await api.call(t, 'createSubmission', {
        token: employee.token,
        body: { form_id: profile.id, values: { [String(P['Full name'])]: 'Ada Lovelace', [String(P.Shirt)]: 'M' } },
      })
    ).status,
    201,
  );
  t.equal((await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: sizes.body.id, values: { [wide]: 'XL' } } })).status, 201);

  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: employee.id } });
  const res = await api.call(t, 'getTaskExecutionDefaultValues', { token: employee.token, params: { taskExecution: execution.body.id } });
  t.equal(res.status, 200);
  const size = res.body.data.find((entry: { form_field_id: number }) => entry.form_field_id === T.Size);
  t.strictSame(size, {
    form_field_id: T.Size,
    name: 'Size',
    field_type: 'select',
    value: 'M',
    default_value_source_id: fromProfile.body.id,
    type: 'formFieldValue',
  });
  const submitted = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { task_execution_id: execution.body.id, values: { [String(T.Size)]: size.value } },
  });
  t.equal(submitted.status, 201, 'the default value can be submitted as it is');
  await api.db.owner.execute(sql`delete from default_value_sources`);
});

t.test('default values: every system variable of the assignee, the tenant and the clock', async (t) => {
  await api.db.owner.execute(sql`update users set email = 'ada@example.com', staff_number = 'S-17' where id = ${employee.id}`);
  await createDepartment(api.db, tenant.tenantId, 'Accounting', [employee.id]);
  const variables = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: { title: 'Variables', fields: VARIABLES.map((name) => ({ name, field_type: 'text' })) },
  });
  for (const field of variables.body.fields) {
    t.equal((await create({ type: 'systemVariable', form_field_id: field.id, config: { variable: field.name } })).status, 201);
  }
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: variables.body.id, user_id: employee.id } });
  const before = Date.now();
  const res = await api.call(t, 'getTaskExecutionDefaultValues', { token: employee.token, params: { taskExecution: execution.body.id } });
  const values = Object.fromEntries(res.body.data.map((d: { name: string; value: unknown }) => [d.name, d.value]));
  t.match(values, {
    username: employee.username,
    first_name: 'Test',
    last_name: employee.username,
    full_name: `Test ${employee.username}`,
    email: 'ada@example.com',
    staff_number: 'S-17',
    language: 'de-DE',
    department_names: 'Accounting, Ops',
    current_date: new Date().toISOString().slice(0, 10),
    tenant_name: 'DVS',
  });
  t.ok(Math.abs(Date.parse(values.current_datetime) - before) < 60_000, `current_datetime ${values.current_datetime} is now`);
  t.match(values.current_datetime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  // Names of many departments cut to what a text value holds, so the value can be submitted back.
  const member = await api.createUser(tenant.tenantId);
  for (let i = 0; i < 45; i++) await createDepartment(api.db, tenant.tenantId, `${String(i).padStart(2, '0')} ${'n'.repeat(247)}`, [member.id]);
  const many = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: variables.body.id, user_id: member.id } });
  const long = await api.call(t, 'getTaskExecutionDefaultValues', { token: admin, params: { taskExecution: many.body.id } });
  const names = long.body.data.find((d: { name: string }) => d.name === 'department_names').value as string;
  t.equal(names.length, 10_000, 'the joined names, cut');
  t.ok(names.startsWith(`00 ${'n'.repeat(247)}, 01 `), 'in name order');
});

t.test('default values: variables describing another user resolve only as far as the caller may read that user', async (t) => {
  const assignee = await api.createUser(tenant.tenantId, { values: { email: 'hidden@example.com', staffNumber: 'S-99', langId: 'de-DE' } });
  const templateAdmin = await api.createUser(tenant.tenantId);
  const personalOnly = await api.createUser(tenant.tenantId, { permissions: ['users.view-personal', 'users.view-administrative'] });
  const reader = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  const viewers = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.view-personal', 'users.view-administrative'] });
  const names = ['username', 'full_name', 'language', 'department_names', 'email', 'staff_number', 'tenant_name'];
  const created = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: {
      title: 'Visibility',
      fields: names.map((name) => ({ name, field_type: 'text' })),
      entity_permissions: { user_ids: [templateAdmin.id, personalOnly.id, reader.id, viewers.id] },
    },
  });
  for (const field of created.body.fields) {
    t.equal((await create({ type: 'systemVariable', form_field_id: field.id, config: { variable: field.name } })).status, 201);
  }
  const [ops] = await api.db.owner.execute<{ id: number }>(sql`select id::int from departments where tenant_id = ${tenant.tenantId} and name = 'Ops'`);
  await api.db.owner.insert(departmentUsers).values({ tenantId: tenant.tenantId, departmentId: ops!.id, userId: assignee.id });
  // A template administrator may assign the execution themselves: that must not open the assignee's record to them.
  const execution = await api.call(t, 'createTaskExecution', { token: templateAdmin.token, body: { task_template_id: created.body.id, user_id: assignee.id } });
  t.equal(execution.status, 201);
  const valuesFor = async (token: string) => {
    const res = await api.call(t, 'getTaskExecutionDefaultValues', { token, params: { taskExecution: execution.body.id } });
    t.equal(res.status, 200);
    return Object.fromEntries(res.body.data.map((d: { name: string; value: unknown }) => [d.name, d.value]));
  };
  const everything = {
    username: assignee.username,
    full_name: `Test ${assignee.username}`,
    language: 'de-DE',
    department_names: 'Ops',
    email: 'hidden@example.com',
    staff_number: 'S-99',
    tenant_name: 'DVS',
  };
  const nothing = { username: null, full_name: null, language: null, department_names: null, email: null, staff_number: null, tenant_name: 'DVS' };
  t.strictSame(await valuesFor(templateAdmin.token), nothing, 'a template administrator who may not read users learns nothing of the assignee');
  t.notMatch(JSON.stringify(await valuesFor(templateAdmin.token)), new RegExp(`hidden@example\\.com|S-99|${assignee.username}`));
  t.strictSame(await valuesFor(personalOnly.token), nothing, 'personal and administrative permissions without users.view');
  t.strictSame(await valuesFor(reader.token), { ...everything, email: null, staff_number: null }, 'users.view: the public fields');
  t.strictSame(await valuesFor(viewers.token), everything, 'with every permission');
  t.strictSame(await valuesFor(assignee.token), everything, 'the assignee sees their own');
});

t.test('default values: a value copied from a form shows only to the assignee and to those who may administer that form', async (t) => {
  const victim = await api.createUser(tenant.tenantId);
  const templateAdmin = await api.createUser(tenant.tenantId);
  // Only tasks.administer holders administer this form; the template names templateAdmin.
  const secret = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Health', form_type: 'survey', fields: [{ name: 'Diagnosis', field_type: 'text' }] },
  });
  const shared = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Shared', form_type: 'survey', fields: [{ name: 'Team', field_type: 'text' }], entity_permissions: { user_ids: [templateAdmin.id] } },
  });
  const task = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: {
      title: 'Copies',
      fields: [
        { name: 'Copied diagnosis', field_type: 'text' },
        { name: 'Copied team', field_type: 'text' },
      ],
      entity_permissions: { user_ids: [templateAdmin.id] },
    },
  });
  const [diagnosisField] = secret.body.fields;
  const [teamField] = shared.body.fields;
  const [copiedDiagnosis, copiedTeam] = task.body.fields;
  for (const [target, source] of [
    [copiedDiagnosis.id, diagnosisField.id],
    [copiedTeam.id, teamField.id],
  ]) {
    t.equal(
      (await create({ type: 'formFieldValue', form_field_id: target, config: {}, source_entity_type: 'formField', source_entity_id: source })).status,
      201,
    );
  }
  const submitted = await api.call(t, 'createSubmission', {
    token: victim.token,
    body: { form_id: secret.body.id, values: { [String(diagnosisField.id)]: 'private matter' } },
  });
  t.equal(submitted.status, 201);
  t.equal(
    (await api.call(t, 'createSubmission', { token: victim.token, body: { form_id: shared.body.id, values: { [String(teamField.id)]: 'Blue' } } })).status,
    201,
  );
  const execution = await api.call(t, 'createTaskExecution', { token: templateAdmin.token, body: { task_template_id: task.body.id, user_id: victim.id } });
  t.equal(execution.status, 201, 'the template administrator assigns the victim');
  const valuesFor = async (token: string) => {
    const res = await api.call(t, 'getTaskExecutionDefaultValues', { token, params: { taskExecution: execution.body.id } });
    t.equal(res.status, 200);
    return res.body.data.map((d: { value: unknown }) => d.value);
  };
  t.strictSame(await valuesFor(templateAdmin.token), [null, 'Blue'], 'not the values of a form the caller cannot administer');
  t.strictSame(await valuesFor(victim.token), ['private matter', 'Blue'], 'the assignee sees their own');
  t.strictSame(await valuesFor(admin), ['private matter', 'Blue'], 'holders of tasks.administer administer every form');
});

t.test('default values cost a constant number of queries, whatever the number of fields and sources', async (t) => {
  const one = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'One', fields: [{ name: 'only', field_type: 'text' }] } });
  await create({ type: 'systemVariable', form_field_id: one.body.fields[0].id, config: { variable: 'username' } });
  await create({ type: 'formFieldValue', form_field_id: one.body.fields[0].id, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
  const many = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: { title: 'Many', fields: Array.from({ length: 12 }, (_, i) => ({ name: `f${i}`, field_type: 'text' })) },
  });
  for (const field of many.body.fields) {
    await create({ type: 'formFieldValue', form_field_id: field.id, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
    await create({ type: 'formFieldValue', form_field_id: field.id, config: {}, source_entity_type: 'formField', source_entity_id: P.Shirt });
    await create({ type: 'systemVariable', form_field_id: field.id, config: { variable: 'tenant_name' } });
  }
  const measure = async (templateId: number) => {
    const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: templateId, user_id: employee.id } });
    const before = api.db.queryCount;
    const res = await api.call(t, 'getTaskExecutionDefaultValues', { token: admin, params: { taskExecution: execution.body.id } });
    t.equal(res.status, 200);
    return { queries: api.db.queryCount - before, body: res.body };
  };
  const small = await measure(one.body.id);
  const large = await measure(many.body.id);
  t.equal(large.body.data.length, 12);
  t.ok(large.body.data.every((d: { value: unknown }) => d.value === 'Ada Lovelace'));
  t.equal(large.queries, small.queries, `${small.queries} queries either way`);
});

t.test('default values: for the assignee and template administrators; 404 for others, as across tenants', async (t) => {
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: outsider.id } });
  t.equal((await api.call(t, 'getTaskExecutionDefaultValues', { token: outsider.token, params: { taskExecution: execution.body.id } })).status, 200);
  t.equal(
    (await api.call(t, 'getTaskExecutionDefaultValues', { token: employee.token, params: { taskExecution: execution.body.id } })).status,
    200,
    'the template names the employee',
  );
  const third = await api.createUser(tenant.tenantId);
  t.equal((await api.call(t, 'getTaskExecutionDefaultValues', { token: third.token, params: { taskExecution: execution.body.id } })).status, 404);
  const foreign = await api.call(t, 'getTaskExecutionDefaultValues', { token: other.adminToken, params: { taskExecution: execution.body.id } });
  const missing = await api.call(t, 'getTaskExecutionDefaultValues', { token: other.adminToken, params: { taskExecution: 999999 } });
  t.equal(foreign.status, 404);
  t.strictSame(foreign.body, missing.body);
});

t.test('default values resolve with more sources copying from forms than a statement takes parameters', async (t) => {
  // PostgreSQL takes at most 65,535 parameters in a statement: the sources were named one parameter each (500).
  const crowded = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Crowded', fields: [{ name: 'target', field_type: 'text' }] } });
  const target = crowded.body.fields[0].id;
  await api.db.owner.execute(sql`
    insert into default_value_sources (tenant_id, form_field_id, type, config, source_entity_type, source_entity_id, sort_number)
    select ${tenant.tenantId}, ${target}, 'formFieldValue', '{}', 'formField', ${P['Full name']}, g from generate_series(1, 65536) g`);
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: crowded.body.id, user_id: employee.id } });
  const res = await api.call(t, 'getTaskExecutionDefaultValues', { token: admin, params: { taskExecution: execution.body.id } });
  t.equal(res.status, 200);
  t.match(res.body.data, [{ value: 'Ada Lovelace' }], 'the first source with a value fills the field');
  await api.db.owner.execute(sql`delete from default_value_sources where form_field_id = ${target}`);
});
