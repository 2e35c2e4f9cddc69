import { and, isNull, sql, type SQL } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { parseNotificationDatetime } from '../../platform/http/datetime.ts';
import { notifications } from './table.ts';

export interface ReadStateInput {
  seen_at?: string;
  read_at?: string;
}

/** The body's datetimes, parsed; `seen_at` defaults to `read_at` (seed state table). */
export function readState(body: ReadStateInput): { seenAt: Date; readAt: Date | null } {
  const readAt = body.read_at !== undefined ? parseNotificationDatetime(body.read_at, 'read_at') : null;
  const seenAt = body.seen_at !== undefined ? parseNotificationDatetime(body.seen_at, 'seen_at') : readAt!;
  return { seenAt, readAt };
}

/**
 * The seed's Notification state table: `read_at` marks read (and seen, if not yet);
 * `seen_at` alone marks seen. Stored times are never overwritten (first sight and first
 * read win), so only records that actually change are touched and counted.
 */
export function readStateChange(state: { seenAt: Date; readAt: Date | null }): { set: Record<string, SQL>; changes: SQL } {
  const seen = sql`coalesce(${notifications.seenAt}, ${state.seenAt.toISOString()}::timestamptz)`;
  if (state.readAt) {
    return {
      set: { readAt: sql`${state.readAt.toISOString()}::timestamptz`, seenAt: seen, updatedAt: sql`now()` },
      changes: isNull(notifications.readAt),
    };
  }
  return { set: { seenAt: seen, updatedAt: sql`now()` }, changes: isNull(notifications.seenAt) };
}

/**
 * Bulk update of the caller's notifications (seed rule 2): unread ones only, narrowed by
 * `where`. Returns how many changed.
 */
export async function markNotifications(tx: Tx, where: SQL | undefined, state: { seenAt: Date; readAt: Date | null }): Promise<number> {
  const change = readStateChange(state);
  const changed = await tx
    .update(notifications)
    .set(change.set)
    .where(and(where, isNull(notifications.readAt), change.changes))
    .returning({ id: notifications.id });
  return changed.length;
}
