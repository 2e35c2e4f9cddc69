/**
 * The rules of forms, task templates, executions and submissions
 * (docs/tasks-and-default-values.md#who-administers-them): who may administer a form or
 * task template, who sees an execution, and what fields and submitted values must be.
 * A record the caller may not administer or see is answered exactly like a missing one.
 */
import { and, eq, isNull, or, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds, MISSING_REFERENCE } from '../../platform/database/existence.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import { coded, forbidden, invalid, notFound, type FieldCode, type FieldErrors } from '../../platform/http/problem.ts';
import { namesUser, tenantBeside, type SubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import { users } from '../users/table.ts';
import { liveFields, type FieldInput, type FieldRow, type SubmissionRow, type TaskExecutionRow } from './queries.ts';
import { formFields, PARENT_TABLES, taskExecutions, type FieldType, type ParentType } from './table.ts';

/** Whom a rule is judged for: the caller's id and permissions (an `Auth` is one). */
export type Caller = Pick<Auth, 'tenantId' | 'userId' | 'permissions'>;

/**
 * "May administer this form or task template": holders of `tasks.administer`, and the
 * users its entity permissions name (directly, through their role or through one of their
 * departments). ONE set-based condition over the entity's type and id (SQL of the outer
 * query), so lists filter in the database instead of row by row. `tenantId`: the outer
 * query's `tenant_id`, when `entityId` is not a column of its table (see `namesUser`).
 */
export function administrableBy(caller: Caller, entityType: SQL, entityId: SQL | AnyColumn, tenantId?: SQL): SQL {
  return caller.permissions.has('tasks.administer') ? sql`true` : namesUser(entityType, entityId, caller.userId, tenantId);
}

/** `administrableBy` over the rows of the forms or task templates table: what their lists hold. */
export function administrable(caller: Caller, type: ParentType): SQL {
  return administrableBy(caller, sql`${type}`, PARENT_TABLES[type].id);
}

/**
 * `administrableBy` for the parent of a field, from the field's `form_id` and
 * `task_template_id` (columns or SQL of the outer query): who may use the field as the
 * target or source of a default value source, or read values submitted to it. The
 * field's `tenant_id` is paired with the check's (Citus plans nothing else): that of the
 * columns' table, or `tenantId` when they are SQL.
 */
export function fieldParentAdministrableBy(caller: Caller, formId: SQL | AnyColumn, taskTemplateId: SQL | AnyColumn, tenantId?: SQL): SQL {
  return administrableBy(
    caller,
    sql`case when ${formId} is not null then 'form' else 'taskTemplate' end`,
    sql`coalesce(${formId}, ${taskTemplateId})`,
    tenantBeside(formId, tenantId) ?? undefined,
  );
}

/**
 * Whether `caller` may administer the form or task template `id`; undefined when it does not
 * exist (in this tenant). `hold`, for a write that adds a record to it (a field, a task
 * execution): it is kept until the transaction ends (`FOR KEY SHARE`, by a statement of its
 * own, `missingIds`), so that its delete, under way or later, waits for the write, and one
 * committed meanwhile is found missing here rather than by the new row's foreign key (whose
 * refusal names no field of the request).
 */
export async function canAdminister(tx: Tx, caller: Caller, type: ParentType, id: number, { hold = false } = {}): Promise<boolean | undefined> {
  const table = PARENT_TABLES[type];
  if (hold) await missingIds(tx, table, [id], undefined, { keep: true });
  const [row] = await tx
    .select({ allowed: sql<boolean>`${administrable(caller, type)}` })
    .from(table)
    .where(eq(table.id, id));
  return row?.allowed;
}

/**
 * 404 `${what} does not exist.` when missing or when the caller may not administer it:
 * one answer for both, so the answer does not tell whether a form or task template hidden
 * from the caller exists.
 */
export async function requireAdministrable(tx: Tx, caller: Caller, type: ParentType, id: number, what: string): Promise<void> {
  if ((await canAdminister(tx, caller, type, id)) !== true) throw notFound(what);
}

/** "Execution visible to": its assignee, and whoever may administer its template. One condition over `task_executions`. */
export function executionVisibleTo(caller: Caller): SQL {
  return or(eq(taskExecutions.userId, caller.userId), administrableBy(caller, sql`'taskTemplate'`, taskExecutions.taskTemplateId))!;
}

/** The execution `id` when the caller sees it; 404 otherwise, one answer for a missing execution and a hidden one. */
export async function requireVisibleExecution(tx: Tx, caller: Caller, id: number): Promise<TaskExecutionRow> {
  const [row] = await tx
    .select({ execution: taskExecutions, visible: sql<boolean>`${executionVisibleTo(caller)}` })
    .from(taskExecutions)
    .where(eq(taskExecutions.id, id));
  if (!row?.visible) throw notFound('The task execution');
  return row.execution;
}

/**
 * The execution `id` when the caller may administer its template (reassign or delete it).
 * 404 when the caller does not see it (one answer for a missing and a hidden execution);
 * 403 for its assignee, who sees it without administering the template.
 */
export async function requireAdministeredExecution(tx: Tx, caller: Caller, id: number): Promise<TaskExecutionRow> {
  const [row] = await tx
    .select({
      execution: taskExecutions,
      visible: sql<boolean>`${executionVisibleTo(caller)}`,
      administered: sql<boolean>`${administrableBy(caller, sql`'taskTemplate'`, taskExecutions.taskTemplateId)}`,
    })
    .from(taskExecutions)
    .where(eq(taskExecutions.id, id));
  if (!row?.visible) throw notFound('The task execution');
  if (!row.administered) throw forbidden('Only those who administer the task template may change or delete its executions.', 'not_administrator');
  return row.execution;
}

/**
 * Field `id` (not deleted) if `caller` may administer its parent form or task template;
 * undefined otherwise. A field of a parent hidden from the caller is thereby exactly
 * like a missing one: no rule looks at its type, so no answer reveals it or its existence.
 * The row is locked (`share` by default): a field about to be used by a write (say, as the
 * source of a default value source) cannot be deleted until that write commits, and a
 * field deleted meanwhile is not found. A write to the field itself takes `update`, so
 * two such writes queue instead of deadlocking.
 */
export async function administrableField(tx: Tx, caller: Caller, id: number, lock: 'share' | 'update' = 'share'): Promise<FieldRow | undefined> {
  // Named by its tenant too, and locked by a statement of its own before the check (a
  // subquery on another table): Citus locks rows only in a statement it can send to one
  // shard as it is.
  const live = and(eq(formFields.tenantId, caller.tenantId), eq(formFields.id, id), isNull(formFields.deletedAt));
  const [locked] = await tx.select({ id: formFields.id }).from(formFields).where(live).for(lock);
  if (!locked) return undefined;
  const [row] = await tx
    .select({
      field: formFields,
      administrable: sql<boolean>`${fieldParentAdministrableBy(caller, formFields.formId, formFields.taskTemplateId)}`,
    })
    .from(formFields)
    .where(live);
  return row?.administrable ? row.field : undefined;
}

/** `administrableField`, or 404 `The field does not exist.` (the same answer for a missing and a hidden field). */
export async function requireAdministrableField(tx: Tx, caller: Caller, id: number, lock: 'share' | 'update' = 'share'): Promise<FieldRow> {
  const field = await administrableField(tx, caller, id, lock);
  if (!field) throw notFound('The field');
  return field;
}

/** The parent a new field names: exactly one of `form_id` and `task_template_id`, otherwise 422 on `form_id`. */
export function fieldParent(body: { form_id?: number; task_template_id?: number }): { type: ParentType; id: number; key: 'form_id' | 'task_template_id' } {
  if ((body.form_id !== undefined) === (body.task_template_id !== undefined)) {
    throw invalid({ form_id: [coded('exactly_one', 'exactly one of form_id and task_template_id is required')] });
  }
  return body.form_id !== undefined
    ? { type: 'form', id: body.form_id, key: 'form_id' }
    : { type: 'taskTemplate', id: body.task_template_id!, key: 'task_template_id' };
}

/**
 * `options` of a field as it is about to be stored, under `key`: required for a `select`
 * field, refused for the other types.
 */
export function fieldOptionsErrors(fieldType: FieldType, options: readonly string[] | null | undefined, key: string): FieldErrors {
  if (fieldType === 'select' && !options) return { [key]: [coded('required', 'is required for a select field')] };
  if (fieldType !== 'select' && options) return { [key]: [coded('not_allowed', 'is only allowed for a select field')] };
  return {};
}

/**
 * The references of a new execution (the spec, operationId createTaskExecution): a task
 * template the caller may administer (one hidden from them "does not exist", like a
 * missing one) and a user who is not deleted. Whether the user is active is not judged:
 * it is an administrative field, which the answer would reveal.
 */
export async function assignmentErrors(tx: Tx, caller: Caller, assignment: { task_template_id: number; user_id: number }): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  if ((await canAdminister(tx, caller, 'taskTemplate', assignment.task_template_id, { hold: true })) !== true) errors.task_template_id = [MISSING_REFERENCE];
  const missingUsers = await missingIds(tx, users, [assignment.user_id], isNull(users.deletedAt));
  if (missingUsers.size > 0) errors.user_id = [MISSING_REFERENCE];
  return errors;
}

/** `options` belong to `select` fields, and only to them. */
export function fieldInputErrors(fields: readonly FieldInput[]): FieldErrors {
  const errors: FieldErrors = {};
  fields.forEach((field, i) => Object.assign(errors, fieldOptionsErrors(field.field_type, field.options, `fields.${i}.options`)));
  return errors;
}

/** The errors of a new form's or task template's fields and entity permissions (their ids must exist). */
export async function parentInputErrors(tx: Tx, input: { fields?: readonly FieldInput[]; entity_permissions?: Partial<SubjectLists> }): Promise<FieldErrors> {
  return { ...fieldInputErrors(input.fields ?? []), ...(await missingSubjects(tx, input.entity_permissions ?? {}, 'entity_permissions')) };
}

/** Why `value` does not fit a field of this type, or null when it does (null always fits: it clears). */
export function fieldValueProblem(field: { fieldType: FieldType; options: string[] | null }, value: unknown): string | null {
  if (value === null) return null;
  switch (field.fieldType) {
    case 'text':
      return typeof value === 'string' ? null : 'must be a string';
    case 'number':
      return typeof value === 'number' ? null : 'must be a number';
    case 'boolean':
      return typeof value === 'boolean' ? null : 'must be a boolean';
    case 'date':
      return typeof value === 'string' && isCalendarDate(value) ? null : 'must be a date YYYY-MM-DD';
    case 'select':
      return typeof value === 'string' && (field.options ?? []).includes(value) ? null : `must be one of: ${(field.options ?? []).join(', ')}`;
  }
}

/** The code of a `fieldValueProblem` (`error_codes`), by the field's type. */
const VALUE_PROBLEM_CODES: Record<FieldType, FieldCode> = { text: 'type', number: 'type', boolean: 'type', date: 'format', select: 'enum' };

/** What a submission is submitted to: a form, or a task template through one of its executions. */
export type SubmissionParent = { type: 'form'; id: number } | { type: 'taskTemplate'; executionId: number; templateId: number | undefined };

/**
 * The parent a submission names (the spec, schema SubmissionCreate): a form, or a task
 * execution (with its task template, optionally). Otherwise 422 on `form_id`, or on
 * `task_execution_id` when a task template is named without one.
 */
export function submissionParent(body: { form_id?: number; task_template_id?: number; task_execution_id?: number }): SubmissionParent {
  const toTemplate = body.task_template_id !== undefined || body.task_execution_id !== undefined;
  if ((body.form_id !== undefined) === toTemplate) {
    throw invalid({ form_id: [coded('exactly_one', 'exactly one of form_id and task_execution_id (with task_template_id, optionally) is required')] });
  }
  if (body.form_id !== undefined) return { type: 'form', id: body.form_id };
  if (body.task_execution_id === undefined)
    throw invalid({ task_execution_id: [coded('required', 'is required to submit to a task template: the execution assigned to you')] });
  return { type: 'taskTemplate', executionId: body.task_execution_id, templateId: body.task_template_id };
}

/** Where a checked submission goes: its form or task template, and its execution. */
export interface SubmissionTarget {
  type: ParentType;
  id: number;
  executionId: number | null;
}

/** `values.<key>` errors: every key must name one of `fields` (by id) and every value must fit it. */
export function submissionValueErrors(
  fields: readonly { id: number; fieldType: FieldType; options: string[] | null }[],
  values: Record<string, unknown>,
): FieldErrors {
  const byId = new Map(fields.map((field) => [String(field.id), field]));
  const errors: FieldErrors = {};
  for (const [key, value] of Object.entries(values)) {
    const field = byId.get(key);
    const problem = field ? fieldValueProblem(field, value) : 'is not a field of this form or task template';
    if (problem) errors[`values.${key}`] = [coded(field ? VALUE_PROBLEM_CODES[field.fieldType] : 'unknown_property', problem)];
  }
  return errors;
}

const NOT_ASSIGNED = coded('mismatch', 'is not assigned to you');

/**
 * The execution a submission to a task template is made for: it must be assigned to the
 * caller (the assignment is what lets them fill in the template). One the caller does
 * not see "does not exist"; one they see as the template's administrator but that is
 * assigned to someone else "is not assigned to you". The row is read FOR SHARE, so the
 * execution cannot be reassigned or deleted until the submission is stored.
 */
export async function assignedExecutionErrors(tx: Tx, caller: Caller, executionId: number): Promise<{ errors: FieldErrors; execution?: TaskExecutionRow }> {
  // The lock and the visibility check are two statements, as in `administrableField`.
  const named = and(eq(taskExecutions.tenantId, caller.tenantId), eq(taskExecutions.id, executionId));
  await tx.select({ id: taskExecutions.id }).from(taskExecutions).where(named).for('share');
  const [row] = await tx
    .select({ execution: taskExecutions, visible: sql<boolean>`${executionVisibleTo(caller)}` })
    .from(taskExecutions)
    .where(named);
  if (!row?.visible) return { errors: { task_execution_id: [MISSING_REFERENCE] } };
  if (row.execution.userId !== caller.userId) return { errors: { task_execution_id: [NOT_ASSIGNED] } };
  return { errors: {}, execution: row.execution };
}

/**
 * A submission's parent checked, or its errors (any signed-in user may submit to a form;
 * to a task template only the assignee of one of its executions, through that
 * execution). A parent that does not fit is reported alone; otherwise the values against
 * the parent's (not deleted) fields.
 */
export async function checkSubmission(
  tx: Tx,
  caller: Caller,
  parent: SubmissionParent,
  values: Record<string, unknown>,
): Promise<{ errors: FieldErrors; target?: SubmissionTarget }> {
  let target: SubmissionTarget;
  if (parent.type === 'form') {
    if ((await missingIds(tx, PARENT_TABLES.form, [parent.id])).size > 0) return { errors: { form_id: [MISSING_REFERENCE] } };
    target = { type: 'form', id: parent.id, executionId: null };
  } else {
    const { errors, execution } = await assignedExecutionErrors(tx, caller, parent.executionId);
    if (!execution) return { errors };
    if (parent.templateId !== undefined && parent.templateId !== execution.taskTemplateId) {
      return { errors: { task_template_id: [coded('mismatch', 'is not the task template of the execution')] } };
    }
    target = { type: 'taskTemplate', id: execution.taskTemplateId, executionId: execution.id };
  }
  const errors = submissionValueErrors(await liveFields(tx, target.type, target.id), values);
  return Object.keys(errors).length > 0 ? { errors } : { errors, target };
}

/**
 * The errors of new values for a stored submission: the same value rules as on create,
 * and a submission for an execution only while that execution is still assigned to the
 * caller.
 */
export async function resubmissionErrors(tx: Tx, caller: Caller, submission: SubmissionRow, values: Record<string, unknown>): Promise<FieldErrors> {
  if (submission.taskExecutionId !== null) {
    const { errors } = await assignedExecutionErrors(tx, caller, submission.taskExecutionId);
    if (Object.keys(errors).length > 0) return errors;
  }
  const parent: ParentType = submission.formId !== null ? 'form' : 'taskTemplate';
  return submissionValueErrors(await liveFields(tx, parent, (submission.formId ?? submission.taskTemplateId)!), values);
}
