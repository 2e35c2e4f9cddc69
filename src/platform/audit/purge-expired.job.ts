import { lt, sql } from 'drizzle-orm';
import { deleteInBatches } from '../database/purge.ts';
import { defineJob } from '../jobs/define.ts';
import type { Services } from '../services.ts';
import { auditEvents } from './table.ts';

/**
 * Retention of the audit trail (docs/audit.md#retention): events older than
 * AUDIT_RETENTION_DAYS are deleted, in batches; 0 keeps them. Answers how many went.
 */
export async function purgeExpiredAuditEvents({ db, config }: Services): Promise<number> {
  if (config.auditRetentionDays === 0) return 0;
  const condition = lt(auditEvents.occurredAt, sql`now() - make_interval(days => ${config.auditRetentionDays})`);
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  return (await deleteInBatches(db.owner, auditEvents, condition, config.retention.batchSize)).deleted;
}

export const purgeExpiredAuditEventsJob = defineJob<object>({
  name: 'audit.purge-expired',
  cron: '47 * * * *',
  async handle(_data, services) {
    await purgeExpiredAuditEvents(services);
  },
});
