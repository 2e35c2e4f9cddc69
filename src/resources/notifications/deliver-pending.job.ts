import { and, isNull, lt, sql } from 'drizzle-orm';
import { defineJob } from '../../platform/jobs/define.ts';
import { deliverNotifications } from './deliver.job.ts';
import { notificationDispatches } from './table.ts';

/**
 * Safety net: a dispatch whose delivery job was never queued (process died between the
 * commit and the send) or never finished is queued again after a minute. Harmless when
 * the first job is still running: the unique key makes delivery idempotent.
 */
export const deliverPendingNotifications = defineJob<object>({
  name: 'notifications.deliver-pending',
  cron: '* * * * *',
  async handle(_data, services) {
    // Maintenance across every tenant: the owner role, not a tenant transaction.
    const pending = await services.db.owner
      .select({ tenantId: notificationDispatches.tenantId, dispatchId: notificationDispatches.id })
      .from(notificationDispatches)
      .where(and(isNull(notificationDispatches.deliveredAt), lt(notificationDispatches.createdAt, sql`now() - interval '2 minutes'`)))
      .limit(100);
    for (const dispatch of pending) await services.jobs.send(deliverNotifications, dispatch);
  },
});
