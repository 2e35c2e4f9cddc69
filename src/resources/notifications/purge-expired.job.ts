import { and, isNotNull, isNull, lt, sql } from 'drizzle-orm';
import { deleteInBatches } from '../../platform/database/purge.ts';
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { notificationDispatches, notifications } from './table.ts';

const daysAgo = (days: number) => sql`now() - make_interval(days => ${days})`;

/**
 * Retention (docs/running.md#retention): read notifications some days after they were
 * read, unread ones some days after they were created, and delivered dispatches some
 * days after their delivery. A kind whose retention is 0 is kept. Returns the rows deleted
 * per kind.
 */
export async function purgeExpiredNotifications({ db, config }: Services): Promise<{ read: number; unread: number; dispatches: number }> {
  const { readNotificationsDays, unreadNotificationsDays, dispatchesDays, batchSize } = config.retention;
  const purged = { read: 0, unread: 0, dispatches: 0 };
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  if (readNotificationsDays > 0) {
    const condition = and(isNotNull(notifications.readAt), lt(notifications.readAt, daysAgo(readNotificationsDays)))!;
    purged.read = (await deleteInBatches(db.owner, notifications, condition, batchSize)).deleted;
  }
  if (unreadNotificationsDays > 0) {
    const condition = and(isNull(notifications.readAt), lt(notifications.createdAt, daysAgo(unreadNotificationsDays)))!;
    purged.unread = (await deleteInBatches(db.owner, notifications, condition, batchSize)).deleted;
  }
  if (dispatchesDays > 0) {
    const condition = and(isNotNull(notificationDispatches.deliveredAt), lt(notificationDispatches.deliveredAt, daysAgo(dispatchesDays)))!;
    purged.dispatches = (await deleteInBatches(db.owner, notificationDispatches, condition, batchSize)).deleted;
  }
  return purged;
}

export const purgeExpiredNotificationsJob = defineJob<object>({
  name: 'notifications.purge-expired',
  cron: '23 * * * *',
  async handle(_data, services) {
    await purgeExpiredNotifications(services);
  },
});
