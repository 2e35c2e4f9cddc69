/** The webhook sweeper (docs/outbound-delivery.md#webhooks): re-queues deliveries whose job was lost. */
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { deliverWebhook } from './deliver-webhook.job.ts';
import { failInterruptedDelivery, queuePriority, stuckDeliveries } from './queries.ts';

/** Deliveries handled per run. */
const BATCH = 100;

/**
 * Deliveries still pending or retrying a minute past their due time (the job was never
 * queued, or was lost with its process) are queued again for their next attempt; one
 * whose last allowed attempt was lost fails. A job that is merely late is harmless: the
 * attempt claim lets only one of the two send. Returns how many were queued.
 */
export async function requeueStuckDeliveries(services: Services): Promise<number> {
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  const stuck = await stuckDeliveries(services.db.owner, BATCH);
  let queued = 0;
  // Each tenant's requeued deliveries take turns with the other tenants' (`queuePriority`): its first one here goes first.
  const requeued = new Map<number, number>();
  for (const delivery of stuck) {
    if (delivery.attempts >= services.config.webhookMaxAttempts) {
      // Its last allowed attempt was claimed and never reported (the process died): final.
      await failInterruptedDelivery(services.db.owner, delivery.tenantId, delivery.deliveryId, delivery.attempts);
      continue;
    }
    const ahead = requeued.get(delivery.tenantId) ?? 0;
    requeued.set(delivery.tenantId, ahead + 1);
    await services.jobs.send(
      deliverWebhook,
      { tenantId: delivery.tenantId, deliveryId: delivery.deliveryId, attempt: delivery.attempts + 1 },
      { priority: queuePriority(ahead) },
    );
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
