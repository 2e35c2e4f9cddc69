import t from 'tap';
import { sql } from 'drizzle-orm';
import { departmentUsers, departments } from '../../src/resources/departments/table.ts';
import { startTestApi } from '../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('dvs');
const other = await api.createTenant('dvs-other');
const admin = tenant.adminToken;
const employee = await api.createUser(tenant.tenantId, { values: { langId: 'de-DE' } });
const outsider = await api.createUser(tenant.tenantId);

type Field = { id: number; name: string };
const byName = (fields: Field[]) => Object.fromEntries(fields.map((f) => [f.name, f.id])) as Record<string, number>;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
let template: any, profile: any, checklist: any, foreignForm: any;
let T: Record<string, number>, P: Record<string, number>, C: Record<string, number>;

t.test('setup: a task template and forms with fields of every type', async (t) => {
  template = (
    await api.call(t, 'createTaskTemplate', {
      token: admin,
      body: {
        title: 'Onboarding task',
        fields: [
          { name: 'Name', field_type: 'text' },
          { name: 'Count', field_type: 'number' },
          { name: 'Start', field_type: 'date' },
          { name: 'Flag', field_type: 'boolean' },
          { name: 'Size', field_type: 'select', options: ['S', 'M'] },
          { name: 'Note', field_type: 'text' },
        ],
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
      body: { title: 'Checklist', form_type: 'checklist', fields: [{ name: 'Done', field_type: 'boolean' }, { name: 'Comment', field_type: 'text' }] },
    })
  ).body;
  C = byName(checklist.fields);
  foreignForm = (
    await api.call(t, 'createForm', { token: other.adminToken, body: { title: 'Foreign', form_type: 'survey', fields: [{ name: 'X', field_type: 'text' }] } })
  ).body;
  t.ok(template.id && profile.id && checklist.id && foreignForm.id);
});

const sourceCount = async () => {
  const [row] = await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from default_value_sources`);
  return row!.n;
};
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
    ['formFieldValue config with options', { type: 'formFieldValue', form_field_id: T.Name, config: { variable: 'username' }, source_entity_type: 'formField', source_entity_id: P['Full name'] }, 'config'],
    ['source_entity_id without source_entity_type', { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_id: P['Full name'] }, 'source_entity_type'],
    ['wrong source entity type', { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'user', source_entity_id: P['Full name'] }, 'source_entity_type'],
    ['formFieldValue without a source field', { type: 'formFieldValue', form_field_id: T.Name, config: {} }, 'source_entity_id'],
    ["another tenant's field", { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: foreignForm.fields[0].id }, 'source_entity_id'],
    ['a deleted field', { type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: deleted!.id }, 'source_entity_id'],
    ['a field that is its own default', { type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: T.Note }, 'source_entity_id'],
    ['incompatible field types', { type: 'formFieldValue', form_field_id: T.Count, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] }, 'source_entity_id'],
    ['a text into a select', { type: 'formFieldValue', form_field_id: T.Size, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] }, 'source_entity_id'],
    ['a variable that does not fit', { type: 'systemVariable', form_field_id: T.Count, config: { variable: 'username' } }, 'config'],
    ['system variable with a source entity', { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' }, source_entity_type: 'formField', source_entity_id: P['Full name'] }, 'source_entity_id'],
    ['a target field of a form', { type: 'systemVariable', form_field_id: P['Full name'], config: { variable: 'username' } }, 'form_field_id'],
    ['an unknown target field', { type: 'systemVariable', form_field_id: 999999, config: { variable: 'username' } }, 'form_field_id'],
    ['another tenant’s target field', { type: 'systemVariable', form_field_id: foreignForm.fields[0].id, config: { variable: 'username' } }, 'form_field_id'],
    ['a string as id', { type: 'systemVariable', form_field_id: String(T.Name), config: { variable: 'username' } }, 'form_field_id'],
    ['sort_number below 0', { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' }, sort_number: -1 }, 'sort_number'],
  ];
  for (const [rule, body, key] of cases) {
    const res = await create(body);
    t.equal(res.status, 422, rule);
    t.ok(Object.keys(res.body.errors ?? {}).some((k) => k === key || k.startsWith(`${key}.`)), `${rule}: names ${key} in ${JSON.stringify(res.body.errors)}`);
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
  t.match(a.body, { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'full_name' }, source_entity_type: null, source_entity_id: null, sort_number: 1 });
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

t.test('update changes the named keys (200); bad updates are 422 and change nothing', async (t) => {
  const source = await create({ type: 'formFieldValue', form_field_id: T.Name, config: {}, source_entity_type: 'formField', source_entity_id: P['Full name'] });
  const id = source.body.id;
  const bad: [Record<string, unknown>, string][] = [
    [{ source_entity_id: P.Shirt }, 'source_entity_type'],
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

  const repoint = await api.call(t, 'updateDefaultValueSource', {
    token: admin,
    params: { defaultValueSource: id },
    body: { source_entity_type: 'formField', source_entity_id: P.Shirt, sort_number: 5 },
  });
  t.equal(repoint.status, 200);
  t.match(repoint.body, { id, source_entity_id: P.Shirt, sort_number: 5, form_field_id: T.Name });
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

t.test('delete answers 204 and removes the source; a second delete is 404', async (t) => {
  const source = await create({ type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } });
  const foreign = await api.call(t, 'deleteDefaultValueSource', { token: other.adminToken, params: { defaultValueSource: source.body.id } });
  t.equal(foreign.status, 404);
  const res = await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id } });
  t.equal(res.status, 204);
  t.equal(res.text, '');
  t.equal(await sourceCount(), 0);
  t.equal((await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id } })).status, 404);
});

t.test('only those who can administer the target template manage its sources', async (t) => {
  const body = { type: 'systemVariable', form_field_id: T.Name, config: { variable: 'username' } };
  const denied = await create(body, outsider.token);
  t.equal(denied.status, 403);
  t.equal(await sourceCount(), 0);
  const allowed = await create(body, employee.token);
  t.equal(allowed.status, 201, 'a user named by the template entity permissions');
  t.equal((await api.call(t, 'updateDefaultValueSource', { token: outsider.token, params: { defaultValueSource: allowed.body.id }, body: {} })).status, 403);
  t.equal((await api.call(t, 'deleteDefaultValueSource', { token: outsider.token, params: { defaultValueSource: allowed.body.id } })).status, 403);
  const notTheirs = await create({ type: 'formFieldValue', form_field_id: T.Note, config: {}, source_entity_type: 'formField', source_entity_id: C.Comment }, employee.token);
  t.equal(notTheirs.status, 422, 'the source field must belong to a form the caller administers');
  await api.db.owner.execute(sql`delete from default_value_sources`);
});
