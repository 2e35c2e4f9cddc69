import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import helmet, { type HelmetOptions } from 'helmet';

/**
 * Security headers for an API whose answers are JSON, problem documents, pictures and CSV
 * (helmet): nothing an answer holds may run, load anything, be framed or be sniffed as
 * another type, and no referrer leaves. Resources stay loadable by pages of other origins
 * (`Cross-Origin-Resource-Policy: cross-origin`): a profile picture's signed URL is meant
 * to be an `<img>` on the client's page, and everything else needs a token that such a
 * page cannot attach. HSTS is sent always; browsers only heed it over HTTPS. The reference
 * page (`/docs`) replaces the policy with its own (`API_REFERENCE_CSP_DIRECTIVES` in
 * api-reference.ts).
 */
const OPTIONS: HelmetOptions = {
  contentSecurityPolicy: {
    useDefaults: false,
    directives: { defaultSrc: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"], frameAncestors: ["'none'"] },
  },
  crossOriginResourcePolicy: { policy: 'cross-origin' },
  xFrameOptions: { action: 'deny' },
  referrerPolicy: { policy: 'no-referrer' },
  strictTransportSecurity: { maxAge: 31_536_000, includeSubDomains: false },
};

/**
 * The headers helmet sets with `OPTIONS`, taken once: none of them depends on the request
 * (no directive is a function of it), so each answer is given the same set instead of
 * running helmet's middleware per request.
 */
function securityHeaders(): Readonly<Record<string, string>> {
  const headers: Record<string, string> = {};
  const response = {
    setHeader: (name: string, value: string | number | readonly string[]) => (headers[name.toLowerCase()] = String(value)),
    removeHeader: (name: string) => delete headers[name.toLowerCase()],
  };
  let failure: unknown;
  helmet(OPTIONS)({} as IncomingMessage, response as unknown as ServerResponse, (error?: unknown) => (failure = error));
  if (failure !== undefined) throw new Error('helmet refused the security header options', { cause: failure });
  return Object.freeze(headers);
}

/**
 * Answers hold access tokens (sign-in, login and SCIM tokens) and personal data: no cache
 * keeps them (RFC 9111 `no-store`; RFC 6749 §5.1 asks it of token answers). An answer
 * meant to be cached says so itself (a profile picture, the JWKS), replacing this one.
 */
const NOT_STORED = { 'cache-control': 'no-store' };

/** What every answer carries unless it says otherwise: the security headers and `NOT_STORED`. */
export const ANSWER_HEADERS: Readonly<Record<string, string>> = Object.freeze({ ...securityHeaders(), ...NOT_STORED });

/**
 * `ANSWER_HEADERS` on every answer, from the first hook on (registered before CORS, whose
 * preflight answers in its own hook). The refusals made before any hook runs (the router's,
 * Node's parser's) add them themselves (error-handler.ts).
 */
export function registerSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onRequest', (_request, reply, done) => {
    reply.headers(ANSWER_HEADERS);
    done();
  });
}
