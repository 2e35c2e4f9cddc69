/**
 * Reads and writes of automations and their webhook deliveries. Tenant work takes the
 * tenant transaction `tx`; the sweeper's work across tenants takes the owner pool.
 */
import { and, eq, inArray, notExists, sql, type SQL } from 'drizzle-orm';
import type { Db, Tx } from '../../platform/database/database.ts';
import { turnPriority } from '../../platform/jobs/jobs.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import type { DeliveryOutcome } from '../../platform/outbound/delivery-outcome.ts';
import { automations, webhookDeliveries, webhookDeliveryAttempts, type AutomationRow, type DeliveryRow, type DeliveryStatus } from './table.ts';
import type { StoredWebhookConfiguration } from './webhook-configuration.ts';

/** Deliveries that still expect an attempt. */
const OPEN_STATUSES: DeliveryStatus[] = ['pending', 'retrying'];

/** When a delivery is due: its scheduled attempt, or its creation for the first one. */
const DUE_AT = sql`coalesce(${webhookDeliveries.nextAttemptAt}, ${webhookDeliveries.createdAt})`;

/** Grace after a delivery's due time before the sweeper considers its job lost. */
const STUCK_AFTER = sql`interval '1 minute'`;

/** The automation `id`; with `lock`, locked, and named by `tenantId` too (Citus locks rows only in a statement that names its shard). */
export async function findAutomation(
  tx: Tx,
  id: number,
  options: { lock?: 'update' | 'key share'; tenantId?: number } = {},
): Promise<AutomationRow | undefined> {
  const query = tx
    .select()
    .from(automations)
    .where(options.tenantId === undefined ? eq(automations.id, id) : and(eq(automations.tenantId, options.tenantId), eq(automations.id, id)));
  const [row] = options.lock ? await query.for(options.lock) : await query;
  return row;
}

export function insertAutomation(tx: Tx, values: { tenantId: number; name: string; config: StoredWebhookConfiguration }): Promise<AutomationRow[]> {
  return tx
    .insert(automations)
    .values({ ...values, actionType: 'webhook' })
    .returning();
}

/**
 * Sets the keys given (and `updated_at`, unless the update changes nothing: `changed`,
 * `updateTime`); the updated row, none when it does not exist.
 */
export function updateAutomation(
  tx: Tx,
  id: number,
  changes: { name?: string; config?: StoredWebhookConfiguration },
  { changed }: { changed: boolean },
): Promise<AutomationRow[]> {
  return tx
    .update(automations)
    .set({
      ...(changes.name !== undefined ? { name: changes.name } : {}),
      ...(changes.config ? { config: changes.config } : {}),
      updatedAt: updateTime(automations.updatedAt, changed),
    })
    .where(eq(automations.id, id))
    .returning();
}

/** Deletes the automation (its deliveries with it); whether it existed. */
export async function deleteAutomation(tx: Tx, id: number): Promise<boolean> {
  const deleted = await tx.delete(automations).where(eq(automations.id, id)).returning({ id: automations.id });
  return deleted.length > 0;
}

/** The deliveries of one automation (a `where` for the deliveries listing). */
export const deliveriesOf = (automationId: number): SQL => eq(webhookDeliveries.automationId, automationId);

/**
 * How many of the tenant's deliveries wait for their attempt now: open, due, and not being
 * made (an attempt in flight holds it past its lease). A new job of the tenant's queues
 * behind that many of its own (`queuePriority`), not behind other tenants' backlogs; retries
 * scheduled for later do not count until they are due.
 */
export async function waitingDeliveries(tx: Tx, tenantId: number): Promise<number> {
  const [row] = await tx
    .select({ waiting: sql<number>`count(*)::int` })
    .from(webhookDeliveries)
    .where(and(eq(webhookDeliveries.tenantId, tenantId), inArray(webhookDeliveries.status, OPEN_STATUSES), sql`${DUE_AT} <= now()`));
  return row?.waiting ?? 0;
}

/**
 * The pg-boss priority of a delivery job whose tenant has `ahead` other deliveries waiting:
 * each counts ten seconds of the queue's virtual time (`turnPriority`), about one attempt
 * at a receiver that is slow to answer. A tenant's thousand deliveries queued at once are
 * spread over three hours of it, and another tenant's queued meanwhile go between them.
 * A job that waits to be due (a retry) counts from when it is due, not from when it was queued.
 */
export const queuePriority = (ahead: number, due = Date.now()): number => turnPriority(ahead, 10, due);

export function insertDelivery(tx: Tx, values: { tenantId: number; automationId: number; eventId: string; payload: string }): Promise<DeliveryRow[]> {
  return tx.insert(webhookDeliveries).values(values).returning();
}

/**
 * Claims attempt number `attempt` of a delivery: only when it is still open, due, and its
 * recorded attempt count is `attempt - 1`, so a duplicated or late job cannot send twice.
 * The claim counts the attempt and moves `next_attempt_at` `leaseSeconds` ahead (past the
 * longest the request can take), which keeps the sweeper and other jobs off it while it is
 * in flight. Whether the claim succeeded.
 */
export async function claimAttempt(tx: Tx, deliveryId: number, attempt: number, leaseSeconds: number): Promise<boolean> {
  const claimed = await tx
    .update(webhookDeliveries)
    .set({ attempts: attempt, nextAttemptAt: sql`now() + make_interval(secs => ${leaseSeconds})` })
    .where(
      and(
        eq(webhookDeliveries.id, deliveryId),
        eq(webhookDeliveries.attempts, attempt - 1),
        inArray(webhookDeliveries.status, OPEN_STATUSES),
        sql`${DUE_AT} <= now()`,
      ),
    )
    .returning({ id: webhookDeliveries.id });
  return claimed.length > 0;
}

/**
 * Claims attempt `attempt` again when it was claimed but never recorded: the job that
 * claimed it was lost with its worker, possibly after sending. Only the retry of that same
 * job calls this (a duplicated job never does), so the attempt is repeated, with the same
 * `webhook-id`, instead of waiting for the sweeper. Whether the claim succeeded.
 */
export async function reclaimInterruptedAttempt(tx: Tx, deliveryId: number, attempt: number, leaseSeconds: number): Promise<boolean> {
  const recorded = tx
    .select({ one: sql`1` })
    .from(webhookDeliveryAttempts)
    .where(
      and(
        eq(webhookDeliveryAttempts.tenantId, webhookDeliveries.tenantId),
        eq(webhookDeliveryAttempts.deliveryId, webhookDeliveries.id),
        eq(webhookDeliveryAttempts.number, attempt),
      ),
    );
  const claimed = await tx
    .update(webhookDeliveries)
    .set({ nextAttemptAt: sql`now() + make_interval(secs => ${leaseSeconds})` })
    .where(
      and(eq(webhookDeliveries.id, deliveryId), eq(webhookDeliveries.attempts, attempt), inArray(webhookDeliveries.status, OPEN_STATUSES), notExists(recorded)),
    )
    .returning({ id: webhookDeliveries.id });
  return claimed.length > 0;
}

/** The delivery with its automation; undefined when either was deleted meanwhile. */
export async function findDeliveryWithAutomation(tx: Tx, deliveryId: number): Promise<{ delivery: DeliveryRow; automation: AutomationRow } | undefined> {
  const [found] = await tx
    .select({ delivery: webhookDeliveries, automation: automations })
    .from(webhookDeliveries)
    .innerJoin(automations, and(eq(automations.tenantId, webhookDeliveries.tenantId), eq(automations.id, webhookDeliveries.automationId)))
    .where(eq(webhookDeliveries.id, deliveryId));
  return found;
}

/**
 * Records attempt number `attempt` in the attempt log and as the delivery's latest outcome,
 * with the delivery's new status; a final status also sets `completed_at`. False when the
 * delivery is gone (its automation was deleted while the attempt was made): nothing is
 * recorded, and no attempt follows. The delivery's row is locked first, so a delete waits
 * for the record (and takes it along) rather than the record failing on its reference.
 */
export async function recordAttempt(
  tx: Tx,
  attempt: { tenantId: number; deliveryId: number; number: number; startedAt: Date },
  outcome: Pick<DeliveryOutcome, 'responseStatus' | 'durationMs' | 'error'>,
  next: { status: DeliveryStatus; retryAt: Date | null },
): Promise<boolean> {
  if (!(await lockRecord(tx, webhookDeliveries, attempt.deliveryId))) return false;
  const result = { responseStatus: outcome.responseStatus, durationMs: outcome.durationMs, error: outcome.error };
  await tx.insert(webhookDeliveryAttempts).values({ ...attempt, ...result });
  await tx
    .update(webhookDeliveries)
    .set({
      status: next.status,
      attempts: attempt.number,
      ...result,
      nextAttemptAt: next.retryAt,
      completedAt: next.status === 'succeeded' || next.status === 'failed' ? sql`now()` : null,
    })
    .where(eq(webhookDeliveries.id, attempt.deliveryId));
  return true;
}

/**
 * Deliveries of every tenant still open a minute past their due time (their job was never
 * queued, or was lost with its process), at most `limit`.
 */
export function stuckDeliveries(owner: Db, limit: number): Promise<{ tenantId: number; deliveryId: number; attempts: number }[]> {
  return owner
    .select({ tenantId: webhookDeliveries.tenantId, deliveryId: webhookDeliveries.id, attempts: webhookDeliveries.attempts })
    .from(webhookDeliveries)
    .where(and(inArray(webhookDeliveries.status, OPEN_STATUSES), sql`${DUE_AT} < now() - ${STUCK_AFTER}`))
    .limit(limit);
}

/** Fails a delivery whose attempt `attempts` was claimed and never reported, unless it moved on meanwhile. */
export async function failInterruptedDelivery(owner: Db, tenantId: number, deliveryId: number, attempts: number): Promise<void> {
  await owner
    .update(webhookDeliveries)
    .set({ status: 'failed', error: `attempt ${attempts} was interrupted`, nextAttemptAt: null, completedAt: sql`now()` })
    // By primary key (tenant_id, id): the owner pool has no tenant setting to narrow the search.
    .where(
      and(
        eq(webhookDeliveries.tenantId, tenantId),
        eq(webhookDeliveries.id, deliveryId),
        eq(webhookDeliveries.attempts, attempts),
        inArray(webhookDeliveries.status, OPEN_STATUSES),
      ),
    );
}
