import t from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, FIELDS_OF_EVERY_TYPE, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('forms');
const other = await api.createTenant('forms-other');
const admin = tenant.adminToken;
const employee = await api.createUser(tenant.tenantId);
const colleague = await api.createUser(tenant.tenantId);

const count = (table: string) => rowCount(api.db, table, sql`tenant_id = ${tenant.tenantId}`);

const department = await createDepartment(api.db, tenant.tenantId, 'Ops', [colleague.id]);

t.test('bad form input is 422 and stores nothing', async (t) => {
  const before = [await count('forms'), await count('form_fields'), await count('entity_permissions')];
  const cases: [unknown, string][] = [
    [{ title: 'A' }, 'form_type'],
    [{ title: 'A', form_type: 'survey', fields: [{ name: 'x', field_type: 'colour' }] }, 'fields.0.field_type'],
    [{ title: 'A', form_type: 'survey', fields: [{ name: 'x', field_type: 'select' }] }, 'fields.0.options'],
    [{ title: 'A', form_type: 'survey', fields: [{ name: 'x', field_type: 'text', options: ['a'] }] }, 'fields.0.options'],
    [{ title: 'A', form_type: 'survey', entity_permissions: { user_ids: [999999] } }, 'entity_permissions.user_ids.0'],
    [{ title: 'A', form_type: 'survey', entity_permissions: { department_ids: [999999] } }, 'entity_permissions.department_ids.0'],
    [{ title: 'A', form_type: 'survey', extra: 1 }, 'extra'],
  ];
  for (const [body, key] of cases) {
    const res = await api.call(t, 'createForm', { token: admin, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[key], `names ${key}: ${JSON.stringify(res.body.errors)}`);
  }
  const foreignUser = await api.createUser(other.tenantId);
  const foreign = await api.call(t, 'createForm', { token: admin, body: { title: 'A', form_type: 's', entity_permissions: { user_ids: [foreignUser.id] } } });
  t.equal(foreign.status, 422, "another tenant's user is unknown");
  t.strictSame([await count('forms'), await count('form_fields'), await count('entity_permissions')], before);
});

t.test('only holders of tasks.administer create forms and templates', async (t) => {
  const form = await api.call(t, 'createForm', { token: employee.token, body: { title: 'A', form_type: 'survey' } });
  t.equal(form.status, 403);
  const template = await api.call(t, 'createTaskTemplate', { token: employee.token, body: { title: 'A' } });
  t.equal(template.status, 403);
});

t.test('a form is created with its fields and entity permissions, and shown again', async (t) => {
  const res = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Onboarding',
      form_type: 'survey',
      fields: [
        { name: 'Shirt size', field_type: 'select', options: ['S', 'M', 'L'] },
        { name: 'Start', field_type: 'date' },
      ],
      entity_permissions: { user_ids: [employee.id] },
    },
  });
  t.equal(res.status, 201);
  t.equal(res.body.title, 'Onboarding');
  t.strictSame(
    res.body.fields.map((f: { name: string; field_type: string; sort_number: number; form_id: number }) => [f.name, f.field_type, f.sort_number, f.form_id]),
    [
      ['Shirt size', 'select', 1, res.body.id],
      ['Start', 'date', 2, res.body.id],
    ],
  );
  t.strictSame(res.body.entity_permissions, { user_ids: [employee.id], role_ids: [], department_ids: [] });
  const shown = await api.call(t, 'getForm', { token: employee.token, params: { form: res.body.id } });
  t.equal(shown.status, 200, 'a user named by the entity permissions may administer it');
  t.strictSame(shown.body, res.body);
  const denied = await api.call(t, 'getForm', { token: colleague.token, params: { form: res.body.id } });
  t.equal(denied.status, 404, 'a form the caller cannot administer is answered like a missing one');
  const foreign = await api.call(t, 'getForm', { token: other.adminToken, params: { form: res.body.id } });
  const missing = await api.call(t, 'getForm', { token: other.adminToken, params: { form: 999999 } });
  t.equal(foreign.status, 404);
  t.strictSame(foreign.body, missing.body);
});

t.test('lists hold only what the caller can administer (user, role or department named)', async (t) => {
  const byDepartment = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: { title: 'Ops checklist', fields: [{ name: 'Done', field_type: 'boolean' }], entity_permissions: { department_ids: [department!.id] } },
  });
  t.equal(byDepartment.status, 201);
  const [colleagueRole] = await api.db.owner.execute<{ role_id: number }>(sql`select role_id::int from users where id = ${colleague.id}`);
  const byRole = await api.call(t, 'createTaskTemplate', {
    token: admin,
    body: { title: 'Audit', entity_permissions: { role_ids: [colleagueRole!.role_id] } },
  });
  await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Secret' } });
  const list = await api.call(t, 'listTaskTemplates', { token: colleague.token, query: { relations: 'fields' } });
  t.equal(list.status, 200);
  t.strictSame(
    list.body.map((x: { title: string }) => x.title),
    ['Audit', 'Ops checklist'],
  );
  t.equal(list.body[1].fields[0].name, 'Done');
  t.equal(byRole.status, 201);
  const all = await api.call(t, 'listTaskTemplates', { token: admin, query: { selects: 'title' } });
  t.strictSame(all.body, [{ title: 'Audit' }, { title: 'Ops checklist' }, { title: 'Secret' }]);
  const forms = await api.call(t, 'listForms', { token: colleague.token });
  t.strictSame(forms.body, []);
});

t.test('executions: template administrators assign them; assignees and administrators see them', async (t) => {
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Exec' } });
  const bad = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: 999999, user_id: 999999 } });
  t.equal(bad.status, 422);
  t.ok(bad.body.errors.task_template_id && bad.body.errors.user_id);
  const denied = await api.call(t, 'createTaskExecution', { token: employee.token, body: { task_template_id: template.body.id, user_id: employee.id } });
  t.equal(denied.status, 422);
  t.strictSame(denied.body.errors, { task_template_id: ['does not exist'] }, 'a template the caller cannot administer is unknown to them');
  const created = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: employee.id } });
  t.equal(created.status, 201);
  t.equal(created.body.user_id, employee.id);
  const mine = await api.call(t, 'listTaskExecutions', { token: employee.token });
  t.strictSame(
    mine.body.map((e: { id: number }) => e.id),
    [created.body.id],
  );
  t.equal((await api.call(t, 'getTaskExecution', { token: employee.token, params: { taskExecution: created.body.id } })).status, 200);
  t.equal((await api.call(t, 'getTaskExecution', { token: colleague.token, params: { taskExecution: created.body.id } })).status, 404);
  t.equal((await api.call(t, 'getTaskExecution', { token: other.adminToken, params: { taskExecution: created.body.id } })).status, 404);
});

t.test('a form, template or execution the caller may not administer or see is answered exactly like a missing one', async (t) => {
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Hidden', form_type: 'survey', fields: [{ name: 'Salary', field_type: 'number' }] },
  });
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Hidden task', fields: [{ name: 'Due', field_type: 'date' }] } });
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: colleague.id } });
  t.equal(form.status + template.status + execution.status, 603);
  const outsider = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  const same = async (label: string, hidden: { status: number; body: unknown }, missing: { status: number; body: unknown }, status: number) => {
    t.equal(hidden.status, status, `${label}: ${status}`);
    t.strictSame(hidden.body, missing.body, `${label}: the same answer as for a missing record`);
  };
  const call = (operationId: 'getForm' | 'getTaskTemplate' | 'getTaskExecution', params: Record<string, number>) =>
    api.call(t, operationId, { token: outsider.token, params });
  await same('getForm', await call('getForm', { form: form.body.id }), await call('getForm', { form: 999999 }), 404);
  await same(
    'getTaskTemplate',
    await call('getTaskTemplate', { taskTemplate: template.body.id }),
    await call('getTaskTemplate', { taskTemplate: 999999 }),
    404,
  );
  await same(
    'getTaskExecution',
    await call('getTaskExecution', { taskExecution: execution.body.id }),
    await call('getTaskExecution', { taskExecution: 999999 }),
    404,
  );
  const assign = (taskTemplateId: number) =>
    api.call(t, 'createTaskExecution', { token: outsider.token, body: { task_template_id: taskTemplateId, user_id: outsider.id } });
  const before = await count('task_executions');
  await same('createTaskExecution', await assign(template.body.id), await assign(999999), 422);
  t.equal(await count('task_executions'), before, 'nothing was assigned');
  t.equal((await api.call(t, 'getForm', { token: admin, params: { form: form.body.id } })).status, 200, 'the records are there');
});

t.test('assigning an execution does not tell whether the assignee is active (an administrative field)', async (t) => {
  const planner = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Onboarding', entity_permissions: { user_ids: [planner.id] } } });
  const starter = await api.createUser(tenant.tenantId, { values: { active: false, enteringDate: '2999-01-01' } });
  const present = await api.createUser(tenant.tenantId);
  const deleted = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  const assign = (userId: number) =>
    api.call(t, 'createTaskExecution', { token: planner.token, body: { task_template_id: template.body.id, user_id: userId } });
  const inactive = await assign(starter.id);
  const active = await assign(present.id);
  t.equal(inactive.status, 201, 'an inactive user (e.g. not entered yet) is assigned like any other');
  t.equal(active.status, 201);
  t.equal(inactive.body.user_id, starter.id);
  const gone = await assign(deleted.id);
  const missing = await assign(999999);
  t.equal(gone.status, 422, 'a deleted user is not');
  t.strictSame(gone.body, missing.body, 'answered exactly like a missing one');
});

t.test('submissions: values must be fields of the form and fit their types', async (t) => {
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Values',
      form_type: 'survey',
      fields: FIELDS_OF_EVERY_TYPE,
    },
  });
  const [name, age, born, ok, size] = form.body.fields.map((f: { id: number }) => String(f.id));
  const before = await count('form_submissions');
  const bad = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { form_id: form.body.id, values: { [name]: 5, [age]: '5', [born]: '2026-02-30', [ok]: 'yes', [size]: 'XL', '999999': 'x' } },
  });
  t.equal(bad.status, 422);
  t.strictSame(
    Object.keys(bad.body.errors).sort(),
    [`values.${name}`, `values.${age}`, `values.${born}`, `values.${ok}`, `values.${size}`, 'values.999999'].sort(),
  );
  const both = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.body.id, task_template_id: 1, values: {} } });
  t.equal(both.status, 422);
  const neither = await api.call(t, 'createSubmission', { token: employee.token, body: { values: {} } });
  t.equal(neither.status, 422);
  const badKey = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.body.id, values: { abc: 'x' } } });
  t.equal(badKey.status, 422);
  const tooLong = await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.body.id, values: { [name]: 'x'.repeat(10_001) } } });
  t.equal(tooLong.status, 422, 'a text value beyond 10000 characters is refused');
  t.ok(tooLong.body.errors[`values.${name}`], 'on its field');
  t.equal(await count('form_submissions'), before, 'nothing stored');

  const good = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { form_id: form.body.id, values: { [name]: 'A'.repeat(10_000), [age]: 36, [born]: '1990-12-10', [ok]: true, [size]: 'M' } },
  });
  t.equal(good.status, 201);
  t.equal(good.body.user_id, employee.id);
  t.equal(good.body.values[age], 36);
  const own = await api.call(t, 'getSubmission', { token: employee.token, params: { formSubmission: good.body.id } });
  t.equal(own.status, 200);
  const foreign = await api.call(t, 'getSubmission', { token: colleague.token, params: { formSubmission: good.body.id } });
  t.equal(foreign.status, 404, "another user's submission is not shown");
  const list = await api.call(t, 'listSubmissions', { token: employee.token });
  t.strictSame(
    list.body.map((s: { id: number }) => s.id),
    [good.body.id],
  );
});

t.test('text the database cannot store (a NUL character) is 422, not a server error', async (t) => {
  const before = await count('forms');
  const title = await api.call(t, 'createForm', { token: admin, body: { title: 'a\u0000b', form_type: 'survey' } });
  t.equal(title.status, 422);
  const form = await api.call(t, 'createForm', { token: admin, body: { title: 'NUL', form_type: 'survey', fields: [{ name: 'T', field_type: 'text' }] } });
  const value = await api.call(t, 'createSubmission', {
    token: admin,
    body: { form_id: form.body.id, values: { [String(form.body.fields[0].id)]: 'x\u0000' } },
  });
  t.equal(value.status, 422);
  const search = await api.call(t, 'previewFormFieldValueSourceFields', { token: admin, body: { filter: { text: 'a\u0000' } } });
  t.equal(search.status, 422);
  t.equal(await count('forms'), before + 1, 'only the valid form was stored');
});

t.test('a deleted user a form or template names stays named: the lists sent back as read are accepted', async (t) => {
  for (const [create, get, update, key] of [
    ['createForm', 'getForm', 'updateForm', 'form'],
    ['createTaskTemplate', 'getTaskTemplate', 'updateTaskTemplate', 'taskTemplate'],
  ] as const) {
    const [named, leaving, gone] = [await api.createUser(tenant.tenantId), await api.createUser(tenant.tenantId), await api.createUser(tenant.tenantId)];
    const body = { title: `Named ${key}`, entity_permissions: { user_ids: [named.id, leaving.id] }, ...(key === 'form' ? { form_type: 'survey' } : {}) };
    const created = await api.call(t, create, { token: admin, body });
    t.equal(created.status, 201);
    const params = { [key]: created.body.id };
    for (const user of [leaving, gone]) t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: user.id } })).status, 204);
    const read = (await api.call(t, get, { token: admin, params })).body;
    t.strictSame(
      read.entity_permissions.user_ids,
      [named.id, leaving.id].sort((a, b) => a - b),
      'the deleted user is still listed',
    );
    const saved = await api.call(t, update, { token: admin, params, body: { title: `Renamed ${key}`, entity_permissions: read.entity_permissions } });
    t.equal(saved.status, 200, `${key}: the lists as read are no change`);
    t.strictSame(saved.body.entity_permissions, read.entity_permissions);
    const added = await api.call(t, update, { token: admin, params, body: { entity_permissions: { user_ids: [gone.id] } } });
    t.equal(added.status, 422, `${key}: a deleted user it did not name is refused`);
    t.strictSame(added.body.errors, { 'entity_permissions.user_ids.0': ['does not exist'] });
    t.equal((await api.call(t, get, { token: admin, params })).body.title, `Renamed ${key}`, 'the refusal changed nothing');
  }
});
