import t, { type Test } from 'tap';
import pino from 'pino';
import { createAtrium } from '../../../src/server.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { bearer, sleep, waitForDispatches } from '../../helpers/fixtures.ts';
import { openSse, type SseClient } from '../../helpers/sse.ts';

// A stream outlives the check of its token at open. With a heartbeat far away, nothing
// but the check before each write keeps a revoked session from receiving notifications.
const api = await startTestApi(t, { role: 'all', streamHeartbeatMs: 600_000 });
const base = await api.atrium.app!.listen({ port: 0, host: '127.0.0.1' });
const url = `${base}/api/notifications/stream`;
const tenant = await api.createTenant('stream-revoked');

/** How long a case waits for an event it expects before it fails: a guard against a hang, not a speed target. */
const WAIT_MS = 15_000;

async function send(t: Test, userIds: number[], title: string): Promise<void> {
  const res = await api.call(t, 'createNotification', { token: tenant.adminToken, body: { user_ids: userIds, title, body: '<p>x</p>', url: '/x' } });
  t.equal(res.status, 202);
  await waitForDispatches(api.db, tenant.tenantId);
}

/** Opens a stream for a fresh session of `userId` and waits for its first count. */
async function streamOf(t: Test, userId: number): Promise<{ token: string; stream: SseClient }> {
  const token = await api.tokenFor(tenant.tenantId, userId);
  const stream = await openSse(t, url, bearer(token));
  await stream.next((e) => e.event === 'count', WAIT_MS);
  return { token, stream };
}

const revocations: [string, (t: Test, userId: number, token: string) => Promise<unknown>][] = [
  ['signed out', async (t, _userId, token) => t.equal((await api.call(t, 'logout', { token })).status, 204)],
  [
    'marked for logout',
    async (t, userId) => t.equal((await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: userId } })).status, 204),
  ],
  [
    // Such a session may only change its password, read its user and sign out: no stream.
    'restricted to changing its password',
    async (t, userId) =>
      t.equal((await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: userId }, body: { request_password_change: true } })).status, 200),
  ],
];
// (Deactivated and deleted users are no recipients at all: their streams end below, with nothing to deliver.)

for (const [how, revoke] of revocations) {
  t.test(`a stream whose session was ${how} receives no further notification and ends`, async (t) => {
    const user = await api.createUser(tenant.tenantId);
    const witness = await api.createUser(tenant.tenantId);
    const { token, stream } = await streamOf(t, user.id);
    const { stream: witnessStream } = await streamOf(t, witness.id);
    await revoke(t, user.id, token);
    await send(t, [user.id, witness.id], `after ${how}`);
    await witnessStream.next((e) => e.event === 'notification', WAIT_MS);
    await sleep(300);
    t.strictSame(
      stream.events.filter((e) => e.event === 'notification'),
      [],
      'the revoked session got nothing (a live session of the same batch did)',
    );
    const ended = await Promise.race([stream.ended.then(() => true), sleep(WAIT_MS).then(() => false)]);
    t.ok(ended, 'and its stream was ended without waiting for the heartbeat');
    witnessStream.close();
  });
}

t.test('a live session keeps streaming', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const { stream } = await streamOf(t, user.id);
  await send(t, [user.id], 'still here');
  const received = await stream.next((e) => e.event === 'notification', WAIT_MS);
  t.equal(JSON.parse(received.data).data.title, 'still here');
  stream.close();
});

/**
 * Whether the stream ended within a guard against a hang, which is far below the
 * heartbeat of this file (ten minutes): only the end of the session can have ended it.
 */
const endsBeforeHeartbeat = (stream: SseClient) => Promise.race([stream.ended.then(() => true), sleep(10_000).then(() => false)]);

const quietEnds: [string, (t: Test, userId: number, token: string) => Promise<unknown>][] = [
  ...revocations,
  [
    'deactivated',
    async (t, userId) =>
      t.equal((await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: userId }, body: { active: false } })).status, 200),
  ],
  ['deleted', async (t, userId) => t.equal((await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: userId } })).status, 204)],
  ['blacked out', async (t, userId) => t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: userId } })).status, 204)],
  [
    'ended by a password reset',
    async (t, userId) =>
      t.equal(
        (await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: userId }, body: { password: 'a new password for them' } })).status,
        200,
      ),
  ],
];

// With no notification to deliver, nothing writes to the stream before the heartbeat: the
// session's end itself (a notice on the streams' channel, on commit) must end it.
for (const [how, revoke] of quietEnds) {
  t.test(`a stream whose session was ${how} ends at once, with nothing to deliver`, async (t) => {
    const user = await api.createUser(tenant.tenantId);
    const { token, stream } = await streamOf(t, user.id);
    await revoke(t, user.id, token);
    t.ok(await endsBeforeHeartbeat(stream), 'the stream ended long before the heartbeat');
  });
}

t.test('a sign-out ends that session’s streams only', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const { token, stream } = await streamOf(t, user.id);
  const { stream: other } = await streamOf(t, user.id);
  t.equal((await api.call(t, 'logout', { token })).status, 204);
  t.ok(await endsBeforeHeartbeat(stream), 'the signed-out stream ended');
  await send(t, [user.id], 'to the other session');
  const received = await other.next((e) => e.event === 'notification', WAIT_MS);
  t.equal(JSON.parse(received.data).data.title, 'to the other session', 'the other session keeps streaming');
  other.close();
});

t.test('a session ended in one process ends its stream in another at once', async (t) => {
  // A second process on the same database, serving the API only: the notice reaches it through its own LISTEN.
  const second = await createAtrium({ ...api.config, role: 'api' }, { logger: pino({ level: 'silent' }) });
  t.teardown(() => second.stop());
  const secondUrl = `${await second.app!.listen({ port: 0, host: '127.0.0.1' })}/api/notifications/stream`;
  const user = await api.createUser(tenant.tenantId);
  const stream = await openSse(t, secondUrl, bearer(user.token));
  await stream.next((e) => e.event === 'count', WAIT_MS);
  t.equal((await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: user.id } })).status, 204);
  t.ok(await endsBeforeHeartbeat(stream), 'the other process ended the stream long before the heartbeat');
});

t.test('a session ended while its stream was being opened gets nothing replayed, and its stream ends', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  await send(t, [user.id], 'before the sign-out');
  const token = await api.tokenFor(tenant.tenantId, user.id);
  // The sign-out commits after the stream's request was authenticated, before the stream is registered: its notice
  // finds no stream to end.
  const streams = api.atrium.services.notificationStreams;
  const open = streams.open.bind(streams);
  streams.open = async (...args) => {
    t.equal((await api.call(t, 'logout', { token })).status, 204);
    return open(...args);
  };
  t.teardown(() => {
    streams.open = open;
  });
  // From the first event id on: a replay of every notification the user has.
  const stream = await openSse(t, url, { ...bearer(token), 'last-event-id': '0-00000000-0000-0000-0000-000000000000' });
  streams.open = open;
  t.equal(stream.status, 200, 'authenticated before the sign-out');
  t.ok(await endsBeforeHeartbeat(stream), 'the stream ended long before the heartbeat');
  t.strictSame(
    stream.events.filter((e) => e.event === 'notification'),
    [],
    'nothing was replayed to the ended session',
  );
});
