import { and, asc, desc, eq, inArray, isNull, or, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { replaceSubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import type { Body, Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { departments } from '../departments/table.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { administrableBy, canAdminister, fieldValueProblem, type ParentType, requireAdministrable } from './rules.ts';
import { formFields, formSubmissions, forms, taskExecutions, taskTemplates } from './table.ts';
import { formView, submissionView, taskExecutionView, taskTemplateView } from './view.ts';

type FieldInput = NonNullable<Body<'createForm'>['fields']>[number];
type EntityPermissionsInput = NonNullable<Body<'createForm'>['entity_permissions']>;

const SHOW_RELATIONS = ['fields', 'entity_permissions'];

/** `options` belong to `select` fields, and only to them. */
function fieldInputErrors(fields: FieldInput[]): FieldErrors {
  const errors: FieldErrors = {};
  fields.forEach((field, i) => {
    if (field.field_type === 'select' && !field.options) errors[`fields.${i}.options`] = ['is required for a select field'];
    if (field.field_type !== 'select' && field.options) errors[`fields.${i}.options`] = ['is only allowed for a select field'];
  });
  return errors;
}

async function insertFieldsAndPermissions(
  tx: Tx,
  tenantId: number,
  parent: ParentType,
  parentId: number,
  fields: FieldInput[],
  permissions: EntityPermissionsInput | undefined,
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

async function validateParentInput(tx: Tx, body: { fields?: FieldInput[]; entity_permissions?: EntityPermissionsInput }) {
  const errors = { ...fieldInputErrors(body.fields ?? []), ...(await missingSubjects(tx, body.entity_permissions ?? {}, 'entity_permissions')) };
  if (Object.keys(errors).length > 0) throw invalid(errors);
}

/** Executions the caller may see: assigned to them, or of a template they can administer. */
const executionVisibleTo = (auth: Auth) =>
  or(eq(taskExecutions.userId, auth.userId), administrableBy(auth, sql`'taskTemplate'`, sql`${taskExecutions.taskTemplateId}`));

export const formHandlers = {
  async createForm({ auth, body, services: { db } }) {
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      await validateParentInput(tx, body);
      const [form] = await tx.insert(forms).values({ tenantId: auth.tenantId, title: body.title, formType: body.form_type }).returning();
      await insertFieldsAndPermissions(tx, auth.tenantId, 'form', form!.id, body.fields ?? [], body.entity_permissions);
      return present(formView, tx, [form!], { selects: null, relations: SHOW_RELATIONS }, auth);
    });
    return { status: 201, body: created! };
  },

  async listForms({ auth, query, services: { db } }) {
    const controls = readControls(formView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx
        .select()
        .from(forms)
        .where(administrableBy(auth, sql`'form'`, sql`${forms.id}`))
        .orderBy(asc(forms.title), asc(forms.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(formView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getForm({ auth, query, params, services: { db } }) {
    const controls = readControls(formView, query, auth, { defaultRelations: SHOW_RELATIONS });
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      await requireAdministrable(tx, auth, 'form', params.form, 'The form');
      const rows = await tx.select().from(forms).where(eq(forms.id, params.form));
      return present(formView, tx, rows, controls, auth);
    });
    return { status: 200, body: body! };
  },

  async createTaskTemplate({ auth, body, services: { db } }) {
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      await validateParentInput(tx, body);
      const [template] = await tx.insert(taskTemplates).values({ tenantId: auth.tenantId, title: body.title }).returning();
      await insertFieldsAndPermissions(tx, auth.tenantId, 'taskTemplate', template!.id, body.fields ?? [], body.entity_permissions);
      return present(taskTemplateView, tx, [template!], { selects: null, relations: SHOW_RELATIONS }, auth);
    });
    return { status: 201, body: created! };
  },

  async listTaskTemplates({ auth, query, services: { db } }) {
    const controls = readControls(taskTemplateView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx
        .select()
        .from(taskTemplates)
        .where(administrableBy(auth, sql`'taskTemplate'`, sql`${taskTemplates.id}`))
        .orderBy(asc(taskTemplates.title), asc(taskTemplates.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(taskTemplateView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getTaskTemplate({ auth, query, params, services: { db } }) {
    const controls = readControls(taskTemplateView, query, auth, { defaultRelations: SHOW_RELATIONS });
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      await requireAdministrable(tx, auth, 'taskTemplate', params.taskTemplate, 'The task template');
      const rows = await tx.select().from(taskTemplates).where(eq(taskTemplates.id, params.taskTemplate));
      return present(taskTemplateView, tx, rows, controls, auth);
    });
    return { status: 200, body: body! };
  },

  async createTaskExecution({ auth, body, services: { db } }) {
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      // A template the caller cannot administer is answered like a missing one, so the
      // answer does not tell whether it exists.
      const allowed = await canAdminister(tx, auth, 'taskTemplate', body.task_template_id);
      const errors: FieldErrors = {};
      if (allowed !== true) errors.task_template_id = ['does not exist'];
      // Any user who is not deleted: whether a user is active is an administrative field,
      // which refusing inactive assignees would reveal to template administrators.
      const [assignee] = await tx
        .select({ id: users.id })
        .from(users)
        .where(and(eq(users.id, body.user_id), isNull(users.deletedAt)));
      if (!assignee) errors.user_id = ['does not name a user'];
      if (Object.keys(errors).length > 0) throw invalid(errors);
      const rows = await tx
        .insert(taskExecutions)
        .values({ tenantId: auth.tenantId, taskTemplateId: body.task_template_id, userId: body.user_id })
        .returning();
      return present(taskExecutionView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 201, body: created! };
  },

  async listTaskExecutions({ auth, query, services: { db } }) {
    const controls = readControls(taskExecutionView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(taskExecutions).where(executionVisibleTo(auth)).orderBy(desc(taskExecutions.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(taskExecutionView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getTaskExecution({ auth, query, params, services: { db } }) {
    const controls = readControls(taskExecutionView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const [row] = await tx
        .select({ execution: taskExecutions, visible: sql<boolean>`${executionVisibleTo(auth)}` })
        .from(taskExecutions)
        .where(eq(taskExecutions.id, params.taskExecution));
      // One answer for a missing execution and one the caller may not see.
      if (!row?.visible) throw notFound('The task execution');
      return present(taskExecutionView, tx, [row.execution], controls, auth);
    });
    return { status: 200, body: body! };
  },

  async createSubmission({ auth, body, services: { db } }) {
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      const hasForm = body.form_id !== undefined;
      if (hasForm === (body.task_template_id !== undefined)) {
        throw invalid({ form_id: ['exactly one of form_id and task_template_id is required'] });
      }
      const parentColumn = hasForm ? formFields.formId : formFields.taskTemplateId;
      const parentId = (hasForm ? body.form_id : body.task_template_id)!;
      const parentTable = hasForm ? forms : taskTemplates;
      const [parent] = await tx.select({ id: parentTable.id }).from(parentTable).where(eq(parentTable.id, parentId));
      if (!parent) throw invalid({ [hasForm ? 'form_id' : 'task_template_id']: ['does not exist'] });
      const fields = await tx
        .select()
        .from(formFields)
        .where(and(eq(parentColumn, parentId), isNull(formFields.deletedAt)));
      const byId = new Map(fields.map((f) => [String(f.id), f]));
      const errors: FieldErrors = {};
      for (const [key, value] of Object.entries(body.values)) {
        const field = byId.get(key);
        const problem = field ? fieldValueProblem(field, value) : 'is not a field of this form or task template';
        if (problem) errors[`values.${key}`] = [problem];
      }
      if (Object.keys(errors).length > 0) throw invalid(errors);
      const rows = await tx
        .insert(formSubmissions)
        .values({
          tenantId: auth.tenantId,
          formId: hasForm ? parentId : null,
          taskTemplateId: hasForm ? null : parentId,
          userId: auth.userId,
          values: body.values,
        })
        .returning();
      return present(submissionView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 201, body: created! };
  },

  async listSubmissions({ auth, query, services: { db } }) {
    const controls = readControls(submissionView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(formSubmissions).where(eq(formSubmissions.userId, auth.userId)).orderBy(desc(formSubmissions.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(submissionView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getSubmission({ auth, query, params, services: { db } }) {
    const controls = readControls(submissionView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const rows = await tx
        .select()
        .from(formSubmissions)
        .where(and(eq(formSubmissions.id, params.formSubmission), eq(formSubmissions.userId, auth.userId)));
      if (rows.length === 0) throw notFound('The submission');
      return present(submissionView, tx, rows, controls, auth);
    });
    return { status: 200, body: body! };
  },
} satisfies Partial<Handlers>;
