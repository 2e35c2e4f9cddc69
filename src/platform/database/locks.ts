import { sql } from 'drizzle-orm';
import type { Tx } from './database.ts';
import { requiredTenant } from './tenancy.ts';

/**
 * Serialises, until the transaction ends, every tenant transaction that takes the lock
 * of the same `purpose` (a rule that a check-then-write could break under concurrency:
 * a limit, a "last + 1" number, a cycle check). The one key construction for such locks:
 * a 64-bit hash of `atrium.<purpose>:<tenant id>`, the tenant taken from the transaction
 * itself (db.tenant), so it cannot name another tenant; outside one it fails.
 */
export async function lockTenantScope(tx: Tx, purpose: string): Promise<void> {
  // `requiredTenant` fails on an unset (or, later in a session, empty) tenant setting.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`atrium.${purpose}:`} || ${requiredTenant}::text, 0))`);
}
