import t from 'tap';
import { sql } from 'drizzle-orm';
import { deliverDispatch } from '../../../src/resources/notifications/deliver.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { lockWaiters, PAUSES_WRITES, pauseWrites, rowCount } from '../../helpers/fixtures.ts';

// A reset against a delivery under way (docs/notifications.md#recipients): the API alone serves here, so the test
// runs the delivery itself, and holds it where it stores a batch.
const api = await startTestApi(t);
const tenant = await api.createTenant('reset-races');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const recipients = (await Promise.all([1, 2, 3].map(() => api.createUser(tenant.tenantId)))).sort((a, b) => a.id - b.id);

const storedCount = () => rowCount(api.db, 'notifications', sql`tenant_id = ${tenant.tenantId}`);
const dispatchCount = () => rowCount(api.db, 'notification_dispatches', sql`tenant_id = ${tenant.tenantId}`);

t.test('a reset answered during a delivery leaves none of its notifications behind', PAUSES_WRITES, async (t) => {
  const sent = await api.call(t, 'createNotification', {
    token: sender.token,
    body: { title: 'Raced', body: '<p>x</p>', url: '/x', user_ids: recipients.map((user) => user.id) },
  });
  t.equal(sent.status, 202);
  const [dispatch] = await api.db.owner.execute<{ id: string }>(sql`select id from notification_dispatches where tenant_id = ${tenant.tenantId}`);
  // The second recipient's batch is held as it is stored; the first is stored and committed before.
  const paused = await pauseWrites(t, api.db, {
    name: 'test_hold_second_batch',
    trigger: 'trigger test_hold_second_batch after insert on notifications',
    condition: `new.notifiable_id = ${recipients[1]!.id}`,
    key: 7301,
  });
  const delivering = deliverDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId: dispatch!.id }, 1);
  t.ok((await lockWaiters(api.db, 'with setting as')) > 0, 'the second batch is held');
  t.equal(await storedCount(), 1, 'the first batch is stored');

  const reset = api.call(t, 'resetNotifications', { token: tenant.adminToken });
  // The reset either answers at once, or waits for the batch under way; either way the batch is let go after.
  await Promise.race([reset, lockWaiters(api.db, 'delete from').catch(() => 0)]);
  await paused.release();
  t.equal((await reset).status, 200);
  await delivering;

  t.equal(await dispatchCount(), 0, 'the dispatch is gone');
  t.equal(await storedCount(), 0, 'no notification of the reset dispatch is left, nor stored after the reset');
  for (const user of recipients) {
    const count = await api.call(t, 'countNotifications', { token: user.token });
    t.equal(count.body, 0, `user ${user.id} has no unread notification`);
  }
});
