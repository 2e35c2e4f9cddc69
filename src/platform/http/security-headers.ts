import helmet from '@fastify/helmet';
import type { FastifyInstance } from 'fastify';

/**
 * The policy of the interactive reference (`/docs`, set by @fastify/swagger-ui on its own
 * routes): its scripts, styles, fonts and images come from this server; the spec it shows
 * is fetched from this server; nothing may frame it but this origin.
 */
export const DOCS_CONTENT_SECURITY_POLICY =
  "default-src 'self'; base-uri 'self'; connect-src 'self'; font-src 'self' data:; form-action 'self'; frame-ancestors 'self'; img-src 'self' data:; object-src 'none'; script-src 'self'; script-src-attr 'none'; style-src 'self'";

/**
 * Security headers for an API whose answers are JSON, problem documents, pictures and CSV
 * (@fastify/helmet): nothing an answer holds may run, load anything, be framed or be
 * sniffed as another type, and no referrer leaves. Resources stay loadable by pages of
 * other origins (`Cross-Origin-Resource-Policy: cross-origin`): a profile picture's signed
 * URL is meant to be an `<img>` on the client's page, and everything else needs a token
 * that such a page cannot attach. HSTS is sent always; browsers only heed it over HTTPS.
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
