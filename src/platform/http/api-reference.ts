/**
 * The interactive API reference at `/docs` (Scalar), served entirely from the installed
 * package: its script comes from `/docs/js/scalar.js`, the spec from
 * `/api/openapi.json` (the one URL that serves it), no font, telemetry, AI or proxy
 * service is contacted. Authentication entered on the page persists in the browser's local
 * storage (docs/running.md#the-api-reference).
 *
 * The package (its script is several megabytes held in memory) is loaded on the first
 * request under `/docs`, not at start: a process that is never asked for the reference
 * never holds it (docs/performance.md#memory-of-a-started-process).
 */
import { createHash } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';

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

/** The package's options: the one spec URL, nothing contacted elsewhere. */
const REFERENCE_OPTIONS = {
  routePrefix: API_REFERENCE_PREFIX,
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
} as const;

/**
 * The package's paths this service passes on: the page (and the redirect to it from the
 * bare prefix) and its script. The package also answers its own copies of the spec at
 * `/docs/openapi.json` and `/docs/openapi.yaml` (given a URL, as here, they fail or
 * answer empty); those stay this service's 404, as the spec has one URL.
 */
const REFERENCE_PATHS = [API_REFERENCE_PREFIX, `${API_REFERENCE_PREFIX}/`, `${API_REFERENCE_PREFIX}/js/scalar.js`];

/** What the reference answers are made of: the package's answer headers passed on (its own framing is Fastify's). */
const PASSED_HEADERS = ['content-type', 'location', 'content-disposition'];

interface ReferenceAnswer {
  statusCode: number;
  headers: Record<string, unknown>;
  /** The page as text (the policy hook reads its inline scripts), anything else as bytes. */
  body: string | Buffer;
}

/**
 * The package's answer for each of its paths, asked once (its page and script do not change
 * while the process runs) and then kept: every request for the script (several MiB) is sent
 * the same buffer, so concurrent requests cost no memory of their own. The package's
 * routes are asked on an instance of their own that answers nothing but them, built on
 * the first call (`inject`, no socket).
 */
function referenceAnswers(): (path: string) => Promise<ReferenceAnswer> {
  const answers = new Map<string, Promise<ReferenceAnswer>>();
  let reference: Promise<FastifyInstance> | undefined;
  const build = async () => {
    const { default: apiReference } = await import('@scalar/fastify-api-reference');
    const instance = Fastify({ logger: false });
    await instance.register(apiReference, REFERENCE_OPTIONS as never);
    await instance.ready();
    return instance;
  };
  const ask = async (path: string): Promise<ReferenceAnswer> => {
    reference ??= build();
    const answer = await (await reference).inject({ method: 'GET', url: path });
    // A failure of the package is not kept: the next request asks again.
    if (answer.statusCode >= 500) throw new Error(`the API reference answered ${answer.statusCode} for ${path}`);
    const html = String(answer.headers['content-type'] ?? '').startsWith('text/html');
    return { statusCode: answer.statusCode, headers: answer.headers, body: html ? answer.body : answer.rawPayload };
  };
  return (path) => {
    let answer = answers.get(path);
    if (!answer) {
      // A failure is not kept: the next request asks again.
      answer = ask(path).catch((error: unknown) => {
        answers.delete(path);
        reference = undefined;
        throw error;
      });
      answers.set(path, answer);
    }
    return answer;
  };
}

export async function registerApiReference(app: FastifyInstance): Promise<void> {
  const answers = referenceAnswers();
  // A context of its own, so that the policy hook covers the reference's routes only.
  await app.register(async (reference) => {
    reference.addHook('onSend', async (_request, reply, payload) => {
      const html = String(reply.getHeader('content-type') ?? '').startsWith('text/html') && typeof payload === 'string';
      reply.header('content-security-policy', withInlineScriptHashes(html ? payload : ''));
      return payload;
    });
    // Browsers ask every site for an icon; answered here, not with a 404 problem.
    reference.get('/favicon.ico', async (_request, reply) => reply.code(204).send());
    /** The package's answer to the same path; a path it does not serve is this service's 404. */
    // By the route's own path: a query string changes nothing in the package's answer.
    const handler = async (request: FastifyRequest, reply: FastifyReply) => {
      const answer = await answers(request.routeOptions.url!);
      if (answer.statusCode === 404) return reply.callNotFound();
      for (const name of PASSED_HEADERS) if (answer.headers[name] !== undefined) reply.header(name, answer.headers[name]);
      // The script changes only with the package: a browser keeps it for an hour.
      if (request.routeOptions.url!.endsWith('.js')) reply.header('cache-control', 'public, max-age=3600');
      // An answer without a body (the redirect to the page) is sent without one.
      return reply.code(answer.statusCode).send(answer.body.length > 0 ? answer.body : undefined);
    };
    for (const url of REFERENCE_PATHS) reference.get(url, { logLevel: 'warn' }, handler);
  });
}
