import { defineJob } from '../../platform/jobs/define.ts';
import { deliverNotifications } from './deliver.job.ts';
import { undeliveredDispatches } from './queries.ts';

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
    const pending = await undeliveredDispatches(services.db.owner);
    for (const dispatch of pending) await services.jobs.send(deliverNotifications, dispatch);
  },
});
