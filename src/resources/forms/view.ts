import { and, asc, eq, inArray, isNull } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { loadSubjectLists } from '../entity-permissions/queries.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView, type RelationDefinition } from '../../platform/result-controls/result-controls.ts';
import type { ParentType } from './rules.ts';
import { formFields, formSubmissions, forms, taskExecutions, taskTemplates } from './table.ts';

export type FieldRow = typeof formFields.$inferSelect;

export const presentField = (f: FieldRow) => ({
  id: f.id,
  name: f.name,
  field_type: f.fieldType,
  options: f.options ?? null,
  sort_number: f.sortNumber,
  form_id: f.formId,
  task_template_id: f.taskTemplateId,
});

/** `fields` relation: the parent's (not deleted) fields in order, one query for all rows. */
function fieldsRelation(parent: 'formId' | 'taskTemplateId'): RelationDefinition<{ id: number }, Auth> {
  return {
    empty: [],
    async load(tx: Tx, rows) {
      const column = formFields[parent];
      const found = await tx
        .select()
        .from(formFields)
        .where(and(inArray(column, rows.map((r) => r.id)), isNull(formFields.deletedAt)))
        .orderBy(asc(formFields.sortNumber), asc(formFields.id));
      const byParent = new Map<unknown, unknown[]>();
      for (const field of found) {
        const key = field[parent];
        if (!byParent.has(key)) byParent.set(key, []);
        byParent.get(key)!.push(presentField(field));
      }
      return byParent;
    },
  };
}

/** `entity_permissions` relation as `{user_ids, role_ids, department_ids}`, one query for all rows. */
function entityPermissionsRelation(entityType: ParentType): RelationDefinition<{ id: number }, Auth> {
  return {
    empty: null,
    load: (tx: Tx, rows) => loadSubjectLists(tx, entityType, rows.map((r) => r.id)),
  };
}

export const formView = defineView<typeof forms.$inferSelect, Auth>({
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

export const taskTemplateView = defineView<typeof taskTemplates.$inferSelect, Auth>({
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

export const taskExecutionView = defineView<typeof taskExecutions.$inferSelect, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    task_template_id: { value: (r) => r.taskTemplateId },
    user_id: { value: (r) => r.userId },
    created_at: { value: (r) => rfc3339(r.createdAt) },
  },
});

export const submissionView = defineView<typeof formSubmissions.$inferSelect, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    form_id: { value: (r) => r.formId },
    task_template_id: { value: (r) => r.taskTemplateId },
    user_id: { value: (r) => r.userId },
    values: {},
    created_at: { value: (r) => rfc3339(r.createdAt) },
  },
});
