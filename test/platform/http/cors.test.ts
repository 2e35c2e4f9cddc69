import t from 'tap';
import { buildApp } from '../../../src/app.ts';
import { loadConfig } from '../../../src/config.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const ALLOWED = 'https://app.example.com';
const api = await startTestApi(t, { corsOrigins: [ALLOWED, 'http://localhost:5173'] });
const app = api.atrium.app!;
const demo = await api.createTenant('cors');

const preflight = (origin: string, method = 'PATCH') =>
  app.inject({
    method: 'OPTIONS',
    url: '/api/users/current',
    headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization,content-type' },
  });

t.test('CORS_ORIGINS takes exact origins, or * alone', async (t) => {
  t.strictSame(loadConfig({ CORS_ORIGINS: ' https://a.example.com, http://localhost:5173 ' }).corsOrigins, ['https://a.example.com', 'http://localhost:5173']);
  t.strictSame(loadConfig({ CORS_ORIGINS: '*' }).corsOrigins, ['*']);
  t.strictSame(loadConfig({}).corsOrigins, []);
  t.throws(() => loadConfig({ CORS_ORIGINS: 'https://a.example.com/' }), /CORS_ORIGINS/, 'a trailing slash is no origin');
  t.throws(() => loadConfig({ CORS_ORIGINS: 'https://a.example.com/app' }), /CORS_ORIGINS/, 'a path is no origin');
  t.throws(() => loadConfig({ CORS_ORIGINS: 'a.example.com' }), /CORS_ORIGINS/, 'an origin has a scheme');
  t.throws(() => loadConfig({ CORS_ORIGINS: 'ftp://a.example.com' }), /CORS_ORIGINS/);
  t.throws(() => loadConfig({ CORS_ORIGINS: '*,https://a.example.com' }), /CORS_ORIGINS/);
});

t.test('a preflight from an allowed origin is answered with what the page may send', async (t) => {
  const res = await preflight(ALLOWED);
  t.equal(res.statusCode, 204);
  t.equal(res.headers['access-control-allow-origin'], ALLOWED);
  t.match(String(res.headers['access-control-allow-methods']), /PATCH/);
  t.match(String(res.headers['access-control-allow-headers']), /Authorization/);
  t.match(String(res.headers['access-control-allow-headers']), /Content-Type/);
  t.match(String(res.headers['access-control-allow-headers']), /X-Request-Id/);
  // A page retries a create safely with the key, revalidates a picture it holds, and sends a write's preconditions.
  t.match(String(res.headers['access-control-allow-headers']), /Idempotency-Key/);
  t.match(String(res.headers['access-control-allow-headers']), /If-None-Match/);
  t.match(String(res.headers['access-control-allow-headers']), /If-Match/);
  t.equal(res.headers['access-control-max-age'], '600');
  t.match(String(res.headers.vary), /Origin/, 'caches keep answers per origin');
  t.notOk(res.headers['access-control-allow-credentials'], 'no cookies are involved');
  const other = await preflight('http://localhost:5173', 'DELETE');
  t.equal(other.headers['access-control-allow-origin'], 'http://localhost:5173');
});

t.test('a preflight from any other origin gets no allowance', async (t) => {
  for (const origin of ['https://evil.example.com', 'https://app.example.com.evil.example', 'http://app.example.com', 'null']) {
    const res = await preflight(origin);
    t.notOk(res.headers['access-control-allow-origin'], `${origin} is not allowed`);
  }
});

t.test('answers to an allowed origin expose the headers a client needs', async (t) => {
  const res = await api.call(t, 'getCurrentUser', { token: demo.adminToken, headers: { origin: ALLOWED } });
  t.equal(res.status, 200);
  t.equal(res.headers['access-control-allow-origin'], ALLOWED);
  const exposed = String(res.headers['access-control-expose-headers']);
  for (const name of [
    'Location',
    'Retry-After',
    'RateLimit-Limit',
    'RateLimit-Remaining',
    'RateLimit-Reset',
    'X-Request-Id',
    'Link',
    'ETag',
    'Idempotent-Replayed',
    'Deprecation',
    'Sunset',
    'Allow',
  ])
    t.match(exposed, name);
  const denied = await api.call(t, 'getCurrentUser', { token: demo.adminToken, headers: { origin: 'https://evil.example.com' } });
  t.equal(denied.status, 200, 'CORS is the browser’s guard; the server answers as usual');
  t.notOk(denied.headers['access-control-allow-origin']);
});

t.test('a page of a list exposes its Link to the next page', async (t) => {
  const res = await api.call(t, 'listRoles', { token: demo.adminToken, query: { limit: 1 }, headers: { origin: ALLOWED } });
  t.equal(res.status, 200);
  t.match(res.headers.link, /^<\/api\/roles\?limit=1&offset=1>; rel="next"$/);
  t.ok(String(res.headers['access-control-expose-headers']).split(/,\s*/).includes('Link'), 'the page may read it');
});

t.test('refusals carry the allowance too, so the page can read the problem document', async (t) => {
  const res = await api.call(t, 'getCurrentUser', { token: null, headers: { origin: ALLOWED } });
  t.equal(res.status, 401);
  t.equal(res.headers['access-control-allow-origin'], ALLOWED);
  const missing = await app.inject({ method: 'GET', url: '/api/no-such-route', headers: { origin: ALLOWED } });
  t.equal(missing.statusCode, 404);
  t.equal(missing.headers['access-control-allow-origin'], ALLOWED);
  // Refused by the router before any hook runs: the same allowance as any other answer.
  for (const url of ['/api/roles/%zz', `/api/roles/${'1'.repeat(1025)}`]) {
    const early = await app.inject({ method: 'GET', url, headers: { origin: ALLOWED } });
    t.ok([400, 414].includes(early.statusCode), url.slice(0, 20));
    for (const name of ['access-control-allow-origin', 'access-control-expose-headers', 'vary']) t.equal(early.headers[name], missing.headers[name], name);
    const stranger = await app.inject({ method: 'GET', url, headers: { origin: 'https://evil.example.com' } });
    t.notOk(stranger.headers['access-control-allow-origin'], 'none for an origin not listed');
  }
});

t.test('a preflight carries the headers every answer carries', async (t) => {
  for (const origin of [ALLOWED, 'https://evil.example.com']) {
    const res = await preflight(origin);
    t.equal(res.statusCode, 204);
    t.equal(res.headers['x-content-type-options'], 'nosniff', origin);
    t.equal(res.headers['cache-control'], 'no-store');
    t.equal(res.headers['content-security-policy'], "default-src 'none';base-uri 'none';form-action 'none';frame-ancestors 'none'");
  }
});

t.test('without CORS_ORIGINS no origin is allowed and OPTIONS is a method the path is not served with', async (t) => {
  const closed = await buildApp({ ...api.atrium.services, config: { ...api.config, corsOrigins: [] } }, { logger: api.atrium.logger });
  t.teardown(() => closed.close());
  const res = await closed.inject({
    method: 'OPTIONS',
    url: '/api/users/current',
    headers: { origin: ALLOWED, 'access-control-request-method': 'GET' },
  });
  t.equal(res.statusCode, 405);
  t.match(res.headers.allow, /^GET, HEAD\b/);
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.notOk(res.headers['access-control-allow-origin']);
});

t.test('CORS_ORIGINS=* allows any origin', async (t) => {
  const open = await buildApp({ ...api.atrium.services, config: { ...api.config, corsOrigins: ['*'] } }, { logger: api.atrium.logger });
  t.teardown(() => open.close());
  const res = await open.inject({
    method: 'OPTIONS',
    url: '/api/users/current',
    headers: { origin: 'https://anywhere.example', 'access-control-request-method': 'GET' },
  });
  t.equal(res.statusCode, 204);
  t.equal(res.headers['access-control-allow-origin'], '*');
});
