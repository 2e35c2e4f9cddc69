import { createHash } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ProblemError } from './problem.ts';

export interface RateLimitOptions {
  /** Requests per window per access token; 0: no such limit. */
  perToken: number;
  /** Requests per window per client address (an IPv6 client by its /64); 0: no such limit. */
  perAddress: number;
  windowSeconds: number;
}

/** Paths no limit counts: probes and the metrics scrape (machines on a schedule). */
const UNCOUNTED = /^\/(health\/|metrics(\?|$))/;

/** What a limiter said of one request (@fastify/rate-limit's `createRateLimit`). */
interface Verdict {
  isAllowed: boolean;
  max?: number;
  remaining?: number;
  ttlInSeconds?: number;
  isExceeded?: boolean;
}

/** The token a request presents, as a key that does not hold it: its SHA-256. */
function tokenKey(request: FastifyRequest): string | null {
  const match = /^Bearer +(\S+)/i.exec(request.headers.authorization ?? '');
  return match ? `token:${createHash('sha256').update(match[1]!).digest('base64url')}` : null;
}

/**
 * The general rate limit (@fastify/rate-limit, fixed windows in this process's memory):
 * every request counts against its client address and, when it presents a bearer token,
 * against that token, before authentication (so floods of made-up tokens cost no database
 * query and still count against their address). Every counted answer carries
 * `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (seconds; the IETF
 * draft's separate fields) of the tighter of the two; beyond either limit the answer is a
 * 429 problem document with `Retry-After`. Sign-in keeps its own, stricter limit.
 */
export async function registerRateLimit(app: FastifyInstance, options: RateLimitOptions): Promise<void> {
  if (options.perToken === 0 && options.perAddress === 0) return;
  await app.register(rateLimit, { global: false, enableDraftSpec: true, timeWindow: options.windowSeconds * 1000, ipv6Subnet: 64 });
  const perAddress = options.perAddress > 0 ? app.createRateLimit({ max: options.perAddress }) : null;
  const perToken = options.perToken > 0 ? app.createRateLimit({ max: options.perToken, keyGenerator: (request) => tokenKey(request) ?? '' }) : null;

  app.addHook('onRequest', async (request, reply) => {
    if (UNCOUNTED.test(request.url)) return;
    const verdicts: Verdict[] = [];
    if (perAddress) verdicts.push(await perAddress(request));
    if (perToken && tokenKey(request)) verdicts.push(await perToken(request));
    const counted = verdicts.filter((verdict) => !verdict.isAllowed);
    if (counted.length === 0) return;
    const exceeded = counted.filter((verdict) => verdict.isExceeded);
    // Report the limit the client is closest to, or, once refused, the one that refused it last the longest.
    const shown =
      exceeded.length > 0
        ? exceeded.reduce((a, b) => (a.ttlInSeconds! >= b.ttlInSeconds! ? a : b))
        : counted.reduce((a, b) => (a.remaining! <= b.remaining! ? a : b));
    reply.header('ratelimit-limit', shown.max).header('ratelimit-remaining', shown.remaining).header('ratelimit-reset', shown.ttlInSeconds);
    if (exceeded.length > 0) {
      throw new ProblemError(429, `Too many requests; retry in ${shown.ttlInSeconds} seconds.`, { headers: { 'retry-after': String(shown.ttlInSeconds) } });
    }
  });
}
