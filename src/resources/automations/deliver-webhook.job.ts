/**
 * Delivery of an automation's webhook: one job run is one attempt. Outcomes: 2xx →
 * succeeded; 5xx, 429, timeouts and network errors → retried with exponential backoff
 * until `WEBHOOK_MAX_ATTEMPTS`; anything else (other 4xx, an unfollowed 3xx, a refused
 * destination) → failed at once. Every attempt is recorded. An attempt without an HTTP
 * response records only "the destination is not allowed" or "could not be delivered"
 * and no duration: which network failure it was (refused, reset, timeout, DNS, TLS)
 * would map the network for the tenant (see `WebhookDelivery` in the spec).
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import { defineJob } from '../../platform/jobs/define.ts';
import { OutboundError } from '../../platform/outbound/client.ts';
import type { Services } from '../../platform/services.ts';
import { signWebhookJwt } from './jwt-keys.ts';
import { automations, webhookDeliveries, webhookDeliveryAttempts, type DeliveryStatus } from './table.ts';
import { unsealSecrets, type WebhookConfiguration } from './webhook-configuration.ts';
import { buildWebhookRequest } from './webhook-request.ts';

export interface DeliverWebhookData {
  tenantId: number;
  deliveryId: number;
  /** The attempt this job makes; a job whose attempt was already claimed does nothing. */
  attempt: number;
}

export interface AttemptOutcome {
  responseStatus: number | null;
  durationMs: number | null;
  error: string | null;
  verdict: 'succeeded' | 'retry' | 'failed';
  /** The receiver's `Retry-After`, in milliseconds, when it sent one. */
  retryAfterMs?: number;
}

/** Longest wait a receiver's `Retry-After` can impose. */
const MAX_RETRY_AFTER_MS = 3_600_000;

/** `Retry-After` as seconds or an HTTP date → milliseconds from `now` (undefined when absent or unreadable). */
export function retryAfterMs(header: string | string[] | undefined, now: Date): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  const ms = /^\d+$/.test(value.trim()) ? Number(value.trim()) * 1000 : Date.parse(value) - now.getTime();
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_AFTER_MS) : undefined;
}

/** What an HTTP status means for the delivery. */
export function judgeResponse(status: number): AttemptOutcome['verdict'] {
  if (status >= 200 && status < 300) return 'succeeded';
  if (status >= 500 || status === 429) return 'retry';
  return 'failed';
}

function responseError(status: number): string | null {
  if (status >= 200 && status < 300) return null;
  if (status >= 300 && status < 400) return `HTTP ${status}: redirects are not followed`;
  return `HTTP ${status}`;
}

/**
 * The delivery's state after attempt number `attempt`, and when to try again: the base
 * delay doubled per attempt, or the receiver's `Retry-After` when that is longer.
 */
export function nextState(
  outcome: Pick<AttemptOutcome, 'verdict' | 'retryAfterMs'>,
  attempt: number,
  policy: { maxAttempts: number; retryDelayMs: number },
  now: Date,
): { status: DeliveryStatus; retryAt: Date | null } {
  if (outcome.verdict === 'succeeded') return { status: 'succeeded', retryAt: null };
  if (outcome.verdict === 'retry' && attempt < policy.maxAttempts) {
    const delay = Math.max(policy.retryDelayMs * 2 ** (attempt - 1), outcome.retryAfterMs ?? 0);
    return { status: 'retrying', retryAt: new Date(now.getTime() + delay) };
  }
  return { status: 'failed', retryAt: null };
}

export const deliverWebhook = defineJob<DeliverWebhookData>({
  name: 'automations.deliver-webhook',
  // pg-boss retries only cover failures of Atrium itself (database down); HTTP outcomes
  // are attempts of their own, scheduled below with millisecond backoff. One job per fetch:
  // a failing job must not make pg-boss re-run the others of a batch.
  queue: { retryLimit: 3, retryDelay: 5, retryBackoff: true },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data, services) {
    await attemptDelivery(services, data);
  },
});

/**
 * Claims attempt number `attempt` of a delivery: only when it is still open, due, and its
 * recorded attempt count is `attempt - 1`, so a duplicated or late job cannot send twice.
 * The claim counts the attempt and moves `next_attempt_at` past the longest the request
 * can take, which keeps the sweeper and other jobs off it while it is in flight.
 */
async function claimAttempt(services: Services, { tenantId, deliveryId, attempt }: DeliverWebhookData): Promise<boolean> {
  const leaseSeconds = Math.ceil(services.config.outboundTimeoutMs / 1000) + 60;
  const claimed = await services.db.tenant(tenantId, (tx) =>
    tx
      .update(webhookDeliveries)
      .set({ attempts: attempt, nextAttemptAt: sql`now() + make_interval(secs => ${leaseSeconds})` })
      .where(
        and(
          eq(webhookDeliveries.id, deliveryId),
          eq(webhookDeliveries.attempts, attempt - 1),
          inArray(webhookDeliveries.status, ['pending', 'retrying']),
          sql`coalesce(${webhookDeliveries.nextAttemptAt}, ${webhookDeliveries.createdAt}) <= now()`,
        ),
      )
      .returning({ id: webhookDeliveries.id }),
  );
  return claimed.length > 0;
}

async function attemptDelivery(services: Services, data: DeliverWebhookData): Promise<void> {
  const { db, secrets, outbound, config, jobs } = services;
  const { tenantId, deliveryId, attempt } = data;
  // Already made or being made (a duplicated job), already final, or deleted: nothing to do.
  if (!(await claimAttempt(services, data))) return;
  const [found] = await db.tenant(tenantId, (tx) =>
    tx
      .select({ delivery: webhookDeliveries, automation: automations })
      .from(webhookDeliveries)
      .innerJoin(automations, and(eq(automations.tenantId, webhookDeliveries.tenantId), eq(automations.id, webhookDeliveries.automationId)))
      .where(eq(webhookDeliveries.id, deliveryId)),
  );
  if (!found) return; // deleted with its automation meanwhile
  const { delivery, automation } = found;
  const startedAt = new Date();

  let outcome: AttemptOutcome;
  let plain: WebhookConfiguration | null;
  try {
    plain = unsealSecrets(automation.config, secrets);
  } catch {
    plain = null;
  }
  if (!plain) {
    outcome = { responseStatus: null, durationMs: null, error: 'a stored secret cannot be decrypted (was ATRIUM_SECRET_KEY changed?)', verdict: 'failed' };
  } else {
    const request = await buildWebhookRequest(
      plain,
      { automationId: automation.id, eventId: delivery.eventId, payload: delivery.payload },
      (claims) => signWebhookJwt(db, claims),
      startedAt,
    );
    try {
      const response = await outbound.send(request);
      outcome = {
        responseStatus: response.status,
        durationMs: response.durationMs,
        error: responseError(response.status),
        verdict: judgeResponse(response.status),
        retryAfterMs: retryAfterMs(response.headers['retry-after'], new Date()),
      };
    } catch (error) {
      if (!(error instanceof OutboundError)) throw error;
      outcome = {
        responseStatus: null,
        durationMs: null,
        error: error.message,
        verdict: error.kind === 'refused' ? 'failed' : 'retry',
      };
    }
  }

  const finishedAt = new Date();
  const next = nextState(outcome, attempt, { maxAttempts: config.webhookMaxAttempts, retryDelayMs: config.webhookRetryDelayMs }, finishedAt);
  await db.tenant(tenantId, async (tx) => {
    await tx.insert(webhookDeliveryAttempts).values({
      tenantId,
      deliveryId,
      number: attempt,
      startedAt,
      responseStatus: outcome.responseStatus,
      durationMs: outcome.durationMs,
      error: outcome.error,
    });
    await tx
      .update(webhookDeliveries)
      .set({
        status: next.status,
        attempts: attempt,
        responseStatus: outcome.responseStatus,
        durationMs: outcome.durationMs,
        error: outcome.error,
        nextAttemptAt: next.retryAt,
        completedAt: next.status === 'succeeded' || next.status === 'failed' ? sql`now()` : null,
      })
      .where(eq(webhookDeliveries.id, deliveryId));
  });
  if (next.retryAt) await jobs.send(deliverWebhook, { tenantId, deliveryId, attempt: attempt + 1 }, { startAfter: next.retryAt });
}
