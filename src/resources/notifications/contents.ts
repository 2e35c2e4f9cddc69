import { sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { notifications, type NotificationData } from './table.ts';

/**
 * Which of `notificationIds` (of tenant `tenantId`) still exist, and the contents of each of
 * their dispatches, read from one notification of it only: every notification of a dispatch
 * holds the dispatch's contents (up to 64 KiB of HTML, several times that once sanitized),
 * and a job reading them with each of thousands would hold as many copies. For the jobs that
 * read their recipients first and the contents after: a notification deleted between the two
 * reads (a reset) takes only its own messages with it. Named by its tenant: one shard's
 * statement on Citus, which runs the window there.
 */
export async function presentContents(
  tx: Tx,
  tenantId: number | string,
  notificationIds: string[],
): Promise<{ present: Set<string>; contents: Map<string, NotificationData> }> {
  const rows = await tx.execute<{ id: string; dispatch_id: string; data: NotificationData | null }>(sql`
    select id, dispatch_id, case when row_number() over (partition by dispatch_id order by id) = 1 then data end as data
    from ${notifications}
    where tenant_id = ${tenantId} and id = any(${`{${[...new Set(notificationIds)].join(',')}}`}::uuid[])`);
  const contents = new Map<string, NotificationData>();
  for (const row of rows) if (row.data !== null) contents.set(row.dispatch_id, row.data);
  return { present: new Set(rows.map((row) => row.id)), contents };
}
