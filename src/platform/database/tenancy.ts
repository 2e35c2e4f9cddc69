import { sql } from 'drizzle-orm';
import { bigint, integer, pgPolicy, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * The tenant of the current transaction, set by `Database.tenant()` with
 * `set_config('atrium.tenant_id', …, true)`. Unset (or reset to '') means "no tenant":
 * every policy then matches nothing.
 */
export const currentTenant = sql`nullif(current_setting('atrium.tenant_id', true), '')::bigint`;

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
      using: sql`id = ${currentTenant}`,
    }),
  ],
).enableRLS();

/** `tenant_id` column of every tenant-owned table (decisions §2). */
export const tenantIdColumn = () =>
  bigint('tenant_id', { mode: 'number' })
    .notNull()
    .references(() => tenants.id, { onDelete: 'cascade' });

/** The row-level security policy every tenant-owned table carries. */
export const tenantIsolation = (table: string) =>
  pgPolicy(`${table}_tenant_isolation`, {
    as: 'permissive',
    for: 'all',
    to: 'public',
    using: sql`tenant_id = ${currentTenant}`,
    withCheck: sql`tenant_id = ${currentTenant}`,
  });
