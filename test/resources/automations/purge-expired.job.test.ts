/**
 * Retention of webhook deliveries (docs/running.md#retention): finished deliveries and
 * their attempts are deleted, across tenants, some days after they finished; deliveries
 * still pending or retrying stay whatever their age.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { purgeExpiredDeliveries, purgeExpiredDeliveriesJob } from '../../../src/resources/automations/purge-expired.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

const retention = { readNotificationsDays: 30, unreadNotificationsDays: 60, webhookDeliveriesDays: 7, dispatchesDays: 10, batchSize: 2 };
const api = await startTestApi(t, { role: 'all', retention });
const alpha = await api.createTenant('deliveries-alpha');
const beta = await api.createTenant('deliveries-beta');
const tenants = [alpha.tenantId, beta.tenantId];

const ago = (days: number | null) => (days === null ? sql`null` : sql`now() - make_interval(days => ${days})`);

/** A delivery with two attempts; `completedDaysAgo` null = not finished. */
async function addDelivery(tenantId: number, eventId: string, status: string, completedDaysAgo: number | null) {
  await api.db.owner.execute(sql`
    with automation as (
      insert into automations (tenant_id, name, config) values (${tenantId}, ${eventId}, '{}') returning tenant_id, id
    ), delivery as (
      insert into webhook_deliveries (tenant_id, automation_id, event_id, payload, status, attempts, created_at, completed_at)
      select tenant_id, id, ${eventId}, '{}', ${status}, 2, now() - interval '100 days', ${ago(completedDaysAgo)} from automation
      returning tenant_id, id
    )
    insert into webhook_delivery_attempts (tenant_id, delivery_id, number, started_at)
    select tenant_id, id, n, now() - interval '100 days' from delivery, generate_series(1, 2) n`);
}

async function remaining() {
  const rows = await api.db.owner.execute<{ event_id: string; attempts: number }>(sql`
    select d.event_id, (select count(*)::int from webhook_delivery_attempts a where a.tenant_id = d.tenant_id and a.delivery_id = d.id) as attempts
    from webhook_deliveries d where d.tenant_id in (${sql.join(tenants, sql`, `)}) order by d.event_id`);
  return rows.map((row) => `${row.event_id}:${row.attempts}`);
}

t.test('the job purges, in every tenant, finished deliveries past their retention with their attempts', async (t) => {
  for (const [tenant, name] of [
    [alpha, 'alpha'],
    [beta, 'beta'],
  ] as const) {
    await addDelivery(tenant.tenantId, `${name}-succeeded-old`, 'succeeded', 8);
    await addDelivery(tenant.tenantId, `${name}-failed-old`, 'failed', 9);
    await addDelivery(tenant.tenantId, `${name}-succeeded-recent`, 'succeeded', 6);
    // Unfinished: kept whatever their age (created 100 days ago).
    await addDelivery(tenant.tenantId, `${name}-retrying`, 'retrying', null);
    await addDelivery(tenant.tenantId, `${name}-pending`, 'pending', null);
  }
  t.equal((await remaining()).length, 10);

  const id = await api.atrium.services.jobs.send(purgeExpiredDeliveriesJob, {});
  const state = await eventually(
    async () => (await api.atrium.services.jobs.getJob(purgeExpiredDeliveriesJob.name, id))?.state,
    (s) => s === 'completed' || s === 'failed',
  );
  t.equal(state, 'completed');
  t.strictSame(await remaining(), [
    'alpha-pending:2',
    'alpha-retrying:2',
    'alpha-succeeded-recent:2',
    'beta-pending:2',
    'beta-retrying:2',
    'beta-succeeded-recent:2',
  ]);
  const [orphans] = await api.db.owner.execute<{ n: number }>(sql`
    select count(*)::int as n from webhook_delivery_attempts a
    where not exists (select 1 from webhook_deliveries d where d.tenant_id = a.tenant_id and d.id = a.delivery_id)`);
  t.equal(orphans!.n, 0, 'no attempt outlives its delivery');
  t.equal(await purgeExpiredDeliveries(api.atrium.services), 0, 'a second run finds nothing');
});

t.test('a retention of 0 days keeps finished deliveries for ever', async (t) => {
  // Five days old: this file's retention keeps it too, so only "0 = purge at once" would delete it.
  await addDelivery(alpha.tenantId, 'alpha-kept', 'succeeded', 5);
  const services = api.atrium.services;
  const withDays = (days: number) => ({ ...services, config: { ...services.config, retention: { ...retention, webhookDeliveriesDays: days } } });
  t.equal(await purgeExpiredDeliveries(withDays(0)), 0);
  t.ok((await remaining()).includes('alpha-kept:2'));
  t.ok((await purgeExpiredDeliveries(withDays(1))) >= 1);
  t.notOk((await remaining()).includes('alpha-kept:2'), 'with a retention of 1 day it goes');
});
