import { sql } from 'drizzle-orm';
import { bigint, integer, pgPolicy, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * The tenant setting: the PostgreSQL setting that names the tenant of the current
 * transaction. It is written only by `setLocalTenant`'s statement (sent by `Database.tenant`
 * and `setTenant`, database.ts), and read only through `currentTenant` and `requiredTenant`
 * (docs/tenancy-and-security.md#the-tenant-setting).
 */
export const TENANT_SETTING = 'atrium.tenant_id';

/** The setting's name as SQL text (a literal, not a parameter: policies embed it). */
export const tenantSettingName = sql.raw(`'${TENANT_SETTING}'`);

/**
 * The statement that makes `tenantId` the tenant of the current transaction until it ends.
 * `SET LOCAL` rather than `set_config(…, true)`: Citus carries `SET LOCAL` to the sessions
 * it opens on its workers (with `citus.propagate_set_commands = 'local'`), and not the
 * function (docs/scaling.md). `SET` takes no parameter, so the value is written into the
 * text: an integer formatted here, never text from a request.
 */
export function setLocalTenant(tenantId: number): string {
  if (!Number.isSafeInteger(tenantId) || tenantId <= 0) throw new TypeError(`A tenant id is a positive integer, not ${String(tenantId)}`);
  return `set local ${TENANT_SETTING} = '${tenantId}'`;
}

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
