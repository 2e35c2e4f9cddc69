import { and, asc, desc, eq, isNull } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { ALL_FIELDS, type Listing } from '../../platform/result-controls/listing.ts';
import { defineView, groupBy, present, type RelationDefinition } from '../../platform/result-controls/result-controls.ts';
import { loadSubjectLists } from '../entity-permissions/queries.ts';
import type { FieldRow, FormRow, SubmissionRow, TaskExecutionRow, TaskTemplateRow } from './queries.ts';
import { administrable, executionVisibleTo, fieldParentAdministrableBy } from './rules.ts';
import { formFields, formSubmissions, forms, taskExecutions, taskTemplates, type ParentType } from './table.ts';

/** Relations a form or task template is shown with by default (its show, and the answer of its create). */
export const SHOW_RELATIONS = ['fields', 'entity_permissions'] as const;

/** A field (the spec, schema Field): in the field operations and in its parent's `fields` relation. */
export const fieldView = defineView<FieldRow, Auth, 'form_id' | 'task_template_id'>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    field_type: { value: (f) => f.fieldType },
    options: { value: (f) => f.options ?? null },
    sort_number: { value: (f) => f.sortNumber },
    form_id: { value: (f) => f.formId },
    task_template_id: { value: (f) => f.taskTemplateId },
  },
  filters: {
    form_id: (value: number) => eq(formFields.formId, value),
    task_template_id: (value: number) => eq(formFields.taskTemplateId, value),
  },
});

/** `fields` relation: the parent's (not deleted) fields in order, one query for all rows. */
function fieldsRelation(parent: 'formId' | 'taskTemplateId'): RelationDefinition<{ id: number }, Auth> {
  return {
    empty: [],
    async load(tx: Tx, rows, viewer) {
      const column = formFields[parent];
      const found = await tx
        .select()
        .from(formFields)
        .where(
          and(
            inIdList(
              column,
              rows.map((r) => r.id),
            ),
            isNull(formFields.deletedAt),
          ),
        )
        .orderBy(asc(formFields.sortNumber), asc(formFields.id));
      const shown = await present(fieldView, tx, found, ALL_FIELDS, viewer);
      return groupBy(
        found.map((field, i) => ({ parentId: field[parent], shown: shown[i] })),
        (entry) => entry.parentId,
        (entry) => entry.shown,
      );
    },
  };
}

/** `entity_permissions` relation as `{user_ids, role_ids, department_ids}`, one query for all rows. */
function entityPermissionsRelation(entityType: ParentType): RelationDefinition<{ id: number }, Auth> {
  return {
    empty: null,
    load: (tx: Tx, rows) =>
      loadSubjectLists(
        tx,
        entityType,
        rows.map((r) => r.id),
      ),
  };
}

export const formView = defineView<FormRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    title: {},
    form_type: { value: (r) => r.formType },
    created_at: { value: (r) => rfc3339(r.createdAt) },
    updated_at: { value: (r) => rfc3339(r.updatedAt) },
  },
  relations: { fields: fieldsRelation('formId'), entity_permissions: entityPermissionsRelation('form') },
});

export const taskTemplateView = defineView<TaskTemplateRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    title: {},
    created_at: { value: (r) => rfc3339(r.createdAt) },
    updated_at: { value: (r) => rfc3339(r.updatedAt) },
  },
  relations: { fields: fieldsRelation('taskTemplateId'), entity_permissions: entityPermissionsRelation('taskTemplate') },
});

export const taskExecutionView = defineView<TaskExecutionRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    task_template_id: { value: (r) => r.taskTemplateId },
    user_id: { value: (r) => r.userId },
    created_at: { value: (r) => rfc3339(r.createdAt) },
  },
});

export const submissionView = defineView<SubmissionRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    form_id: { value: (r) => r.formId },
    task_template_id: { value: (r) => r.taskTemplateId },
    task_execution_id: { value: (r) => r.taskExecutionId },
    user_id: { value: (r) => r.userId },
    values: {},
    created_at: { value: (r) => rfc3339(r.createdAt) },
  },
});

/**
 * Fields (not deleted) of the forms and task templates the caller may administer: a form's
 * fields first, then a template's, each parent's in `sort_number` order (the spec,
 * operationId listFormFields).
 */
export const fieldListing: Listing<FieldRow, Auth, 'form_id' | 'task_template_id'> = {
  view: fieldView,
  query: (tx) => tx.select().from(formFields),
  tenant: formFields.tenantId,
  scope: (auth) => and(isNull(formFields.deletedAt), fieldParentAdministrableBy(auth, formFields.formId, formFields.taskTemplateId)),
  order: [asc(formFields.formId), asc(formFields.taskTemplateId), asc(formFields.sortNumber), asc(formFields.id)],
};

/** Forms the caller may administer, by title (the spec, operationId listForms). */
export const formListing: Listing<FormRow, Auth> = {
  view: formView,
  query: (tx) => tx.select().from(forms),
  tenant: forms.tenantId,
  scope: (auth) => administrable(auth, 'form'),
  order: [asc(forms.title), asc(forms.id)],
};

/** Task templates the caller may administer, by title (the spec, operationId listTaskTemplates). */
export const taskTemplateListing: Listing<TaskTemplateRow, Auth> = {
  view: taskTemplateView,
  query: (tx) => tx.select().from(taskTemplates),
  tenant: taskTemplates.tenantId,
  scope: (auth) => administrable(auth, 'taskTemplate'),
  order: [asc(taskTemplates.title), asc(taskTemplates.id)],
};

/** Executions visible to the caller, newest first (the spec, operationId listTaskExecutions). */
export const taskExecutionListing: Listing<TaskExecutionRow, Auth> = {
  view: taskExecutionView,
  query: (tx) => tx.select().from(taskExecutions),
  tenant: taskExecutions.tenantId,
  scope: executionVisibleTo,
  order: [desc(taskExecutions.id)],
};

/** The caller's own submissions, newest first (the spec, operationId listSubmissions). */
export const submissionListing: Listing<SubmissionRow, Auth> = {
  view: submissionView,
  query: (tx) => tx.select().from(formSubmissions),
  tenant: formSubmissions.tenantId,
  scope: (auth) => eq(formSubmissions.userId, auth.userId),
  order: [desc(formSubmissions.id)],
};
