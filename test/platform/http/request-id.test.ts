import { Writable } from 'node:stream';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import t from 'tap';
import { buildApp } from '../../../src/app.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { rawRequest } from '../../helpers/http-client.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const api = await startTestApi(t);
const tenant = await api.createTenant('request-ids');

// An app of the same services whose log lines the test reads.
const lines: Record<string, unknown>[] = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString().split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
    done();
  },
});
const app = await buildApp(api.atrium.services, { logger: pino({ level: 'debug' }, sink) });
t.teardown(() => app.close());

t.test('a well-formed X-Request-Id is taken and echoed', async (t) => {
  for (const sent of ['abc-123', 'f3b2c1d0-0000-4000-8000-000000000000', 'Root=1-67891233-abcdef012345678912345678', 'a.b:c@d+e/f_g', 'x'.repeat(128)]) {
    const res = await api.call(t, 'getCurrentUser', { token: tenant.adminToken, headers: { 'x-request-id': sent } });
    t.equal(res.status, 200);
    t.equal(res.headers['x-request-id'], sent);
  }
});

t.test('without one, each request gets a new UUID', async (t) => {
  const first = await app.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${tenant.adminToken}` } });
  const second = await app.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${tenant.adminToken}` } });
  t.equal(first.statusCode, 200);
  t.match(first.headers['x-request-id'], UUID);
  t.match(second.headers['x-request-id'], UUID);
  t.not(first.headers['x-request-id'], second.headers['x-request-id']);
});

t.test('a malformed X-Request-Id is not taken: the request gets a new one', async (t) => {
  for (const sent of ['', 'has space', 'x'.repeat(129), '<script>', 'quote"d', 'semi;colon', 'ünïcödé', 'a,b']) {
    const res = await api.call(t, 'getCurrentUser', { token: tenant.adminToken, headers: { 'x-request-id': sent } });
    t.equal(res.status, 200, 'the request itself is served');
    t.match(res.headers['x-request-id'], UUID, JSON.stringify(sent));
  }
});

t.test('problem documents carry the request id', async (t) => {
  const refused = await api.call(t, 'getCurrentUser', { token: null, headers: { 'x-request-id': 'refused-1' } });
  t.equal(refused.status, 401);
  t.equal(refused.body.request_id, 'refused-1');
  t.equal(refused.headers['x-request-id'], 'refused-1');

  const invalid = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { limit: 0 }, headers: { 'x-request-id': 'not well formed' } });
  t.equal(invalid.status, 422);
  t.match(invalid.body.request_id, UUID);
  t.equal(invalid.body.request_id, invalid.headers['x-request-id']);

  const missing = await app.inject({ method: 'GET', url: '/api/nothing-here', headers: { 'x-request-id': 'missing-1' } });
  t.equal(missing.statusCode, 404);
  t.equal(missing.json().request_id, 'missing-1');

  const tooLong = await app.inject({ method: 'GET', url: `/api/users/${'1'.repeat(1100)}`, headers: { 'x-request-id': 'router-1' } });
  t.equal(tooLong.statusCode, 414);
  t.equal(tooLong.headers['x-request-id'], 'router-1', 'refused by the router, before any hook');
  t.equal(tooLong.json().request_id, 'router-1');

  const badJson = await app.inject({
    method: 'POST',
    url: '/api/auth/login',
    headers: { 'content-type': 'application/json', 'x-request-id': 'json-1' },
    payload: '{"tenant":',
  });
  t.equal(badJson.statusCode, 400);
  t.equal(badJson.json().request_id, 'json-1');
});

t.test('every log line of a request carries its id', async (t) => {
  lines.length = 0;
  const res = await app.inject({
    method: 'GET',
    url: '/api/users/current',
    headers: { authorization: `Bearer ${tenant.adminToken}`, 'x-request-id': 'logged-1' },
  });
  t.equal(res.statusCode, 200);
  const failed = await app.inject({ method: 'GET', url: '/api/users/current', headers: { 'x-request-id': 'logged-2' } });
  t.equal(failed.statusCode, 401);
  t.ok(lines.length >= 4, 'the requests were logged');
  t.strictSame(
    lines.filter((line) => line.request_id !== 'logged-1' && line.request_id !== 'logged-2'),
    [],
    'no line without the id',
  );
  t.ok(lines.some((line) => line.request_id === 'logged-1' && line.msg === 'request completed'));
  t.ok(lines.some((line) => line.request_id === 'logged-2'));
});

t.test('a client’s id is logged beside an id of the server’s, which the audit trail records', async (t) => {
  lines.length = 0;
  const sent = await app.inject({
    method: 'PUT',
    url: '/api/administration/users/settings',
    headers: { authorization: `Bearer ${tenant.adminToken}`, 'x-request-id': 'logged-3', 'content-type': 'application/json' },
    payload: JSON.stringify({ required_profile_keys: ['zipcode'] }),
  });
  t.equal(sent.statusCode, 200);
  t.equal(sent.headers['x-request-id'], 'logged-3', 'the echo is the client’s id');
  const ids = new Set(lines.map((line) => line.server_request_id));
  t.equal(ids.size, 1, 'every line carries the same server id');
  const [serverId] = ids;
  t.match(serverId, UUID);
  const [event] = await api.db.owner.execute<{ request_id: string; client_request_id: string }>(
    sql`select request_id, client_request_id from audit_events where tenant_id = ${tenant.tenantId} and action = 'user_settings.updated'`,
  );
  t.strictSame(event, { request_id: serverId, client_request_id: 'logged-3' }, 'the trail names the request by the server’s id');

  lines.length = 0;
  const unnamed = await app.inject({
    method: 'PUT',
    url: '/api/administration/users/settings',
    headers: { authorization: `Bearer ${tenant.adminToken}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ required_profile_keys: [] }),
  });
  t.equal(unnamed.statusCode, 200);
  const own = unnamed.headers['x-request-id'] as string;
  t.match(own, UUID);
  t.ok(
    lines.every((line) => line.request_id === own && line.server_request_id === undefined),
    'without a client id the request’s id is the server’s, logged once',
  );
  const [second] = await api.db.owner.execute<{ request_id: string; client_request_id: string | null }>(
    sql`select request_id, client_request_id from audit_events where tenant_id = ${tenant.tenantId} and action = 'user_settings.updated' order by occurred_at desc limit 1`,
  );
  t.strictSame(second, { request_id: own, client_request_id: null });
});

t.test('a request the HTTP parser refuses gets an id too', async (t) => {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const answer = await rawRequest(port, 'NOT HTTP AT ALL\r\n\r\n');
  const id = /\r\nX-Request-Id: ([^\r]+)\r\n/.exec(answer)?.[1];
  t.match(id, UUID);
  t.equal(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).request_id, id);
});
