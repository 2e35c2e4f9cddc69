/** Reads and writes of forms, task templates, their fields, executions and submissions. */
import { and, eq, isNull, type SQL } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { replaceSubjectLists, type SubjectLists } from '../entity-permissions/queries.ts';
import { formFields, formSubmissions, forms, taskExecutions, taskTemplates, type FieldType, type ParentType } from './table.ts';

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
    await tx.insert(formFields).values(
      fields.map((field, i) => ({
        tenantId,
        formId: parent === 'form' ? parentId : null,
        taskTemplateId: parent === 'taskTemplate' ? parentId : null,
        name: field.name,
        fieldType: field.field_type,
        options: field.options ?? null,
        sortNumber: i + 1,
      })),
    );
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

/** The submission `id`, as a condition within the submissions listing's scope (the caller's own). */
export const submissionWithId = (id: number): SQL => eq(formSubmissions.id, id);

export async function insertSubmission(
  tx: Tx,
  tenantId: number,
  userId: number,
  parent: ParentType,
  parentId: number,
  values: Record<string, unknown>,
): Promise<SubmissionRow> {
  const [submission] = await tx
    .insert(formSubmissions)
    .values({
      tenantId,
      formId: parent === 'form' ? parentId : null,
      taskTemplateId: parent === 'taskTemplate' ? parentId : null,
      userId,
      values,
    })
    .returning();
  return submission!;
}
