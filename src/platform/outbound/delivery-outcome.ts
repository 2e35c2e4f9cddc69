/**
 * What one outbound delivery attempt (a webhook call, a Web Push message) came to, and
 * what happens next: the rules every channel that delivers through the outbound client
 * shares (docs/outbound-delivery.md#delivery-outcomes, docs/outbound-delivery.md#backoff-and-retry-after).
 *
 * - An HTTP answer: 2xx succeeded; 429 and 5xx retry; a status the channel names as gone
 *   (Web Push: 404, 410, the subscription no longer exists) gone; anything else (other
 *   4xx, a 3xx, since redirects are never followed) failed.
 * - No HTTP answer (an `OutboundError`): a refused destination failed, any other failure
 *   (timeout, reset, DNS, TLS) retry. It is recorded only as the error's message, "the
 *   destination is not allowed" or "could not be delivered", and without a duration:
 *   which network failure it was, or how long it took, would let tenant users map the
 *   network behind Atrium (docs/security.md#6-outbound-requests-and-the-ssrf-policy).
 *   The client logs the reason.
 * - Retry: after the base delay doubled per attempt up to a day, or the receiver's
 *   `Retry-After` when that is longer (at most an hour), until the channel's number of
 *   attempts is spent.
 */
import { OutboundError, type OutboundClient, type OutboundRequest, type OutboundResponse } from './client.ts';

export type Verdict = 'succeeded' | 'retry' | 'failed' | 'gone';

/** One attempt, as it is recorded and judged. */
export interface DeliveryOutcome {
  verdict: Verdict;
  /** The HTTP status, null when there was no answer. */
  responseStatus: number | null;
  /** How long the exchange took, null when there was no answer. */
  durationMs: number | null;
  /** What tenant users are told went wrong; null on success. */
  error: string | null;
  /** The receiver's `Retry-After` in milliseconds, when it sent a usable one. */
  retryAfterMs?: number;
}

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  maxAttempts: number;
  /** Delay before the first retry; doubled for each further one. */
  retryDelayMs: number;
}

export interface JudgeOptions {
  /** Statuses meaning the destination no longer exists (Web Push: 404, 410); none by default. */
  goneStatuses?: readonly number[];
}

/** Longest wait a receiver's `Retry-After` can impose. */
export const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Where the doubling stops: a day. Unbounded, 30 s doubled 39 times (attempt 40, which
 * WEBHOOK_MAX_ATTEMPTS and PUSH_MAX_ATTEMPTS admit) is past the last date JavaScript holds.
 */
export const MAX_RETRY_DELAY_MS = 24 * 3_600_000;

/** `Retry-After` as seconds or an HTTP date → milliseconds from `now` (undefined when absent, unreadable or not in the future). */
export function retryAfterMs(header: string | string[] | undefined, now: Date): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  const ms = /^\d+$/.test(value.trim()) ? Number(value.trim()) * 1000 : Date.parse(value) - now.getTime();
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_AFTER_MS) : undefined;
}

/**
 * What an HTTP status means for the delivery: 2xx succeeded, 429 and 5xx retry, anything
 * else (a status past 599 too, which Node's client passes on) failed. It takes the status alone, so `statuses.map(judgeResponse)` works; a channel
 * with gone statuses uses `judgeResponseWithGone`.
 */
export function judgeResponse(status: number): Verdict {
  if (status >= 200 && status < 300) return 'succeeded';
  if ((status >= 500 && status < 600) || status === 429) return 'retry';
  return 'failed';
}

/** `judgeResponse`, except that the statuses in `goneStatuses` (a 2xx never) are gone. */
export function judgeResponseWithGone(status: number, goneStatuses: readonly number[]): Verdict {
  const verdict = judgeResponse(status);
  return verdict !== 'succeeded' && goneStatuses.includes(status) ? 'gone' : verdict;
}

/** What tenant users are told about an HTTP answer: null for 2xx, otherwise the status. */
export function responseError(status: number): string | null {
  if (status >= 200 && status < 300) return null;
  if (status >= 300 && status < 400) return `HTTP ${status}: redirects are not followed`;
  return `HTTP ${status}`;
}

/** The outcome of an HTTP answer; `now` is when it arrived (for an HTTP-date `Retry-After`). */
export function responseOutcome(response: Pick<OutboundResponse, 'status' | 'headers' | 'durationMs'>, now: Date, options: JudgeOptions = {}): DeliveryOutcome {
  const outcome: DeliveryOutcome = {
    verdict: judgeResponseWithGone(response.status, options.goneStatuses ?? []),
    responseStatus: response.status,
    durationMs: response.durationMs,
    error: responseError(response.status),
  };
  const retryAfter = retryAfterMs(response.headers['retry-after'], now);
  if (retryAfter !== undefined) outcome.retryAfterMs = retryAfter;
  return outcome;
}

/**
 * The outcome of a request that got no HTTP answer: the error's message only, no status
 * and no duration (see the header). A refused destination and a request the client will
 * not send are final; anything else may work on a later attempt.
 */
export function failureOutcome(error: OutboundError): DeliveryOutcome {
  const final = error.kind === 'refused' || error.kind === 'invalid';
  return { verdict: final ? 'failed' : 'retry', responseStatus: null, durationMs: null, error: error.message };
}

/**
 * Sends `request` once through the outbound client. Any HTTP answer or `OutboundError`
 * becomes an outcome; any other error (a defect, not the destination's doing) is rethrown.
 * `allowListedOnly`: connect only to addresses the operator allow-list admits.
 */
export async function attemptDelivery(
  outbound: OutboundClient,
  request: OutboundRequest,
  options: JudgeOptions & { allowListedOnly?: boolean } = {},
): Promise<DeliveryOutcome> {
  try {
    const response = await outbound.send(request, { allowListedOnly: options.allowListedOnly });
    return responseOutcome(response, new Date(), options);
  } catch (error) {
    if (!(error instanceof OutboundError)) throw error;
    return failureOutcome(error);
  }
}

/**
 * The delivery's state after attempt number `attempt` (1 for the first), and when to try
 * again: the base delay doubled per attempt, at most MAX_RETRY_DELAY_MS (a base longer than
 * that is kept, undoubled), or the receiver's `Retry-After` when that is longer. Failed and
 * gone are final, and so is a retry once `maxAttempts` are spent.
 */
export function nextState(
  outcome: Pick<DeliveryOutcome, 'verdict' | 'retryAfterMs'>,
  attempt: number,
  policy: RetryPolicy,
  now: Date,
): { status: 'succeeded' | 'retrying' | 'failed'; retryAt: Date | null } {
  if (outcome.verdict === 'succeeded') return { status: 'succeeded', retryAt: null };
  if (outcome.verdict === 'retry' && attempt < policy.maxAttempts) {
    const doubled = Math.min(policy.retryDelayMs * 2 ** (attempt - 1), Math.max(policy.retryDelayMs, MAX_RETRY_DELAY_MS));
    const delay = Math.max(doubled, outcome.retryAfterMs ?? 0);
    return { status: 'retrying', retryAt: new Date(now.getTime() + delay) };
  }
  return { status: 'failed', retryAt: null };
}
