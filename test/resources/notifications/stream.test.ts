import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import pino from 'pino';
import { createAtrium } from '../../../src/server.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { bearer, sleep, waitForDispatches } from '../../helpers/fixtures.ts';
import { openSse, type SseEvent } from '../../helpers/sse.ts';
import { FIRST_EVENT_ID } from '../../../src/resources/notifications/event-ids.ts';
import { REPLAY_BYTES } from '../../../src/resources/notifications/stream.ts';

// Two Atrium processes on one database: A serves the API only (no job workers, so
// everything A streams was stored by B and reached A through LISTEN/NOTIFY); B runs both.
const api = await startTestApi(t, { role: 'api', streamHeartbeatMs: 200 });
const second = await createAtrium({ ...api.config, role: 'all' }, { logger: pino({ level: 'silent' }) });
t.teardown(() => second.stop());
const base = async (app: NonNullable<typeof second.app>) => app.listen({ port: 0, host: '127.0.0.1' });
const urlA = `${await base(api.atrium.app!)}/api/notifications/stream`;
const urlB = `${await base(second.app!)}/api/notifications/stream`;

/** How long a case waits for an event it expects before it fails: a guard against a hang, not a speed target. */
const WAIT_MS = 15_000;
const tenant = await api.createTenant('stream');
const other = await api.createTenant('stream-other');
const alice = await api.createUser(tenant.tenantId);
const bob = await api.createUser(tenant.tenantId);
const stranger = await api.createUser(other.tenantId);

/** Sent through B's API (B's worker picks it up at once). */
async function send(t: Test, userIds: number[], title: string, tenantToken = tenant.adminToken): Promise<number> {
  const answer = await second.app!.inject({
    method: 'POST',
    url: '/api/notifications',
    headers: { ...bearer(tenantToken), 'content-type': 'application/json' },
    payload: JSON.stringify({ user_ids: userIds, title, body: '<p>Body</p>', url: '/x' }),
  });
  t.equal(answer.statusCode, 202);
  return Date.now();
}

const notificationTitled = (title: string) => (event: SseEvent) => event.event === 'notification' && JSON.parse(event.data).data.title === title;

const settled = (tenantId: number) => waitForDispatches(api.db, tenantId);

t.test('bad requests: no token is 401, a malformed Last-Event-ID is 400', async (t) => {
  t.equal((await api.call(t, 'streamNotifications', {})).status, 401);
  t.equal((await api.call(t, 'streamNotifications', { token: 'x'.repeat(40) })).status, 401);
  const bad = await api.call(t, 'streamNotifications', { token: alice.token, headers: { 'last-event-id': 'yesterday' } });
  t.equal(bad.status, 400);
  const huge = await api.call(t, 'streamNotifications', {
    token: alice.token,
    headers: { 'last-event-id': `${'9'.repeat(20)}-00000000-0000-0000-0000-000000000000` },
  });
  t.equal(huge.status, 400, 'a time beyond any stored one is no 5xx');
});

t.test('a stream opens with the unread count', async (t) => {
  const stream = await openSse(t, urlA, bearer(alice.token));
  t.equal(stream.status, 200);
  t.match(stream.contentType, /^text\/event-stream/);
  const count = await stream.next((e) => e.event === 'count', WAIT_MS);
  t.equal(JSON.parse(count.data), 0);
  stream.close();
});

t.test('an idle stream receives heartbeat comments', async (t) => {
  const stream = await openSse(t, urlA, bearer(alice.token));
  await eventually(
    async () => stream.comments.length,
    (n) => n >= 2,
    WAIT_MS,
  );
  t.ok(stream.comments.filter((c) => c === 'heartbeat').length >= 2, 'heartbeats keep coming');
  stream.close();
});

t.test('a client of the storing process receives a new notification live', async (t) => {
  const stream = await openSse(t, urlB, bearer(alice.token));
  await stream.next((e) => e.event === 'count', WAIT_MS);
  const sentAt = await send(t, [alice.id], 'same process');
  const received = await stream.next(notificationTitled('same process'), WAIT_MS);
  t.comment(`delivered ${received.at - sentAt} ms after it was stored`);
  const record = JSON.parse(received.data);
  const [listed] = (await api.call(t, 'listNotifications', { token: alice.token, query: { limit: 1 } })).body;
  t.same(record, listed, 'the record as the notifications list presents it');
  t.match(received.id, /^\d+-[0-9a-f-]{36}$/);
  const count = await stream.next((e) => e.event === 'count', WAIT_MS, stream.events.indexOf(received));
  t.equal(JSON.parse(count.data), 1, 'then the new unread count');
  stream.close();
});

t.test('a client of another API process receives it live too, and only its own', async (t) => {
  const aliceStream = await openSse(t, urlA, bearer(alice.token));
  const bobStream = await openSse(t, urlA, bearer(bob.token));
  const strangerStream = await openSse(t, urlA, bearer(stranger.token));
  await Promise.all([aliceStream, bobStream, strangerStream].map((s) => s.next((e) => e.event === 'count', WAIT_MS)));
  const sentAt = await send(t, [alice.id], 'other process');
  const received = await aliceStream.next(notificationTitled('other process'), WAIT_MS);
  t.comment(`delivered ${received.at - sentAt} ms after it was stored`);
  t.equal(JSON.parse(received.data).notifiable_id, alice.id);

  // Bob's and the other tenant's streams see their own next notifications, nothing before.
  await send(t, [bob.id], 'for bob');
  await send(t, [stranger.id], 'for the stranger', other.adminToken);
  const bobs = await bobStream.next((e) => e.event === 'notification', WAIT_MS);
  t.equal(JSON.parse(bobs.data).data.title, 'for bob', 'bob’s first notification event is his own');
  const strangers = await strangerStream.next((e) => e.event === 'notification', WAIT_MS);
  t.equal(JSON.parse(strangers.data).data.title, 'for the stranger');
  t.notOk(aliceStream.events.some(notificationTitled('for bob')), 'alice never sees bob’s');
  t.equal(bobStream.events.filter((e) => e.event === 'notification').length, 1);
  t.equal(strangerStream.events.filter((e) => e.event === 'notification').length, 1);
  for (const stream of [aliceStream, bobStream, strangerStream]) stream.close();
});

t.test('reconnecting with Last-Event-ID replays what was missed, oldest first', async (t) => {
  const first = await openSse(t, urlA, bearer(bob.token));
  await first.next((e) => e.event === 'count', WAIT_MS);
  await send(t, [bob.id], 'seen live');
  const last = await first.next(notificationTitled('seen live'), WAIT_MS);
  first.close();
  await send(t, [bob.id], 'missed one');
  await settled(tenant.tenantId);
  await send(t, [bob.id], 'missed two');
  await settled(tenant.tenantId);

  const resumed = await openSse(t, urlA, { ...bearer(bob.token), 'last-event-id': last.id! });
  const count = await resumed.next((e) => e.event === 'count', WAIT_MS);
  const replayed = resumed.events.filter((e) => e.event === 'notification').map((e) => JSON.parse(e.data).data.title);
  t.same(replayed, ['missed one', 'missed two'], 'exactly the missed ones, in order');
  const unread = (await api.call(t, 'countNotifications', { token: bob.token })).body;
  t.equal(JSON.parse(count.data), unread);
  resumed.close();
});

t.test('a replay bigger than its byte bound ends its stream after the bound; reconnecting goes on from there', async (t) => {
  const carol = await api.createUser(tenant.tenantId);
  // A hundred notifications of 64 KB each: 6.4 MB, far more than a replay writes at once.
  const body = `<p>${'x'.repeat(64 * 1024)}</p>`;
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_type, notifiable_id, data, created_at)
    select ${tenant.tenantId}, gen_random_uuid(), 'customNotification', 'user', ${carol.id},
           jsonb_build_object('title', 'big ' || n, 'body', ${body}::text, 'url', '/x'), now() + n * interval '1 millisecond'
    from generate_series(1, 100) as n`);
  const titles: string[] = [];
  let lastEventId = FIRST_EVENT_ID;
  for (let connection = 1; titles.length < 100 && connection <= 100; connection++) {
    const stream = await openSse(t, urlA, { ...bearer(carol.token), 'last-event-id': lastEventId });
    // The replay, then the count; or the end of a stream that could not write it all.
    await Promise.race([stream.next((e) => e.event === 'count', WAIT_MS).catch(() => undefined), stream.ended]);
    const replayed = stream.events.filter((e) => e.event === 'notification');
    const bytes = replayed.reduce((sum, e) => sum + Buffer.byteLength(e.data), 0);
    if (connection === 1) {
      t.ok(bytes <= REPLAY_BYTES + 70 * 1024, `the first connection replays about the bound, at most (${bytes} bytes)`);
      const ended = await Promise.race([stream.ended.then(() => true), sleep(5_000).then(() => false)]);
      t.ok(ended, 'and then ends, for the client to reconnect from its last event');
    }
    stream.close();
    titles.push(...replayed.map((e) => JSON.parse(e.data).data.title as string));
    lastEventId = replayed.at(-1)?.id ?? lastEventId;
  }
  t.strictSame(
    titles,
    Array.from({ length: 100 }, (_, i) => `big ${i + 1}`),
    'reconnecting with the last event id replays every notification once, in order',
  );
});

t.test('reading notifications sends the new unread count to the reader’s streams', async (t) => {
  const stream = await openSse(t, urlB, bearer(alice.token));
  const initial = await stream.next((e) => e.event === 'count', WAIT_MS);
  t.ok(JSON.parse(initial.data) > 0, 'alice has unread notifications');
  const from = stream.events.length;
  const [newest] = (await api.call(t, 'listNotifications', { token: alice.token, query: { limit: 1 } })).body;
  const now = new Date().toISOString().slice(0, 19).replace('T', ' ');
  t.equal((await api.call(t, 'updateNotification', { token: alice.token, params: { notification: newest.id }, body: { read_at: now } })).status, 200);
  const afterOne = await stream.next((e) => e.event === 'count', WAIT_MS, from);
  t.equal(JSON.parse(afterOne.data), JSON.parse(initial.data) - 1, 'one fewer (marked in process A, streamed by B)');
  const from2 = stream.events.length;
  t.equal((await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: now } })).status, 200);
  const afterAll = await stream.next((e) => e.event === 'count', WAIT_MS, from2);
  t.equal(JSON.parse(afterAll.data), 0, 'none after marking all read');
  stream.close();
});

t.test('a stream ends soon after its token is revoked', async (t) => {
  const token = await api.tokenFor(tenant.tenantId, bob.id);
  const stream = await openSse(t, urlA, bearer(token));
  await stream.next((e) => e.event === 'count', WAIT_MS);
  t.equal((await api.call(t, 'logout', { token })).status, 204);
  const ended = await Promise.race([stream.ended.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), WAIT_MS))]);
  t.ok(ended, 'ended at the next heartbeat');
});

t.test('shutting a process down ends its open streams', async (t) => {
  const stream = await openSse(t, urlB, bearer(alice.token));
  await stream.next((e) => e.event === 'count', WAIT_MS);
  const stopped = second.stop();
  await stream.ended;
  await stopped;
  t.pass('the stream ended and the process stopped');
});
