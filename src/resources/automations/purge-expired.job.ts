import { and, isNotNull, lt, sql } from 'drizzle-orm';
import { deleteInBatches } from '../../platform/database/purge.ts';
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { webhookDeliveries } from './table.ts';

/**
 * Retention (docs/running.md#retention): finished webhook deliveries (succeeded or failed)
 * some days after they finished; their attempts go with them (foreign key cascade).
 * Pending and retrying deliveries are never purged. Retention 0 keeps them all. Returns
 * the deliveries deleted.
 */
export async function purgeExpiredDeliveries({ db, config }: Services): Promise<number> {
  const { webhookDeliveriesDays, batchSize } = config.retention;
  if (webhookDeliveriesDays === 0) return 0;
  const condition = and(
    isNotNull(webhookDeliveries.completedAt),
    lt(webhookDeliveries.completedAt, sql`now() - make_interval(days => ${webhookDeliveriesDays})`),
  )!;
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  return (await deleteInBatches(db.owner, webhookDeliveries, condition, batchSize)).deleted;
}

export const purgeExpiredDeliveriesJob = defineJob<object>({
  name: 'automations.purge-expired',
  cron: '27 * * * *',
  async handle(_data, services) {
    await purgeExpiredDeliveries(services);
  },
});
