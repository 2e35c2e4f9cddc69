import { and, eq, sql, type SQL } from 'drizzle-orm';
import type { AnyPgColumn, PgTable } from 'drizzle-orm/pg-core';
import { transactionTenant, type Tx } from './database.ts';
import { requiredTenant } from './tenancy.ts';

/**
 * Serialises, until the transaction ends, every tenant transaction that takes the lock
 * of the same `purpose` (a rule that a check-then-write could break under concurrency:
 * a limit, a "last + 1" number, a cycle check), or of the same `purpose` and `key` (one
 * value of it: a name). The one key construction for such locks: a 64-bit hash of
 * `atrium.<purpose>:<tenant id>[:<key>]`, the tenant taken from the transaction itself
 * (db.tenant), so it cannot name another tenant; outside one it fails. `shared`: the lock
 * waits only for an exclusive holder, and holders of the shared lock do not wait for each
 * other (many writes, one act that must not run beside any of them).
 */
export async function lockTenantScope(tx: Tx, purpose: string, key?: SQL, mode: 'exclusive' | 'shared' = 'exclusive'): Promise<void> {
  // `requiredTenant` fails on an unset (or, later in a session, empty) tenant setting.
  const value = key === undefined ? sql`` : sql` || ':' || ${key}`;
  const lock = mode === 'shared' ? sql`pg_advisory_xact_lock_shared` : sql`pg_advisory_xact_lock`;
  await tx.execute(sql`select ${lock}(hashtextextended(${`atrium.${purpose}:`} || ${requiredTenant}::text${value}, 0))`);
}

/** A table of tenant records: an `id` and the `tenant_id` that places it. */
type TenantTable = PgTable & { id: AnyPgColumn; tenantId: AnyPgColumn };

/** The row lock `lockRecord` takes (below). */
export type RecordLock = 'no key update' | 'update' | 'share';

/**
 * Locks the record `id` of `table` in the transaction's tenant until the transaction ends
 * and answers whether it exists. An update, delete or restore takes it before it reads
 * the record: two writes of one record then run one after the other, and the second reads
 * what the first left (a record deleted meanwhile is not found; no change is lost).
 * `FOR NO KEY UPDATE` by default: other writes of the record wait, new rows that reference
 * it do not; `FOR UPDATE` makes those wait too (a delete that checks what references the
 * record, or a write that must see no new reference appear); `FOR SHARE` only waits for writes of
 * it and makes them wait, so two readers that each judge the other's record cannot deadlock.
 * The tenant is named as a value: Citus locks rows only in a statement that names its shard.
 */
export async function lockRecord(tx: Tx, table: TenantTable, id: number, strength: RecordLock = 'no key update'): Promise<boolean> {
  const tenantId = transactionTenant(tx);
  if (tenantId === undefined) throw new Error('lockRecord runs in a transaction of db.tenant().');
  const [row] = await tx
    .select({ id: table.id })
    .from(table)
    .where(and(eq(table.tenantId, tenantId), eq(table.id, id)))
    .for(strength);
  return row !== undefined;
}
