import t from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { DEMO_PASSWORD } from '../../helpers/tenant-data.ts';

const api = await startTestApi(t);
const app = api.atrium.app!;
const tenant = await api.createTenant('headers');

const API_HEADERS = {
  'content-security-policy': "default-src 'none';base-uri 'none';form-action 'none';frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'strict-transport-security': 'max-age=31536000',
  'cross-origin-resource-policy': 'cross-origin',
  'cross-origin-opener-policy': 'same-origin',
};

t.test('answers of the API carry the security headers', async (t) => {
  const ok = await api.call(t, 'getCurrentUser', { token: tenant.adminToken });
  const refused = await api.call(t, 'getCurrentUser', { token: null });
  const missing = await app.inject({ method: 'GET', url: '/api/no-such-route' });
  const probe = await api.call(t, 'getLiveness');
  // Refused by the router, before any hook runs: malformed percent-encoding, an overlong path segment.
  const badEncoding = await app.inject({ method: 'GET', url: '/api/roles/%zz' });
  const longSegment = await app.inject({ method: 'GET', url: `/api/roles/${'1'.repeat(1025)}` });
  t.strictSame([ok.status, refused.status, missing.statusCode, probe.status, badEncoding.statusCode, longSegment.statusCode], [200, 401, 404, 200, 400, 414]);
  for (const res of [ok, refused, missing, probe, badEncoding, longSegment]) {
    for (const [name, value] of Object.entries(API_HEADERS)) t.equal(res.headers[name], value, name);
    t.equal(res.headers['cache-control'], 'no-store');
    t.notOk(res.headers['x-powered-by']);
  }
});

t.test('answers holding tokens or personal data are not stored by any cache; answers meant to be cached say so', async (t) => {
  const login = await api.call(t, 'login', { body: { tenant: 'headers', username: 'admin', password: DEMO_PASSWORD } });
  t.equal(login.status, 200);
  t.equal(login.headers['cache-control'], 'no-store', 'a sign-in answer (the access token)');
  const scimToken = await api.call(t, 'createScimToken', { token: tenant.adminToken, body: { name: 'cache check' } });
  t.equal(scimToken.status, 201);
  t.equal(scimToken.headers['cache-control'], 'no-store', 'a SCIM token shown once');
  const current = await api.call(t, 'getCurrentUser', { token: tenant.adminToken });
  t.equal(current.headers['cache-control'], 'no-store', 'personal data');
  const refused = await api.call(t, 'getCurrentUser', { token: null });
  t.equal(refused.headers['cache-control'], 'no-store', 'a problem document');
  // A 401 names the scheme (RFC 9110), and says when the token sent was refused (RFC 6750).
  t.equal(refused.headers['www-authenticate'], 'Bearer realm="atrium"', 'no token sent');
  const forged = await api.call(t, 'getCurrentUser', { token: `atr_${'x'.repeat(43)}` });
  t.equal(forged.status, 401);
  t.equal(forged.headers['www-authenticate'], 'Bearer realm="atrium", error="invalid_token"', 'a token refused');
  const keys = await app.inject({ method: 'GET', url: '/.well-known/jwks.json' });
  t.match(String(keys.headers['cache-control']), /^public, max-age=\d+$/, 'the webhook signing keys keep their own');
});

t.test('the interactive reference loads with a policy that admits its own assets only', async (t) => {
  const page = await app.inject({ method: 'GET', url: '/docs/' });
  t.equal(page.statusCode, 200);
  const policy = String(page.headers['content-security-policy']);
  t.match(policy, /script-src 'self'( 'sha256-[A-Za-z0-9+/=]+')+;/, 'scripts: its own, and inline only the start-up script by hash');
  t.match(policy, "connect-src 'self'", 'the page may fetch the spec from this server');
  t.match(policy, "frame-ancestors 'none'");
  t.notMatch(policy, /unsafe-eval|https:|\*/, 'nothing from elsewhere, no eval');
  t.notMatch(policy.split(';').find((d) => d.trim().startsWith('script-src')) ?? '', /unsafe-inline/, 'no inline script but the hashed one');
  const assets = [...page.body.matchAll(/<script[^>]*\bsrc="([^"]+)"/g)].map((match) => match[1]!);
  t.ok(assets.length >= 1, `the page names its script (${assets.join(', ')})`);
  for (const asset of assets) {
    t.notMatch(asset, /^(https?:)?\/\//, `${asset} is served by this server`);
    const url = new URL(asset, 'http://atrium.test/docs/');
    const res = await app.inject({ method: 'GET', url: url.pathname });
    t.equal(res.statusCode, 200, `${url.pathname} loads`);
    t.ok(res.rawPayload.length > 0, `${url.pathname} has content`);
  }
  t.match(page.body, '/api/openapi.json', 'the page reads the one spec URL');
  const spec = await app.inject({ method: 'GET', url: '/api/openapi.json' });
  t.equal(spec.statusCode, 200);
  t.equal(spec.json().info.title, 'Atrium API');
  const api = await app.inject({ method: 'GET', url: '/api/openapi.json' });
  t.equal(api.headers['content-security-policy'], API_HEADERS['content-security-policy'], 'outside /docs the strict policy stays');
});
