import { randomUUID } from 'node:crypto';
import { defineJob } from '../../platform/jobs/define.ts';
import type { Services } from '../../platform/services.ts';
import { plainText } from './plain-text.ts';
import { claimEmailCopy, markEmailed, pendingEmailCopies, releaseEmailCopy, type Dispatch } from './queries.ts';

/**
 * Whether nodemailer's `error` is the server refusing this copy's one recipient, not the
 * sender or the session: at `RCPT TO` (a mistyped address), or once the message was sent,
 * after `DATA` (a full mailbox, a policy: many servers answer so). Each copy is a message
 * to one recipient, so a refusal after its data is that recipient's. 421 closes the
 * session: it would meet every copy.
 */
function recipientRefused(error: unknown): boolean {
  const { code, command, responseCode } = error as { code?: unknown; command?: unknown; responseCode?: unknown };
  const refusedAt = (code === 'EENVELOPE' && command === 'RCPT TO') || (code === 'EMESSAGE' && command === 'DATA');
  return refusedAt && typeof responseCode === 'number' && responseCode !== 421;
}

/** How much longer a copy's claim lasts than its send may: the send ends half of it before the claim lapses. */
const CLAIM_BEYOND_SEND_SECONDS = 60;

/** Whether `error` is nodemailer's answer to the send's deadline (`AbortSignal`): the message may have been taken. */
const abandoned = (error: unknown) => (error as { code?: unknown }).code === 'EABORT';

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/**
 * E-mail copies of a dispatch (docs/notifications.md#e-mail-copies): to recipients with
 * `wants_email_notifications` and an address, over SMTP (`SMTP_URL`). Each sent copy is
 * marked, so a retry only sends the ones still missing. Each copy is claimed before it is
 * sent, so a run that lost its lease while the retry started (the two then work through
 * the same copies) sends none that the other sends; each send is bounded by
 * `SMTP_TIMEOUT_MS`, and ends half a minute before its claim lapses. Copies another run
 * holds are left to it: a job queued for when their claims lapse sends any it did not,
 * without spending one of this job's retries.
 */
export async function emailDispatch(services: Services, dispatch: Dispatch): Promise<number> {
  const { db, config } = services;
  // Queued by a process that has SMTP_URL: one without it fails the job, which is retried (by a worker that has it,
  // during a rollout that sets it), instead of marking copies it never sent as done.
  if (!config.smtpUrl) throw new Error('SMTP_URL is not set in this process: the e-mail copies are left to a worker that has it.');
  const pending = await db.tenant(dispatch.tenantId, (tx) => pendingEmailCopies(tx, dispatch.dispatchId));
  if (pending.length === 0) return 0;
  // Loaded here: only a process that sends e-mail holds the SMTP client (docs/performance.md#memory-of-a-started-process).
  const { default: nodemailer } = await import('nodemailer');
  const transport = nodemailer.createTransport(config.smtpUrl);
  const claim = randomUUID();
  const claimSeconds = Math.ceil(config.smtpTimeoutMs / 1000) + CLAIM_BEYOND_SEND_SECONDS;
  let sent = 0;
  let refused = 0;
  // When the last claim another run holds on a copy lapses; null while none holds one.
  let heldUntil: Date | null = null;
  // The copies share their contents (one dispatch's): the message is made once, not once per copy.
  const { title, body, url } = pending[0]!.data;
  const link = /^https?:\/\//.test(url) ? url : null;
  const text = `${plainText(body)}${link ? `\n\n${link}` : ''}`;
  const html = `${body}${link ? `<p><a href="${escapeHtml(link)}">${escapeHtml(link)}</a></p>` : ''}`;
  try {
    for (const copy of pending) {
      if (!copy.email) continue;
      // The claim runs from the database's clock, which may have read it well before its answer arrived here.
      const claiming = performance.now();
      const claimed = await db.tenant(dispatch.tenantId, (tx) => claimEmailCopy(tx, copy.id, claim, claimSeconds));
      if (claimed.state === 'sent') continue;
      if (claimed.state === 'held') {
        if (heldUntil === null || claimed.until > heldUntil) heldUntil = claimed.until;
        continue;
      }
      try {
        await transport.sendMail({
          from: config.smtpFrom,
          to: { name: [copy.firstName, copy.lastName].filter(Boolean).join(' '), address: copy.email },
          subject: title,
          text,
          html,
          // The whole conversation, a server that accepts and then stalls included: the connection is closed at the
          // deadline, before the message's end was sent or while its answer is awaited. It ends half a minute before
          // the claim lapses, however long the claim's answer took.
          signal: AbortSignal.timeout(
            Math.max(1, Math.min(config.smtpTimeoutMs, (claimSeconds - CLAIM_BEYOND_SEND_SECONDS / 2) * 1000 - (performance.now() - claiming))),
          ),
        });
      } catch (error) {
        // Not sent: the claim is taken back, so the retry need not wait for it to lapse (if the database is away too,
        // it lapses on its own). Not so when the deadline ended the send: the server may have taken the message, whose
        // answer was awaited, so the copy is left claimed and is sent again only once its claim lapses.
        if (!abandoned(error)) await db.tenant(dispatch.tenantId, (tx) => releaseEmailCopy(tx, copy.id, claim)).catch(() => {});
        // The server refused this recipient (at RCPT TO or after DATA): the other copies are still sent, and the job
        // fails after them, so its retry offers only this one again. Any other failure (the server away, refusing the
        // sender or the login, closing with 421, not done within SMTP_TIMEOUT_MS) would meet every copy: it fails
        // the job at once.
        if (!recipientRefused(error)) throw error;
        refused++;
        continue;
      }
      await db.tenant(dispatch.tenantId, (tx) => markEmailed(tx, copy.id));
      sent++;
    }
  } finally {
    transport.close();
  }
  // The count only: the server's answers name the addresses.
  if (refused > 0)
    throw new Error(`The mail server refused ${refused} of the dispatch's e-mail copies; ${sent} were sent. A retry offers the refused ones again.`);
  // Another run of the job is sending these (one that lost its lease, or died with its claims held): a job for when
  // their claims lapse sends any it did not. Failing this one instead would spend a retry on each wait.
  if (heldUntil !== null)
    await services.jobs.send(emailNotifications, dispatch, { singletonKey: dispatch.dispatchId, startAfter: new Date(heldUntil.getTime() + 1000) });
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
