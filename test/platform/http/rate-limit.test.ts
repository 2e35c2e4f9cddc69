import t from 'tap';
import { buildApp } from '../../../src/app.ts';
import { loadConfig } from '../../../src/config.ts';
import { Limit, MAX_KEYS } from '../../../src/platform/http/rate-limit.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t, { rateLimitPerToken: 3, rateLimitPerAddress: 5, rateLimitWindowSeconds: 60 });
const app = api.atrium.app!;
const tenant = await api.createTenant('limits');
const tokens = await Promise.all([1, 2, 3, 4].map(async () => (await api.createUser(tenant.tenantId)).token));

const current = (remoteAddress: string, token?: string) =>
  app.inject({ method: 'GET', url: '/api/users/current', remoteAddress, headers: token ? { authorization: `Bearer ${token}` } : {} });

const limitHeaders = (res: { headers: Record<string, unknown> }) => [res.headers['ratelimit-limit'], res.headers['ratelimit-remaining']];

t.test('configuration', async (t) => {
  const defaults = loadConfig({});
  t.strictSame([defaults.rateLimitPerToken, defaults.rateLimitPerAddress, defaults.rateLimitWindowSeconds], [600, 1200, 60]);
  const set = loadConfig({ RATE_LIMIT_PER_TOKEN: '0', RATE_LIMIT_PER_ADDRESS: '50', RATE_LIMIT_WINDOW: '10' });
  t.strictSame([set.rateLimitPerToken, set.rateLimitPerAddress, set.rateLimitWindowSeconds], [0, 50, 10]);
  t.throws(() => loadConfig({ RATE_LIMIT_PER_TOKEN: '-1' }), /RATE_LIMIT_PER_TOKEN/);
  t.throws(() => loadConfig({ RATE_LIMIT_WINDOW: '0' }), /RATE_LIMIT_WINDOW/);
});

t.test('beyond the limit per token: 429 problem with Retry-After, as the spec declares', async (t) => {
  for (const remaining of ['2', '1', '0']) {
    const res = await api.call(t, 'getCurrentUser', { token: tokens[0] });
    t.equal(res.status, 200);
    t.strictSame(limitHeaders(res), ['3', remaining], 'the token’s limit is the tighter one');
    t.ok(Number(res.headers['ratelimit-reset']) >= 1 && Number(res.headers['ratelimit-reset']) <= 60);
  }
  const refused = await api.call(t, 'getCurrentUser', { token: tokens[0] });
  t.equal(refused.status, 429);
  t.equal(refused.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.match(refused.body, {
    status: 429,
    title: 'Too Many Requests',
    code: 'rate_limited',
    detail: /retry in \d+ seconds/,
    request_id: refused.headers['x-request-id'],
  });
  t.ok(Number(refused.headers['retry-after']) >= 1 && Number(refused.headers['retry-after']) <= 60, 'Retry-After in seconds');
  t.strictSame(limitHeaders(refused), ['3', '0']);
  const logout = await api.call(t, 'logout', { token: tokens[0] });
  t.equal(logout.status, 429, 'every operation of the token is refused, writes too');
});

t.test('every request counts against its client address, tokens or not', async (t) => {
  for (const [i, token] of [tokens[1], tokens[2], undefined, 'made-up-token-aaaaaaaaaaaaaaaa', tokens[3]].entries()) {
    const res = await current('10.0.0.1', token);
    t.not(res.statusCode, 429, `request ${i + 1} of 5`);
    t.equal(res.headers['ratelimit-remaining'], token ? String(Math.min(4 - i, 2)) : String(4 - i));
  }
  const refused = await current('10.0.0.1', tokens[1]);
  t.equal(refused.statusCode, 429, 'the address is out of requests, whatever the token');
  t.equal(refused.json().status, 429);
  t.strictSame(limitHeaders(refused), ['5', '0']);
  const elsewhere = await current('10.0.0.2', tokens[1]);
  t.equal(elsewhere.statusCode, 200, 'another address of the same token is still served');
});

t.test('an IPv6 client counts by its /64', async (t) => {
  for (let i = 1; i <= 5; i++) t.equal((await current(`2001:db8:0:1::${i}`)).statusCode, 401);
  t.equal((await current('2001:db8:0:1:ffff::9')).statusCode, 429, 'same /64');
  t.equal((await current('2001:db8:0:2::1')).statusCode, 401, 'another /64');
});

t.test('probes and the metrics scrape are not counted', async (t) => {
  for (let i = 0; i < 8; i++) {
    const res = await app.inject({ method: 'GET', url: '/health/live', remoteAddress: '10.0.0.3' });
    t.equal(res.statusCode, 200);
    t.notOk(res.headers['ratelimit-limit']);
  }
  t.equal((await current('10.0.0.3')).headers['ratelimit-remaining'], '4', 'the probes left the address’s count alone');
});

t.test('with both limits at 0 nothing is limited or announced', async (t) => {
  const open = await buildApp(
    { ...api.atrium.services, config: { ...api.config, rateLimitPerToken: 0, rateLimitPerAddress: 0 } },
    { logger: api.atrium.logger },
  );
  t.teardown(() => open.close());
  for (let i = 0; i < 8; i++) {
    const res = await open.inject({ method: 'GET', url: '/api/users/current', remoteAddress: '10.0.0.1', headers: { authorization: `Bearer ${tokens[0]}` } });
    t.equal(res.statusCode, 200);
    t.notOk(res.headers['ratelimit-limit']);
  }
});

t.test('a limit keeps at most MAX_KEYS keys: expired windows go first, then the one ending first', async (t) => {
  const length = 10 * MAX_KEYS;
  const limit = new Limit(2, length, () => null);
  const start = 1_000_000;
  // One window per key, each starting a millisecond after the one before, all still open.
  for (let i = 0; i < MAX_KEYS; i++) limit.count(`key ${i}`, start + i);
  t.equal(limit.size, MAX_KEYS);
  const now = start + MAX_KEYS;
  t.equal(limit.count('key 5', now).count, 2, 'a kept key counts on in its window');
  // Full: a new key makes room by dropping the window that ends first.
  t.equal(limit.count('new', now).count, 1);
  t.equal(limit.size, MAX_KEYS);
  t.equal(limit.count('key 0', now).count, 1, 'the window ending first was forgotten: its key starts afresh');
  t.equal(limit.count('key 2', now).count, 2, 'the others are kept');
  // Much later every window has ended: a new key drops all the expired ones.
  const later = start + 100 * MAX_KEYS;
  t.equal(limit.count('later', later).count, 1);
  t.equal(limit.size, 1, 'expired windows are dropped together');
  t.equal(limit.count('later', later + length - 1).count, 2, 'within its window');
  t.equal(limit.count('later', later + length).count, 1, 'a window ends after its length');
});

t.test('with CORS origins, preflights count too, and a refusal carries the allowance of a listed origin', async (t) => {
  const origin = 'https://app.example.com';
  const cross = await buildApp({ ...api.atrium.services, config: { ...api.config, corsOrigins: [origin] } }, { logger: api.atrium.logger });
  t.teardown(() => cross.close());
  const preflight = () =>
    cross.inject({ method: 'OPTIONS', url: '/api/users', remoteAddress: '10.0.0.4', headers: { origin, 'access-control-request-method': 'GET' } });
  for (const remaining of ['4', '3', '2', '1', '0']) {
    const res = await preflight();
    t.equal(res.statusCode, 204);
    t.equal(res.headers['ratelimit-remaining'], remaining, 'a preflight is counted');
  }
  const refused = await preflight();
  t.equal(refused.statusCode, 429, 'a preflight beyond the limit');
  t.ok(Number(refused.headers['retry-after']) >= 1);
  t.equal(refused.headers['access-control-allow-origin'], origin, 'the refusal is readable by the listed origin');
  const read = await cross.inject({ method: 'GET', url: '/api/users', remoteAddress: '10.0.0.4', headers: { origin } });
  t.equal(read.statusCode, 429, 'and so is the page’s request');
  t.equal(read.headers['access-control-allow-origin'], origin);
  t.match(read.headers['access-control-expose-headers'], /Retry-After/);
  const unlisted = await cross.inject({ method: 'GET', url: '/api/users', remoteAddress: '10.0.0.4', headers: { origin: 'https://elsewhere.example' } });
  t.equal(unlisted.statusCode, 429);
  t.equal(unlisted.headers['access-control-allow-origin'], undefined, 'no allowance for an origin not listed');
});
