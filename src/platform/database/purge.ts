import { sql, type SQL } from 'drizzle-orm';
import type { PgTable } from 'drizzle-orm/pg-core';
import type { Db } from './database.ts';

/** A tenant-owned table: its primary key is `(tenant_id, id)`. */
type KeyedTable = PgTable & { tenantId: unknown; id: unknown };

/**
 * Deletes the rows of `table` that `condition` selects, at most `batchSize` per statement,
 * until none is left. Each batch is a statement (and transaction) of its own, so row locks
 * are held only for one batch and concurrent requests wait at most that long. Batches
 * are chosen by primary key, which works the same on a distributed table (docs/scaling.md).
 * For maintenance across tenants: `db` is the owner pool.
 */
export async function deleteInBatches(db: Db, table: KeyedTable, condition: SQL, batchSize: number): Promise<{ deleted: number; batches: number }> {
  let deleted = 0;
  let batches = 0;
  for (;;) {
    const result = await db.execute(sql`
      delete from ${table}
      where (tenant_id, id) in (select tenant_id, id from ${table} where ${condition} limit ${batchSize})`);
    batches += 1;
    deleted += result.count;
    if (result.count < batchSize) return { deleted, batches };
  }
}
