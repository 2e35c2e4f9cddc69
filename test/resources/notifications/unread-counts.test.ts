/**
 * The unread counts the database keeps (table notification_unread_counts, kept by triggers
 * on notifications; what `GET /api/notifications/count` answers without filters and the
 * live stream's count): exact after every path that stores, reads or deletes
 * notifications, under concurrency, and closed to the application role but for reading
 * its own tenant's.
 */
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { purgeExpiredNotifications } from '../../../src/resources/notifications/purge-expired.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { holdRows, lockWaiters, storeNotification, waitForDispatches } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { role: 'all' });
const tenant = await api.createTenant('unread-counts');
const other = await api.createTenant('unread-counts-other');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const alice = await api.createUser(tenant.tenantId);
const bob = await api.createUser(tenant.tenantId);
const carol = await api.createUser(other.tenantId);

const now = () => new Date();
const daysAgo = (days: number) => new Date(Date.now() - days * 86_400_000);

/** Users whose kept count differs from the number of their unread notifications (none when exact). */
async function mismatches() {
  return [
    ...(await api.db.owner.execute<{ id: number; kept: number; counted: number }>(sql`
      select u.id, coalesce(c.unread, 0)::int as kept, count(n.id)::int as counted
      from users u
      left join notification_unread_counts c on c.tenant_id = u.tenant_id and c.user_id = u.id
      left join notifications n on n.tenant_id = u.tenant_id and n.notifiable_id = u.id and n.notifiable_type = 'user' and n.read_at is null
      group by u.tenant_id, u.id, c.unread
      having coalesce(c.unread, 0) <> count(n.id)`)),
  ];
}

const countOf = async (t: Test, token: string, filter?: Record<string, string>) => {
  const res = await api.call(t, 'countNotifications', { token, query: filter ? { filter } : {} });
  t.equal(res.status, 200);
  return res.body as number;
};

const newest = async (userId: number) =>
  (
    await api.db.owner.execute<{ id: string }>(sql`
      select id from notifications where notifiable_id = ${userId} and read_at is null order by created_at desc, id desc limit 1`)
  )[0]!.id;

t.test('every path that stores, reads or deletes notifications keeps the count exact', async (t) => {
  await storeNotification(api.db, tenant.tenantId, alice.id, now());
  await storeNotification(api.db, tenant.tenantId, alice.id, now(), { type: 'taskReminder' });
  await storeNotification(api.db, tenant.tenantId, alice.id, now(), { readAt: now() });
  await storeNotification(api.db, tenant.tenantId, bob.id, now());
  await storeNotification(api.db, other.tenantId, carol.id, now());
  t.equal(await countOf(t, alice.token), 2, 'stored directly: the read one is not counted');
  t.equal(await countOf(t, alice.token, { type: 'taskReminder' }), 1, 'a filter is counted');
  t.strictSame(await mismatches(), []);

  // Delivered by the job, through the API.
  const sent = await api.call(t, 'createNotification', {
    token: sender.token,
    body: { title: 'Drill', body: '<p>Now</p>', url: '/drill', user_ids: [alice.id, bob.id] },
  });
  t.equal(sent.status, 202);
  await waitForDispatches(api.db, tenant.tenantId);
  t.equal(await countOf(t, alice.token), 3, 'delivered: one more');
  t.equal(await countOf(t, bob.token), 2);
  t.strictSame(await mismatches(), []);

  // Seen is not read; read once counts once.
  const id = await newest(alice.id);
  const seen = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: id }, body: { seen_at: '2026-01-01 10:00:00' } });
  t.equal(seen.status, 200);
  t.equal(await countOf(t, alice.token), 3, 'seen: still unread');
  for (let i = 0; i < 2; i++) {
    const read = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: id }, body: { read_at: '2026-01-01 10:00:00' } });
    t.equal(read.status, 200);
  }
  t.equal(await countOf(t, alice.token), 2, 'read (twice): one fewer');
  const someRead = await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: '2026-01-01 10:00:00', filter: { type: 'taskReminder' } } });
  t.equal(someRead.body.data, 1);
  t.equal(await countOf(t, alice.token), 1, 'read by filter');
  t.equal(await countOf(t, bob.token), 2, 'another user’s count is untouched');
  t.strictSame(await mismatches(), []);

  // Deleted by age (the retention job, as the owner, across tenants).
  await storeNotification(api.db, tenant.tenantId, bob.id, daysAgo(40));
  await storeNotification(api.db, other.tenantId, carol.id, daysAgo(40));
  await storeNotification(api.db, tenant.tenantId, bob.id, daysAgo(40), { readAt: daysAgo(40) });
  t.equal(await countOf(t, bob.token), 3);
  const retention = { ...api.config.retention, readNotificationsDays: 30, unreadNotificationsDays: 30, dispatchesDays: 0 };
  const purged = await purgeExpiredNotifications({ ...api.atrium.services, config: { ...api.config, retention } });
  // Read ones go too: Bob's, and Alice's two read on 2026-01-01; none of them was counted.
  t.match(purged, { read: 3, unread: 2 });
  t.equal(await countOf(t, bob.token), 2, 'purged: the old unread one is no longer counted');
  t.equal(await countOf(t, carol.token), 1, 'nor in the other tenant');
  t.strictSame(await mismatches(), []);

  // Reset (the tenant's notifications deleted) and a user deleted with their notifications.
  const reset = await api.call(t, 'resetNotifications', { token: tenant.adminToken });
  t.equal(reset.status, 200);
  t.equal(await countOf(t, alice.token), 0, 'reset: none');
  t.equal(await countOf(t, bob.token), 0);
  t.equal(await countOf(t, carol.token), 1, 'the other tenant keeps its count');
  await storeNotification(api.db, other.tenantId, carol.id, now());
  await api.db.owner.execute(sql`delete from users where id = ${carol.id}`);
  t.equal((await api.db.owner.execute(sql`select 1 from notification_unread_counts where user_id = ${carol.id}`)).length, 0, 'a deleted user’s count goes too');
  t.strictSame(await mismatches(), []);
});

t.test('concurrent reads, bulk reads and deliveries of one user keep the count exact', async (t) => {
  const dave = await api.createUser(tenant.tenantId);
  for (let i = 0; i < 40; i++) await storeNotification(api.db, tenant.tenantId, dave.id, new Date(Date.now() - i * 1000));
  const ids = (
    await api.db.owner.execute<{ id: string }>(sql`select id from notifications where notifiable_id = ${dave.id} order by created_at desc limit 20`)
  ).map((row) => row.id);
  await Promise.all([
    ...ids.map((id) => api.call(t, 'updateNotification', { token: dave.token, params: { notification: id }, body: { read_at: '2026-01-01 10:00:00' } })),
    api.call(t, 'updateNotifications', { token: dave.token, body: { read_at: '2026-01-01 11:00:00' } }),
    ...Array.from({ length: 10 }, () => storeNotification(api.db, tenant.tenantId, dave.id, now())),
    api.call(t, 'createNotification', { token: sender.token, body: { title: 'Again', body: '<p>x</p>', url: '/x', user_ids: [dave.id] } }),
  ]);
  await waitForDispatches(api.db, tenant.tenantId);
  t.strictSame(await mismatches(), [], 'every count equals its unread notifications');
  const [{ unread } = { unread: -1 }] = await api.db.owner.execute<{ unread: number }>(
    sql`select count(*)::int as unread from notifications where notifiable_id = ${dave.id} and read_at is null`,
  );
  t.equal(await countOf(t, dave.token), unread, `the API answers the same (${unread})`);
});

t.test('a delete of several users’ notifications locks their counts in key order, as a delivery does', async (t) => {
  const readers = await Promise.all(Array.from({ length: 20 }, () => api.createUser(tenant.tenantId)));
  for (const reader of readers) await storeNotification(api.db, tenant.tenantId, reader.id, now());
  const ids = readers.map((reader) => reader.id).sort((a, b) => a - b);
  const [lowest, ...rest] = ids;
  // Another transaction holds the lowest count: the delete waits for it before it takes any other.
  const held = await holdRows(api.db, sql`select 1 from notification_unread_counts where tenant_id = ${tenant.tenantId} and user_id = ${lowest} for update`);
  // Sent now (a query is sent when awaited or `then`ed).
  const deleting = api.db.owner
    .execute(sql`delete from notifications where tenant_id = ${tenant.tenantId} and notifiable_id in ${ids}`)
    .then((result) => result);
  t.equal(await lockWaiters(api.db, 'delete from notifications'), 1, 'the delete waits for the held count');
  const free = await api.db.owner.transaction((tx) =>
    tx.execute<{ user_id: number }>(
      sql`select user_id from notification_unread_counts where tenant_id = ${tenant.tenantId} and user_id in ${rest} for update skip locked`,
    ),
  );
  t.equal(free.length, rest.length, 'the delete holds none of the higher counts while it waits');
  await held.release();
  await deleting;
  t.strictSame(await mismatches(), [], 'every count equals its unread notifications');
});

t.test('the application role reads its own tenant’s counts and writes none', async (t) => {
  await storeNotification(api.db, other.tenantId, (await api.createUser(other.tenantId)).id, now());
  const seen = await api.db.tenant(tenant.tenantId, (tx) =>
    tx.execute<{ tenant_id: string }>(sql`select distinct tenant_id::text from notification_unread_counts`),
  );
  t.strictSame(
    seen.map((row) => row.tenant_id),
    [String(tenant.tenantId)],
    'only its tenant’s rows',
  );
  for (const statement of [
    sql`update notification_unread_counts set unread = 0`,
    sql`insert into notification_unread_counts (tenant_id, user_id, unread) values (${tenant.tenantId}, ${alice.id}, 99)`,
    sql`delete from notification_unread_counts`,
  ]) {
    const refused = await api.db
      .tenant(tenant.tenantId, (tx) => tx.execute(statement))
      .then(
        () => 'allowed',
        (error: { cause?: { code?: string }; code?: string }) => error.cause?.code ?? error.code,
      );
    t.equal(refused, '42501', 'permission denied');
  }
  t.strictSame(await mismatches(), []);
});
