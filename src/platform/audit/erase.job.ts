/**
 * The blackout's erasure of the trail (docs/audit.md#erasure), run right after the blackout
 * commits: `audit.erase` rewrites one person's events, `audit.erase-pending` sends again
 * every erasure still recorded a minute after (its job never sent: the process died
 * between the commit and the send; or lost).
 */
import { and, lt, sql } from 'drizzle-orm';
import { defineJob } from '../jobs/define.ts';
import type { Jobs } from '../jobs/jobs.ts';
import type { Services } from '../services.ts';
import { eraseAuditTrail } from './audit.ts';
import { auditErasures } from './table.ts';

/** One person's erasure: their tenant and user id. */
export interface Erasure {
  tenantId: number;
  userId: number;
}

/** Erasures sent again per sweep. */
const BATCH = 100;

/**
 * Rewrites the person's events and removes the record of the erasure, in one transaction
 * (`eraseAuditTrail`). Safe to run twice, or after a run that failed: a record left means
 * nothing of it committed, none left means it is done.
 */
export const eraseAuditTrailJob = defineJob<Erasure>({
  name: 'audit.erase',
  queue: { retryLimit: 10, retryDelay: 5, retryBackoff: true },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data, services) {
    await eraseAuditTrail(services.db, data.tenantId, data.userId);
  },
});

/** Sends the erasure's job; call after the transaction that recorded it (`recordErasure`) committed (a failed send is left to the sweep). */
export async function queueErasure(jobs: Jobs, erasure: Erasure): Promise<void> {
  await jobs.sendCommitted(eraseAuditTrailJob, erasure);
}

/**
 * Safety net: every erasure still recorded a minute after the blackout is sent again.
 * Harmless when its first job is merely late: the second run finds nothing left to do.
 * Answers how many were sent.
 */
export async function sendPendingErasures(services: Services): Promise<number> {
  // Maintenance across every tenant: the owner role, not a tenant transaction.
  // Only of users a blackout has cleared: a record for anyone else (which only a request able to run SQL could write)
  // is no erasure the function would do, and would fail its job every minute.
  const pending = await services.db.owner
    .select({ tenantId: auditErasures.tenantId, userId: auditErasures.userId })
    .from(auditErasures)
    .where(
      and(
        lt(auditErasures.requestedAt, sql`now() - interval '1 minute'`),
        sql`exists (select 1 from users u where u.tenant_id = ${auditErasures.tenantId} and u.id = ${auditErasures.userId} and u.blacked_out_at is not null)`,
      ),
    )
    .limit(BATCH);
  for (const erasure of pending) await queueErasure(services.jobs, erasure);
  return pending.length;
}

export const erasePendingAuditTrailsJob = defineJob<object>({
  name: 'audit.erase-pending',
  cron: '* * * * *',
  async handle(_data, services) {
    await sendPendingErasures(services);
  },
});
