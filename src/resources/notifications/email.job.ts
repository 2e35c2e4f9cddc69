import { and, eq, isNull, ne, sql } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { users } from '../users/table.ts';
import { plainText } from './plain-text.ts';
import type { Dispatch } from './queries.ts';
import { notifications, type NotificationData } from './table.ts';

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
  async handle(data, services) {
    await emailDispatch(services, data);
  },
});
