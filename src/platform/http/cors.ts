import cors from '@fastify/cors';
import type { FastifyInstance } from 'fastify';

/** Request headers a browser page may send besides the CORS-safelisted ones. */
const ALLOWED_HEADERS = ['Authorization', 'Content-Type', 'X-Request-Id', 'Last-Event-ID', 'Idempotency-Key', 'If-None-Match', 'If-Match'];

/**
 * Response headers a page may read besides the safelisted ones: where a created record is,
 * when to retry, the rate limit's state, the request's id, a download's file name, a
 * list's next page, a picture's validator, whether a retry was replayed, an operation's
 * deprecation, and the methods a path is served with (a 405's `Allow`).
 */
export const EXPOSED_HEADERS = [
  'Location',
  'Retry-After',
  'RateLimit-Limit',
  'RateLimit-Remaining',
  'RateLimit-Reset',
  'X-Request-Id',
  'Content-Disposition',
  'Link',
  'ETag',
  'Idempotent-Replayed',
  'Deprecation',
  'Sunset',
  'Allow',
];

/**
 * Cross-origin access for the browser pages of `origins` (`CORS_ORIGINS`; `*` any). A
 * preflight (`OPTIONS` with `Origin`) from a listed origin is answered 204 with the
 * methods, `Authorization` among the allowed headers, and a cache lifetime; from any other
 * origin it is answered without `Access-Control-Allow-Origin`, so the browser refuses the
 * call. Credentials (cookies) are not involved: the API takes bearer tokens. With no
 * origins configured nothing is registered and `OPTIONS` is answered as any method a path
 * is not served with (405, or 404 for an unknown path).
 */
export async function registerCors(app: FastifyInstance, origins: string[]): Promise<void> {
  if (origins.length === 0) return;
  await app.register(cors, {
    origin: origins.includes('*') ? '*' : origins,
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
    allowedHeaders: ALLOWED_HEADERS,
    exposedHeaders: EXPOSED_HEADERS,
    credentials: false,
    maxAge: 600,
    // An `OPTIONS` without the preflight headers is answered like a preflight (204)
    // instead of the plugin's plain-text 400: every refusal here is a problem document.
    strictPreflight: false,
  });
}

/**
 * The allowance that `registerCors` gives an answer to `origin`, for a refusal made before
 * its hook runs (the router's): a page of a listed origin can then read the problem
 * document. Empty for an origin not listed, or none.
 */
export function corsAnswerHeaders(origins: readonly string[], origin: string | undefined): Record<string, string> {
  if (origin === undefined || origins.length === 0) return {};
  const any = origins.includes('*');
  if (!any && !origins.includes(origin)) return {};
  return {
    'access-control-allow-origin': any ? '*' : origin,
    'access-control-expose-headers': EXPOSED_HEADERS.join(', '),
    ...(any ? {} : { vary: 'Origin' }),
  };
}
