import { sql } from 'drizzle-orm';
import { bigint, check, foreignKey, index, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { formFields } from '../forms/table.ts';

export const SOURCE_TYPES = ['formFieldValue', 'systemVariable'] as const;
export type SourceType = (typeof SOURCE_TYPES)[number];

/** The morph alias of a field as the source entity of a `formFieldValue` source. */
export const FORM_FIELD_ALIAS = 'formField' as const;

/**
 * Task field default value sources (docs/tasks-and-default-values.md#default-value-sources):
 * how the field `form_field_id` of a task template is prefilled. Evaluated in `sort_number`
 * order per field; the first non-null value wins. The source entity is a morph
 * (`source_entity_type` + `source_entity_id`), so it has no foreign key.
 */
export const defaultValueSources = pgTable(
  'default_value_sources',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    formFieldId: bigint('form_field_id', { mode: 'number' }).notNull(),
    type: text('type', { enum: SOURCE_TYPES }).notNull(),
    config: jsonb('config').$type<Record<string, unknown>>().notNull(),
    sourceEntityType: text('source_entity_type'),
    sourceEntityId: bigint('source_entity_id', { mode: 'number' }),
    sortNumber: integer('sort_number').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    foreignKey({
      name: 'default_value_sources_form_field_fk',
      columns: [t.tenantId, t.formFieldId],
      foreignColumns: [formFields.tenantId, formFields.id],
    }).onDelete('cascade'),
    check('default_value_sources_type_known', sql`${t.type} IN ('formFieldValue', 'systemVariable')`),
    check('default_value_sources_entity_pair', sql`${t.sourceEntityId} IS NULL OR ${t.sourceEntityType} IS NOT NULL`),
    index('default_value_sources_field_order_idx').on(t.tenantId, t.formFieldId, t.sortNumber, t.id),
    index('default_value_sources_source_idx').on(t.tenantId, t.sourceEntityType, t.sourceEntityId),
    tenantIsolation('default_value_sources'),
  ],
).enableRLS();
