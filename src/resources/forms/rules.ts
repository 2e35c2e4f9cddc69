/**
 * The rules of forms, task templates, executions and submissions
 * (docs/tasks-and-default-values.md#who-administers-them): who may administer a form or
 * task template, who sees an execution, and what fields and submitted values must be.
 * A record the caller may not administer or see is answered exactly like a missing one.
 */
import { eq, isNull, or, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { MISSING, missingIds } from '../../platform/database/existence.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { namesUser, type SubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import { users } from '../users/table.ts';
import { liveFields, type FieldInput, type TaskExecutionRow } from './queries.ts';
import { PARENT_TABLES, taskExecutions, type FieldType, type ParentType } from './table.ts';

/** Whom a rule is judged for: the caller's id and permissions (an `Auth` is one). */
export type Caller = Pick<Auth, 'userId' | 'permissions'>;

/**
 * "May administer this form or task template": holders of `tasks.administer`, and the
 * users its entity permissions name (directly, through their role or through one of their
 * departments). ONE set-based condition over the entity's type and id (SQL of the outer
 * query), so lists filter in the database instead of row by row.
 */
export function administrableBy(caller: Caller, entityType: SQL, entityId: SQL | AnyColumn): SQL {
  return caller.permissions.has('tasks.administer') ? sql`true` : namesUser(entityType, entityId, caller.userId);
}

/** `administrableBy` over the rows of the forms or task templates table: what their lists hold. */
export function administrable(caller: Caller, type: ParentType): SQL {
  return administrableBy(caller, sql`${type}`, PARENT_TABLES[type].id);
}

/**
 * `administrableBy` for the parent of a field, from the field's `form_id` and
 * `task_template_id` (columns or SQL of the outer query): who may use the field as the
 * target or source of a default value source, or read values submitted to it.
 */
export function fieldParentAdministrableBy(caller: Caller, formId: SQL | AnyColumn, taskTemplateId: SQL | AnyColumn): SQL {
  return administrableBy(caller, sql`case when ${formId} is not null then 'form' else 'taskTemplate' end`, sql`coalesce(${formId}, ${taskTemplateId})`);
}

/** Whether `caller` may administer the form or task template `id`; undefined when it does not exist (in this tenant). */
export async function canAdminister(tx: Tx, caller: Caller, type: ParentType, id: number): Promise<boolean | undefined> {
  const table = PARENT_TABLES[type];
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
 * The references of a new execution (the spec, operationId createTaskExecution): a task
 * template the caller may administer (one hidden from them "does not exist", like a
 * missing one) and a user who is not deleted. Whether the user is active is not judged:
 * it is an administrative field, which the answer would reveal.
 */
export async function assignmentErrors(tx: Tx, caller: Caller, assignment: { task_template_id: number; user_id: number }): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  if ((await canAdminister(tx, caller, 'taskTemplate', assignment.task_template_id)) !== true) errors.task_template_id = [MISSING];
  const missingUsers = await missingIds(tx, users, [assignment.user_id], isNull(users.deletedAt));
  if (missingUsers.size > 0) errors.user_id = [MISSING];
  return errors;
}

/** `options` belong to `select` fields, and only to them. */
export function fieldInputErrors(fields: readonly FieldInput[]): FieldErrors {
  const errors: FieldErrors = {};
  fields.forEach((field, i) => {
    if (field.field_type === 'select' && !field.options) errors[`fields.${i}.options`] = ['is required for a select field'];
    if (field.field_type !== 'select' && field.options) errors[`fields.${i}.options`] = ['is only allowed for a select field'];
  });
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

/** What a submission is submitted to, and the body key that names it. */
export interface SubmissionParent {
  type: ParentType;
  id: number;
  key: 'form_id' | 'task_template_id';
}

/** The parent a submission names: exactly one of `form_id` and `task_template_id`, otherwise 422 on `form_id`. */
export function submissionParent(body: { form_id?: number; task_template_id?: number }): SubmissionParent {
  if ((body.form_id !== undefined) === (body.task_template_id !== undefined)) {
    throw invalid({ form_id: ['exactly one of form_id and task_template_id is required'] });
  }
  return body.form_id !== undefined
    ? { type: 'form', id: body.form_id, key: 'form_id' }
    : { type: 'taskTemplate', id: body.task_template_id!, key: 'task_template_id' };
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
    if (problem) errors[`values.${key}`] = [problem];
  }
  return errors;
}

/**
 * The errors of a submission (any signed-in user may submit): a parent that does not
 * exist is reported alone; otherwise the values against the parent's (not deleted) fields.
 */
export async function submissionErrors(tx: Tx, parent: SubmissionParent, values: Record<string, unknown>): Promise<FieldErrors> {
  if ((await missingIds(tx, PARENT_TABLES[parent.type], [parent.id])).size > 0) return { [parent.key]: [MISSING] };
  return submissionValueErrors(await liveFields(tx, parent.type, parent.id), values);
}
