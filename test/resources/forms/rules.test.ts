/**
 * The rules of forms, task templates, executions and submissions (src/resources/forms/rules.ts),
 * called directly: the pure ones on values, the ones that need data in a tenant transaction
 * on rows written as the database owner (the test API only provides the database, tenants
 * and users; no request is made).
 */
import { eq, inArray } from 'drizzle-orm';
import t from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import type { Tx } from '../../../src/platform/database/database.ts';
import { MISSING_REFERENCE } from '../../../src/platform/database/existence.ts';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import { departments, departmentUsers } from '../../../src/resources/departments/table.ts';
import { entityPermissions } from '../../../src/resources/entity-permissions/table.ts';
import {
  administrable,
  assignmentErrors,
  canAdminister,
  fieldInputErrors,
  fieldParentAdministrableBy,
  fieldValueProblem,
  parentInputErrors,
  requireAdministrable,
  requireVisibleExecution,
  checkSubmission,
  resubmissionErrors,
  submissionParent,
  submissionValueErrors,
  type Caller,
} from '../../../src/resources/forms/rules.ts';
import { formFields, formSubmissions, forms, taskExecutions, taskTemplates } from '../../../src/resources/forms/table.ts';
import { users } from '../../../src/resources/users/table.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

t.test('fieldInputErrors: options belong to select fields, and only to them', async (t) => {
  t.strictSame(
    fieldInputErrors([
      { name: 'a', field_type: 'select', options: ['x'] },
      { name: 'b', field_type: 'text' },
    ]),
    {},
  );
  t.strictSame(
    fieldInputErrors([
      { name: 'a', field_type: 'text' },
      { name: 'b', field_type: 'select' },
      { name: 'c', field_type: 'number', options: ['1'] },
    ]),
    {
      'fields.1.options': [coded('required', 'is required for a select field')],
      'fields.2.options': [coded('not_allowed', 'is only allowed for a select field')],
    },
  );
});

t.test('fieldValueProblem: a value fits its field type; null always fits', async (t) => {
  const field = (fieldType: 'text' | 'number' | 'date' | 'boolean' | 'select', options: string[] | null = null) => ({ fieldType, options });
  for (const type of ['text', 'number', 'date', 'boolean', 'select'] as const)
    t.equal(fieldValueProblem(field(type, ['S']), null), null, `null clears a ${type} field`);
  t.equal(fieldValueProblem(field('text'), 'x'), null);
  t.equal(fieldValueProblem(field('text'), 5), 'must be a string');
  t.equal(fieldValueProblem(field('number'), 1.5), null);
  t.equal(fieldValueProblem(field('number'), '5'), 'must be a number');
  t.equal(fieldValueProblem(field('boolean'), false), null);
  t.equal(fieldValueProblem(field('boolean'), 'yes'), 'must be a boolean');
  t.equal(fieldValueProblem(field('date'), '2024-02-29'), null);
  t.equal(fieldValueProblem(field('date'), '2026-02-30'), 'must be a date YYYY-MM-DD', 'an impossible calendar date');
  t.equal(fieldValueProblem(field('date'), '2026-02-01T00:00:00Z'), 'must be a date YYYY-MM-DD');
  t.equal(fieldValueProblem(field('select', ['S', 'M']), 'M'), null);
  t.equal(fieldValueProblem(field('select', ['S', 'M']), 'XL'), 'must be one of: S, M');
});

t.test('submissionParent: a form, or a task template through an execution', async (t) => {
  t.strictSame(submissionParent({ form_id: 3 }), { type: 'form', id: 3 });
  t.strictSame(submissionParent({ task_execution_id: 5 }), { type: 'taskTemplate', executionId: 5, templateId: undefined });
  t.strictSame(submissionParent({ task_template_id: 4, task_execution_id: 5 }), { type: 'taskTemplate', executionId: 5, templateId: 4 });
  const refusal = (body: Record<string, number>) => {
    try {
      submissionParent(body);
    } catch (error) {
      return (error as ProblemError).toDocument();
    }
  };
  for (const body of [{}, { form_id: 3, task_template_id: 4 }, { form_id: 3, task_execution_id: 5 }] as Record<string, number>[]) {
    t.match(
      refusal(body),
      { status: 422, errors: { form_id: [/^exactly one of form_id and task_execution_id/] }, error_codes: { form_id: ['exactly_one'] } },
      JSON.stringify(body),
    );
  }
  t.match(refusal({ task_template_id: 4 }), { status: 422, errors: { task_execution_id: [/is required to submit to a task template/] } });
});

t.test('submissionValueErrors: every key names a field, every value fits it', async (t) => {
  const fields = [
    { id: 10, fieldType: 'text' as const, options: null },
    { id: 11, fieldType: 'select' as const, options: ['S'] },
  ];
  t.strictSame(submissionValueErrors(fields, { '10': 'x', '11': 'S' }), {});
  t.strictSame(submissionValueErrors(fields, {}), {}, 'no key is required');
  t.strictSame(submissionValueErrors(fields, { '10': 1, '11': 'M', '12': 'x' }), {
    'values.10': [coded('type', 'must be a string')],
    'values.11': [coded('enum', 'must be one of: S')],
    'values.12': [coded('unknown_property', 'is not a field of this form or task template')],
  });
});

// ---- rules that need data ----

const data = await startTestDatabase(t);
const db = data.db;
const { tenantId } = await data.createTenant('rules-home');
const away = await data.createTenant('rules-away');
const roleOf = async (userId: number) => (await db.owner.select({ roleId: users.roleId }).from(users).where(eq(users.id, userId)))[0]!.roleId;
const named = (await data.createUser(tenantId)).id;
const byRole = (await data.createUser(tenantId)).id;
const memberRole = await roleOf(byRole);
const byDepartment = (await data.createUser(tenantId)).id;
const outsider = (await data.createUser(tenantId)).id;
const inactive = (await data.createUser(tenantId, { values: { active: false } })).id;
const deleted = (await data.createUser(tenantId, { values: { deletedAt: new Date() } })).id;
const [department] = await db.owner.insert(departments).values({ tenantId, name: 'Ops' }).returning({ id: departments.id });
await db.owner.insert(departmentUsers).values({ tenantId, departmentId: department!.id, userId: byDepartment });

/** A form named by the user `named`, a task template named by the role of `byRole` and by the department, and one of each named by nobody. */
const [namedForm, hiddenForm] = await db.owner
  .insert(forms)
  .values([
    { tenantId, title: 'Named', formType: 'survey' },
    { tenantId, title: 'Hidden', formType: 'survey' },
  ])
  .returning({ id: forms.id });
const [sharedTemplate, hiddenTemplate] = await db.owner
  .insert(taskTemplates)
  .values([
    { tenantId, title: 'Shared' },
    { tenantId, title: 'Hidden' },
  ])
  .returning({ id: taskTemplates.id });
await db.owner.insert(entityPermissions).values([
  { tenantId, entityType: 'form', entityId: namedForm!.id, subjectType: 'user', subjectId: named },
  { tenantId, entityType: 'taskTemplate', entityId: sharedTemplate!.id, subjectType: 'role', subjectId: memberRole },
  { tenantId, entityType: 'taskTemplate', entityId: sharedTemplate!.id, subjectType: 'department', subjectId: department!.id },
]);
const [foreignForm] = await db.owner.insert(forms).values({ tenantId: away.tenantId, title: 'Foreign', formType: 'survey' }).returning({ id: forms.id });

const caller = (userId: number, permissions: Permission[] = []): Caller => ({ tenantId, userId, permissions: new Set(permissions) });
const administrator = caller(outsider, ['tasks.administer']);
const inTenant = <T>(work: (tx: Tx) => Promise<T>) => db.tenant(tenantId, work);

t.test('canAdminister: tasks.administer, or named directly, through the role or a department', async (t) => {
  const judge = (who: Caller, type: 'form' | 'taskTemplate', id: number) => inTenant((tx) => canAdminister(tx, who, type, id));
  t.equal(await judge(administrator, 'form', hiddenForm!.id), true, 'tasks.administer administers every form');
  t.equal(await judge(administrator, 'taskTemplate', hiddenTemplate!.id), true, 'and every task template');
  t.equal(await judge(caller(named), 'form', namedForm!.id), true, 'a user named directly');
  t.equal(await judge(caller(byRole), 'taskTemplate', sharedTemplate!.id), true, 'through the role');
  t.equal(await judge(caller(byDepartment), 'taskTemplate', sharedTemplate!.id), true, 'through a department');
  t.equal(await judge(caller(outsider), 'form', namedForm!.id), false, 'named by nothing');
  t.equal(await judge(caller(named), 'form', hiddenForm!.id), false, 'another form');
  t.equal(await judge(caller(named), 'taskTemplate', namedForm!.id), false, 'the id of a form is not a task template');
  t.equal(await judge(administrator, 'form', 999999), undefined, 'missing');
  t.equal(await judge(administrator, 'form', foreignForm!.id), undefined, "another tenant's form is missing");
});

t.test('administrable: the forms and task templates a list holds', async (t) => {
  const listed = (who: Caller) =>
    inTenant(async (tx) => ({
      forms: (await tx.select({ id: forms.id }).from(forms).where(administrable(who, 'form')).orderBy(forms.id)).map((r) => r.id),
      templates: (await tx.select({ id: taskTemplates.id }).from(taskTemplates).where(administrable(who, 'taskTemplate')).orderBy(taskTemplates.id)).map(
        (r) => r.id,
      ),
    }));
  t.strictSame(await listed(administrator), { forms: [namedForm!.id, hiddenForm!.id], templates: [sharedTemplate!.id, hiddenTemplate!.id] });
  t.strictSame(await listed(caller(named)), { forms: [namedForm!.id], templates: [] });
  t.strictSame(await listed(caller(byDepartment)), { forms: [], templates: [sharedTemplate!.id] });
  t.strictSame(await listed(caller(outsider)), { forms: [], templates: [] });
});

t.test('fieldParentAdministrableBy: a field is administrable with its form or task template', async (t) => {
  const fields = await db.owner
    .insert(formFields)
    .values([
      { tenantId, formId: namedForm!.id, name: 'of the named form', fieldType: 'text', sortNumber: 1 },
      { tenantId, taskTemplateId: sharedTemplate!.id, name: 'of the shared template', fieldType: 'text', sortNumber: 1 },
      { tenantId, formId: hiddenForm!.id, name: 'of the hidden form', fieldType: 'text', sortNumber: 1 },
    ])
    .returning({ id: formFields.id });
  const visible = (who: Caller) =>
    inTenant(async (tx) =>
      (
        await tx
          .select({ name: formFields.name })
          .from(formFields)
          .where(fieldParentAdministrableBy(who, formFields.formId, formFields.taskTemplateId))
          .orderBy(formFields.id)
      ).map((r) => r.name),
    );
  t.strictSame(await visible(caller(named)), ['of the named form']);
  t.strictSame(await visible(caller(byRole)), ['of the shared template']);
  t.strictSame(await visible(caller(outsider)), []);
  t.strictSame(await visible(administrator), ['of the named form', 'of the shared template', 'of the hidden form']);
  await db.owner.delete(formFields).where(
    inArray(
      formFields.id,
      fields.map((f) => f.id),
    ),
  );
});

t.test('requireAdministrable: one 404 for a missing record and one the caller may not administer', async (t) => {
  const require = (who: Caller, id: number) => inTenant((tx) => requireAdministrable(tx, who, 'form', id, 'The form'));
  await t.resolves(require(caller(named), namedForm!.id));
  const hidden = await require(caller(named), hiddenForm!.id).catch((error: unknown) => error);
  const missing = await require(caller(named), 999999).catch((error: unknown) => error);
  t.ok(hidden instanceof ProblemError && missing instanceof ProblemError);
  t.strictSame((hidden as ProblemError).toDocument(), (missing as ProblemError).toDocument(), 'the same answer');
  t.match((missing as ProblemError).toDocument(), { status: 404, detail: 'The form does not exist.' });
});

t.test('requireVisibleExecution: the assignee and the template administrators see an execution; for anyone else it is missing', async (t) => {
  const [execution] = await db.owner.insert(taskExecutions).values({ tenantId, taskTemplateId: sharedTemplate!.id, userId: outsider }).returning();
  const see = (who: Caller, id = execution!.id) => inTenant((tx) => requireVisibleExecution(tx, who, id));
  t.strictSame(await see(caller(outsider)), execution, 'the assignee');
  t.equal((await see(caller(byRole))).id, execution!.id, 'an administrator of its template');
  t.equal((await see(administrator)).id, execution!.id, 'tasks.administer');
  const hidden = await see(caller(named)).catch((error: unknown) => error);
  const missing = await see(caller(named), 999999).catch((error: unknown) => error);
  t.ok(hidden instanceof ProblemError);
  t.strictSame((hidden as ProblemError).toDocument(), (missing as ProblemError).toDocument());
  t.match((hidden as ProblemError).toDocument(), { status: 404, detail: 'The task execution does not exist.' });
});

t.test('assignmentErrors: an administrable template and a user who is not deleted, active or not', async (t) => {
  const errors = (who: Caller, templateId: number, userId: number) =>
    inTenant((tx) => assignmentErrors(tx, who, { task_template_id: templateId, user_id: userId }));
  t.strictSame(await errors(caller(byRole), sharedTemplate!.id, inactive), {}, 'an inactive user may be assigned');
  t.strictSame(await errors(caller(byRole), hiddenTemplate!.id, deleted), { task_template_id: [MISSING_REFERENCE], user_id: [MISSING_REFERENCE] });
  t.strictSame(
    await errors(caller(byRole), hiddenTemplate!.id, outsider),
    await errors(caller(byRole), 999999, outsider),
    'a hidden template is a missing one',
  );
  t.strictSame(
    await errors(administrator, sharedTemplate!.id, deleted),
    await errors(administrator, sharedTemplate!.id, 999999),
    'a deleted user is a missing one',
  );
});

t.test('parentInputErrors: the fields and the entity permissions of a new form or task template', async (t) => {
  const errors = await inTenant((tx) =>
    parentInputErrors(tx, { fields: [{ name: 'a', field_type: 'select' }], entity_permissions: { user_ids: [named, deleted], role_ids: [memberRole] } }),
  );
  t.strictSame(Object.keys(errors).sort(), ['entity_permissions.user_ids.1', 'fields.0.options']);
  t.strictSame(await inTenant((tx) => parentInputErrors(tx, {})), {});
});

t.test('checkSubmission: a missing parent alone, otherwise the values against the live fields', async (t) => {
  const [live, gone] = await db.owner
    .insert(formFields)
    .values([
      { tenantId, formId: hiddenForm!.id, name: 'Live', fieldType: 'number', sortNumber: 1 },
      { tenantId, formId: hiddenForm!.id, name: 'Gone', fieldType: 'number', sortNumber: 2, deletedAt: new Date() },
    ])
    .returning({ id: formFields.id });
  const errors = async (
    parent: { type: 'form'; id: number } | { type: 'taskTemplate'; executionId: number; templateId: number | undefined },
    values: Record<string, unknown>,
  ) => (await inTenant((tx) => checkSubmission(tx, caller(outsider), parent, values))).errors;
  const form = { type: 'form' as const, id: hiddenForm!.id };
  t.strictSame(await errors(form, { [live!.id]: 3 }), {}, 'any form of the tenant, administrable or not');
  t.strictSame(await errors(form, { [live!.id]: 'x', [gone!.id]: 3 }), {
    [`values.${live!.id}`]: [coded('type', 'must be a number')],
    [`values.${gone!.id}`]: [coded('unknown_property', 'is not a field of this form or task template')],
  });
  t.strictSame(await errors({ type: 'taskTemplate', executionId: 999999, templateId: undefined }, { x: 1 }), { task_execution_id: [MISSING_REFERENCE] });
  t.strictSame(await errors({ ...form, id: foreignForm!.id }, {}), { form_id: [MISSING_REFERENCE] }, "another tenant's form is missing");
});

t.test('checkSubmission and resubmissionErrors: a task template only through an execution assigned to the caller', async (t) => {
  const [field] = await db.owner
    .insert(formFields)
    .values({ tenantId, taskTemplateId: sharedTemplate!.id, name: 'Done', fieldType: 'boolean', sortNumber: 1 })
    .returning({ id: formFields.id });
  const [mine, theirs] = await db.owner
    .insert(taskExecutions)
    .values([
      { tenantId, taskTemplateId: sharedTemplate!.id, userId: outsider },
      { tenantId, taskTemplateId: sharedTemplate!.id, userId: named },
    ])
    .returning();
  const check = (who: Caller, executionId: number, templateId?: number) =>
    inTenant((tx) => checkSubmission(tx, who, { type: 'taskTemplate', executionId, templateId }, { [field!.id]: true }));
  t.strictSame(await check(caller(outsider), mine!.id), {
    errors: {},
    target: { type: 'taskTemplate', id: sharedTemplate!.id, executionId: mine!.id },
  });
  t.strictSame((await check(caller(outsider), mine!.id, hiddenTemplate!.id)).errors, {
    task_template_id: [coded('mismatch', 'is not the task template of the execution')],
  });
  t.strictSame(
    (await check(caller(outsider), theirs!.id)).errors,
    { task_execution_id: [MISSING_REFERENCE] },
    'an execution the caller does not see is missing',
  );
  t.strictSame(
    (await check(caller(byRole), theirs!.id)).errors,
    { task_execution_id: [coded('mismatch', 'is not assigned to you')] },
    'the template administrator sees it, but it is not theirs to fill in',
  );
  const [submission] = await db.owner
    .insert(formSubmissions)
    .values({ tenantId, taskTemplateId: sharedTemplate!.id, taskExecutionId: mine!.id, userId: outsider, values: {} })
    .returning();
  const again = (values: Record<string, unknown>) => inTenant((tx) => resubmissionErrors(tx, caller(outsider), submission!, values));
  t.strictSame(await again({ [field!.id]: false }), {});
  t.strictSame(await again({ [field!.id]: 'no' }), { [`values.${field!.id}`]: [coded('type', 'must be a boolean')] });
  await db.owner.update(taskExecutions).set({ userId: named }).where(eq(taskExecutions.id, mine!.id));
  t.strictSame(await again({ [field!.id]: false }), { task_execution_id: [MISSING_REFERENCE] }, 'once reassigned, the execution is no longer theirs');
});
