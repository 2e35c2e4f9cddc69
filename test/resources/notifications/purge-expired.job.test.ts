/**
 * Retention of notifications and dispatches (docs/running.md#retention): the hourly job
 * deletes, across tenants, what is older than the configured days, in small batches.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { deleteInBatches } from '../../../src/platform/database/purge.ts';
import { purgeExpiredNotifications, purgeExpiredNotificationsJob } from '../../../src/resources/notifications/purge-expired.job.ts';
import { notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

const retention = { readNotificationsDays: 30, unreadNotificationsDays: 60, webhookDeliveriesDays: 7, dispatchesDays: 10, batchSize: 2 };
const api = await startTestApi(t, { role: 'all', retention });
const alpha = await api.createTenant('purge-alpha');
const beta = await api.createTenant('purge-beta');
const tenants = [alpha.tenantId, beta.tenantId];

const ago = (days: number | null) => (days === null ? sql`null` : sql`now() - make_interval(days => ${days})`);

async function addNotification(tenantId: number, userId: number, title: string, createdDaysAgo: number, readDaysAgo: number | null) {
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data, created_at, read_at)
    values (${tenantId}, gen_random_uuid(), 'customNotification', ${userId}, jsonb_build_object('title', ${title}::text, 'body', '', 'url', '/'),
            ${ago(createdDaysAgo)}, ${ago(readDaysAgo)})`);
}

async function addDispatch(tenantId: number, title: string, createdDaysAgo: number, deliveredDaysAgo: number | null) {
  await api.db.owner.execute(sql`
    insert into notification_dispatches (tenant_id, type, data, created_at, delivered_at)
    values (${tenantId}, 'customNotification', jsonb_build_object('title', ${title}::text, 'body', '', 'url', '/'), ${ago(createdDaysAgo)}, ${ago(deliveredDaysAgo)})`);
}

/** Titles left in `table` per tenant of this file, sorted. */
async function titles(table: 'notifications' | 'notification_dispatches') {
  const rows = await api.db.owner.execute<{ tenant_id: number; title: string }>(sql`
    select tenant_id::int, data->>'title' as title from ${sql.identifier(table)}
    where tenant_id in (${sql.join(tenants, sql`, `)}) order by tenant_id, title`);
  return rows.map((row) => `${row.tenant_id === alpha.tenantId ? 'alpha' : 'beta'}:${row.title}`);
}

t.test('the job purges, in every tenant, read, unread and delivered records past their retention and keeps the rest', async (t) => {
  for (const tenant of [alpha, beta]) {
    const user = await api.createUser(tenant.tenantId);
    // Read 31+ days ago: past the 30 days. Three of them, more than one batch of 2.
    for (const n of [1, 2, 3]) await addNotification(tenant.tenantId, user.id, `read-old-${n}`, 100, 30 + n);
    // Created long ago but read recently: the read date counts.
    await addNotification(tenant.tenantId, user.id, 'read-recently', 100, 29);
    await addNotification(tenant.tenantId, user.id, 'unread-old', 61, null);
    await addNotification(tenant.tenantId, user.id, 'unread-recent', 59, null);
    await addDispatch(tenant.tenantId, 'delivered-old', 20, 11);
    await addDispatch(tenant.tenantId, 'delivered-recent', 20, 9);
    // Never delivered: the delivery sweeper still needs it, whatever its age.
    await addDispatch(tenant.tenantId, 'undelivered', 100, null);
  }

  const id = await api.atrium.services.jobs.send(purgeExpiredNotificationsJob, {});
  const state = await eventually(
    async () => (await api.atrium.services.jobs.getJob(purgeExpiredNotificationsJob.name, id))?.state,
    (s) => s === 'completed' || s === 'failed',
  );
  t.equal(state, 'completed');
  t.strictSame(await titles('notifications'), ['alpha:read-recently', 'alpha:unread-recent', 'beta:read-recently', 'beta:unread-recent']);
  t.strictSame(await titles('notification_dispatches'), ['alpha:delivered-recent', 'alpha:undelivered', 'beta:delivered-recent', 'beta:undelivered']);

  const again = await purgeExpiredNotifications(api.atrium.services);
  t.strictSame(again, { read: 0, unread: 0, dispatches: 0 }, 'a second run finds nothing');
});

t.test('a retention of 0 days keeps that kind for ever', async (t) => {
  // Five days old: this file's retention keeps them too, so only "0 = purge at once" would delete them.
  const user = await api.createUser(alpha.tenantId);
  await addNotification(alpha.tenantId, user.id, 'kept-read', 5, 5);
  await addNotification(alpha.tenantId, user.id, 'kept-unread', 5, null);
  await addDispatch(alpha.tenantId, 'kept-dispatch', 5, 5);
  const services = api.atrium.services;
  const withDays = (days: number) => ({
    ...services,
    config: { ...services.config, retention: { ...retention, readNotificationsDays: days, unreadNotificationsDays: days, dispatchesDays: days } },
  });
  t.strictSame(await purgeExpiredNotifications(withDays(0)), { read: 0, unread: 0, dispatches: 0 });
  t.strictSame(
    (await titles('notifications')).filter((title) => title.startsWith('alpha:kept')),
    ['alpha:kept-read', 'alpha:kept-unread'],
  );
  t.ok((await titles('notification_dispatches')).includes('alpha:kept-dispatch'));

  // Purges every tenant's rows older than a day, this file's earlier ones included.
  await purgeExpiredNotifications(withDays(1));
  t.strictSame(
    (await titles('notifications')).filter((title) => title.startsWith('alpha:kept')),
    [],
    'with a retention of 1 day they go',
  );
  t.notOk((await titles('notification_dispatches')).includes('alpha:kept-dispatch'));
});

t.test('deleteInBatches deletes at most batchSize rows per statement until none is left', async (t) => {
  const user = await api.createUser(beta.tenantId);
  for (const n of [1, 2, 3, 4, 5]) await addNotification(beta.tenantId, user.id, `batch-${n}`, 0, null);
  const condition = sql`${notifications.tenantId} = ${beta.tenantId} and ${notifications.data}->>'title' like 'batch-%'`;
  t.strictSame(await deleteInBatches(api.db.owner, notifications, condition, 2), { deleted: 5, batches: 3 }, '2 + 2 + 1');
  t.strictSame(await deleteInBatches(api.db.owner, notifications, condition, 2), { deleted: 0, batches: 1 });
  t.strictSame(
    (await titles('notifications')).filter((title) => title.includes('batch-')),
    [],
  );
});
