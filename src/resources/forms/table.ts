import { sql } from 'drizzle-orm';
import { bigint, check, foreignKey, index, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/**
 * The small model that task field default value sources live in
 * (docs/tasks-and-default-values.md#forms-task-templates-executions-submissions): forms and
 * task templates, each with typed fields; executions of a template assigned to a user;
 * stored submissions (field values) of a form or template by a user.
 */
export const FIELD_TYPES = ['text', 'number', 'date', 'boolean', 'select'] as const;
export type FieldType = (typeof FIELD_TYPES)[number];

export const forms = pgTable(
  'forms',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    title: text('title').notNull(),
    formType: text('form_type').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.id] }), tenantIsolation('forms')],
).enableRLS();

export const taskTemplates = pgTable(
  'task_templates',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    title: text('title').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.id] }), tenantIsolation('task_templates')],
).enableRLS();

/** Morph aliases of the parents of fields, as `entity_permissions.entity_type` names them. */
export type ParentType = 'form' | 'taskTemplate';

/** The table of each kind of parent. */
export const PARENT_TABLES = { form: forms, taskTemplate: taskTemplates } as const;

/** A field belongs to exactly one parent: a form or a task template (morph alias `formField`). */
export const formFields = pgTable(
  'form_fields',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    formId: bigint('form_id', { mode: 'number' }),
    taskTemplateId: bigint('task_template_id', { mode: 'number' }),
    name: text('name').notNull(),
    fieldType: text('field_type', { enum: FIELD_TYPES }).notNull(),
    /** Choices of a `select` field; null for every other type. */
    options: jsonb('options').$type<string[] | null>(),
    sortNumber: integer('sort_number').notNull(),
    deletedAt: timestamp('deleted_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    foreignKey({ name: 'form_fields_form_fk', columns: [t.tenantId, t.formId], foreignColumns: [forms.tenantId, forms.id] }).onDelete('cascade'),
    foreignKey({
      name: 'form_fields_task_template_fk',
      columns: [t.tenantId, t.taskTemplateId],
      foreignColumns: [taskTemplates.tenantId, taskTemplates.id],
    }).onDelete('cascade'),
    check('form_fields_one_parent', sql`(${t.formId} IS NULL) <> (${t.taskTemplateId} IS NULL)`),
    check('form_fields_type_known', sql`${t.fieldType} IN ('text', 'number', 'date', 'boolean', 'select')`),
    index('form_fields_form_idx').on(t.tenantId, t.formId),
    index('form_fields_task_template_idx').on(t.tenantId, t.taskTemplateId),
    tenantIsolation('form_fields'),
  ],
).enableRLS();

/** One execution of a task template, assigned to a user (`user_id`). */
export const taskExecutions = pgTable(
  'task_executions',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    taskTemplateId: bigint('task_template_id', { mode: 'number' }).notNull(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    foreignKey({
      name: 'task_executions_task_template_fk',
      columns: [t.tenantId, t.taskTemplateId],
      foreignColumns: [taskTemplates.tenantId, taskTemplates.id],
    }).onDelete('cascade'),
    foreignKey({ name: 'task_executions_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }),
    index('task_executions_user_idx').on(t.tenantId, t.userId),
    tenantIsolation('task_executions'),
  ],
).enableRLS();

/** Values a user submitted for a form or task template: field id (as text) → value. */
export const formSubmissions = pgTable(
  'form_submissions',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    formId: bigint('form_id', { mode: 'number' }),
    taskTemplateId: bigint('task_template_id', { mode: 'number' }),
    /** The execution the values were submitted for (submissions to a task template). */
    taskExecutionId: bigint('task_execution_id', { mode: 'number' }),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    values: jsonb('values').$type<Record<string, unknown>>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    foreignKey({ name: 'form_submissions_form_fk', columns: [t.tenantId, t.formId], foreignColumns: [forms.tenantId, forms.id] }).onDelete('cascade'),
    foreignKey({
      name: 'form_submissions_task_template_fk',
      columns: [t.tenantId, t.taskTemplateId],
      foreignColumns: [taskTemplates.tenantId, taskTemplates.id],
    }).onDelete('cascade'),
    foreignKey({
      name: 'form_submissions_task_execution_fk',
      columns: [t.tenantId, t.taskExecutionId],
      foreignColumns: [taskExecutions.tenantId, taskExecutions.id],
    }).onDelete('cascade'),
    check('form_submissions_execution_of_template', sql`${t.taskExecutionId} IS NULL OR ${t.taskTemplateId} IS NOT NULL`),
    index('form_submissions_task_execution_idx').on(t.tenantId, t.taskExecutionId),
    foreignKey({ name: 'form_submissions_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }),
    check('form_submissions_one_parent', sql`(${t.formId} IS NULL) <> (${t.taskTemplateId} IS NULL)`),
    // "latest submission of a form by a user" (default value resolution)
    index('form_submissions_latest_idx').on(t.tenantId, t.userId, t.formId, t.taskTemplateId, t.createdAt, t.id),
    tenantIsolation('form_submissions'),
  ],
).enableRLS();
