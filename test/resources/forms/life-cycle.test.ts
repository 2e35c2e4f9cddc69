/**
 * The life cycle of forms, task templates, their fields, executions and submissions:
 * update and delete, the field operations, entity permissions administered through the
 * update, deletion while default value sources copy from a field, and submissions to a
 * task template through the caller's execution. Every answer is checked against the spec.
 */
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { startTestApi, type CallResult } from '../../helpers/atrium.ts';
import { backdateUpdatedAt, createDepartment, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('life-cycle');
const other = await api.createTenant('life-cycle-other');
const admin = tenant.adminToken;
/** Holds `tasks.administer` and nothing else. */
const taskAdmin = await api.createUser(tenant.tenantId, { permissions: ['tasks.administer'] });
/** Holds one unrelated permission; administers what entity permissions name them for. */
const delegate = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
const employee = await api.createUser(tenant.tenantId);
const colleague = await api.createUser(tenant.tenantId);
const department = await createDepartment(api.db, tenant.tenantId, 'Field team', [colleague.id]);

const count = (table: string, where = sql`true`) => rowCount(api.db, table, sql`tenant_id = ${tenant.tenantId} and ${where}`);

async function createForm(t: Test, body: Record<string, unknown> = {}) {
  const res = await api.call(t, 'createForm', { token: admin, body: { title: 'Form', form_type: 'survey', ...body } });
  t.equal(res.status, 201);
  return res.body;
}

async function createTemplate(t: Test, body: Record<string, unknown> = {}) {
  const res = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Template', ...body } });
  t.equal(res.status, 201);
  return res.body;
}

/** A hidden record and a missing one get one and the same answer. */
function sameAsMissing(t: Test, hidden: CallResult, missing: CallResult, status: number, label: string) {
  t.equal(hidden.status, status, `${label}: ${status}`);
  t.strictSame(hidden.body, missing.body, `${label}: answered exactly like a missing record`);
}

t.test('bad input to the new operations is 422 and changes nothing', async (t) => {
  const form = await createForm(t, { fields: [{ name: 'Note', field_type: 'text' }], entity_permissions: { user_ids: [delegate.id] } });
  const template = await createTemplate(t);
  const before = [await count('forms'), await count('form_fields'), await count('entity_permissions'), await count('task_executions')];
  const updates: [unknown, string][] = [
    [{ title: '' }, 'title'],
    [{ form_type: 'x'.repeat(101) }, 'form_type'],
    [{ fields: [] }, 'fields'],
    [{ entity_permissions: { user_ids: [999999] } }, 'entity_permissions.user_ids.0'],
    [{ entity_permissions: { role_ids: [1, 999999] } }, 'entity_permissions.role_ids.1'],
    [{ entity_permissions: { group_ids: [1] } }, 'entity_permissions.group_ids'],
  ];
  for (const [body, key] of updates) {
    const res = await api.call(t, 'updateForm', { token: admin, params: { form: form.id }, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[key], `names ${key}: ${JSON.stringify(res.body.errors)}`);
  }
  const foreignUser = await api.createUser(other.tenantId);
  const foreign = await api.call(t, 'updateTaskTemplate', {
    token: admin,
    params: { taskTemplate: template.id },
    body: { title: 'Changed', entity_permissions: { user_ids: [foreignUser.id] } },
  });
  t.equal(foreign.status, 422, "another tenant's user is unknown");
  const fields: [unknown, string][] = [
    [{ name: 'X', field_type: 'text' }, 'form_id'],
    [{ form_id: form.id, task_template_id: template.id, name: 'X', field_type: 'text' }, 'form_id'],
    [{ form_id: form.id, name: 'X', field_type: 'select' }, 'options'],
    [{ form_id: form.id, name: 'X', field_type: 'number', options: ['1'] }, 'options'],
    [{ form_id: form.id, name: 'X', field_type: 'colour' }, 'field_type'],
    [{ form_id: form.id, name: 'X', field_type: 'text', sort_number: 0 }, 'sort_number'],
    [{ form_id: 999999, name: 'X', field_type: 'text' }, 'form_id'],
    [{ task_template_id: 999999, name: 'X', field_type: 'text' }, 'task_template_id'],
  ];
  for (const [body, key] of fields) {
    const res = await api.call(t, 'createFormField', { token: admin, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[key], `names ${key}: ${JSON.stringify(res.body.errors)}`);
  }
  const field = form.fields[0].id;
  for (const [body, key] of [
    [{ options: ['a'] }, 'options'],
    [{ field_type: 'number' }, 'field_type'],
    [{ form_id: 1 }, 'form_id'],
    [{ name: '' }, 'name'],
  ] as const) {
    const res = await api.call(t, 'updateFormField', { token: admin, params: { formField: field }, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[key], `names ${key}: ${JSON.stringify(res.body.errors)}`);
  }
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: employee.id } });
  const gone = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  for (const userId of [999999, gone.id]) {
    const res = await api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution: execution.body.id }, body: { user_id: userId } });
    t.equal(res.status, 422);
    t.strictSame(res.body.errors, { user_id: ['does not exist'] });
  }
  t.strictSame(
    [await count('forms'), await count('form_fields'), await count('entity_permissions'), await count('task_executions')],
    [before[0], before[1], before[2], before[3]! + 1],
    'only the execution was stored',
  );
  const shown = await api.call(t, 'getForm', { token: admin, params: { form: form.id } });
  t.strictSame(shown.body, form, 'the form is unchanged');
  t.equal((await api.call(t, 'getTaskExecution', { token: admin, params: { taskExecution: execution.body.id } })).body.user_id, employee.id);
});

t.test('a form and a template are updated; entity permissions sent replace all three lists', async (t) => {
  const form = await createForm(t, { entity_permissions: { user_ids: [delegate.id], department_ids: [department!.id] } });
  const res = await api.call(t, 'updateForm', { token: admin, params: { form: form.id }, body: { title: 'Renamed', form_type: 'checklist' } });
  t.equal(res.status, 200);
  t.match(res.body, { id: form.id, title: 'Renamed', form_type: 'checklist' });
  t.strictSame(res.body.fields, [], 'still no field');
  t.strictSame(res.body.entity_permissions, form.entity_permissions, 'not sent: kept');
  const replaced = await api.call(t, 'updateForm', {
    token: admin,
    params: { form: form.id },
    body: { entity_permissions: { user_ids: [employee.id, employee.id] } },
  });
  t.strictSame(replaced.body.entity_permissions, { user_ids: [employee.id], role_ids: [], department_ids: [] });
  t.equal(replaced.body.title, 'Renamed');
  t.equal((await api.call(t, 'getForm', { token: employee.token, params: { form: form.id } })).status, 200, 'the newly named user administers it');
  t.equal((await api.call(t, 'getForm', { token: delegate.token, params: { form: form.id } })).status, 404, 'the user no longer named does not');
  const template = await createTemplate(t);
  const renamed = await api.call(t, 'updateTaskTemplate', { token: taskAdmin.token, params: { taskTemplate: template.id }, body: { title: 'Checklist' } });
  t.equal(renamed.status, 200);
  t.equal(renamed.body.title, 'Checklist');
  t.strictSame(renamed.body.entity_permissions, { user_ids: [], role_ids: [], department_ids: [] });
});

t.test('an update that changes nothing leaves updated_at as it was and records no event, for a form and a template', async (t) => {
  const named = await api.createUser(tenant.tenantId);
  const form = await createForm(t, {
    fields: [{ name: 'Room', field_type: 'text' }],
    entity_permissions: { user_ids: [delegate.id, named.id], department_ids: [department!.id] },
  });
  const template = await createTemplate(t, { entity_permissions: { user_ids: [delegate.id] } });
  const past = await backdateUpdatedAt(api.db, 'forms', form.id);
  await backdateUpdatedAt(api.db, 'task_templates', template.id);
  const events = () => count('audit_events');
  const eventsBefore = await events();
  const readForm = (await api.call(t, 'getForm', { token: admin, params: { form: form.id } })).body;
  const sameForm = await api.call(t, 'updateForm', {
    token: admin,
    params: { form: form.id },
    // The same subjects in another order, one twice: the same lists.
    body: {
      title: readForm.title,
      form_type: readForm.form_type,
      entity_permissions: { ...readForm.entity_permissions, user_ids: [named.id, delegate.id, named.id] },
    },
  });
  t.equal(sameForm.status, 200);
  t.equal(sameForm.body.updated_at, past, 'the form sent back as read answers the updated_at it had');
  t.strictSame(sameForm.body, readForm, 'and the form as it was');
  const readTemplate = (await api.call(t, 'getTaskTemplate', { token: admin, params: { taskTemplate: template.id } })).body;
  const sameTemplate = await api.call(t, 'updateTaskTemplate', {
    token: admin,
    params: { taskTemplate: template.id },
    body: { title: readTemplate.title, entity_permissions: readTemplate.entity_permissions },
  });
  t.equal(sameTemplate.status, 200);
  t.equal(sameTemplate.body.updated_at, past, 'the template too');
  t.strictSame(sameTemplate.body, readTemplate);
  t.equal(await events(), eventsBefore, 'and neither records an event');
  const renamed = await api.call(t, 'updateForm', { token: admin, params: { form: form.id }, body: { title: 'Renamed form' } });
  t.not(renamed.body.updated_at, past, 'a change moves it');
  const narrowed = await api.call(t, 'updateTaskTemplate', { token: admin, params: { taskTemplate: template.id }, body: { entity_permissions: {} } });
  t.not(narrowed.body.updated_at, past, 'so does a change of the entity permissions alone');
  t.equal(await events(), eventsBefore + 2);
});

t.test('a delegate named by a form administers its entity permissions; others cannot touch it', async (t) => {
  const form = await createForm(t, { fields: [{ name: 'Size', field_type: 'text' }], entity_permissions: { user_ids: [delegate.id] } });
  const widened = await api.call(t, 'updateForm', {
    token: delegate.token,
    params: { form: form.id },
    body: { entity_permissions: { user_ids: [delegate.id], department_ids: [department!.id] } },
  });
  t.equal(widened.status, 200, 'naming others confers only what the delegate holds: this form');
  t.equal((await api.call(t, 'getForm', { token: colleague.token, params: { form: form.id } })).status, 200, 'the department member now administers it');

  const missing = (operationId: 'updateForm' | 'deleteForm', token: string, body?: unknown) =>
    api.call(t, operationId, { token, params: { form: 999999 }, ...(body ? { body } : {}) });
  const hidden = (operationId: 'updateForm' | 'deleteForm', token: string, body?: unknown) =>
    api.call(t, operationId, { token, params: { form: form.id }, ...(body ? { body } : {}) });
  const seize = { entity_permissions: { user_ids: [employee.id] } };
  sameAsMissing(t, await hidden('updateForm', employee.token, seize), await missing('updateForm', employee.token, seize), 404, 'employee updateForm');
  sameAsMissing(t, await hidden('deleteForm', employee.token), await missing('deleteForm', employee.token), 404, 'employee deleteForm');
  sameAsMissing(t, await hidden('updateForm', other.adminToken, seize), await missing('updateForm', other.adminToken, seize), 404, 'other tenant updateForm');
  sameAsMissing(t, await hidden('deleteForm', other.adminToken), await missing('deleteForm', other.adminToken), 404, 'other tenant deleteForm');
  const field = form.fields[0].id;
  sameAsMissing(
    t,
    await api.call(t, 'updateFormField', { token: employee.token, params: { formField: field }, body: { name: 'Mine' } }),
    await api.call(t, 'updateFormField', { token: employee.token, params: { formField: 999999 }, body: { name: 'Mine' } }),
    404,
    'employee updateFormField',
  );
  sameAsMissing(
    t,
    await api.call(t, 'deleteFormField', { token: other.adminToken, params: { formField: field } }),
    await api.call(t, 'deleteFormField', { token: other.adminToken, params: { formField: 999999 } }),
    404,
    'other tenant deleteFormField',
  );
  sameAsMissing(
    t,
    await api.call(t, 'createFormField', { token: employee.token, body: { form_id: form.id, name: 'Mine', field_type: 'text' } }),
    await api.call(t, 'createFormField', { token: employee.token, body: { form_id: 999999, name: 'Mine', field_type: 'text' } }),
    422,
    'employee createFormField',
  );
  const shown = await api.call(t, 'getForm', { token: admin, params: { form: form.id } });
  t.strictSame(shown.body.entity_permissions, { user_ids: [delegate.id], role_ids: [], department_ids: [department!.id] }, 'nothing seized');
  t.strictSame(
    shown.body.fields.map((f: { name: string }) => f.name),
    ['Size'],
  );

  const left = await api.call(t, 'updateForm', {
    token: delegate.token,
    params: { form: form.id },
    body: { entity_permissions: { department_ids: [department!.id] } },
  });
  t.equal(left.status, 200, 'a delegate may remove themselves');
  t.equal((await api.call(t, 'getForm', { token: delegate.token, params: { form: form.id } })).status, 404, 'and loses access at once');
});

t.test('fields: created last by default, listed, shown, updated and deleted', async (t) => {
  const form = await createForm(t, { fields: [{ name: 'First', field_type: 'text' }], entity_permissions: { user_ids: [delegate.id] } });
  const hiddenForm = await createForm(t, { fields: [{ name: 'Hidden', field_type: 'text' }] });
  const created = await api.call(t, 'createFormField', {
    token: delegate.token,
    body: { form_id: form.id, name: 'Size', field_type: 'select', options: ['S', 'M'] },
  });
  t.equal(created.status, 201);
  t.strictSame(created.body, {
    id: created.body.id,
    name: 'Size',
    field_type: 'select',
    options: ['S', 'M'],
    sort_number: 2,
    form_id: form.id,
    task_template_id: null,
  });
  const placed = await api.call(t, 'createFormField', { token: delegate.token, body: { form_id: form.id, name: 'Top', field_type: 'date', sort_number: 1 } });
  t.equal(placed.body.sort_number, 1);

  const list = await api.call(t, 'listFormFields', { token: delegate.token, query: { filter: { form_id: form.id } } });
  t.equal(list.status, 200);
  t.strictSame(
    list.body.map((f: { name: string }) => f.name),
    ['First', 'Top', 'Size'],
    'by sort_number, then id',
  );
  const all = await api.call(t, 'listFormFields', { token: delegate.token, query: { selects: 'id' } });
  t.notOk(
    all.body.some((f: { id: number }) => f.id === hiddenForm.fields[0].id),
    'fields of a form the caller does not administer are not listed',
  );
  t.equal((await api.call(t, 'listFormFields', { token: delegate.token, query: { filter: { colour: 'red' } } })).status, 422, 'unknown filter');
  t.strictSame((await api.call(t, 'listFormFields', { token: employee.token })).body, [], 'an employee administers no field');

  const shown = await api.call(t, 'getFormField', { token: delegate.token, params: { formField: created.body.id } });
  t.strictSame(shown.body, created.body);
  sameAsMissing(
    t,
    await api.call(t, 'getFormField', { token: delegate.token, params: { formField: hiddenForm.fields[0].id } }),
    await api.call(t, 'getFormField', { token: delegate.token, params: { formField: 999999 } }),
    404,
    'getFormField of a hidden form',
  );

  const updated = await api.call(t, 'updateFormField', {
    token: delegate.token,
    params: { formField: created.body.id },
    body: { name: 'Shirt size', options: ['S', 'M', 'L'], sort_number: 9 },
  });
  t.equal(updated.status, 200);
  t.match(updated.body, { name: 'Shirt size', field_type: 'select', options: ['S', 'M', 'L'], sort_number: 9 });

  const unchanged = await api.call(t, 'updateFormField', { token: delegate.token, params: { formField: created.body.id }, body: {} });
  t.equal(unchanged.status, 200, 'an empty update changes nothing');
  t.strictSame(unchanged.body, updated.body);

  const deleted = await api.call(t, 'deleteFormField', { token: delegate.token, params: { formField: placed.body.id } });
  t.equal(deleted.status, 204);
  t.equal((await api.call(t, 'getFormField', { token: delegate.token, params: { formField: placed.body.id } })).status, 404);
  t.equal((await api.call(t, 'deleteFormField', { token: delegate.token, params: { formField: placed.body.id } })).status, 404, 'deleted once');
  const parent = await api.call(t, 'getForm', { token: delegate.token, params: { form: form.id } });
  t.strictSame(
    parent.body.fields.map((f: { name: string }) => f.name),
    ['First', 'Shirt size'],
  );
  const submit = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.id, values: { [placed.body.id]: '2026-01-01' } } });
  t.equal(submit.status, 422, 'a deleted field takes no values');
});

t.test('deleting a field that a default value source copies from is refused with 409 naming the sources', async (t) => {
  const profile = await createForm(t, { fields: [{ name: 'Full name', field_type: 'text' }], entity_permissions: { user_ids: [delegate.id] } });
  const mine = await createTemplate(t, { fields: [{ name: 'Name', field_type: 'text' }], entity_permissions: { user_ids: [delegate.id] } });
  const theirs = await createTemplate(t, { fields: [{ name: 'Name', field_type: 'text' }] });
  const source = profile.fields[0].id;
  const copy = (target: number) =>
    api.call(t, 'createDefaultValueSource', {
      token: admin,
      body: { type: 'formFieldValue', form_field_id: target, config: {}, source_entity_type: 'formField', source_entity_id: source },
    });
  const visible = await copy(mine.fields[0].id);
  const hidden = await copy(theirs.fields[0].id);
  t.equal(visible.status + hidden.status, 402);

  const refused = await api.call(t, 'deleteFormField', { token: delegate.token, params: { formField: source } });
  t.equal(refused.status, 409);
  t.strictSame(refused.body.errors, {
    form_field: [`default value sources copy from it (${visible.body.id}, sources you cannot administer); delete them or change their source first`],
  });
  const formRefused = await api.call(t, 'deleteForm', { token: admin, params: { form: profile.id } });
  t.equal(formRefused.status, 409, 'and so is deleting its form');
  t.strictSame(formRefused.body.errors, {
    form: [`default value sources copy from it (${visible.body.id}, ${hidden.body.id}); delete them or change their source first`],
  });
  t.equal((await api.call(t, 'getFormField', { token: admin, params: { formField: source } })).status, 200, 'nothing was deleted');
  t.equal(await count('default_value_sources', sql`id in (${visible.body.id}, ${hidden.body.id})`), 2);

  // A field's own sources (those filling it) go with it.
  const fill = await api.call(t, 'createDefaultValueSource', {
    token: admin,
    body: { type: 'systemVariable', form_field_id: mine.fields[0].id, config: { variable: 'username' } },
  });
  t.equal((await api.call(t, 'deleteFormField', { token: delegate.token, params: { formField: mine.fields[0].id } })).status, 204);
  t.equal(await count('default_value_sources', sql`id in (${visible.body.id}, ${fill.body.id})`), 0, 'the sources filling the field were deleted');
  t.equal(
    (await api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource: hidden.body.id } })).status,
    204,
    'once no source copies from it…',
  );
  t.equal((await api.call(t, 'deleteFormField', { token: delegate.token, params: { formField: source } })).status, 204, '…the field is deleted');
});

t.test('deleting a task template takes its fields, sources, executions, submissions and entity permissions along', async (t) => {
  const template = await createTemplate(t, {
    fields: [
      { name: 'Done', field_type: 'boolean' },
      { name: 'Note', field_type: 'text' },
    ],
    entity_permissions: { user_ids: [delegate.id] },
  });
  const [done, note] = template.fields.map((f: { id: number }) => f.id);
  const sameTemplate = await api.call(t, 'createDefaultValueSource', {
    token: admin,
    body: { type: 'systemVariable', form_field_id: note, config: { variable: 'username' } },
  });
  t.equal(sameTemplate.status, 201);
  const execution = await api.call(t, 'createTaskExecution', { token: delegate.token, body: { task_template_id: template.id, user_id: employee.id } });
  const submission = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { task_execution_id: execution.body.id, values: { [done]: true } },
  });
  t.equal(submission.status, 201);

  t.equal(
    (await api.call(t, 'deleteTaskTemplate', { token: employee.token, params: { taskTemplate: template.id } })).status,
    404,
    'the assignee does not administer it',
  );
  const deleted = await api.call(t, 'deleteTaskTemplate', { token: delegate.token, params: { taskTemplate: template.id } });
  t.equal(deleted.status, 204);
  t.equal((await api.call(t, 'getTaskTemplate', { token: admin, params: { taskTemplate: template.id } })).status, 404);
  t.equal(
    (await api.call(t, 'getTaskExecution', { token: employee.token, params: { taskExecution: execution.body.id } })).status,
    404,
    'the execution is gone',
  );
  t.equal(
    (await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: submission.body.id } })).status,
    404,
    'and the values submitted for it',
  );
  t.equal(await count('form_fields', sql`task_template_id = ${template.id}`), 0);
  t.equal(await count('default_value_sources', sql`id = ${sameTemplate.body.id}`), 0);
  t.equal(await count('entity_permissions', sql`entity_type = 'taskTemplate' and entity_id = ${template.id}`), 0);
});

t.test('deleting a form takes its fields, submissions and entity permissions along', async (t) => {
  const form = await createForm(t, { fields: [{ name: 'Note', field_type: 'text' }], entity_permissions: { department_ids: [department!.id] } });
  const submission = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.id, values: { [form.fields[0].id]: 'hi' } } });
  t.equal((await api.call(t, 'deleteForm', { token: colleague.token, params: { form: form.id } })).status, 204, 'a department member named by it deletes it');
  t.equal((await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: submission.body.id } })).status, 404);
  t.equal(await count('form_fields', sql`form_id = ${form.id}`), 0);
  t.equal(await count('entity_permissions', sql`entity_type = 'form' and entity_id = ${form.id}`), 0);
  t.equal((await api.call(t, 'deleteForm', { token: admin, params: { form: form.id } })).status, 404, 'deleted once');
});

t.test('executions: template administrators reassign and delete them; the assignee may not', async (t) => {
  const template = await createTemplate(t, { fields: [{ name: 'Done', field_type: 'boolean' }], entity_permissions: { user_ids: [delegate.id] } });
  const created = await api.call(t, 'createTaskExecution', { token: delegate.token, body: { task_template_id: template.id, user_id: employee.id } });
  const id = created.body.id;
  const assignee = await api.call(t, 'updateTaskExecution', { token: employee.token, params: { taskExecution: id }, body: { user_id: employee.id } });
  t.equal(assignee.status, 403, 'the assignee sees it but does not administer the template');
  t.equal((await api.call(t, 'deleteTaskExecution', { token: employee.token, params: { taskExecution: id } })).status, 403);
  sameAsMissing(
    t,
    await api.call(t, 'updateTaskExecution', { token: colleague.token, params: { taskExecution: id }, body: { user_id: colleague.id } }),
    await api.call(t, 'updateTaskExecution', { token: colleague.token, params: { taskExecution: 999999 }, body: { user_id: colleague.id } }),
    404,
    'updateTaskExecution by someone who does not see it',
  );
  sameAsMissing(
    t,
    await api.call(t, 'deleteTaskExecution', { token: other.adminToken, params: { taskExecution: id } }),
    await api.call(t, 'deleteTaskExecution', { token: other.adminToken, params: { taskExecution: 999999 } }),
    404,
    'deleteTaskExecution from another tenant',
  );
  const first = await api.call(t, 'createSubmission', { token: employee.token, body: { task_execution_id: id, values: { [template.fields[0].id]: false } } });
  t.equal(first.status, 201);
  t.equal(first.body.task_execution_id, id);
  t.equal(first.body.task_template_id, template.id);

  const moved = await api.call(t, 'updateTaskExecution', { token: delegate.token, params: { taskExecution: id }, body: { user_id: colleague.id } });
  t.equal(moved.status, 200);
  t.equal(moved.body.user_id, colleague.id);
  t.equal(
    (await api.call(t, 'getTaskExecution', { token: employee.token, params: { taskExecution: id } })).status,
    404,
    'the former assignee no longer sees it',
  );
  const late = await api.call(t, 'updateSubmission', { token: employee.token, params: { formSubmission: first.body.id }, body: { values: {} } });
  t.equal(late.status, 422, 'nor changes what they submitted for it');
  t.ok(late.body.errors.task_execution_id);
  t.equal(
    (await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: first.body.id } })).status,
    200,
    'their submission stays theirs',
  );
  const next = await api.call(t, 'createSubmission', { token: colleague.token, body: { task_execution_id: id, values: { [template.fields[0].id]: true } } });
  t.equal(next.status, 201, 'the new assignee submits');

  t.equal((await api.call(t, 'deleteTaskExecution', { token: taskAdmin.token, params: { taskExecution: id } })).status, 204);
  t.equal((await api.call(t, 'getTaskExecution', { token: admin, params: { taskExecution: id } })).status, 404);
  t.equal(await count('form_submissions', sql`task_execution_id = ${id}`), 0, 'the values submitted for it went with it');
});

t.test('submissions to a task template go through an execution assigned to the caller', async (t) => {
  const template = await createTemplate(t, { fields: [{ name: 'Done', field_type: 'boolean' }] });
  const otherTemplate = await createTemplate(t);
  const field = String(template.fields[0].id);
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.id, user_id: employee.id } });
  const before = await count('form_submissions');
  const cases: [Record<string, unknown>, string | null, string, Record<string, string[]>][] = [
    [
      { task_template_id: template.id, values: { [field]: true } },
      employee.token,
      'without an execution',
      { task_execution_id: ['is required to submit to a task template: the execution assigned to you'] },
    ],
    [
      { task_execution_id: execution.body.id, values: { [field]: true } },
      colleague.token,
      "someone else's execution",
      { task_execution_id: ['does not exist'] },
    ],
    [
      { task_execution_id: execution.body.id, values: { [field]: true } },
      admin,
      'an execution the caller administers but is not assigned',
      { task_execution_id: ['is not assigned to you'] },
    ],
    [{ task_execution_id: 999999, values: {} }, employee.token, 'a missing execution', { task_execution_id: ['does not exist'] }],
    [
      { task_execution_id: execution.body.id, task_template_id: otherTemplate.id, values: {} },
      employee.token,
      'another template',
      { task_template_id: ['is not the task template of the execution'] },
    ],
    [
      { task_execution_id: execution.body.id, values: { [field]: 'yes' } },
      employee.token,
      'a value that does not fit',
      { [`values.${field}`]: ['must be a boolean'] },
    ],
  ];
  for (const [body, token, label, errors] of cases) {
    const res = await api.call(t, 'createSubmission', { token, body });
    t.equal(res.status, 422, label);
    t.strictSame(res.body.errors, errors, label);
  }
  const foreign = await api.call(t, 'createSubmission', { token: other.adminToken, body: { task_execution_id: execution.body.id, values: {} } });
  t.strictSame(foreign.body.errors, { task_execution_id: ['does not exist'] }, 'another tenant');
  t.equal(await count('form_submissions'), before, 'nothing stored');

  const ok = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { task_template_id: template.id, task_execution_id: execution.body.id, values: { [field]: true } },
  });
  t.equal(ok.status, 201);
  t.match(ok.body, { task_template_id: template.id, task_execution_id: execution.body.id, form_id: null, user_id: employee.id });
});

t.test('submissions: their author changes and deletes them, nobody else', async (t) => {
  const form = await createForm(t, { fields: [{ name: 'Age', field_type: 'number' }] });
  const field = String(form.fields[0].id);
  const created = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.id, values: { [field]: 30 } } });
  const id = created.body.id;
  const bad = await api.call(t, 'updateSubmission', {
    token: employee.token,
    params: { formSubmission: id },
    body: { values: { [field]: 'thirty', '999999': 1 } },
  });
  t.equal(bad.status, 422);
  t.strictSame(Object.keys(bad.body.errors).sort(), [`values.${field}`, 'values.999999'].sort());
  t.equal((await api.call(t, 'updateSubmission', { token: employee.token, params: { formSubmission: id }, body: {} })).status, 422, 'values are required');
  sameAsMissing(
    t,
    await api.call(t, 'updateSubmission', { token: admin, params: { formSubmission: id }, body: { values: {} } }),
    await api.call(t, 'updateSubmission', { token: admin, params: { formSubmission: 999999 }, body: { values: {} } }),
    404,
    'updateSubmission by another user, even an administrator',
  );
  sameAsMissing(
    t,
    await api.call(t, 'deleteSubmission', { token: other.adminToken, params: { formSubmission: id } }),
    await api.call(t, 'deleteSubmission', { token: other.adminToken, params: { formSubmission: 999999 } }),
    404,
    'deleteSubmission from another tenant',
  );
  t.strictSame((await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: id } })).body.values, { [field]: 30 }, 'unchanged');
  const changed = await api.call(t, 'updateSubmission', { token: employee.token, params: { formSubmission: id }, body: { values: { [field]: 31 } } });
  t.equal(changed.status, 200);
  t.strictSame(changed.body.values, { [field]: 31 });
  t.equal((await api.call(t, 'deleteSubmission', { token: colleague.token, params: { formSubmission: id } })).status, 404);
  t.equal((await api.call(t, 'deleteSubmission', { token: employee.token, params: { formSubmission: id } })).status, 204);
  t.equal((await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: id } })).status, 404);
});

t.test('a form that has had more fields than a statement takes parameters is deleted', async (t) => {
  // PostgreSQL takes at most 65,535 parameters in a statement: the check for sources copying from the form's fields
  // (deleted ones included) named each field as one, and the delete answered 500 for ever.
  const crowded = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Crowded', form_type: 'survey', fields: [{ name: 'a', field_type: 'text' }] },
  });
  t.equal(crowded.status, 201);
  await api.db.owner.execute(sql`
    insert into form_fields (tenant_id, form_id, name, field_type, sort_number, deleted_at)
    select ${tenant.tenantId}, ${crowded.body.id}, 'gone ' || g, 'text', g + 1, now() from generate_series(1, 65536) g`);
  const deleted = await api.call(t, 'deleteForm', { token: admin, params: { form: crowded.body.id } });
  t.equal(deleted.status, 204);
  t.equal(await count('forms', sql`id = ${crowded.body.id}`), 0, 'the form is gone');
});
