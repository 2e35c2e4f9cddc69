import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { pushPriority, sendPushJob } from '../push/send-push.job.ts';
import { emailNotifications } from './email.job.ts';
import {
  findDispatch,
  holdPushedThrough,
  markDispatchDelivered,
  recordPushedThrough,
  storeNotificationBatch,
  type Dispatch,
  type DispatchRow,
} from './queries.ts';

/** Recipients per `INSERT … SELECT` (one transaction each, so a crash loses at most one batch's work). */
export const DELIVERY_BATCH_SIZE = 5000;

/**
 * Expands a dispatch into per-user notifications, batch by batch. Safe to run twice or
 * to resume after a crash: committed batches are skipped by the unique key.
 */
export async function deliverDispatch(services: Services, dispatch: Dispatch, batchSize = DELIVERY_BATCH_SIZE): Promise<number> {
  const { db } = services;
  const found = await db.tenant(dispatch.tenantId, (tx) => findDispatch(tx, dispatch.dispatchId));
  if (!found) return 0; // reset in the meantime
  let after = 0;
  let stored = 0;
  // The batch's place in this dispatch: a fan-out's later batches queue behind other dispatches' first ones.
  for (let turn = 0; ; turn++) {
    const batch = await db.tenant(dispatch.tenantId, (tx) => storeNotificationBatch(tx, found, after, batchSize));
    stored += batch.stored;
    if (batch.last === null) break;
    await queuePushes(services, found, after, batch.last, turn);
    after = batch.last;
  }
  await db.tenant(dispatch.tenantId, (tx) => markDispatchDelivered(tx, found));
  if (services.config.smtpUrl) {
    await services.jobs.send(emailNotifications, { tenantId: dispatch.tenantId, dispatchId: dispatch.dispatchId }, { singletonKey: dispatch.dispatchId });
  }
  return stored;
}

/**
 * Push copies of the batch of recipients `(after, last]`: one job, whose one query finds
 * every subscription of these recipients. `pushed_through` remembers how far pushes are
 * queued, so a delivery re-run after a crash queues the batches whose push was lost and
 * none twice (except the one batch between the send and the update: at least once). It is
 * read, and the job queued and recorded, with the dispatch's row locked: another run of
 * the delivery at the same time (the sweeper's, while this one is slow) waits, then finds
 * the batch queued, instead of queueing its push job again from what it read at its start.
 */
async function queuePushes(services: Services, dispatch: DispatchRow, after: number, last: number, turn: number): Promise<void> {
  if (last <= dispatch.pushedThrough) return;
  const pushedThrough = await services.db.tenant(dispatch.tenantId, async (tx) => {
    const queued = await holdPushedThrough(tx, dispatch);
    // Deleted by a reset: nothing of it is left to push.
    if (queued === undefined) return last;
    if (last <= queued) return queued;
    // Queued at once, before this transaction commits (not `sendCommitted`): should the commit fail, a later run queues
    // the batch again, within the at-least-once the docs allow (docs/notifications.md).
    await services.jobs.send(
      sendPushJob,
      { tenantId: dispatch.tenantId, dispatchId: dispatch.id, afterUserId: Math.max(after, queued), lastUserId: last, turn },
      pushPriority(turn),
    );
    await recordPushedThrough(tx, dispatch, last);
    return last;
  });
  dispatch.pushedThrough = pushedThrough;
}

export const deliverNotifications = defineJob<Dispatch & { batchSize?: number }>({
  name: 'notifications.deliver',
  queue: { retryLimit: 10, retryDelay: 5, retryBackoff: true, expireInSeconds: 15 * 60 },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data, services) {
    await deliverDispatch(services, data, data.batchSize);
  },
});
