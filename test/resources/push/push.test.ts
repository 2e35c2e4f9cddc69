import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { eq, sql } from 'drizzle-orm';
import { deliverDispatch } from '../../../src/resources/notifications/deliver.job.ts';
import { findDispatch, storeNotificationBatch } from '../../../src/resources/notifications/queries.ts';
import { notify } from '../../../src/resources/notifications/notify.ts';
import { sanitizeBody } from '../../../src/resources/notifications/rules.ts';
import { deleteUserSubscriptions, loadMessages, recordOutcomes } from '../../../src/resources/push/queries.ts';
import { PUSH_MESSAGE_MAX_BYTES, pushPayload, pushPayloads } from '../../../src/resources/push/rules.ts';
import { sendPushJob, sendPushes } from '../../../src/resources/push/send-push.job.ts';
import { pushSubscriptions } from '../../../src/resources/push/table.ts';
import { DESTINATION_NOT_ALLOWED, NOT_AN_ALLOWED_DESTINATION, NOT_DELIVERED, OUTBOUND_CONCURRENCY } from '../../../src/platform/outbound/client.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { backdateUpdatedAt, holdRows, lockWaiters, rowCount, sleep } from '../../helpers/fixtures.ts';
import { browserSubscription, decryptPush, verifyVapid } from '../../helpers/push-service.ts';
import { startReceiver } from '../../helpers/receiver.ts';

// Loopback push services are only reachable because the operator allow-list admits them.
const api = await startTestApi(t, {
  role: 'all',
  webhookAllowedCidrs: ['127.0.0.1/32'],
  pushAllowedCidrs: ['127.0.0.1/32'],
  pushRetryDelayMs: 50,
  pushMaxAttempts: 3,
});
// A push service must accept 4096 bytes of body (RFC 8030 §7.2, RFC 8291 §4), and refuses more, as real ones do.
const pushService = await startReceiver(t, { maxBodyBytes: 4096 });
const tenant = await api.createTenant('push');
const other = await api.createTenant('push-other');
const alice = await api.createUser(tenant.tenantId);
const bob = await api.createUser(tenant.tenantId);
const group = await api.createUser(tenant.tenantId, { values: { groupAccount: true } });

const subscriptionCount = () => rowCount(api.db, 'push_subscriptions');
const register = (t: Test, token: string, body: unknown, headers: Record<string, string> = {}) =>
  api.call(t, 'createPushSubscription', { token, body, headers });
const notifyUsers = (t: Test, userIds: number[], message = { title: 'Fire drill', body: '<p>At <b>10:00</b> &amp; <i>sharp</i></p>', url: '/events/1' }) =>
  api.call(t, 'createNotification', { token: tenant.adminToken, body: { user_ids: userIds, ...message } });

let pathCounter = 0;
const pushPath = () => `/push/${++pathCounter}-${randomBytes(6).toString('hex')}`;

t.test('bad subscriptions are refused with a problem document and store nothing', async (t) => {
  const keys = browserSubscription().keys;
  const endpoint = pushService.url(pushPath());
  const cases: [string, unknown, string][] = [
    ['malformed endpoint', { endpoint: 'not a url', keys }, 'endpoint'],
    ['non-http scheme', { endpoint: 'ftp://127.0.0.1/push', keys }, 'endpoint'],
    ['http outside the allow-list', { endpoint: 'http://127.0.0.2/push', keys }, 'endpoint'],
    ['https to a private address', { endpoint: 'https://10.1.2.3/push', keys }, 'endpoint'],
    ['https to link-local metadata', { endpoint: 'https://169.254.169.254/push', keys }, 'endpoint'],
    ['p256dh not base64url', { endpoint, keys: { ...keys, p256dh: '***' } }, 'keys.p256dh'],
    ['p256dh of the wrong length', { endpoint, keys: { ...keys, p256dh: randomBytes(33).toString('base64url') } }, 'keys.p256dh'],
    [
      'p256dh not on the curve',
      { endpoint, keys: { ...keys, p256dh: Buffer.concat([Buffer.from([4]), Buffer.alloc(64, 0xff)]).toString('base64url') } },
      'keys.p256dh',
    ],
    ['auth of 15 bytes', { endpoint, keys: { ...keys, auth: randomBytes(15).toString('base64url') } }, 'keys.auth'],
  ];
  for (const [name, body, field] of cases) {
    const answer = await register(t, alice.token, body);
    t.equal(answer.status, 422, name);
    t.ok(answer.body.errors?.[field], `${name}: names ${field}`);
  }
  for (const [name, body] of [
    ['missing keys', { endpoint }],
    ['missing auth', { endpoint, keys: { p256dh: keys.p256dh } }],
    ['unknown property', { endpoint, keys, extra: 1 }],
    ['endpoint not a string', { endpoint: 42, keys }],
  ] as const) {
    const answer = await register(t, alice.token, body);
    t.ok(answer.status >= 400 && answer.status < 500, `${name} → ${answer.status}`);
    t.equal(answer.headers['content-type'], 'application/problem+json; charset=utf-8');
  }
  // Port 0 reaches nothing: told as such over plain http too, not as a destination the operator does not admit.
  for (const scheme of ['https', 'http']) {
    const answer = await register(t, alice.token, { endpoint: `${scheme}://127.0.0.1:0/push`, keys });
    t.equal(answer.status, 422, `${scheme} on port 0`);
    t.strictSame(answer.body.errors, { endpoint: ['must name a port from 1 to 65535 (or none)'] });
    t.strictSame(answer.body.error_codes, { endpoint: ['format'] });
  }
  // Credentials in the URL are refused as such: the message names no `auth` (the keys' `auth` is no credential of the URL).
  const withCredentials = await register(t, alice.token, { endpoint: pushService.url(pushPath()).replace('://', '://user:pw@'), keys });
  t.equal(withCredentials.status, 422, 'credentials in the endpoint');
  t.strictSame(withCredentials.body.errors, { endpoint: ['must not contain credentials (a user name or password before the host)'] });
  t.strictSame(withCredentials.body.error_codes, { endpoint: ['format'] });
  const malformed = await api.call(t, 'createPushSubscription', { token: alice.token, payload: '{"endpoint"', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  t.equal((await register(t, '', { endpoint, keys })).status, 401, 'no token');
  t.equal(await subscriptionCount(), 0, 'nothing stored');
});

t.test('group accounts cannot register a subscription', async (t) => {
  const answer = await register(t, group.token, { endpoint: pushService.url(pushPath()), keys: browserSubscription().keys });
  t.equal(answer.status, 403);
  const badInput = await register(t, group.token, { endpoint: 'not a url', keys: browserSubscription().keys });
  t.equal(badInput.status, 403, 'refused before the input is judged');
  t.equal(await subscriptionCount(), 0);
});

t.test('the VAPID public key is one stable uncompressed P-256 key', async (t) => {
  const first = await api.call(t, 'getVapidPublicKey', { token: alice.token });
  t.equal(first.status, 200);
  const key = Buffer.from(first.body.public_key, 'base64url');
  t.equal(key.length, 65);
  t.equal(key[0], 4);
  t.match(first.body.public_key, /^[A-Za-z0-9_-]+$/, 'base64url without padding');
  const again = await api.call(t, 'getVapidPublicKey', { token: bob.token });
  t.equal(again.body.public_key, first.body.public_key, 'same key for every caller and call');
  t.equal((await api.call(t, 'getVapidPublicKey', {})).status, 401);
});

t.test('registering the same endpoint again updates the one subscription', async (t) => {
  const endpoint = pushService.url(pushPath());
  const created = await register(t, alice.token, { endpoint, keys: browserSubscription().keys, expirationTime: null }, { 'user-agent': 'Firefox/130' });
  t.equal(created.status, 201);
  t.type(created.body.id, 'number');
  t.equal(created.body.user_agent, 'Firefox/130');
  t.notOk('p256dh' in created.body || 'keys' in created.body || 'auth' in created.body, 'keys are never answered');
  const fresh = browserSubscription().keys;
  const again = await register(t, alice.token, { endpoint, keys: fresh }, { 'user-agent': 'Firefox/131' });
  t.equal(again.status, 201);
  t.equal(again.body.id, created.body.id, 'same record');
  const [row] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, created.body.id));
  t.equal(row!.p256dh, fresh.p256dh, 'keys updated');
  t.equal(row!.userAgent, 'Firefox/131');
  const listed = await api.call(t, 'listPushSubscriptions', { token: alice.token });
  t.same(
    listed.body.map((s: { id: number }) => s.id),
    [created.body.id],
  );
  t.same((await api.call(t, 'listPushSubscriptions', { token: bob.token })).body, [], 'only the caller’s own');
  await api.db.owner.delete(pushSubscriptions);
});

t.test('registering a subscription again as it is stored leaves updated_at as it was', async (t) => {
  const endpoint = pushService.url(pushPath());
  const keys = browserSubscription().keys;
  const firefox = { 'user-agent': 'Firefox/130' };
  const created = await register(t, alice.token, { endpoint, keys }, firefox);
  t.equal(created.status, 201);
  const id = created.body.id;
  const past = await backdateUpdatedAt(api.db, 'push_subscriptions', id);
  // A browser sends its subscription on every page load (docs/audit.md): the same keys from the same browser.
  const again = await register(t, alice.token, { endpoint, keys }, firefox);
  t.equal(again.status, 201);
  t.equal(again.body.updated_at, past, 'the same keys and user agent answer the updated_at it had');
  t.strictSame(again.body, { ...created.body, updated_at: past }, 'and the subscription as it was');
  const upgraded = await register(t, alice.token, { endpoint, keys }, { 'user-agent': 'Firefox/131' });
  t.not(upgraded.body.updated_at, past, 'another user agent moves it');
  await backdateUpdatedAt(api.db, 'push_subscriptions', id);
  await api.db.owner
    .update(pushSubscriptions)
    .set({ lastFailureStatus: 400, lastFailure: 'refused', lastFailureAt: new Date() })
    .where(eq(pushSubscriptions.id, id));
  const cleared = await register(t, alice.token, { endpoint, keys }, { 'user-agent': 'Firefox/131' });
  t.equal(cleared.body.last_failure_status, null, 'a registration clears the last failure');
  t.not(cleared.body.updated_at, past, 'which moves it too');
  await api.db.owner.delete(pushSubscriptions);
});

t.test("a registration waiting behind the user's blackout is refused and stores nothing", async (t) => {
  const leaver = await api.createUser(tenant.tenantId, { username: 'leaving-pusher' });
  // A blackout under way: it holds the user's row (its new username takes the key lock) and has deleted the subscriptions.
  const blackout = await holdRows(
    api.db,
    sql`with gone as (delete from push_subscriptions where user_id = ${leaver.id})
        update users set username = 'deleted-user-' || id, deleted_at = now() where id = ${leaver.id}`,
  );
  const registered = register(t, leaver.token, { endpoint: pushService.url(pushPath()), keys: browserSubscription().keys });
  t.equal(await lockWaiters(api.db, 'for update'), 1, "the registration's look-up waits for the row");
  await blackout.release();
  t.equal((await registered).status, 401, 'it is refused');
  t.equal(await rowCount(api.db, 'push_subscriptions', sql`user_id = ${leaver.id}`), 0, 'and stored nothing');
});

t.test('an endpoint registered by another user of the tenant is refused and stays theirs', async (t) => {
  const endpoint = pushService.url(pushPath());
  const alices = await register(t, alice.token, { endpoint, keys: browserSubscription().keys });
  t.equal(alices.status, 201);
  const [before] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, alices.body.id));
  const taken = await register(t, bob.token, { endpoint, keys: browserSubscription().keys });
  t.equal(taken.status, 422);
  t.ok(taken.body.errors?.endpoint, 'names the endpoint');
  const [after] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, alices.body.id));
  t.same(after, before, 'owner and keys unchanged');
  t.same((await api.call(t, 'listPushSubscriptions', { token: bob.token })).body, []);
  // The same endpoint in another tenant is another subscription.
  const stranger = await api.createUser(other.tenantId);
  t.equal((await register(t, stranger.token, { endpoint, keys: browserSubscription().keys })).status, 201);
  t.equal(await subscriptionCount(), 2);
  await api.db.owner.delete(pushSubscriptions);
});

t.test('another spelling of an endpoint is the same endpoint: still refused to another user, the same record for its owner', async (t) => {
  const endpoint = pushService.url(pushPath());
  const alices = await register(t, alice.token, { endpoint, keys: browserSubscription().keys });
  t.equal(alices.status, 201);
  const [before] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, alices.body.id));
  const url = new URL(endpoint);
  const spellings = [
    endpoint.replace(/^http:/, 'HTTP:'),
    `${endpoint}#fragment`,
    `${endpoint}#`,
    `${url.protocol}//${url.hostname}:${url.port}${url.pathname}`.replace(url.hostname, url.hostname.toUpperCase()),
    // A letter of the path percent-encoded (RFC 3986 counts it as the letter), and the host as an IPv4-mapped IPv6 address.
    endpoint.replace('/push/', '/%70ush/'),
    endpoint.replace(url.hostname, `[::ffff:${url.hostname}]`),
  ];
  for (const spelling of spellings) {
    const taken = await register(t, bob.token, { endpoint: spelling, keys: browserSubscription().keys });
    t.equal(taken.status, 422, `${spelling} is refused to another user`);
    t.ok(taken.body.errors?.endpoint, 'names the endpoint');
  }
  const [after] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, alices.body.id));
  t.same(after, before, 'owner and keys unchanged');
  t.equal(await subscriptionCount(), 1, 'no second record');
  const again = await register(t, alice.token, { endpoint: `${endpoint.replace(/^http:/, 'HTTP:')}#x`, keys: browserSubscription().keys });
  t.equal(again.status, 201);
  t.equal(again.body.id, alices.body.id, 'its owner re-registering another spelling updates the one record');
  t.equal(again.body.endpoint, endpoint, 'answered as written as a URL, without the fragment');
  await api.db.owner.delete(pushSubscriptions);
});

t.test('an endpoint longer than 2048 characters once written as a URL is refused and stores nothing', async (t) => {
  // 400 accented letters fit the schema's 2048 characters as sent, and become 2,400 as %C3%A9.
  const endpoint = `${pushService.url(pushPath())}/${'\u00e9'.repeat(400)}end`;
  t.ok(endpoint.length <= 2048);
  const refused = await register(t, alice.token, { endpoint, keys: browserSubscription().keys });
  t.equal(refused.status, 422);
  t.strictSame(refused.body.error_codes?.endpoint, ['max_length']);
  t.equal(await subscriptionCount(), 0);
});

t.test('a user holds at most 20 subscriptions; re-registering one of them still works', async (t) => {
  const carol = await api.createUser(tenant.tenantId);
  const endpoints = Array.from({ length: 20 }, () => pushService.url(pushPath()));
  for (const endpoint of endpoints) t.equal((await register(t, carol.token, { endpoint, keys: browserSubscription().keys })).status, 201);
  const refused = await register(t, carol.token, { endpoint: pushService.url(pushPath()), keys: browserSubscription().keys });
  t.equal(refused.status, 422);
  t.ok(refused.body.errors?.endpoint, 'names the endpoint');
  t.equal(await subscriptionCount(), 20, 'nothing stored');
  t.equal((await register(t, carol.token, { endpoint: endpoints[3], keys: browserSubscription().keys })).status, 201, 'an own endpoint is updated');
  t.equal((await register(t, bob.token, { endpoint: pushService.url(pushPath()), keys: browserSubscription().keys })).status, 201, 'the cap is per user');
  t.equal(await subscriptionCount(), 21);
  await api.db.owner.delete(pushSubscriptions);
});

t.test('another user’s or tenant’s subscription is answered like a missing one', async (t) => {
  const subscription = { endpoint: pushService.url(pushPath()), keys: browserSubscription().keys };
  const created = await register(t, alice.token, subscription);
  // Browsers send their subscription again on every page load: the same subscription, no new event.
  t.equal((await register(t, alice.token, subscription)).body.id, created.body.id, 'registered again: the same subscription');
  const stranger = await api.createUser(other.tenantId);
  t.equal((await api.call(t, 'deletePushSubscription', { token: bob.token, params: { subscription: created.body.id } })).status, 404);
  t.equal((await api.call(t, 'deletePushSubscription', { token: stranger.token, params: { subscription: created.body.id } })).status, 404);
  t.equal((await api.call(t, 'deletePushSubscription', { token: alice.token, params: { subscription: 'x' } })).status >= 400, true);
  t.equal(await subscriptionCount(), 1, 'still there');
  t.equal((await api.call(t, 'deletePushSubscription', { token: alice.token, params: { subscription: created.body.id } })).status, 204);
  t.equal((await api.call(t, 'deletePushSubscription', { token: alice.token, params: { subscription: created.body.id } })).status, 404);
  t.equal(await subscriptionCount(), 0);
  const events = await api.db.owner.execute<{ action: string; actor_id: string }>(
    sql`select action, actor_id::text from audit_events where target_type = 'push_subscription' and target_id = ${String(created.body.id)} order by occurred_at, action`,
  );
  t.strictSame(
    events.map((e) => [e.action, e.actor_id]),
    [
      ['push_subscription.created', String(alice.id)],
      ['push_subscription.deleted', String(alice.id)],
    ],
    'one event per change: the repeated registration and the refused and repeated deletes left none',
  );
});

t.test('a notification is pushed encrypted and VAPID-signed to every subscription of the recipient', async (t) => {
  const phone = browserSubscription();
  const laptop = browserSubscription();
  const phonePath = pushPath();
  const laptopPath = pushPath();
  pushService.script(phonePath, [201]);
  pushService.script(laptopPath, [201]);
  await register(t, alice.token, { endpoint: pushService.url(phonePath), keys: phone.keys });
  await register(t, alice.token, { endpoint: pushService.url(laptopPath), keys: laptop.keys });
  t.equal((await notifyUsers(t, [alice.id, bob.id])).status, 202);

  const received = await eventually(
    async () => [...pushService.received(phonePath), ...pushService.received(laptopPath)],
    (r) => r.length >= 2,
  );
  t.equal(received.length, 2, 'one push per subscription');
  const [stored] = (await api.call(t, 'listNotifications', { token: alice.token })).body;
  const publicKey = (await api.call(t, 'getVapidPublicKey', { token: alice.token })).body.public_key;
  for (const [request, subscription] of [
    [pushService.received(phonePath)[0]!, phone],
    [pushService.received(laptopPath)[0]!, laptop],
  ] as const) {
    t.equal(request.method, 'POST');
    t.equal(request.headers['content-encoding'], 'aes128gcm');
    t.ok(Number(request.headers.ttl) > 0, 'TTL header');
    const { claims, k } = await verifyVapid(request.headers, publicKey);
    t.equal(k, publicKey, 'k is the served public key');
    t.equal(claims.aud, `http://127.0.0.1:${pushService.port}`, 'audience is the push service origin');
    t.match(claims.sub, /^mailto:|^https:/);
    t.ok(claims.exp! > Date.now() / 1000);
    const message = JSON.parse(decryptPush(subscription, request.raw));
    t.same(message, { id: stored.id, title: 'Fire drill', body: 'At 10:00 & sharp', url: '/events/1' }, 'the message, body as plain text');
  }
});

t.test('404 or 410 from the push service deletes the subscription', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const gonePath = pushPath();
  const missingPath = pushPath();
  pushService.script(gonePath, [410]);
  pushService.script(missingPath, [404]);
  await register(t, bob.token, { endpoint: pushService.url(gonePath), keys: browserSubscription().keys });
  await register(t, bob.token, { endpoint: pushService.url(missingPath), keys: browserSubscription().keys });
  await notifyUsers(t, [bob.id]);
  const left = await eventually(subscriptionCount, (n) => n === 0);
  t.equal(left, 0, 'both deleted');
  t.equal(pushService.received(gonePath).length, 1);
  t.equal(pushService.received(missingPath).length, 1);
});

t.test('429 is retried after Retry-After, other 4xx are recorded and not retried', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const busyPath = pushPath();
  const refusingPath = pushPath();
  pushService.script(busyPath, [{ status: 429, body: 'slow down', headers: { 'retry-after': '1' } }, 201]);
  pushService.script(refusingPath, [400]);
  await register(t, bob.token, { endpoint: pushService.url(busyPath), keys: browserSubscription().keys });
  const refusing = await register(t, bob.token, { endpoint: pushService.url(refusingPath), keys: browserSubscription().keys });
  await notifyUsers(t, [bob.id]);
  const busy = await eventually(
    async () => pushService.received(busyPath),
    (r) => r.length >= 2,
  );
  t.equal(busy.length, 2, 'retried once, then accepted');
  t.ok(busy[1]!.at - busy[0]!.at >= 900, `waited for Retry-After (${busy[1]!.at - busy[0]!.at} ms)`);
  t.equal(pushService.received(refusingPath).length, 1, 'the 400 was not retried');
  const [row] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, refusing.body.id));
  t.equal(row!.lastFailureStatus, 400, 'recorded');
  const listed = (await api.call(t, 'listPushSubscriptions', { token: bob.token })).body;
  t.equal(listed.find((s: { id: number }) => s.id === refusing.body.id).last_failure_status, 400);
  t.equal(await subscriptionCount(), 2, 'neither deleted');
});

t.test('5xx is retried with backoff until the attempts run out, then recorded', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const failingPath = pushPath();
  pushService.script(failingPath, [503]);
  const created = await register(t, bob.token, { endpoint: pushService.url(failingPath), keys: browserSubscription().keys });
  await notifyUsers(t, [bob.id]);
  const row = await eventually(
    async () => (await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, created.body.id)))[0]!,
    (r) => r.lastFailureStatus !== null,
  );
  t.equal(pushService.received(failingPath).length, 3, 'PUSH_MAX_ATTEMPTS attempts');
  t.equal(row.lastFailureStatus, 503);
  t.match(row.lastFailure, /gave up after 3 attempts/);
});

t.test('pushes for a batch cost the same number of queries for 2 or 40 recipients', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const recipients = await Promise.all(Array.from({ length: 40 }, () => api.createUser(tenant.tenantId)));
  const path = pushPath();
  pushService.script(path, [201]);
  for (const user of recipients) await register(t, user.token, { endpoint: pushService.url(`${path}-${user.id}`), keys: browserSubscription().keys });
  // Stored without the delivery job (owner role), so the push job is run here directly.
  const queriesFor = async (users: typeof recipients) => {
    const dispatchId = crypto.randomUUID();
    await api.db.owner.execute(sql`
      insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
      select ${tenant.tenantId}, ${dispatchId}::uuid, 'customNotification', u, '{"title":"T","body":"B","url":"/"}'::jsonb
      from unnest(${`{${users.map((u) => u.id).join(',')}}`}::bigint[]) u`);
    const ids = users.map((u) => u.id);
    const before = api.db.queryCount;
    const tally = await sendPushes(api.atrium.services, {
      tenantId: tenant.tenantId,
      dispatchId,
      afterUserId: Math.min(...ids) - 1,
      lastUserId: Math.max(...ids),
    });
    return { queries: api.db.queryCount - before, sent: tally.sent };
  };
  const few = await queriesFor(recipients.slice(0, 2));
  const many = await queriesFor(recipients);
  t.equal(few.sent, 2);
  t.equal(many.sent, 40);
  t.equal(many.queries, few.queries, `constant: ${few.queries} queries`);
});

t.test("a batch's push job holds a notification's contents once, whatever the number of recipients", async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const recipients = await Promise.all(Array.from({ length: 30 }, () => api.createUser(tenant.tenantId)));
  const path = pushPath();
  pushService.script(path, [201]);
  for (const user of recipients) await register(t, user.token, { endpoint: pushService.url(`${path}-${user.id}`), keys: browserSubscription().keys });
  // The longest body a notification takes, sanitized: each `&` is stored as `&amp;`, some 320 KB in all.
  const data = { title: 'Long', body: sanitizeBody('&'.repeat(65535)), url: '/' };
  const dispatchId = crypto.randomUUID();
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
    select ${tenant.tenantId}, ${dispatchId}::uuid, 'customNotification', u, ${JSON.stringify(data)}::jsonb
    from unnest(${`{${recipients.map((u) => u.id).join(',')}}`}::bigint[]) u`);
  const ids = recipients.map((u) => u.id);
  const batch = { dispatchId, afterUserId: Math.min(...ids) - 1, lastUserId: Math.max(...ids) };
  const messages = await api.db.tenant(tenant.tenantId, (tx) => loadMessages(tx, batch));
  t.equal(messages.length, 30);
  t.ok(
    messages.every((message) => message.data === messages[0]!.data),
    'one copy of the contents for all the messages (5000 recipients would otherwise hold 5000 copies: 1.6 GB)',
  );
  t.same(messages[0]!.data, data);
  t.equal((await sendPushes(api.atrium.services, { tenantId: tenant.tenantId, ...batch })).sent, 30);
  const [first] = pushService.received(`${path}-${recipients[0]!.id}`);
  t.ok(first, 'pushed');
});

t.test("a notification deleted while its batch's push job reads takes only its own messages with it", async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const recipients = await Promise.all(Array.from({ length: 3 }, () => api.createUser(tenant.tenantId)));
  const path = pushPath();
  pushService.script(path, [201]);
  for (const user of recipients) await register(t, user.token, { endpoint: pushService.url(`${path}-${user.id}`), keys: browserSubscription().keys });
  const dispatchId = crypto.randomUUID();
  const stored = await api.db.owner.execute<{ id: string; notifiable_id: string }>(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
    select ${tenant.tenantId}, ${dispatchId}::uuid, 'customNotification', u, '{"title":"Kept","body":"B","url":"/"}'::jsonb
    from unnest(${`{${recipients.map((u) => u.id).join(',')}}`}::bigint[]) u
    returning id, notifiable_id`);
  const ids = recipients.map((u) => u.id);
  const batch = { dispatchId, afterUserId: Math.min(...ids) - 1, lastUserId: Math.max(...ids) };
  // The first recipient's notification is the one whose contents the job reads: deleted (its recipient's reset)
  // right after the job's first read, committed before its second.
  const gone = stored.find((row) => Number(row.notifiable_id) === Math.min(...ids))!;
  let reads = 0;
  const messages = await api.db.tenant(tenant.tenantId, (tx) => {
    const interrupted = new Proxy(tx, {
      get(target, key) {
        const value = Reflect.get(target, key, target) as unknown;
        if (key !== 'execute' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
        return async (...args: unknown[]) => {
          const result = await (value as (...args: unknown[]) => Promise<unknown>).apply(target, args);
          if (++reads === 1) await api.db.owner.execute(sql`delete from notifications where id = ${gone.id}::uuid`);
          return result;
        };
      },
    });
    return loadMessages(interrupted, batch);
  });
  t.equal(reads, 2, 'the delete came between the two reads');
  t.strictSame(
    messages.map((message) => message.recipientId).sort((a, b) => a - b),
    ids.filter((id) => id !== Number(gone.notifiable_id)).sort((a, b) => a - b),
    "the other recipients' messages are kept",
  );
  t.ok(
    messages.every((message) => message.data.title === 'Kept'),
    'with the contents',
  );
});

t.test('the messages of one contents shorten its body once, not once per message', async (t) => {
  const data = { title: 'Long', body: sanitizeBody('&'.repeat(65535)), url: '/' };
  const ids = Array.from({ length: 200 }, () => crypto.randomUUID());
  const single = performance.now();
  for (const id of ids.slice(0, 20)) pushPayload(id, data);
  const twentyAlone = performance.now() - single;
  const payload = pushPayloads();
  const started = performance.now();
  const messages = ids.map((id) => payload(id, data));
  const twoHundredTogether = performance.now() - started;
  t.ok(twoHundredTogether < twentyAlone, `200 messages in ${Math.round(twoHundredTogether)} ms, 20 made alone in ${Math.round(twentyAlone)} ms`);
  t.strictSame(
    messages.slice(0, 3),
    ids.slice(0, 3).map((id) => pushPayload(id, data)),
    'the same messages',
  );
  t.ok(Buffer.byteLength(messages[0]!) <= PUSH_MESSAGE_MAX_BYTES);
});

t.test('a long body is shortened so the message fits a push', async (t) => {
  const long = pushPayload('00000000-0000-0000-0000-000000000000', { title: 'T', body: `<p>${'ä'.repeat(5000)}</p>`, url: '/u' });
  t.ok(Buffer.byteLength(long) <= PUSH_MESSAGE_MAX_BYTES, `${Buffer.byteLength(long)} bytes`);
  const message = JSON.parse(long);
  t.match(message.body, /^ä+…$/);
  t.equal(message.title, 'T');
  const short = JSON.parse(pushPayload('00000000-0000-0000-0000-000000000000', { title: 'T', body: '<p>a &lt; b</p>', url: '/u' }));
  t.equal(short.body, 'a < b', 'short bodies stay whole, entities decoded');
});

t.test('a notification with the longest title and URL the API accepts arrives, within what push services take', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  // Each title character a control character (6 bytes escaped in JSON), each URL character 2 or 4 bytes: some 5,700
  // to 9,300 bytes of message, which push services would refuse (413) once encrypted.
  const cases = [
    { name: 'control characters and ü', title: '\u0001'.repeat(255), url: `/${'ü'.repeat(2047)}`, body: '<p>At 10:00</p>' },
    { name: 'emoji (surrogate pairs)', title: '😀'.repeat(255), url: `/${'😀'.repeat(2047)}`, body: `<p>${'😀'.repeat(5000)}</p>` },
    { name: 'a URL that fits, a title that must be shortened', title: '\u0001'.repeat(255), url: `/${'ü'.repeat(1400)}`, body: '<p>Body</p>' },
  ];
  const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
  for (const { name, title, url, body } of cases) {
    const subscriber = await api.createUser(tenant.tenantId);
    const browser = browserSubscription();
    const path = pushPath();
    pushService.script(path, [201]);
    await register(t, subscriber.token, { endpoint: pushService.url(path), keys: browser.keys });
    t.equal((await notifyUsers(t, [subscriber.id], { title, body, url })).status, 202, `${name}: accepted`);
    const [request] = await eventually(
      async () => pushService.received(path),
      (r) => r.length >= 1,
    );
    t.ok(request!.raw.length <= 4096, `${name}: ${request!.raw.length} bytes encrypted, at most 4096`);
    const [row] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.userId, subscriber.id));
    t.equal(row!.lastFailureStatus, null, `${name}: no failure recorded`);
    let text: string;
    try {
      text = decryptPush(browser, request!.raw);
    } catch (error) {
      t.fail(`${name}: not one record the browser can decrypt: ${(error as Error).message}`);
      continue;
    }
    t.ok(Buffer.byteLength(text) <= PUSH_MESSAGE_MAX_BYTES, `${name}: ${Buffer.byteLength(text)} bytes decrypted`);
    const message = JSON.parse(text) as { id: string; title: string; body: string; url: string };
    const [stored] = (await api.call(t, 'listNotifications', { token: subscriber.token })).body;
    t.equal(message.id, stored.id, `${name}: the notification's id`);
    for (const field of ['title', 'body', 'url'] as const) t.notMatch(message[field], lone, `${name}: ${field} holds whole characters`);
    t.ok(message.url === url || message.url === '/', `${name}: the URL whole, or the start page when it cannot fit`);
    t.ok(title.startsWith(message.title.replace(/…$/, '')), `${name}: the title, or its beginning`);
  }
});

t.test('a push job ends within the expiry pg-boss stores for it, even when every push service takes the whole timeout', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  // Push services that each take OUTBOUND_TIMEOUT_MS at 5 minutes (a value the configuration admits), 8 requests in flight.
  const timeoutSeconds = 300;
  const services = { ...api.atrium.services, config: { ...api.atrium.services.config, outboundTimeoutMs: timeoutSeconds * 1000 } };
  const recipients = await Promise.all(Array.from({ length: 30 }, () => api.createUser(tenant.tenantId)));
  const path = pushPath();
  await api.db.owner.insert(pushSubscriptions).values(
    recipients.flatMap((user) =>
      ['phone', 'laptop'].map((device) => ({
        tenantId: tenant.tenantId,
        userId: user.id,
        endpoint: pushService.url(`${path}-${user.id}-${device}`),
        ...browserSubscription().keys,
      })),
    ),
  );
  const dispatchId = crypto.randomUUID();
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
    select ${tenant.tenantId}, ${dispatchId}::uuid, 'customNotification', u, '{"title":"T","body":"B","url":"/"}'::jsonb
    from unnest(${`{${recipients.map((u) => u.id).join(',')}}`}::bigint[]) u`);
  const ids = recipients.map((u) => u.id);
  const batch = { tenantId: tenant.tenantId, dispatchId, afterUserId: Math.min(...ids) - 1, lastUserId: Math.max(...ids) };
  // The job as the delivery queues it, kept from the workers (a day ahead): its expiry as pg-boss stores it.
  const queued = await api.atrium.services.jobs.send(sendPushJob, batch, { startAfter: new Date(Date.now() + 86_400_000) });
  const [stored] = await api.db.owner.execute<{ expire: number }>(
    sql`select extract(epoch from expire_in)::int as expire from pgboss.job where id = ${queued}::uuid`,
  );
  await api.db.owner.execute(sql`delete from pgboss.job where id = ${queued}::uuid`);
  const [queue] = await api.db.owner.execute<{ expire_seconds: number | null }>(sql`select expire_seconds from pgboss.queue where name = 'push.send'`);
  t.equal(queue!.expire_seconds, stored!.expire, "the queue's expiry, which every push job gets");

  const tally = await sendPushes(services, batch);
  const longest = Math.ceil(tally.sent / 8) * timeoutSeconds;
  t.ok(longest < stored!.expire, `this job sent ${tally.sent} of 60 messages, at most ${longest} s, within its expiry of ${stored!.expire} s`);
  const received = await eventually(
    async () => recipients.flatMap((user) => ['phone', 'laptop'].map((device) => pushService.received(`${path}-${user.id}-${device}`).length)),
    (counts) => counts.every((count) => count >= 1),
  );
  t.ok(
    received.every((count) => count === 1),
    'the rest went out as jobs of their own: every subscription got its message once',
  );
});

t.test('a delivery resumed after a crash pushes the batches whose push was lost, and none twice', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const path = pushPath();
  pushService.script(path, [201]);
  const subscriber = await api.createUser(tenant.tenantId);
  await register(t, subscriber.token, { endpoint: pushService.url(path), keys: browserSubscription().keys });
  const dispatch = await api.db.tenant(tenant.tenantId, (tx) =>
    notify(tx, { recipients: { userIds: [subscriber.id] }, type: 'customNotification', data: { title: 'Resumed', body: 'B', url: '/' } }),
  );
  // The "crashed" run: the batch is stored, but the process died before queueing its push.
  await api.db.tenant(tenant.tenantId, async (tx) => storeNotificationBatch(tx, (await findDispatch(tx, dispatch.dispatchId))!, 0, 100));
  await deliverDispatch(api.atrium.services, dispatch);
  await eventually(
    async () => pushService.received(path),
    (r) => r.length >= 1,
  );
  await deliverDispatch(api.atrium.services, dispatch);
  // Give a wrongly queued second push the time to arrive.
  await sleep(1500);
  t.equal(pushService.received(path).length, 1, 'exactly one push');
});

t.test('a plain-http endpoint is sent to only when the allow-list admits the address connected to', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  const dave = await api.createUser(tenant.tenantId);
  await notifyUsers(t, [dave.id]);
  const [notification] = await eventually(
    async () => api.db.owner.execute<{ id: string }>(sql`select id from notifications where notifiable_id = ${dave.id}`),
    (rows) => rows.length === 1,
  );
  // Stored directly, as if it had been registered while its host name resolved to an
  // allow-listed address and now resolves to a public one (1.1.1.1 is public, not allow-listed).
  const [subscription] = await api.db.owner
    .insert(pushSubscriptions)
    .values({ tenantId: tenant.tenantId, userId: dave.id, endpoint: 'http://1.1.1.1:9/push', ...browserSubscription().keys })
    .returning();
  const tally = await sendPushes(api.atrium.services, {
    tenantId: tenant.tenantId,
    attempt: 1,
    deliveries: [{ subscriptionId: subscription!.id, notificationId: notification!.id }],
  });
  t.same(tally, { sent: 0, gone: 0, retried: 0, failed: 1 }, 'refused, not retried');
  const [row] = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.id, subscription!.id));
  t.equal(row!.lastFailure, DESTINATION_NOT_ALLOWED, 'the refusal is recorded, without the address');
  t.equal(row!.lastFailureStatus, null);
  await api.db.owner.delete(pushSubscriptions);
});

t.test('a refused endpoint is answered without saying where its host points', async (t) => {
  const keys = browserSubscription().keys;
  const https = ['https://10.1.2.3/push', 'https://[::7f00:1]/push', 'https://[64:ff9b::a9fe:a9fe]/push', 'https://no-such-host.invalid/push'];
  for (const endpoint of https) {
    const answer = await register(t, alice.token, { endpoint, keys });
    t.equal(answer.status, 422, endpoint);
    t.strictSame(answer.body.errors?.endpoint, [NOT_AN_ALLOWED_DESTINATION], `${endpoint}: one answer for every refused host`);
  }
  for (const endpoint of ['http://127.0.0.2/push', 'http://[::ffff:7f00:2]/push', 'http://no-such-host.invalid/push']) {
    const answer = await register(t, alice.token, { endpoint, keys });
    t.equal(answer.status, 422, endpoint);
    t.strictSame(answer.body.errors?.endpoint, ['must be an https URL (plain http only to destinations the operator admits)'], endpoint);
  }
});

t.test('push failures without a response are recorded alike: no port-scan oracle', async (t) => {
  await api.db.owner.delete(pushSubscriptions);
  // A peer that accepts and resets every connection.
  const resetter = createServer((socket) => socket.resetAndDestroy());
  await new Promise<void>((resolve) => resetter.listen(0, '127.0.0.1', resolve));
  t.teardown(() => resetter.close());
  const erin = await api.createUser(tenant.tenantId);
  await notifyUsers(t, [erin.id]);
  const [notification] = await eventually(
    async () => api.db.owner.execute<{ id: string }>(sql`select id from notifications where notifiable_id = ${erin.id}`),
    (rows) => rows.length === 1,
  );
  const endpoints = {
    'connection refused': 'http://127.0.0.1:1/push',
    'connection reset': `http://127.0.0.1:${(resetter.address() as { port: number }).port}/push`,
    'TLS failure': `https://127.0.0.1:${pushService.port}/push`,
    'DNS failure': 'https://no-such-host.invalid/push',
  };
  // Stored directly: each may have worked when it was registered.
  const stored = await api.db.owner
    .insert(pushSubscriptions)
    .values(Object.values(endpoints).map((endpoint) => ({ tenantId: tenant.tenantId, userId: erin.id, endpoint, ...browserSubscription().keys })))
    .returning({ id: pushSubscriptions.id, endpoint: pushSubscriptions.endpoint });
  const tally = await sendPushes(api.atrium.services, {
    tenantId: tenant.tenantId,
    attempt: 3, // the last allowed attempt: each failure is recorded now
    deliveries: stored.map((row) => ({ subscriptionId: row.id, notificationId: notification!.id })),
  });
  t.same(tally, { sent: 0, gone: 0, retried: 0, failed: 4 });
  const listed = (await api.call(t, 'listPushSubscriptions', { token: erin.token })).body as {
    endpoint: string;
    last_failure: string;
    last_failure_status: null;
  }[];
  t.equal(listed.length, 4);
  for (const [what, endpoint] of Object.entries(endpoints)) {
    const subscription = listed.find((s) => s.endpoint === endpoint)!;
    t.equal(subscription.last_failure, `${NOT_DELIVERED} (gave up after 3 attempts)`, what);
    t.equal(subscription.last_failure_status, null, what);
  }
  await api.db.owner.delete(pushSubscriptions);
});

/**
 * Runs `write` while another transaction holds the lowest of eight subscriptions of alice:
 * answers whether the write, waiting for it, held none of the others (it locks in id order).
 */
async function waitsHoldingNoneOthers(t: Test, write: (ids: number[]) => Promise<unknown>, prepare?: (ids: number[]) => Promise<unknown>) {
  await api.db.owner.delete(pushSubscriptions);
  const rows = await api.db.owner
    .insert(pushSubscriptions)
    .values(
      Array.from({ length: 8 }, (_, i) => ({ tenantId: tenant.tenantId, userId: alice.id, endpoint: `https://push.example.com/${i}`, p256dh: 'k', auth: 'a' })),
    )
    .returning({ id: pushSubscriptions.id });
  const ids = rows.map((row) => row.id).sort((a, b) => a - b);
  await prepare?.(ids);
  const [lowest, ...rest] = ids;
  const held = await holdRows(api.db, sql`select 1 from push_subscriptions where tenant_id = ${tenant.tenantId} and id = ${lowest} for update`);
  const writing = write(ids);
  t.equal(await lockWaiters(api.db, 'push_subscriptions'), 1, 'the write waits for the held subscription');
  const free = await api.db.owner.transaction((tx) =>
    tx.execute<{ id: number }>(sql`select id from push_subscriptions where tenant_id = ${tenant.tenantId} and id in ${rest} for update skip locked`),
  );
  t.equal(free.length, rest.length, 'none of the others is held while it waits');
  await held.release();
  await writing;
}

t.test('settling a delivery and deleting a user’s subscriptions lock them in id order, as another delivery does', async (t) => {
  await waitsHoldingNoneOthers(t, ([lowest, ...rest]) =>
    api.db.tenant(tenant.tenantId, (tx) =>
      recordOutcomes(tx, {
        gone: new Set(rest.slice(0, 4)),
        failures: new Map([lowest!, ...rest.slice(4)].map((id) => [id, { status: 400, error: 'refused' }])),
      }),
    ),
  );
  t.equal(await subscriptionCount(), 4, 'the gone ones are deleted');
  // A leaver cut off or a blackout deletes all of them.
  // The lowest rewritten first (its endpoint re-registered) lies last in the table and its indexes: a scan meets it last.
  await waitsHoldingNoneOthers(
    t,
    () => api.db.tenant(tenant.tenantId, (tx) => deleteUserSubscriptions(tx, alice.id)),
    ([lowest]) => api.db.owner.execute(sql`update push_subscriptions set endpoint = endpoint || '/moved', last_failure = 'refused' where id = ${lowest}`),
  );
  t.equal(await subscriptionCount(), 0, 'all are deleted');
});

t.test("one tenant's fan-out does not queue another tenant's push behind all of its batches", async (t) => {
  // docs/outbound-delivery.md#concurrency. The first tenant's notification to twenty recipients, stored one recipient a
  // batch: twenty push jobs. Every push worker is held by its push service, twelve jobs wait; then another tenant's
  // notification. Once the workers are free, its push is among the next ones sent, not after the twelve.
  await api.db.owner.delete(pushSubscriptions);
  // An endpoint is the one user's: each recipient's own, every one held by the push service until released.
  const paths: string[] = [];
  const recipients: number[] = [];
  for (let i = 0; i < OUTBOUND_CONCURRENCY + 12; i++) {
    const path = pushPath();
    pushService.script(path, ['hang']);
    const recipient = await api.createUser(tenant.tenantId);
    t.equal((await register(t, recipient.token, { endpoint: pushService.url(path), keys: browserSubscription().keys })).status, 201);
    paths.push(path);
    recipients.push(recipient.id);
  }
  const backlog = () => paths.reduce((sum, path) => sum + pushService.received(path).length, 0);
  const data = { title: 'Everyone', body: 'B', url: '/' };
  const fanOut = await api.db.tenant(tenant.tenantId, (tx) => notify(tx, { recipients: { userIds: recipients }, type: 'customNotification', data }));
  await deliverDispatch(api.atrium.services, fanOut, 1);
  await eventually(
    async () => backlog(),
    (n) => n === OUTBOUND_CONCURRENCY,
  );
  const besidePath = pushPath();
  pushService.script(besidePath, [201]);
  const beside = await api.createUser(other.tenantId);
  t.equal((await register(t, beside.token, { endpoint: pushService.url(besidePath), keys: browserSubscription().keys })).status, 201);
  const single = await api.db.tenant(other.tenantId, (tx) => notify(tx, { recipients: { userIds: [beside.id] }, type: 'customNotification', data }));
  await deliverDispatch(api.atrium.services, single);
  pushService.releaseHung();
  const busy = await eventually(
    async () => ({ backlog: backlog(), beside: pushService.received(besidePath).length }),
    (seen) => seen.backlog + seen.beside >= 2 * OUTBOUND_CONCURRENCY,
  );
  t.equal(busy.beside, 1, `the other tenant's push was sent before the first tenant's next ${busy.backlog - OUTBOUND_CONCURRENCY}`);
  // The rest of the fan-out, released as it arrives.
  const all = await eventually(
    async () => {
      pushService.releaseHung();
      return backlog();
    },
    (n) => n === OUTBOUND_CONCURRENCY + 12,
  );
  t.equal(all, OUTBOUND_CONCURRENCY + 12, 'then every one of the fan-out');
});
