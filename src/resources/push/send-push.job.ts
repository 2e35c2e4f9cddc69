/**
 * Web Push delivery: one job per stored notification batch sends the batch's
 * notifications to every subscription of its recipients, loaded with ONE set-based query
 * (a 10,000-recipient fan-out is two batches, so two queries, never one per user).
 * Messages are encrypted (RFC 8291, aes128gcm) and signed (VAPID, RFC 8292) by
 * `web-push`'s `generateRequestDetails`, and sent through the outbound client (timeouts,
 * no redirects, SSRF guard on the address connected to).
 *
 * Outcomes per message: 2xx done; 404/410 → the subscription is gone and deleted;
 * 429, 5xx, timeouts and network errors → retried (a job of its own) after the base delay
 * doubled per attempt or the service's `Retry-After` when longer, up to
 * `PUSH_MAX_ATTEMPTS`; any other answer (other 4xx, an unfollowed 3xx, a refused
 * address) → recorded on the subscription, not retried. A failure without an HTTP
 * response is recorded only as "the destination is not allowed" or "could not be
 * delivered": the subscriber must not learn which network failure it was (the server
 * log has the reason).
 */
import { sql } from 'drizzle-orm';
import webPush from 'web-push';
import { defineJob } from '../../platform/jobs/define.ts';
import { OutboundError } from '../../platform/outbound/client.ts';
import type { Services } from '../../platform/services.ts';
import { retryAfterMs } from '../automations/deliver-webhook.job.ts';
import { plainText } from '../notifications/plain-text.ts';
import type { NotificationData } from '../notifications/table.ts';
import { vapidKeys, type VapidKeys } from './vapid.ts';

/** The recipients `(afterUserId, lastUserId]` of one stored batch of a dispatch. */
export interface PushBatch {
  tenantId: number;
  dispatchId: string;
  afterUserId: number;
  lastUserId: number;
}

/** Messages to try again: attempt number `attempt` of each (subscription, notification). */
export interface PushRetry {
  tenantId: number;
  attempt: number;
  deliveries: { subscriptionId: number; notificationId: string }[];
}

export type PushJobData = PushBatch | PushRetry;

/** How long push services keep an undelivered message (the device may be offline). */
const PUSH_TTL_SECONDS = 24 * 3600;
/** Requests in flight at once per job. */
const CONCURRENCY = 8;

interface PushMessage {
  subscriptionId: number;
  notificationId: string;
  endpoint: string;
  p256dh: string;
  auth: string;
  data: NotificationData;
}

type Outcome = { kind: 'sent' } | { kind: 'gone' } | { kind: 'retry'; status: number | null; error: string; retryAfterMs?: number } | { kind: 'failed'; status: number | null; error: string };

/**
 * Push services accept about 4 KB of payload (RFC 8291 §4: 4078 bytes of plaintext in one
 * record; some services less), and a notification shows a few lines anyway: the body is
 * shortened until the whole message fits in PUSH_MESSAGE_MAX_BYTES.
 */
export const PUSH_MESSAGE_MAX_BYTES = 3072;

/** The push message is `{id, title, body, url}`, body as plain text. */
export function pushPayload(notificationId: string, data: NotificationData): string {
  const message = (body: string) => JSON.stringify({ id: notificationId, title: data.title, body, url: data.url });
  const text = plainText(data.body);
  let json = message(text);
  const characters = [...text];
  let keep = characters.length;
  // Shrink in proportion to the excess (characters take 1–4 bytes, more when escaped).
  while (Buffer.byteLength(json) > PUSH_MESSAGE_MAX_BYTES && keep > 0) {
    keep = Math.min(keep - 1, Math.floor((keep * PUSH_MESSAGE_MAX_BYTES) / Buffer.byteLength(json)));
    json = message(keep > 0 ? `${characters.slice(0, keep).join('')}…` : '');
  }
  return json;
}

/** What the push service's answer means (RFC 8030 §5–§7). */
export function judgePushResponse(status: number): 'sent' | 'gone' | 'retry' | 'failed' {
  if (status >= 200 && status < 300) return 'sent';
  if (status === 404 || status === 410) return 'gone';
  if (status === 429 || status >= 500) return 'retry';
  return 'failed';
}

/**
 * The messages of a batch or a retry, in one query: each notification × each
 * subscription of its recipient, recipients still personal, active and not deleted.
 */
async function loadMessages(services: Services, data: PushJobData): Promise<PushMessage[]> {
  const selection =
    'deliveries' in data
      ? sql`(s.id, n.id) in (select * from unnest(${`{${data.deliveries.map((d) => Math.trunc(d.subscriptionId)).join(',')}}`}::bigint[],
                                                   ${`{${data.deliveries.map((d) => d.notificationId).join(',')}}`}::uuid[]))`
      : sql`n.dispatch_id = ${data.dispatchId}::uuid and n.notifiable_id > ${data.afterUserId} and n.notifiable_id <= ${data.lastUserId}`;
  const rows = await services.db.tenant(data.tenantId, (tx) =>
    tx.execute<{ subscription_id: string; notification_id: string; endpoint: string; p256dh: string; auth: string; data: NotificationData }>(sql`
      select s.id as subscription_id, n.id as notification_id, s.endpoint, s.p256dh, s.auth, n.data
      from notifications n
      join users u on u.tenant_id = n.tenant_id and u.id = n.notifiable_id
      join push_subscriptions s on s.tenant_id = n.tenant_id and s.user_id = n.notifiable_id
      where n.notifiable_type = 'user' and u.active and u.deleted_at is null and not u.group_account
        and ${selection}`),
  );
  return rows.map((row) => ({
    subscriptionId: Number(row.subscription_id),
    notificationId: row.notification_id,
    endpoint: row.endpoint,
    p256dh: row.p256dh,
    auth: row.auth,
    data: row.data,
  }));
}

async function sendOne(services: Services, keys: VapidKeys, message: PushMessage): Promise<Outcome> {
  let details: ReturnType<typeof webPush.generateRequestDetails>;
  try {
    details = webPush.generateRequestDetails(
      { endpoint: message.endpoint, keys: { p256dh: message.p256dh, auth: message.auth } },
      pushPayload(message.notificationId, message.data),
      {
        vapidDetails: { subject: services.config.vapidSubject, publicKey: keys.publicKey, privateKey: keys.privateKey },
        TTL: PUSH_TTL_SECONDS,
        contentEncoding: 'aes128gcm',
      },
    );
  } catch (error) {
    return { kind: 'failed', status: null, error: `cannot encrypt for this subscription: ${(error as Error).message}` };
  }
  const headers = Object.fromEntries(Object.entries(details.headers).map(([name, value]) => [name, String(value)]));
  try {
    // Plain http is admitted only inside the operator allow-list (subscription-input.ts), and
    // checked again here on the address connected to: a name may resolve elsewhere by now.
    const response = await services.outbound.send(
      { url: details.endpoint, method: 'POST', headers, body: details.body ?? undefined },
      { allowListedOnly: new URL(details.endpoint).protocol === 'http:' },
    );
    const verdict = judgePushResponse(response.status);
    if (verdict === 'sent' || verdict === 'gone') return { kind: verdict };
    const error = `HTTP ${response.status}${response.status >= 300 && response.status < 400 ? ': redirects are not followed' : ''}`;
    if (verdict === 'retry') return { kind: 'retry', status: response.status, error, retryAfterMs: retryAfterMs(response.headers['retry-after'], new Date()) };
    return { kind: 'failed', status: response.status, error };
  } catch (error) {
    if (!(error instanceof OutboundError)) throw error;
    return error.kind === 'refused' ? { kind: 'failed', status: null, error: error.message } : { kind: 'retry', status: null, error: error.message };
  }
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function inPool<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index]!);
    }
  });
  await Promise.all(lanes);
  return results;
}

/** Sends the job's messages and applies the outcomes with a constant number of queries. */
export async function sendPushes(services: Services, data: PushJobData): Promise<{ sent: number; gone: number; retried: number; failed: number }> {
  const messages = await loadMessages(services, data);
  const tally = { sent: 0, gone: 0, retried: 0, failed: 0 };
  if (messages.length === 0) return tally;
  const keys = await vapidKeys(services.config, services.db);
  const outcomes = await inPool(messages, CONCURRENCY, (message) => sendOne(services, keys, message));
  const attempt = 'attempt' in data ? data.attempt : 1;
  const { pushMaxAttempts, pushRetryDelayMs } = services.config;

  const gone = new Set<number>();
  const failures = new Map<number, { status: number | null; error: string }>();
  const retries = new Map<number, PushRetry['deliveries']>(); // delay → deliveries
  outcomes.forEach((outcome, index) => {
    const message = messages[index]!;
    if (outcome.kind === 'sent') tally.sent++;
    else if (outcome.kind === 'gone') {
      tally.gone++;
      gone.add(message.subscriptionId);
    } else if (outcome.kind === 'retry' && attempt < pushMaxAttempts) {
      tally.retried++;
      const delay = Math.max(pushRetryDelayMs * 2 ** (attempt - 1), outcome.retryAfterMs ?? 0);
      retries.set(delay, [...(retries.get(delay) ?? []), { subscriptionId: message.subscriptionId, notificationId: message.notificationId }]);
    } else {
      tally.failed++;
      failures.set(message.subscriptionId, {
        status: outcome.status,
        error: outcome.kind === 'retry' ? `${outcome.error} (gave up after ${attempt} attempts)` : outcome.error,
      });
    }
  });

  await services.db.tenant(data.tenantId, async (tx) => {
    if (gone.size > 0) await tx.execute(sql`delete from push_subscriptions where id = any(${`{${[...gone].join(',')}}`}::bigint[])`);
    const recorded = [...failures].filter(([id]) => !gone.has(id));
    if (recorded.length > 0) {
      await tx.execute(sql`
        update push_subscriptions s
        set last_failure_status = f.status, last_failure = f.error, last_failure_at = now()
        from jsonb_to_recordset(${JSON.stringify(recorded.map(([id, failure]) => ({ id, ...failure })))}::jsonb)
             as f(id bigint, status integer, error text)
        where s.id = f.id`);
    }
  });
  for (const [delay, deliveries] of retries) {
    await services.jobs.send(sendPushJob, { tenantId: data.tenantId, attempt: attempt + 1, deliveries }, { startAfter: new Date(Date.now() + delay) });
  }
  return tally;
}

export const sendPushJob = defineJob<PushJobData>({
  name: 'push.send',
  // pg-boss retries only cover failures of Atrium itself (database down); push-service
  // answers are handled above with their own backoff. Known limit: there is no per-message
  // progress record, so a job that fails after sending (recording the outcomes or
  // queueing the retries fails, or the process dies mid-batch) is run again by pg-boss and
  // sends the batch's messages again: delivery is at least once, and a device may show a
  // notification twice (a service worker that uses the message `id` as the notification
  // `tag` makes the browser replace it instead).
  queue: { retryLimit: 3, retryDelay: 5, retryBackoff: true },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data, services) {
    await sendPushes(services, data);
  },
});
