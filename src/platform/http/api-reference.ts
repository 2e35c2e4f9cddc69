/**
 * The interactive API reference at `/docs` (Scalar), served entirely from the installed
 * package: its script comes from `/docs/js/scalar.js`, the spec from
 * `/api/openapi.json` (the one URL that serves it), no font, telemetry, AI or proxy
 * service is contacted. Authentication entered on the page persists in the browser's local
 * storage (docs/running.md#the-api-reference).
 */
import { createHash } from 'node:crypto';
import apiReference from '@scalar/fastify-api-reference';
import type { FastifyInstance } from 'fastify';

export const API_REFERENCE_PREFIX = '/docs';
export const SPECIFICATION_URL = '/api/openapi.json';

/**
 * What the reference page needs of a Content-Security-Policy; nothing else may load.
 * `script-src` gets the hashes of the page's inline start-up script added per answer
 * (`withInlineScriptHashes`). Scalar sets inline styles, so `style-src` needs
 * 'unsafe-inline'; it shows images given as data URIs. Any policy that covers `/docs`
 * must allow at least this.
 */
export const API_REFERENCE_CSP_DIRECTIVES: Readonly<Record<string, readonly string[]>> = {
  'default-src': ["'self'"],
  'script-src': ["'self'"],
  'style-src': ["'self'", "'unsafe-inline'"],
  'img-src': ["'self'", 'data:'],
  'font-src': ["'self'", 'data:'],
  'connect-src': ["'self'"],
  'worker-src': ["'self'", 'blob:'],
  'object-src': ["'none'"],
  'base-uri': ["'none'"],
  'frame-ancestors': ["'none'"],
  'form-action': ["'self'"],
};

/** The policy header for a page, with the SHA-256 of each of its inline scripts allowed. */
export function withInlineScriptHashes(html: string): string {
  const hashes = [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map(
    ([, body]) => `'sha256-${createHash('sha256').update(body!).digest('base64')}'`,
  );
  return Object.entries(API_REFERENCE_CSP_DIRECTIVES)
    .map(([name, values]) => [name, ...values, ...(name === 'script-src' ? hashes : [])].join(' '))
    .join('; ');
}

export async function registerApiReference(app: FastifyInstance): Promise<void> {
  // A context of its own, so that the policy hook covers the reference's routes only.
  await app.register(async (reference) => {
    reference.addHook('onSend', async (_request, reply, payload) => {
      const html = String(reply.getHeader('content-type') ?? '').startsWith('text/html') && typeof payload === 'string';
      reply.header('content-security-policy', withInlineScriptHashes(html ? payload : ''));
      return payload;
    });
    // Browsers ask every site for an icon; answered here, not with a 404 problem.
    reference.get('/favicon.ico', async (_request, reply) => reply.code(204).send());
    await reference.register(apiReference, {
      routePrefix: API_REFERENCE_PREFIX,
      logLevel: 'warn',
      configuration: {
        url: SPECIFICATION_URL,
        pageTitle: 'Atrium API reference',
        persistAuth: true,
        withDefaultFonts: false,
        telemetry: false,
        showDeveloperTools: 'never',
        agent: { disabled: true },
        mcp: { disabled: true },
        defaultHttpClient: { targetKey: 'shell', clientKey: 'curl' },
        operationTitleSource: 'summary',
        authentication: { preferredSecurityScheme: 'bearerAuth' },
      },
    });
  });
}
