import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { sql } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { bearer, sleep } from '../../helpers/fixtures.ts';
import { openSse } from '../../helpers/sse.ts';
import { rawRequest } from '../../helpers/http-client.ts';
import { MAX_STREAMS_PER_USER } from '../../../src/resources/notifications/stream.ts';

// How streams are registered and let go: early disconnects, HEAD, the per-user cap,
// ended streams, and counts announced by the tenant-wide reset.
const api = await startTestApi(t, { role: 'all', streamHeartbeatMs: 200 });
const base = await api.atrium.app!.listen({ port: 0, host: '127.0.0.1' });
const url = `${base}/api/notifications/stream`;
const streams = api.atrium.services.notificationStreams;
const tenant = await api.createTenant('stream-life');
const alice = await api.createUser(tenant.tenantId);
// A server whose heartbeat never comes during the file: the heartbeat forgets gone streams,
// and would hide a stream registered after its client left.
const quiet = await startTestApi(t, { role: 'api', streamHeartbeatMs: 600_000 });
const quietBase = await quiet.atrium.app!.listen({ port: 0, host: '127.0.0.1' });

/** How long a case waits for what it expects before it fails: a guard against a hang, not a speed target. */
const WAIT_MS = 15_000;

/** How many streams `registry` holds once it holds `count`, or after WAIT_MS (then the count it holds). */
const openStreamsOnce = (registry: typeof streams, count: number) =>
  eventually(
    async () => registry.openStreams(),
    (n) => n === count,
    WAIT_MS,
  );

/** A stream request written on a raw socket that is destroyed right after the request is sent. */
async function connectAndAbort(server: string, token: string): Promise<void> {
  const address = new URL(server);
  const socket = net.connect(Number(address.port), address.hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(`GET /api/notifications/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${token}\r\n\r\n`);
  socket.destroy();
}

t.test('a client that disconnects at once leaves no stream registered', async (t) => {
  const quietStreams = quiet.atrium.services.notificationStreams;
  const quietTenant = await quiet.createTenant('stream-life-quiet');
  const frank = await quiet.createUser(quietTenant.tenantId);
  // Each request the handler hands to the streams has passed authentication.
  const opened: Promise<void>[] = [];
  const open = quietStreams.open.bind(quietStreams);
  quietStreams.open = (...args) => {
    const opening = open(...args);
    opened.push(opening);
    return opening;
  };
  // Three times as many as a user may hold open, in waves of that many at once (each wave
  // handled before the next): were gone clients registered, the cap would be full.
  const aborts = 3 * MAX_STREAMS_PER_USER;
  while (opened.length < aborts) {
    const wave = opened.length + MAX_STREAMS_PER_USER;
    await Promise.all(Array.from({ length: MAX_STREAMS_PER_USER }, () => connectAndAbort(quietBase, frank.token)));
    await eventually(
      async () => opened.length,
      (n) => n >= wave,
      WAIT_MS,
    );
    if (opened.length < wave) break;
    await Promise.allSettled(opened);
  }
  t.equal(opened.length, aborts, 'every aborted request passed authentication and reached the streams');
  // A client's abort reaches the server as its socket's close, which may come after the open
  // returned (the stream registered, then let go on close): none may stay. The quiet server's
  // heartbeat is ten minutes away, so only the close can let one go.
  t.equal(await openStreamsOnce(quietStreams, 0), 0, 'no registration remains');
  const stream = await openSse(t, `${quietBase}/api/notifications/stream`, bearer(frank.token));
  t.equal(stream.status, 200, 'the aborted attempts do not count against the cap');
  t.equal(quietStreams.openStreams(), 1);
  stream.close();
  t.equal(await openStreamsOnce(quietStreams, 0), 0, 'a closed stream is let go');
});

t.test('HEAD is answered at once and opens no stream', async (t) => {
  const answer = await new Promise<{ status: number; contentType: string; body: string }>((resolve, reject) => {
    const request = http.request(url, { method: 'HEAD', headers: bearer(alice.token) }, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => resolve({ status: response.statusCode!, contentType: String(response.headers['content-type']), body }));
    });
    const timer = setTimeout(() => {
      request.destroy();
      reject(new Error(`HEAD got no complete answer within ${WAIT_MS} ms`));
    }, WAIT_MS);
    request.on('close', () => clearTimeout(timer));
    request.on('error', reject);
    request.end();
  });
  t.equal(answer.status, 200);
  t.match(answer.contentType, /^text\/event-stream/);
  t.equal(answer.body, '');
  t.equal(streams.openStreams(), 0);
  // A client that asks the connection closed has it closed (rawRequest resolves at the close), and no cache may keep the answer.
  const closed = await rawRequest(
    Number(new URL(base).port),
    `HEAD /api/notifications/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.token}\r\nConnection: close\r\n\r\n`,
  );
  t.match(closed, /^HTTP\/1\.1 200 /);
  t.match(closed, /\r\ncache-control: no-store, no-transform\r\n/i, 'stored by no cache: it carries a user’s notifications');
  t.notMatch(closed, /\r\nconnection: keep-alive\r\n/i);
});

t.test('a user holds at most 10 streams: the 11th is a 429 until one closes', async (t) => {
  const bob = await api.createUser(tenant.tenantId);
  const open = [];
  for (let i = 0; i < 10; i++) {
    const stream = await openSse(t, url, bearer(bob.token));
    t.equal(stream.status, 200);
    open.push(stream);
  }
  const refused = await openSse(t, url, bearer(bob.token));
  t.equal(refused.status, 429);
  t.match(refused.contentType, /^application\/problem\+json/);
  t.equal(streams.openStreams(), 10);
  const others = await openSse(t, url, bearer(alice.token));
  t.equal(others.status, 200, 'the cap is per user');
  others.close();
  open.pop()!.close();
  await openStreamsOnce(streams, 9);
  const again = await openSse(t, url, bearer(bob.token));
  t.equal(again.status, 200, 'a closed stream frees its place');
  for (const stream of [...open, again]) stream.close();
  await openStreamsOnce(streams, 0);
});

t.test('a stream ended because its token expired is no longer registered', async (t) => {
  const carol = await api.createUser(tenant.tenantId);
  const stream = await openSse(t, url, bearer(carol.token));
  await stream.next((event) => event.event === 'count', WAIT_MS);
  t.equal(streams.openStreams(), 1);
  await api.db.owner.execute(sql`update access_tokens set expires_at = now() - interval '1 second' where user_id = ${carol.id}`);
  const ended = await Promise.race([stream.ended.then(() => true), sleep(WAIT_MS).then(() => false)]);
  if (!ended) t.fail('the stream was not ended');
  t.equal(await openStreamsOnce(streams, 0), 0, 'no longer registered');
});

t.test('resetting the tenant’s notifications sends every open stream of the tenant its new count', async (t) => {
  const dave = await api.createUser(tenant.tenantId);
  const other = await api.createTenant('stream-life-other');
  const stranger = await api.createUser(other.tenantId);
  t.equal((await api.call(t, 'createNotification', { token: tenant.adminToken, body: { user_ids: [dave.id], title: 'x', body: 'y', url: '/x' } })).status, 202);
  t.equal(
    (await api.call(t, 'createNotification', { token: other.adminToken, body: { user_ids: [stranger.id], title: 'x', body: 'y', url: '/x' } })).status,
    202,
  );
  await eventually(
    async () => (await api.call(t, 'countNotifications', { token: dave.token })).body,
    (n) => n === 1,
  );
  await eventually(
    async () => (await api.call(t, 'countNotifications', { token: stranger.token })).body,
    (n) => n === 1,
  );
  const stream = await openSse(t, url, bearer(dave.token));
  const strangerStream = await openSse(t, url, bearer(stranger.token));
  t.equal(JSON.parse((await stream.next((event) => event.event === 'count', WAIT_MS)).data), 1);
  await strangerStream.next((event) => event.event === 'count', WAIT_MS);
  const seen = stream.events.length;
  const strangerSeen = strangerStream.events.length;
  t.equal((await api.call(t, 'resetNotifications', { token: tenant.adminToken })).status, 200);
  const count = await stream.next((event) => event.event === 'count', WAIT_MS, seen);
  t.equal(JSON.parse(count.data), 0, 'the stream learns the count is 0');
  await sleep(500);
  t.equal(strangerStream.events.length, strangerSeen, 'another tenant’s streams hear nothing');
  stream.close();
  strangerStream.close();
});

t.test('after the listening connection was lost, open streams get what was stored meanwhile', async (t) => {
  const erin = await api.createUser(tenant.tenantId);
  const stream = await openSse(t, url, bearer(erin.token));
  t.equal(JSON.parse((await stream.next((event) => event.event === 'count', WAIT_MS)).data), 0);
  // Stored without a notice: what a client misses while the listener is disconnected.
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_type, notifiable_id, data)
    values (${tenant.tenantId}, gen_random_uuid(), 'custom', 'user', ${erin.id}, '{"title":"missed","body":"b","url":"/x"}'::jsonb)`);
  const seen = stream.events.length;
  const terminated = await api.db.owner.execute<{ pid: number }>(
    sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query = 'listen "atrium_notifications"'`,
  );
  t.equal(terminated.length, 1, 'the process’s one listening connection');
  const replayed = await stream.next((event) => event.event === 'notification', WAIT_MS, seen);
  t.equal(JSON.parse(replayed.data).data.title, 'missed', 'replayed once listening again');
  t.equal(JSON.parse((await stream.next((event) => event.event === 'count', WAIT_MS, stream.events.indexOf(replayed))).data), 1, 'then the count');
  stream.close();
});
