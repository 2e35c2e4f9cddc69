import { sql } from 'drizzle-orm';
import { bigint, integer, pgPolicy, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** Tenants are looked up by slug only through `atrium_find_tenant()` (security definer). */
export const tenants = pgTable(
  'tenants',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    slug: text('slug').notNull().unique(),
    name: text('name').notNull(),
    /** Maximum number of departments; null = unlimited (decisions §6). */
    departmentLimit: integer('department_limit'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  () => [
    pgPolicy('tenants_own_row', {
      as: 'permissive',
      for: 'select',
      to: 'public',
      using: sql`id = nullif(current_setting('atrium.tenant_id', true), '')::bigint`,
    }),
  ],
).enableRLS();
