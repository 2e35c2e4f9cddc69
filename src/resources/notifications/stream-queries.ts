/** What the live stream reads: notifications with their event ids, and unread counts. */
import { and, asc, desc, eq, getTableColumns, inArray, lt, sql, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { eventIdColumn } from './event-ids.ts';
import { notifications, notificationUnreadCounts } from './table.ts';
import { ownNotifications, type NotificationRow } from './view.ts';

export type StreamRow = NotificationRow & { eventId: string };

/** Notifications matching `where`, each with its event id, in the stream's order. */
export function selectStreamRows(tx: Tx, where: SQL | undefined) {
  return tx
    .select({ ...getTableColumns(notifications), eventId: eventIdColumn })
    .from(notifications)
    .where(where)
    .orderBy(asc(notifications.createdAt), asc(notifications.id));
}

/**
 * The first `rows` notifications matching `where`, in the stream's order, as far as their
 * data reaches `bytes` (one at least), in one statement: a catch-up holds and writes a
 * bounded amount, however large the notifications are. `full`: the bound was reached, so
 * more may follow.
 */
export async function selectReplayRows(tx: Tx, where: SQL | undefined, limits: { rows: number; bytes: number }): Promise<{ rows: StreamRow[]; full: boolean }> {
  const size = sql`octet_length(${notifications.data}::text)`;
  const order = [asc(notifications.createdAt), asc(notifications.id)];
  // The data's bytes up to each notification, through it; only those that start within the bound are read in full.
  // Partitioned by tenant, one partition here: Citus runs a window function only partitioned by the distribution column.
  const reached = tx
    .select({
      tenantId: notifications.tenantId,
      id: notifications.id,
      reach: sql<number>`sum(${size}) over (partition by ${notifications.tenantId} order by ${notifications.createdAt}, ${notifications.id})`.as('reach'),
    })
    .from(notifications)
    .where(where)
    .orderBy(...order)
    .limit(limits.rows)
    .as('reached');
  const rows = await tx
    .select({ ...getTableColumns(notifications), eventId: eventIdColumn, reach: reached.reach })
    .from(notifications)
    .innerJoin(reached, and(eq(reached.tenantId, notifications.tenantId), eq(reached.id, notifications.id)))
    .where(lt(sql`${reached.reach} - ${size}`, limits.bytes))
    .orderBy(...order);
  const reach = Number(rows.at(-1)?.reach ?? 0);
  return { rows: rows.map(({ reach: _reach, ...row }) => row), full: reach >= limits.bytes };
}

/** The event id of the caller's newest notification, if any. */
export async function newestEventId(tx: Tx, auth: Auth): Promise<string | undefined> {
  const [newest] = await tx
    .select({ eventId: eventIdColumn })
    .from(notifications)
    .where(ownNotifications(auth))
    .orderBy(desc(notifications.createdAt), desc(notifications.id))
    .limit(1);
  return newest?.eventId;
}

/**
 * Unread counts of `userIds` (what `GET /api/notifications/count` answers without filters),
 * in one query of the counts the triggers keep; a user without a row has none.
 */
export async function unreadCounts(tx: Tx, userIds: number[]): Promise<Map<number, number>> {
  const rows = await tx
    .select({ userId: notificationUnreadCounts.userId, n: notificationUnreadCounts.unread })
    .from(notificationUnreadCounts)
    .where(inArray(notificationUnreadCounts.userId, userIds));
  return new Map(rows.map((row) => [row.userId, row.n]));
}
