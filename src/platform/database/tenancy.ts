import { sql } from 'drizzle-orm';
import { bigint, integer, pgPolicy, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * The tenant setting: the PostgreSQL setting that names the tenant of the current
 * transaction. It is set only by `setTenant` and `Database.tenant` (database.ts), and read only through
 * `currentTenant` and `requiredTenant` (docs/tenancy-and-security.md#the-tenant-setting).
 */
export const TENANT_SETTING = 'atrium.tenant_id';

/** The setting's name as SQL text (a literal, not a parameter: policies embed it). */
export const tenantSettingName = sql.raw(`'${TENANT_SETTING}'`);

/**
 * The tenant of the current transaction, or null when there is none: unset, or reset to
 * ''. For row-level security policies, which then match nothing.
 */
export const currentTenant = sql`nullif(current_setting(${tenantSettingName}, true), '')::bigint`;

/**
 * The tenant of the current transaction, for statements that must not run without one
 * (tenant-scoped locks, inserts that take the tenant from the transaction): the query
 * fails when the setting is unset or reset to ''.
 */
export const requiredTenant = sql`current_setting(${tenantSettingName})::bigint`;

/** Tenants are looked up by slug only through `atrium_find_tenant()` (security definer). */
export const tenants = pgTable(
  'tenants',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    slug: text('slug').notNull().unique(),
    name: text('name').notNull(),
    /** Maximum number of departments; null = unlimited (docs/departments.md#department-limit-and-availability). */
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

/** `tenant_id` column of every tenant-owned table (docs/tenancy-and-security.md#tenant-owned-tables-and-rls). */
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
