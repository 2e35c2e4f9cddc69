/** Reads and writes of forms, task templates, their fields, executions and submissions. */
import { and, eq, isNull, sql, type SQL } from 'drizzle-orm';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { deleteSubjectLists, replaceSubjectLists, type SubjectLists } from '../entity-permissions/queries.ts';
import { formFields, formSubmissions, forms, PARENT_TABLES, taskExecutions, taskTemplates, type FieldType, type ParentType } from './table.ts';

export type FormRow = typeof forms.$inferSelect;
export type TaskTemplateRow = typeof taskTemplates.$inferSelect;
export type FieldRow = typeof formFields.$inferSelect;
export type TaskExecutionRow = typeof taskExecutions.$inferSelect;
export type SubmissionRow = typeof formSubmissions.$inferSelect;

/** A field as create bodies name it; its position in the list is its `sort_number`. */
export interface FieldInput {
  name: string;
  field_type: FieldType;
  options?: string[];
}

export async function insertForm(tx: Tx, tenantId: number, values: { title: string; form_type: string }): Promise<FormRow> {
  const [form] = await tx.insert(forms).values({ tenantId, title: values.title, formType: values.form_type }).returning();
  return form!;
}

export async function insertTaskTemplate(tx: Tx, tenantId: number, values: { title: string }): Promise<TaskTemplateRow> {
  const [template] = await tx.insert(taskTemplates).values({ tenantId, title: values.title }).returning();
  return template!;
}

export async function findForm(tx: Tx, id: number): Promise<FormRow | undefined> {
  return (await tx.select().from(forms).where(eq(forms.id, id)))[0];
}

export async function findTaskTemplate(tx: Tx, id: number): Promise<TaskTemplateRow | undefined> {
  return (await tx.select().from(taskTemplates).where(eq(taskTemplates.id, id)))[0];
}

/**
 * The form's stored values changed by `values` (keys as the update body names them); the
 * unchanged row when none is sent. The time of the update is stored unless it changes
 * nothing (`changed`: `updateTime`).
 */
export async function updateForm(tx: Tx, id: number, values: { title?: string; form_type?: string }, { changed }: { changed: boolean }): Promise<FormRow> {
  const [form] = await tx
    .update(forms)
    .set({ title: values.title, formType: values.form_type, updatedAt: updateTime(forms.updatedAt, changed) })
    .where(eq(forms.id, id))
    .returning();
  return form!;
}

/** The form as `updateForm` leaves it with `values`. */
export const updatedForm = (form: FormRow, values: { title?: string; form_type?: string }): FormRow => ({
  ...form,
  title: values.title ?? form.title,
  formType: values.form_type ?? form.formType,
});

/** As `updateForm`, for a task template. */
export async function updateTaskTemplate(tx: Tx, id: number, values: { title?: string }, { changed }: { changed: boolean }): Promise<TaskTemplateRow> {
  const [template] = await tx
    .update(taskTemplates)
    .set({ title: values.title, updatedAt: updateTime(taskTemplates.updatedAt, changed) })
    .where(eq(taskTemplates.id, id))
    .returning();
  return template!;
}

/** The task template as `updateTaskTemplate` leaves it with `values`. */
export const updatedTaskTemplate = (template: TaskTemplateRow, values: { title?: string }): TaskTemplateRow => ({
  ...template,
  title: values.title ?? template.title,
});

/**
 * Deletes the form or task template `id` and its entity permissions. Its fields, their
 * sources, executions and submissions go by the foreign keys' cascades.
 */
export async function deleteParent(tx: Tx, type: ParentType, id: number): Promise<void> {
  const table = PARENT_TABLES[type];
  // A task template's executions first, in id order, before the delete's cascade meets them:
  // a submission being stored holds its execution and then, for its foreign key, the
  // template, so the delete waits for it here instead of deadlocking with it.
  if (type === 'taskTemplate') {
    await tx
      .select({ id: taskExecutions.id })
      .from(taskExecutions)
      .where(and(eq(taskExecutions.tenantId, transactionTenant(tx)!), eq(taskExecutions.taskTemplateId, id)))
      .orderBy(taskExecutions.id)
      .for('update');
  }
  await deleteSubjectLists(tx, type, id);
  await tx.delete(table).where(eq(table.id, id));
}

/** The ids of every field (deleted ones too) of the form or task template `id`. */
export async function fieldIdsOf(tx: Tx, type: ParentType, id: number): Promise<number[]> {
  const column = type === 'form' ? formFields.formId : formFields.taskTemplateId;
  const rows = await tx.select({ id: formFields.id }).from(formFields).where(eq(column, id));
  return rows.map((row) => row.id);
}

/**
 * The next `sort_number` of a parent's fields: one more than its highest (1 for its first);
 * the lock keeps two concurrent creates from taking one number.
 */
export async function nextFieldSortNumber(tx: Tx, type: ParentType, id: number): Promise<number> {
  await lockTenantScope(tx, 'form_fields.sort_number');
  const column = type === 'form' ? formFields.formId : formFields.taskTemplateId;
  const [row] = await tx
    .select({ next: sql<number>`least(coalesce(max(${formFields.sortNumber}), 0)::bigint + 1, 2147483647)::int` })
    .from(formFields)
    .where(and(eq(column, id), isNull(formFields.deletedAt)));
  return row?.next ?? 1;
}

/** The row of a new field of the parent `parentId`, at position `sortNumber`. */
function newFieldRow(tenantId: number, parent: ParentType, parentId: number, field: FieldInput, sortNumber: number) {
  return {
    tenantId,
    formId: parent === 'form' ? parentId : null,
    taskTemplateId: parent === 'taskTemplate' ? parentId : null,
    name: field.name,
    fieldType: field.field_type,
    options: field.options ?? null,
    sortNumber,
  };
}

export async function insertField(tx: Tx, tenantId: number, parent: ParentType, parentId: number, field: FieldInput, sortNumber: number): Promise<FieldRow> {
  const [row] = await tx
    .insert(formFields)
    .values(newFieldRow(tenantId, parent, parentId, field, sortNumber))
    .returning();
  return row!;
}

/** The field `current` with the keys `values` sends changed (none sent: `current` as it is). */
export async function updateField(tx: Tx, current: FieldRow, values: { name?: string; options?: string[]; sort_number?: number }): Promise<FieldRow> {
  if (values.name === undefined && values.options === undefined && values.sort_number === undefined) return current;
  const [row] = await tx
    .update(formFields)
    .set({ name: values.name, options: values.options, sortNumber: values.sort_number })
    .where(eq(formFields.id, current.id))
    .returning();
  return row!;
}

/** Soft-deletes the field `id`: it leaves its parent's fields; submitted values keep their keys. */
export async function softDeleteField(tx: Tx, id: number): Promise<void> {
  await tx.update(formFields).set({ deletedAt: new Date() }).where(eq(formFields.id, id));
}

/** A new parent's fields (numbered in list order) and its entity permissions. */
export async function insertFieldsAndPermissions(
  tx: Tx,
  tenantId: number,
  parent: ParentType,
  parentId: number,
  fields: readonly FieldInput[],
  permissions: Partial<SubjectLists> | undefined,
): Promise<void> {
  if (fields.length > 0) {
    await tx.insert(formFields).values(fields.map((field, i) => newFieldRow(tenantId, parent, parentId, field, i + 1)));
  }
  await replaceSubjectLists(tx, tenantId, parent, parentId, permissions ?? {});
}

/** The (not deleted) fields of the form or task template `id`. */
export async function liveFields(tx: Tx, parent: ParentType, id: number): Promise<FieldRow[]> {
  const column = parent === 'form' ? formFields.formId : formFields.taskTemplateId;
  return tx
    .select()
    .from(formFields)
    .where(and(eq(column, id), isNull(formFields.deletedAt)));
}

export async function insertExecution(tx: Tx, tenantId: number, values: { taskTemplateId: number; userId: number }): Promise<TaskExecutionRow> {
  const [execution] = await tx
    .insert(taskExecutions)
    .values({ tenantId, ...values })
    .returning();
  return execution!;
}

export async function reassignExecution(tx: Tx, id: number, userId: number): Promise<TaskExecutionRow> {
  const [execution] = await tx.update(taskExecutions).set({ userId }).where(eq(taskExecutions.id, id)).returning();
  return execution!;
}

/** Deletes the execution `id`; the values submitted for it go by the foreign key's cascade. */
export async function deleteExecution(tx: Tx, id: number): Promise<void> {
  await tx.delete(taskExecutions).where(eq(taskExecutions.id, id));
}

/**
 * Holds (FOR SHARE) the execution the caller's submission `id` was made for, if any, before
 * the submission itself is locked: an execution's delete locks the execution and then, by
 * its cascade, the submissions, so an update of a submission takes the two in that order.
 */
export async function holdSubmissionExecution(tx: Tx, owner: { tenantId: number; userId: number }, id: number): Promise<void> {
  await tx
    .select({ id: taskExecutions.id })
    .from(taskExecutions)
    .innerJoin(formSubmissions, and(eq(formSubmissions.tenantId, taskExecutions.tenantId), eq(formSubmissions.taskExecutionId, taskExecutions.id)))
    .where(
      and(
        eq(taskExecutions.tenantId, owner.tenantId),
        eq(formSubmissions.tenantId, owner.tenantId),
        eq(formSubmissions.id, id),
        eq(formSubmissions.userId, owner.userId),
      ),
    )
    .for('share', { of: taskExecutions });
}

/**
 * The caller's submission `id` (read FOR UPDATE, as it is about to change), or undefined.
 * Named by its tenant too: Citus locks rows only in a statement that names its shard.
 */
export async function findOwnSubmission(tx: Tx, owner: { tenantId: number; userId: number }, id: number): Promise<SubmissionRow | undefined> {
  const [row] = await tx
    .select()
    .from(formSubmissions)
    .where(and(eq(formSubmissions.tenantId, owner.tenantId), eq(formSubmissions.id, id), eq(formSubmissions.userId, owner.userId)))
    .for('update');
  return row;
}

export async function replaceSubmissionValues(tx: Tx, id: number, values: Record<string, unknown>): Promise<SubmissionRow> {
  const [row] = await tx.update(formSubmissions).set({ values }).where(eq(formSubmissions.id, id)).returning();
  return row!;
}

export async function deleteSubmission(tx: Tx, id: number): Promise<void> {
  await tx.delete(formSubmissions).where(eq(formSubmissions.id, id));
}

/** The submission `id`, as a condition within the submissions listing's scope (the caller's own). */
export const submissionWithId = (id: number): SQL => eq(formSubmissions.id, id);

export async function insertSubmission(
  tx: Tx,
  tenantId: number,
  userId: number,
  target: { type: ParentType; id: number; executionId: number | null },
  values: Record<string, unknown>,
): Promise<SubmissionRow> {
  const [submission] = await tx
    .insert(formSubmissions)
    .values({
      tenantId,
      formId: target.type === 'form' ? target.id : null,
      taskTemplateId: target.type === 'taskTemplate' ? target.id : null,
      taskExecutionId: target.executionId,
      userId,
      values,
    })
    .returning();
  return submission!;
}
