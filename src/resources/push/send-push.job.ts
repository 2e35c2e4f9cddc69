/**
 * Web Push delivery (docs/notifications.md#push): one job per stored notification batch
 * sends the batch's notifications to every subscription of its recipients, loaded with ONE
 * set-based query and their shared contents with one more (a 10,000-recipient fan-out is two
 * batches, so four queries, never one per user). A job sends at most `pushMessagesPerJob`
 * messages, so that it ends within its expiry; the rest is another job. Messages are
 * encrypted (RFC 8291, aes128gcm) and signed (VAPID, RFC 8292) by `web-push`'s
 * `generateRequestDetails`, and sent through the outbound client (timeouts, no redirects,
 * the address policy on the address connected to).
 *
 * Each send is judged by the shared delivery rules (docs/outbound-delivery.md#delivery-outcomes)
 * with 404 and 410 as gone, and settled by `settleOutcomes` (rules.ts): gone subscriptions
 * are deleted, retries become jobs of their own, other failures are recorded on the
 * subscription. A failure without an HTTP response is recorded only as "the destination is
 * not allowed" or "could not be delivered" (the subscriber must not learn which network
 * failure it was; the server log has the reason).
 */
import { OUTBOUND_CONCURRENCY } from '../../platform/outbound/client.ts';
import type webPushModule from 'web-push';
import type { Tx } from '../../platform/database/database.ts';
import { defineJob } from '../../platform/jobs/define.ts';
import { turnPriority } from '../../platform/jobs/jobs.ts';
import { attemptDelivery, type DeliveryOutcome } from '../../platform/outbound/delivery-outcome.ts';
import type { Services } from '../../platform/services.ts';
import { loadMessages, recordOutcomes, type BatchRecipients, type PushMessage } from './queries.ts';
import { GONE_STATUSES, pushPayloads, settleOutcomes, type PushDelivery, type PushTally } from './rules.ts';
import { vapidKeys, type VapidKeys } from './vapid.ts';

/** The recipients `(afterUserId, lastUserId]` of one stored batch of a dispatch. */
export interface PushBatch extends BatchRecipients {
  tenantId: number;
}

/** Messages to try again: attempt number `attempt` of each (subscription, notification). */
export interface PushRetry {
  tenantId: number;
  attempt: number;
  deliveries: PushDelivery[];
}

/**
 * How many jobs of the same work went before this one (a dispatch's earlier batches, the
 * job this one continues or retries); absent: none. Each counts a minute of the queue's
 * virtual time (`pushPriority`, `turnPriority`), about what a batch's job takes: another
 * dispatch's first push job queued meanwhile goes before a fan-out's later ones.
 */
interface Turn {
  turn?: number;
}

export type PushJobData = (PushBatch | PushRetry) & Turn;

/** The queue options of a push job that has `turn` jobs of the same work before it (docs/outbound-delivery.md#concurrency). */
export const pushPriority = (turn: number | undefined, due = Date.now()) => ({ priority: turnPriority(turn ?? 0, 60, due) });

/** How long push services keep an undelivered message (the device may be offline). */
const PUSH_TTL_SECONDS = 24 * 3600;
/** Requests in flight at once per job. */
const CONCURRENCY = 8;

/**
 * How long pg-boss lets a push job run (`expireInSeconds`). Past it, pg-boss deems the job
 * lost and runs it again, beside the first run if that is merely slow: every message of
 * the job would be sent twice. So each job is bounded to end well within it
 * (`pushMessagesPerJob`). pg-boss admits less than 24 hours.
 */
export const PUSH_JOB_EXPIRE_SECONDS = 30 * 60;

/** Of the expiry, what is kept for all but the requests: the queries, encrypting and signing, queueing the retries. */
const PUSH_JOB_SPARE_SECONDS = 5 * 60;

/**
 * The most messages one job sends, so that it ends within its expiry when every request
 * takes the whole OUTBOUND_TIMEOUT_MS (which bounds each, the connection included): as many
 * rounds of CONCURRENCY requests as fit in the expiry less the spare time, three at least
 * (24 messages, more than the 20 subscriptions one recipient may hold). With the 15 s
 * default that is 100 rounds, 800 messages, 25 minutes at the very worst; three rounds fit
 * up to a timeout of 500 s.
 */
export function pushMessagesPerJob(outboundTimeoutMs: number): number {
  const rounds = Math.floor(((PUSH_JOB_EXPIRE_SECONDS - PUSH_JOB_SPARE_SECONDS) * 1000) / outboundTimeoutMs);
  return CONCURRENCY * Math.max(3, rounds);
}

/**
 * The job's own messages, at most `limit`, and the rest of its work as a job of its own.
 * A batch is cut between recipients (in id order), so its rest is again a batch: the
 * recipients after the last one this job sends to. Never less than one recipient's
 * messages: one who held more than `limit` subscriptions (beyond the cap) would get the
 * first `limit`.
 */
async function jobShare(tx: Tx, data: PushJobData, limit: number): Promise<{ messages: PushMessage[]; rest: PushJobData | null }> {
  if ('deliveries' in data) {
    const rest = data.deliveries.length > limit ? { ...data, deliveries: data.deliveries.slice(limit) } : null;
    return { messages: await loadMessages(tx, { deliveries: data.deliveries.slice(0, limit) }), rest };
  }
  const loaded = await loadMessages(tx, data, limit + 1);
  if (loaded.length <= limit) return { messages: loaded, rest: null };
  const cut = loaded[limit]!.recipientId;
  const whole = loaded.filter((message) => message.recipientId < cut);
  const messages = whole.length > 0 ? whole : loaded.slice(0, limit);
  return { messages, rest: { ...data, afterUserId: messages.at(-1)!.recipientId } };
}

async function sendOne(
  services: Services,
  webPush: typeof webPushModule,
  keys: VapidKeys,
  payload: ReturnType<typeof pushPayloads>,
  message: PushMessage,
): Promise<DeliveryOutcome> {
  let details: ReturnType<typeof webPushModule.generateRequestDetails>;
  try {
    details = webPush.generateRequestDetails(
      { endpoint: message.endpoint, keys: { p256dh: message.p256dh, auth: message.auth } },
      payload(message.notificationId, message.data),
      {
        vapidDetails: { subject: services.config.vapidSubject, publicKey: keys.publicKey, privateKey: keys.privateKey },
        TTL: PUSH_TTL_SECONDS,
        contentEncoding: 'aes128gcm',
      },
    );
  } catch (error) {
    return { verdict: 'failed', responseStatus: null, durationMs: null, error: `cannot encrypt for this subscription: ${(error as Error).message}` };
  }
  const headers = Object.fromEntries(Object.entries(details.headers).map(([name, value]) => [name, String(value)]));
  // Plain http is admitted only inside the operator allow-list (rules.ts, endpointProblem),
  // and checked again here on the address connected to: a name may resolve elsewhere by now.
  return attemptDelivery(
    services.pushOutbound,
    { url: details.endpoint, method: 'POST', headers, body: details.body ?? undefined },
    { allowListedOnly: new URL(details.endpoint).protocol === 'http:', goneStatuses: GONE_STATUSES },
  );
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function inPool<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
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

/**
 * Sends the job's messages (at most `pushMessagesPerJob`; the rest is queued as another
 * job) and applies the outcomes with a constant number of queries.
 */
export async function sendPushes(services: Services, data: PushJobData): Promise<PushTally> {
  const limit = pushMessagesPerJob(services.config.outboundTimeoutMs);
  const { messages, rest } = await services.db.tenant(data.tenantId, (tx) => jobShare(tx, data, limit));
  // Queued first: another worker sends it meanwhile.
  if (rest) await services.jobs.send(sendPushJob, { ...rest, turn: (data.turn ?? 0) + 1 }, pushPriority((data.turn ?? 0) + 1));
  if (messages.length === 0) return { sent: 0, gone: 0, retried: 0, failed: 0 };
  const keys = await vapidKeys(services.config, services.db);
  // Loaded here: only a process that sends push messages holds the library (docs/performance.md#memory-of-a-started-process).
  const { default: webPush } = await import('web-push');
  const payload = pushPayloads();
  const outcomes = await inPool(messages, CONCURRENCY, (message) => sendOne(services, webPush, keys, payload, message));
  for (const outcome of outcomes) services.metrics.deliveries.inc({ channel: 'push', outcome: outcome.verdict });
  const attempt = 'attempt' in data ? data.attempt : 1;
  const policy = { maxAttempts: services.config.pushMaxAttempts, retryDelayMs: services.config.pushRetryDelayMs };
  const settlement = settleOutcomes(messages, outcomes, attempt, policy, new Date());
  await services.db.tenant(data.tenantId, (tx) => recordOutcomes(tx, settlement));
  for (const [at, deliveries] of settlement.retries) {
    const turn = (data.turn ?? 0) + 1;
    await services.jobs.send(
      sendPushJob,
      { tenantId: data.tenantId, attempt: attempt + 1, deliveries, turn },
      { startAfter: new Date(at), ...pushPriority(turn, at) },
    );
  }
  return settlement.tally;
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
  queue: { retryLimit: 3, retryDelay: 5, retryBackoff: true, expireInSeconds: PUSH_JOB_EXPIRE_SECONDS },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  // Each waits on a receiver up to OUTBOUND_TIMEOUT_MS: one tenant's that hangs holds one worker, not the process's deliveries.
  concurrency: OUTBOUND_CONCURRENCY,
  async handle(data, services) {
    await sendPushes(services, data);
  },
});
