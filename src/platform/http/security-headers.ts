import helmet from '@fastify/helmet';
import type { FastifyInstance } from 'fastify';

/**
 * Security headers for an API whose answers are JSON, problem documents, pictures and CSV
 * (@fastify/helmet): nothing an answer holds may run, load anything, be framed or be
 * sniffed as another type, and no referrer leaves. Resources stay loadable by pages of
 * other origins (`Cross-Origin-Resource-Policy: cross-origin`): a profile picture's signed
 * URL is meant to be an `<img>` on the client's page, and everything else needs a token
 * that such a page cannot attach. HSTS is sent always; browsers only heed it over HTTPS.
 * The reference page (`/docs`) replaces the policy with its own (`API_REFERENCE_CSP_DIRECTIVES`
 * in api-reference.ts).
 */
export async function registerSecurityHeaders(app: FastifyInstance): Promise<void> {
  await app.register(helmet, {
    contentSecurityPolicy: {
      useDefaults: false,
      directives: { defaultSrc: ["'none'"], baseUri: ["'none'"], formAction: ["'none'"], frameAncestors: ["'none'"] },
    },
    crossOriginResourcePolicy: { policy: 'cross-origin' },
    xFrameOptions: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    strictTransportSecurity: { maxAge: 31_536_000, includeSubDomains: false },
  });
}
