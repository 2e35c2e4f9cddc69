import { sql } from 'drizzle-orm';
import { bigint, jsonb, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';

export const ATTRIBUTE_TYPES = ['string', 'integer', 'number', 'boolean', 'date'] as const;
export type AttributeType = (typeof ATTRIBUTE_TYPES)[number];

export interface AttributeField {
  key: string;
  type: AttributeType;
  label?: string;
}

/**
 * Attribute sets: named groups of typed fields (docs/departments.md#attribute-sets-and-values).
 * A department with a set attached accepts a value for each of its fields.
 */
export const attributeSets = pgTable(
  'attribute_sets',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    fields: jsonb('fields')
      .$type<AttributeField[]>()
      .notNull()
      .default(sql`'[]'::jsonb`),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.id] }), unique('attribute_sets_tenant_id_name_key').on(t.tenantId, t.name), tenantIsolation('attribute_sets')],
).enableRLS();
