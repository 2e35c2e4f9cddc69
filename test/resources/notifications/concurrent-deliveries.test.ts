import t from 'tap';
import { sql } from 'drizzle-orm';
import { deliverDispatch } from '../../../src/resources/notifications/deliver.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';

// Two runs of one dispatch's delivery at once (the sweeper queues another while the first still runs, or a run the
// queue deemed lost): the API alone serves here, so the push jobs they queue stay in the queue to be counted.
const api = await startTestApi(t);
const tenant = await api.createTenant('concurrent-deliveries');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const recipients = await Promise.all([1, 2, 3, 4].map(() => api.createUser(tenant.tenantId)));

t.test('two runs of a delivery at once queue each batch’s push job once', async (t) => {
  const sent = await api.call(t, 'createNotification', {
    token: sender.token,
    body: { title: 'Twice', body: '<p>x</p>', url: '/x', user_ids: recipients.map((user) => user.id) },
  });
  t.equal(sent.status, 202);
  const [dispatch] = await api.db.owner.execute<{ id: string }>(sql`select id from notification_dispatches where tenant_id = ${tenant.tenantId}`);
  const ref = { tenantId: tenant.tenantId, dispatchId: dispatch!.id };
  await Promise.all([deliverDispatch(api.atrium.services, ref, 1), deliverDispatch(api.atrium.services, ref, 1)]);
  const jobs = await api.db.owner.execute<{ batch: string }>(
    sql`select (data->>'afterUserId') || '-' || (data->>'lastUserId') as batch from pgboss.job
        where name = 'push.send' and data->>'dispatchId' = ${dispatch!.id} order by 1`,
  );
  const batches = jobs.map((job) => job.batch);
  t.equal(batches.length, recipients.length, `one push job per batch: ${batches.join(', ')}`);
  t.equal(new Set(batches).size, batches.length, 'no batch queued twice');
});
