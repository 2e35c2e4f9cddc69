/** What the live stream reads: notifications with their event ids, and unread counts. */
import { and, asc, count, desc, eq, getTableColumns, inArray, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { eventIdColumn } from './event-ids.ts';
import { notifications } from './table.ts';
import { ownNotifications, unreadNotifications, type NotificationRow } from './view.ts';

export type StreamRow = NotificationRow & { eventId: string };

/** Notifications matching `where`, each with its event id, in the stream's order. */
export function selectStreamRows(tx: Tx, where: SQL | undefined) {
  return tx
    .select({ ...getTableColumns(notifications), eventId: eventIdColumn })
    .from(notifications)
    .where(where)
    .orderBy(asc(notifications.createdAt), asc(notifications.id));
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

/** Unread counts of `userIds` (the condition of `GET /api/notifications/count`), in one query. */
export async function unreadCounts(tx: Tx, userIds: number[]): Promise<Map<number, number>> {
  const rows = await tx
    .select({ userId: notifications.notifiableId, n: count() })
    .from(notifications)
    .where(and(eq(notifications.notifiableType, 'user'), inArray(notifications.notifiableId, userIds), unreadNotifications()))
    .groupBy(notifications.notifiableId);
  return new Map(rows.map((row) => [row.userId, row.n]));
}
