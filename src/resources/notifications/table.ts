import { sql } from 'drizzle-orm';
import { bigint, customType, foreignKey, index, jsonb, pgTable, primaryKey, text, timestamp, unique, uuid } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

export interface NotificationData {
  title: string;
  body: string;
  url: string;
}

/**
 * One requested delivery (`POST /api/notifications`, a typed producer, or `notify()`):
 * stored in the caller's transaction, then expanded by the delivery job into one
 * notification per recipient. `delivered_at` is set once every batch is stored.
 */
export const notificationDispatches = pgTable(
  'notification_dispatches',
  {
    id: uuid('id').notNull().defaultRandom(),
    tenantId: tenantIdColumn(),
    type: text('type').notNull(),
    targetableType: text('targetable_type'),
    targetableId: bigint('targetable_id', { mode: 'number' }),
    data: jsonb('data').$type<NotificationData>().notNull(),
    userIds: bigint('user_ids', { mode: 'number' })
      .array()
      .notNull()
      .default(sql`'{}'::bigint[]`),
    departmentIds: bigint('department_ids', { mode: 'number' })
      .array()
      .notNull()
      .default(sql`'{}'::bigint[]`),
    createdBy: bigint('created_by', { mode: 'number' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    deliveredAt: timestamp('delivered_at', { withTimezone: true, mode: 'date' }),
    /**
     * Recipients up to this user id have their push job queued (docs/notifications.md#push).
     * A delivery resumed after a crash queues pushes for batches stored but not yet pushed.
     */
    pushedThrough: bigint('pushed_through', { mode: 'number' }).notNull().default(0),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    index('notification_dispatches_pending_idx')
      .on(t.createdAt)
      .where(sql`${t.deliveredAt} IS NULL`),
    // The retention purge (purge-expired.job.ts) finds delivered dispatches by age.
    index('notification_dispatches_delivered_idx')
      .on(t.deliveredAt)
      .where(sql`${t.deliveredAt} IS NOT NULL`),
    tenantIsolation('notification_dispatches'),
  ],
).enableRLS();

/**
 * A `timestamptz` whose year a client chooses (`read_at`, `seen_at`: years 0001–9999): read
 * in ISO 8601 form. drizzle's `timestamp` column hands PostgreSQL's text
 * (`0049-06-15 10:20:30+00`) to `new Date`, whose parser for that form reads a year below
 * 100 as 19xx or 20xx (or swaps day and month).
 */
const clientTimestamp = customType<{ data: Date; driverData: string }>({
  dataType: () => 'timestamp with time zone',
  toDriver: (value) => value.toISOString(),
  fromDriver: (value) => {
    // `YYYY-MM-DD HH:MM:SS[.f]±HH[:MM[:SS]]`: the session's time zone may give a historic date an offset in seconds.
    const [, local, sign, hours, minutes = '0', seconds = '0'] = /^(.+)([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?$/.exec(value) ?? [];
    if (local === undefined) return new Date(Number.NaN);
    const offsetMs = (sign === '-' ? -1 : 1) * (Number(hours) * 3600 + Number(minutes) * 60 + Number(seconds)) * 1000;
    // The local part as ISO 8601 in UTC, which every year parses as written, then the offset taken away.
    return new Date(new Date(`${local.replace(' ', 'T')}Z`).getTime() - offsetMs);
  },
});

/** Per-user notifications (schema Notification; docs/notifications.md). */
export const notifications = pgTable(
  'notifications',
  {
    id: uuid('id').notNull().defaultRandom(),
    tenantId: tenantIdColumn(),
    dispatchId: uuid('dispatch_id').notNull(),
    type: text('type').notNull(),
    notifiableType: text('notifiable_type').notNull().default('user'),
    notifiableId: bigint('notifiable_id', { mode: 'number' }).notNull(),
    targetableType: text('targetable_type'),
    targetableId: bigint('targetable_id', { mode: 'number' }),
    data: jsonb('data').$type<NotificationData>().notNull(),
    seenAt: clientTimestamp('seen_at'),
    readAt: clientTimestamp('read_at'),
    /** When the e-mail copy went out (internal; the e-mail job skips those already sent). */
    emailedAt: timestamp('emailed_at', { withTimezone: true, mode: 'date' }),
    /**
     * The e-mail job's claim on the copy while it sends it (internal; docs/notifications.md#e-mail-copies):
     * the claiming run's id, and until when the claim holds. A copy claimed by another run is not sent.
     */
    emailClaim: uuid('email_claim'),
    emailClaimedUntil: timestamp('email_claimed_until', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    // A retried or duplicated delivery job stores no second copy.
    unique('notifications_dispatch_recipient_key').on(t.tenantId, t.dispatchId, t.notifiableId),
    foreignKey({ name: 'notifications_notifiable_fk', columns: [t.tenantId, t.notifiableId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    // The caller's list, newest first.
    index('notifications_recipient_created_idx').on(t.tenantId, t.notifiableId, t.createdAt.desc().nullsFirst(), t.id.desc().nullsFirst()),
    // GET /api/notifications/count: only unread rows are in this index, and it covers the
    // whole condition, so the count is an index-only scan.
    index('notifications_unread_idx')
      .on(t.tenantId, t.notifiableType, t.notifiableId)
      .where(sql`${t.readAt} IS NULL`),
    index('notifications_recipient_target_idx').on(t.tenantId, t.notifiableId, t.targetableType, t.targetableId),
    // The retention purge (purge-expired.job.ts): read notifications by when they were
    // read, unread ones by when they were created.
    index('notifications_read_at_idx')
      .on(t.readAt)
      .where(sql`${t.readAt} IS NOT NULL`),
    index('notifications_unread_created_idx')
      .on(t.createdAt)
      .where(sql`${t.readAt} IS NULL`),
    tenantIsolation('notifications'),
  ],
).enableRLS();

/**
 * How many of a user's notifications are unread: what `GET /api/notifications/count`
 * answers without filters, and the live stream's count. Triggers on `notifications` keep
 * it (drizzle/0018_unread-counts.sql): every statement that stores, reads, marks unread or
 * deletes notifications changes it in the same transaction, whoever sends it. A user
 * without a row has none unread.
 */
export const notificationUnreadCounts = pgTable(
  'notification_unread_counts',
  {
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    unread: bigint('unread', { mode: 'number' }).notNull().default(0),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.userId] }),
    foreignKey({ name: 'notification_unread_counts_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('notification_unread_counts'),
  ],
).enableRLS();
