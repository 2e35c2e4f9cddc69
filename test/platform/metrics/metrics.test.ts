import { Writable } from 'node:stream';
import pino from 'pino';
import t from 'tap';
import { buildApp } from '../../../src/app.ts';
import { loadConfig } from '../../../src/config.ts';
import { Database } from '../../../src/platform/database/database.ts';
import { Metrics } from '../../../src/platform/metrics/metrics.ts';
import { eventually } from '../../helpers/eventually.ts';
import { bearer } from '../../helpers/fixtures.ts';
import { startReceiver } from '../../helpers/receiver.ts';
import { openSse } from '../../helpers/sse.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const METRICS_TOKEN = 'metrics-token-0123456789';
const api = await startTestApi(t, {
  role: 'all',
  metricsToken: METRICS_TOKEN,
  webhookAllowedCidrs: ['127.0.0.1/32'],
  pushAllowedCidrs: ['127.0.0.1/32'],
  databasePoolSize: 7,
});
const app = api.atrium.app!;
const receiver = await startReceiver(t);
const tenant = await api.createTenant('metrics');

const scrape = (token?: string) => app.inject({ method: 'GET', url: '/metrics', headers: token ? { authorization: `Bearer ${token}` } : {} });

/** The value of one series in the exposition text, or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels).map(([key, value]) => `${key}="${value}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const labelPart = /\{([^}]*)\}/.exec(line)?.[1] ?? '';
    if (wanted.every((label) => labelPart.split(',').includes(label))) return Number(line.split(' ').at(-1));
  }
  return undefined;
}

t.test('METRICS_TOKEN is at least 16 characters', async (t) => {
  t.equal(loadConfig({}).metricsToken, undefined);
  t.equal(loadConfig({ METRICS_TOKEN }).metricsToken, METRICS_TOKEN);
  t.throws(() => loadConfig({ METRICS_TOKEN: 'short' }), /METRICS_TOKEN/);
  t.throws(() => loadConfig({ METRICS_TOKEN: 'has a space in it, long enough' }), /METRICS_TOKEN/);
});

t.test('metrics are refused without the metrics token', async (t) => {
  for (const token of [undefined, 'wrong-token-0123456789', tenant.adminToken, `${METRICS_TOKEN}x`]) {
    const res = await scrape(token);
    t.equal(res.statusCode, 401);
    t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
    t.notMatch(res.body, /atrium_/);
  }
  const basic = await app.inject({
    method: 'GET',
    url: '/metrics',
    headers: { authorization: `Basic ${Buffer.from(`x:${METRICS_TOKEN}`).toString('base64')}` },
  });
  t.equal(basic.statusCode, 401);
});

t.test('without METRICS_TOKEN there is no metrics route', async (t) => {
  const bare = await buildApp({ ...api.atrium.services, config: { ...api.config, metricsToken: undefined } }, { logger: api.atrium.logger });
  t.teardown(() => bare.close());
  t.equal((await bare.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).statusCode, 404);
});

t.test('after some traffic the metrics show requests, jobs, deliveries, connections and streams', async (t) => {
  for (let i = 0; i < 3; i++) t.equal((await api.call(t, 'getCurrentUser', { token: tenant.adminToken })).status, 200);
  t.equal((await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: 999_999 } })).status, 404);
  const unmatchedBefore = sample((await scrape(METRICS_TOKEN)).body, 'atrium_http_request_duration_seconds_count', { route: 'unmatched' }) ?? 0;
  t.equal((await app.inject({ method: 'GET', url: '/api/no-such-route/42' })).statusCode, 404);

  const created = await api.call(t, 'createAutomation', {
    token: tenant.adminToken,
    body: { name: 'hook', config: { url: receiver.url('/hook'), headers: {} } },
  });
  t.equal(created.status, 201);
  const run = await api.call(t, 'runAutomation', { token: tenant.adminToken, params: { automation: created.body.id }, body: {} });
  t.equal(run.status, 202);
  await eventually(
    async () => receiver.received('/hook').length,
    (count) => count === 1,
  );
  const text = await eventually(
    async () => (await scrape(METRICS_TOKEN)).body,
    (body) => sample(body, 'atrium_delivery_attempts_total', { channel: 'webhook', outcome: 'succeeded' }) === 1,
  );

  const res = await scrape(METRICS_TOKEN);
  t.equal(res.statusCode, 200);
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/);

  const count = (labels: Record<string, string>) => sample(text, 'atrium_http_request_duration_seconds_count', labels);
  t.equal(count({ method: 'GET', route: '/api/users/current', status_code: '200' }), 3, 'by route pattern and status');
  t.equal(count({ method: 'GET', route: '/api/users/:user', status_code: '404' }), 1, 'the pattern, not the id');
  t.equal(count({ method: 'GET', route: 'unmatched', status_code: '404' }), unmatchedBefore + 1, 'unknown paths share one series');
  t.notMatch(text, /="[^"]*(999999|no-such-route)/, 'no URL ends up in a label');
  t.ok(sample(text, 'atrium_http_request_duration_seconds_bucket', { route: '/api/users/current', le: '+Inf' }) === 3);

  t.equal(sample(text, 'atrium_delivery_attempts_total', { channel: 'webhook', outcome: 'succeeded' }), 1);
  t.ok((sample(text, 'atrium_jobs', { queue: 'automations.deliver-webhook' }) ?? 0) >= 1, 'the delivery job is in the queue table');
  t.match(text, /# TYPE atrium_jobs gauge/);
  t.ok((sample(text, 'atrium_database_connections', { pool: 'app' }) ?? 0) >= 1, 'the app pool has connections');
  t.equal(sample(text, 'atrium_database_pool_max_connections', { pool: 'app' }), 7, 'as DATABASE_POOL_SIZE says');
  t.equal(sample(text, 'atrium_event_streams_open'), 0, 'no stream open yet');
  t.ok((sample(text, 'atrium_process_resident_memory_bytes') ?? 0) > 0, 'process metrics too');
});

t.test('the open event streams gauge follows a stream opened and closed', async (t) => {
  const streams = async () => sample((await scrape(METRICS_TOKEN)).body, 'atrium_event_streams_open');
  t.equal(await streams(), 0, 'none open');
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const stream = await openSse(t, `${base}/api/notifications/stream`, bearer(tenant.adminToken));
  t.equal(stream.status, 200);
  await stream.next((event) => event.event === 'count', 15_000);
  t.equal(await streams(), 1, 'one stream open');
  stream.close();
  t.equal(await eventually(streams, (open) => open === 0, 15_000), 0, 'none open once it is closed');
});

t.test('probes and scrapes are logged at debug, other requests at info', async (t) => {
  const lines: { level: number; msg: string; req?: { url: string } }[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line) as never);
      done();
    },
  });
  const logged = await buildApp(api.atrium.services, { logger: pino({ level: 'debug' }, sink) });
  t.teardown(() => logged.close());
  await logged.inject({ method: 'GET', url: '/health/live' });
  await logged.inject({ method: 'GET', url: '/health/ready' });
  await logged.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  await logged.inject({ method: 'GET', url: '/api/users/current' });
  const incoming = lines.filter((line) => line.msg === 'incoming request');
  t.strictSame(
    incoming.map((line) => [line.req?.url, line.level]),
    [
      ['/health/live', 20],
      ['/health/ready', 20],
      ['/metrics', 20],
      ['/api/users/current', 30],
    ],
  );
  t.strictSame(
    lines.filter((line) => line.msg === 'request completed').map((line) => line.level),
    [20, 20, 20, 30],
  );
});

t.test("a scrape while the database is away still answers with the process's own metrics", async (t) => {
  // A database nobody answers on: the gauges that read it have no value, the rest are there.
  const away = new Database('postgres://atrium@127.0.0.1:1/gone');
  t.teardown(() => away.close());
  const metrics = new Metrics(away);
  metrics.httpRequestDuration.observe({ method: 'GET', route: '/api/users/current', status_code: '503' }, 0.01);
  const text = await metrics.registry.metrics();
  t.equal(sample(text, 'atrium_http_request_duration_seconds_count', { status_code: '503' }), 1, 'the requests of the outage are counted');
  t.ok(sample(text, 'atrium_process_cpu_user_seconds_total') !== undefined, "and Node's own metrics");
  t.equal(sample(text, 'atrium_jobs'), undefined, 'the job counts are left out');
  t.equal(sample(text, 'atrium_database_connections'), undefined, 'so are the connections');
});
