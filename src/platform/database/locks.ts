import { sql } from 'drizzle-orm';
import type { Tx } from './database.ts';

/**
 * Serialises, until the transaction ends, every tenant transaction that takes the lock
 * of the same `purpose` (a rule that a check-then-write could break under concurrency:
 * a limit, a "last + 1" number, a cycle check). The one key construction for such locks:
 * a 64-bit hash of `atrium.<purpose>:<tenant id>`, the tenant taken from the transaction
 * itself (db.tenant), so it cannot name another tenant; outside one it fails.
 */
export async function lockTenantScope(tx: Tx, purpose: string): Promise<void> {
  // The cast fails on an unset (or, later in a session, empty) tenant setting.
  await tx.execute(
    sql`select pg_advisory_xact_lock(hashtextextended(${`atrium.${purpose}:`} || current_setting('atrium.tenant_id')::bigint::text, 0))`,
  );
}
