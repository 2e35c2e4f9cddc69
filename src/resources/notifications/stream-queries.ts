/** What the live stream reads: notifications with their event ids, and unread counts. */
import { asc, desc, getTableColumns, inArray, type SQL } from 'drizzle-orm';
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
