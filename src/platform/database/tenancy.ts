import { sql } from 'drizzle-orm';
import { bigint, pgPolicy } from 'drizzle-orm/pg-core';
import { tenants } from '../../resources/tenants/table.ts';

/**
 * The tenant of the current transaction, set by `Database.tenant()` with
 * `set_config('atrium.tenant_id', …, true)`. Unset (or reset to '') means "no tenant":
 * every policy then matches nothing.
 */
export const currentTenant = sql`nullif(current_setting('atrium.tenant_id', true), '')::bigint`;

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
