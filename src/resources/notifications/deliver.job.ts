import { and, eq, isNull, lt, ne, sql } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { defineJob } from '../../platform/jobs/jobs.ts';
import type { Services } from '../../platform/services.ts';
import { sendPushJob } from '../push/send-push.job.ts';
import { users } from '../users/table.ts';
import { plainText } from './plain-text.ts';
import { findDispatch, storeNotificationBatch, type Dispatch } from './notify.ts';
import { notificationDispatches, notifications, type NotificationData } from './table.ts';

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
  for (;;) {
    const batch = await db.tenant(dispatch.tenantId, (tx) => storeNotificationBatch(tx, found, after, batchSize));
    stored += batch.stored;
    if (batch.last === null) break;
    await queuePushes(services, found, after, batch.last);
    after = batch.last;
  }
  await db.tenant(dispatch.tenantId, (tx) =>
    tx.update(notificationDispatches).set({ deliveredAt: sql`now()` }).where(eq(notificationDispatches.id, found.id)),
  );
  if (services.config.smtpUrl) {
    await services.jobs.send(emailNotifications, { tenantId: dispatch.tenantId, dispatchId: dispatch.dispatchId }, { singletonKey: dispatch.dispatchId });
  }
  return stored;
}

/**
 * Push copies of the batch of recipients `(after, last]`: one job, whose one query finds
 * every subscription of these recipients. `pushed_through` remembers how far pushes are
 * queued, so a delivery re-run after a crash queues the batches whose push was lost and
 * none twice (except the one batch between the send and the update: at least once).
 */
async function queuePushes(services: Services, dispatch: typeof notificationDispatches.$inferSelect, after: number, last: number): Promise<void> {
  if (last <= dispatch.pushedThrough) return;
  await services.jobs.send(sendPushJob, {
    tenantId: dispatch.tenantId,
    dispatchId: dispatch.id,
    afterUserId: Math.max(after, dispatch.pushedThrough),
    lastUserId: last,
  });
  await services.db.tenant(dispatch.tenantId, (tx) =>
    tx.update(notificationDispatches).set({ pushedThrough: last }).where(eq(notificationDispatches.id, dispatch.id)),
  );
  dispatch.pushedThrough = last;
}

export const deliverNotifications = defineJob<Dispatch & { batchSize?: number }>({
  name: 'notifications.deliver',
  queue: { retryLimit: 10, retryDelay: 5, retryBackoff: true, expireInSeconds: 15 * 60 },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async run(jobs, services) {
    for (const job of jobs) await deliverDispatch(services, job.data, job.data.batchSize);
  },
});

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);


/**
 * E-mail copies of a dispatch (decisions §6): to recipients with
 * `wants_email_notifications` and an address, over SMTP (`SMTP_URL`). Each sent copy is
 * marked, so a retry only sends the ones still missing.
 */
export async function emailDispatch(services: Services, dispatch: Dispatch): Promise<number> {
  const { db, config } = services;
  if (!config.smtpUrl) return 0;
  const pending = await db.tenant(dispatch.tenantId, (tx) =>
    tx
      .select({ id: notifications.id, data: notifications.data, email: users.email, firstName: users.firstName, lastName: users.lastName })
      .from(notifications)
      .innerJoin(users, and(eq(users.tenantId, notifications.tenantId), eq(users.id, notifications.notifiableId)))
      .where(
        and(
          eq(notifications.dispatchId, dispatch.dispatchId),
          isNull(notifications.emailedAt),
          eq(users.wantsEmailNotifications, true),
          ne(users.email, ''),
        ),
      ),
  );
  if (pending.length === 0) return 0;
  const transport = nodemailer.createTransport(config.smtpUrl);
  let sent = 0;
  try {
    for (const copy of pending) {
      if (!copy.email) continue;
      const data = copy.data as NotificationData;
      const link = /^https?:\/\//.test(data.url) ? data.url : null;
      await transport.sendMail({
        from: config.smtpFrom,
        to: { name: [copy.firstName, copy.lastName].filter(Boolean).join(' '), address: copy.email },
        subject: data.title,
        text: `${plainText(data.body)}${link ? `\n\n${link}` : ''}`,
        html: `${data.body}${link ? `<p><a href="${escapeHtml(link)}">${escapeHtml(link)}</a></p>` : ''}`,
      });
      await db.tenant(dispatch.tenantId, (tx) =>
        tx.update(notifications).set({ emailedAt: sql`now()` }).where(eq(notifications.id, copy.id)),
      );
      sent++;
    }
  } finally {
    transport.close();
  }
  return sent;
}

export const emailNotifications = defineJob<Dispatch>({
  name: 'notifications.email',
  // One active job per dispatch (singleton key = dispatch id): a second job for the same
  // dispatch (re-delivery) waits, then finds every copy marked sent.
  queue: { policy: 'singleton', retryLimit: 5, retryDelay: 30, retryBackoff: true },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async run(jobs, services) {
    for (const job of jobs) await emailDispatch(services, job.data);
  },
});

/**
 * Safety net: a dispatch whose delivery job was never queued (process died between the
 * commit and the send) or never finished is queued again after a minute. Harmless when
 * the first job is still running: the unique key makes delivery idempotent.
 */
export const deliverPendingNotifications = defineJob<object>({
  name: 'notifications.deliver-pending',
  cron: '* * * * *',
  async run(_jobs, services) {
    // Maintenance across every tenant: the owner role, not a tenant transaction.
    const pending = await services.db.owner
      .select({ tenantId: notificationDispatches.tenantId, dispatchId: notificationDispatches.id })
      .from(notificationDispatches)
      .where(and(isNull(notificationDispatches.deliveredAt), lt(notificationDispatches.createdAt, sql`now() - interval '2 minutes'`)))
      .limit(100);
    for (const dispatch of pending) await services.jobs.send(deliverNotifications, dispatch);
  },
});
