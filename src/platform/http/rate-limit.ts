import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { clientOf } from './client-address.ts';
import { corsAnswerHeaders } from './cors.ts';
import { ProblemError } from './problem.ts';

export interface RateLimitOptions {
  /** Requests per window per access token; 0: no such limit. */
  perToken: number;
  /** Requests per window per client address (an IPv6 client by its /64); 0: no such limit. */
  perAddress: number;
  windowSeconds: number;
  /**
   * The CORS origins (`CORS_ORIGINS`): the limit counts before CORS answers a preflight, so
   * its refusal carries a listed origin's allowance itself (`corsAnswerHeaders`).
   */
  corsOrigins: readonly string[];
}

/** Paths no limit counts: probes and the metrics scrape (machines on a schedule). */
const UNCOUNTED = /^\/(health\/|metrics(\?|$))/;

/** Keys a limit keeps in memory at most; past it, the window that ends first is forgotten. */
export const MAX_KEYS = 10_000;

/** One key's requests in its window. */
interface Window {
  count: number;
  /** When the window ends (ms since the epoch). */
  endsAt: number;
}

/**
 * A limit of `max` requests a key in fixed windows of `ms`, each starting with the key's
 * first request after the last one ended. The windows are kept in the order they started,
 * which, all being as long, is the order they end in: the expired ones and, past
 * `MAX_KEYS`, the one ending first are dropped from the front.
 */
export class Limit {
  private readonly windows = new Map<string, Window>();
  /** How many keys are kept (tests). */
  get size(): number {
    return this.windows.size;
  }

  constructor(
    readonly max: number,
    private readonly ms: number,
    readonly keyOf: (request: FastifyRequest) => string | null,
  ) {}

  /** Counts a request of `key` at `now`: its window, the request counted. */
  count(key: string, now: number): Window {
    let window = this.windows.get(key);
    if (window === undefined || window.endsAt <= now) {
      if (window !== undefined) this.windows.delete(key);
      else if (this.windows.size >= MAX_KEYS) this.forget(now);
      window = { count: 0, endsAt: now + this.ms };
      this.windows.set(key, window);
    }
    window.count++;
    return window;
  }

  private forget(now: number): void {
    for (const [key, window] of this.windows) {
      if (window.endsAt > now && this.windows.size < MAX_KEYS) return;
      this.windows.delete(key);
    }
  }
}

/** The token a request presents, as a key that does not hold it: its SHA-256. */
function tokenKey(request: FastifyRequest): string | null {
  const match = /^Bearer +(\S+)/i.exec(request.headers.authorization ?? '');
  return match ? createHash('sha256').update(match[1]!).digest('base64url') : null;
}

/**
 * The general rate limit (fixed windows in this process's memory): every request counts
 * against its client address and, when it presents a bearer token, against that token,
 * before authentication (so floods of made-up tokens cost no database query and still
 * count against their address). Every counted answer carries `RateLimit-Limit`,
 * `RateLimit-Remaining` and `RateLimit-Reset` (seconds; the IETF draft's separate fields)
 * of the limit the client is closest to; beyond either limit the answer is a 429 problem
 * document with `Retry-After`, that of the limit refusing it longest. Sign-in keeps its
 * own, stricter limit.
 */
export function registerRateLimit(app: FastifyInstance, options: RateLimitOptions): void {
  const ms = options.windowSeconds * 1000;
  const limits: Limit[] = [];
  if (options.perAddress > 0) limits.push(new Limit(options.perAddress, ms, (request) => clientOf(request.ip)));
  if (options.perToken > 0) limits.push(new Limit(options.perToken, ms, tokenKey));
  if (limits.length === 0) return;

  app.addHook('onRequest', (request, reply, done) => {
    if (UNCOUNTED.test(request.url)) return done();
    const now = Date.now();
    let shown: { max: number; window: Window } | undefined;
    let refused = false;
    for (const limit of limits) {
      const key = limit.keyOf(request);
      if (key === null) continue;
      const window = limit.count(key, now);
      const over = window.count > limit.max;
      // Shown: the limit refusing longest, or, none refusing, the one with the fewest requests left (the first on a tie).
      if (
        shown === undefined ||
        (over && (!refused || window.endsAt > shown.window.endsAt)) ||
        (!over && !refused && limit.max - window.count < shown.max - shown.window.count)
      ) {
        shown = { max: limit.max, window };
      }
      refused ||= over;
    }
    if (shown === undefined) return done();
    const reset = Math.ceil((shown.window.endsAt - now) / 1000);
    reply
      .header('ratelimit-limit', shown.max)
      .header('ratelimit-remaining', Math.max(0, shown.max - shown.window.count))
      .header('ratelimit-reset', reset);
    if (!refused) return done();
    const origin = typeof request.headers.origin === 'string' ? request.headers.origin : undefined;
    const headers = { 'retry-after': String(reset), ...corsAnswerHeaders(options.corsOrigins, origin) };
    done(new ProblemError(429, `Too many requests; retry in ${reset} seconds.`, { headers }));
  });
}
