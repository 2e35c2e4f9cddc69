import { and, eq, inArray, sql } from 'drizzle-orm';
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { deliverWebhook } from './deliver-webhook.job.ts';
import { webhookDeliveries } from './table.ts';

/** Grace after a delivery's due time before the sweeper considers its job lost. */
const STUCK_AFTER = sql`interval '1 minute'`;

/**
 * Deliveries still pending or retrying a minute past their due time (the job was never
 * queued, or was lost with its process) are queued again for their next attempt; one
 * whose last allowed attempt was lost fails. A job that is merely late is harmless: the
 * attempt claim lets only one of the two send. Returns how many were queued.
 */
export async function requeueStuckDeliveries(services: Services): Promise<number> {
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  const stuck = await services.db.owner
    .select({ tenantId: webhookDeliveries.tenantId, deliveryId: webhookDeliveries.id, attempts: webhookDeliveries.attempts })
    .from(webhookDeliveries)
    .where(
      and(
        inArray(webhookDeliveries.status, ['pending', 'retrying']),
        sql`coalesce(${webhookDeliveries.nextAttemptAt}, ${webhookDeliveries.createdAt}) < now() - ${STUCK_AFTER}`,
      ),
    )
    .limit(100);
  let queued = 0;
  for (const delivery of stuck) {
    if (delivery.attempts >= services.config.webhookMaxAttempts) {
      // Its last allowed attempt was claimed and never reported (the process died): final.
      await services.db.owner
        .update(webhookDeliveries)
        .set({ status: 'failed', error: `attempt ${delivery.attempts} was interrupted`, nextAttemptAt: null, completedAt: sql`now()` })
        .where(and(eq(webhookDeliveries.id, delivery.deliveryId), eq(webhookDeliveries.attempts, delivery.attempts), inArray(webhookDeliveries.status, ['pending', 'retrying'])));
      continue;
    }
    await services.jobs.send(deliverWebhook, { tenantId: delivery.tenantId, deliveryId: delivery.deliveryId, attempt: delivery.attempts + 1 });
    queued += 1;
  }
  return queued;
}

export const deliverPendingWebhooks = defineJob<object>({
  name: 'automations.deliver-pending',
  cron: '* * * * *',
  async handle(_data, services) {
    await requeueStuckDeliveries(services);
  },
});
