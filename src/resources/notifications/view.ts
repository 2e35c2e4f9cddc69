import { and, desc, eq, gte, isNotNull, isNull, lt, sql, type Placeholder, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { notificationDatetime, parseNotificationDatetime } from '../../platform/http/datetime.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { presentUsersById } from '../users/view.ts';
import { eventIdColumn, storedBefore } from './event-ids.ts';
import { notifications } from './table.ts';

export type NotificationRow = typeof notifications.$inferSelect;

type FilterKey = 'unread' | 'unseen' | 'type' | 'targetable_type' | 'targetable_id' | 'created_from' | 'created_to';

/** Only the caller's own notifications (docs/notifications.md#recipients). */
export const ownNotifications = (auth: Auth): SQL => notificationsOf(auth.userId);

/** The notifications of the user `userId` names: an id, or a placeholder for one in a prepared statement. */
const notificationsOf = (userId: number | Placeholder): SQL => and(eq(notifications.notifiableType, 'user'), eq(notifications.notifiableId, userId))!;

/** Unread: not yet read (the condition of `GET /api/notifications/count` and the stream's `count`). */
export const unreadNotifications = (): SQL => isNull(notifications.readAt);

export const notificationView = defineView<NotificationRow, Auth, FilterKey>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    type: {},
    notifiable_type: { value: (r) => r.notifiableType },
    notifiable_id: { value: (r) => r.notifiableId },
    targetable_type: { value: (r) => r.targetableType },
    targetable_id: { value: (r) => r.targetableId },
    data: {},
    seen_at: { value: (r) => notificationDatetime(r.seenAt) },
    read_at: { value: (r) => notificationDatetime(r.readAt) },
    created_at: { value: (r) => notificationDatetime(r.createdAt) },
    updated_at: { value: (r) => notificationDatetime(r.updatedAt) },
  },
  // docs/api-conventions.md#result-controls; the datetimes as in #datetimes-and-calendar-dates.
  filters: {
    unread: (value: boolean) => (value ? unreadNotifications() : isNotNull(notifications.readAt)),
    unseen: (value: boolean) => (value ? isNull(notifications.seenAt) : isNotNull(notifications.seenAt)),
    type: (value: string) => eq(notifications.type, value),
    targetable_type: (value: string) => eq(notifications.targetableType, value),
    targetable_id: (value: number) => eq(notifications.targetableId, value),
    created_from: (value: string) => gte(notifications.createdAt, parseNotificationDatetime(value, 'filter.created_from')),
    // Inclusive to the second: everything before the next second.
    created_to: (value: string) =>
      lt(notifications.createdAt, sql`${parseNotificationDatetime(value, 'filter.created_to').toISOString()}::timestamptz + interval '1 second'`),
  },
  relations: {
    notifiable: {
      empty: null,
      async load(tx, rows, viewer) {
        const byId = await presentUsersById(
          tx,
          rows.map((r) => r.notifiableId),
          viewer,
        );
        return new Map(rows.map((r) => [r.id, byId.get(r.notifiableId)]));
      },
    },
    // The targets (infoboard posts, manual entries) live in the producing services: a reference.
    targetable: {
      empty: null,
      async load(_tx, rows) {
        return new Map(rows.map((r) => [r.id, r.targetableType && r.targetableId !== null ? { type: r.targetableType, id: r.targetableId } : undefined]));
      },
    },
  },
});

/**
 * The caller's own notifications, newest first (`created_at`, then `id`): the list, type,
 * target and show operations, and the record `updateNotification` answers. New ones arrive
 * at the head while a client pages, so pages follow each other by the cursor `before_id`
 * (docs/api-conventions.md#paging).
 */
export const notificationListing: Listing<NotificationRow, Auth, FilterKey> = {
  view: notificationView,
  query: (tx) => tx.select().from(notifications),
  tenant: notifications.tenantId,
  // ownNotifications, with the caller's id as a placeholder: the statements are prepared once.
  scope: {
    where: notificationsOf(sql.placeholder('userId')),
    values: (auth) => ({ userId: auth.userId }),
  },
  key: notifications.id,
  order: [desc(notifications.createdAt), desc(notifications.id)],
  cursor: {
    // The position in microseconds, as PostgreSQL stores it (a JavaScript Date would round it to milliseconds).
    async after(tx, auth, id) {
      const [named] = await tx
        .select({ eventId: eventIdColumn })
        .from(notifications)
        .where(and(ownNotifications(auth), eq(notifications.id, id)));
      return named && storedBefore(named.eventId);
    },
    of: (row) => row.id,
  },
};

/** Notifications about one kind of target (operations listNotificationsByType, updateNotificationsByType). */
export const byType = (targetableType: string): SQL => eq(notifications.targetableType, targetableType);

/** Notifications about one target (operations listNotificationsByTarget, updateNotificationsByTarget). */
export const byTarget = (targetableType: string, targetableId: number): SQL =>
  and(eq(notifications.targetableType, targetableType), eq(notifications.targetableId, targetableId))!;
