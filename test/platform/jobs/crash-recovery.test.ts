/**
 * A worker process killed mid-job (SIGKILL: no shutdown code runs) loses the job only
 * for a lease's length: another worker's sweeper fails it and pg-boss retries it there
 * (docs/fault-tolerance.md). Real processes, a real fan-out, no duplicates.
 */
import { eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { jobLeases } from '../../../src/platform/jobs/leases.ts';
import { deliverWebhook } from '../../../src/resources/automations/deliver-webhook.job.ts';
import { deliverNotifications } from '../../../src/resources/notifications/deliver.job.ts';
import { notificationDispatches, notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { startAtriumProcess, type AtriumProcess } from '../../helpers/processes.ts';
import { startReceiver } from '../../helpers/receiver.ts';

// Worker processes started, killed and started again: a minute here, more on a slower machine than tap's 120 s allow.
t.setTimeout(300_000);

const LEASE_SECONDS = 3;
const MEMBERS = 3000;

// The API only: the workers are the child processes below. The webhook receiver is on loopback.
const api = await startTestApi(t, { role: 'api', jobLeaseSeconds: LEASE_SECONDS, webhookAllowedCidrs: ['127.0.0.0/8'] });
interface Worker extends AtriumProcess {
  started: Promise<void>;
}
const workers: Worker[] = [];

function startWorker(): Worker {
  const worker = startAtriumProcess(t, api, {
    ATRIUM_ROLE: 'worker',
    JOB_LEASE_SECONDS: String(LEASE_SECONDS),
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
    LOG_LEVEL: 'info',
  });
  const started = new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (worker.output().includes('job workers started')) {
        clearInterval(timer);
        resolve();
      }
    }, 50);
    void worker.exited.then(() => {
      clearInterval(timer);
      reject(new Error(`worker exited early:\n${worker.output()}`));
    });
  });
  const live: Worker = { ...worker, started };
  workers.push(live);
  return live;
}

/** Two live worker processes: the one that takes the job, and one to notice its loss. */
async function twoLiveWorkers(): Promise<void> {
  while (workers.filter((worker) => worker.child.exitCode === null && worker.child.signalCode === null).length < 2) startWorker();
  await Promise.all(workers.map((worker) => worker.started));
}

/** Kills the worker process named by the job's lease (SIGKILL: none of its shutdown code runs); when it died. */
async function killLeaseHolder(t: Test, queue: string) {
  const lease = await eventually(
    async () => (await api.db.owner.select().from(jobLeases).where(eq(jobLeases.queue, queue)))[0],
    (row) => row !== undefined,
  );
  t.ok(lease, `the ${queue} job runs under a lease`);
  const victim = workers.find((worker) => lease!.holder.endsWith(`:${worker.child.pid}`));
  t.ok(victim, `the lease names the worker process that holds the job (${lease!.holder})`);
  victim!.child.kill('SIGKILL');
  await victim!.exited;
  return { victim: victim!, killedAt: Date.now() };
}

/** Lease expiry, one sweep, the queue's first retry delay (at most twice its retryDelay), one poll, and slack for a loaded machine. */
const boundMs = (retryDelay: number) => (LEASE_SECONDS + LEASE_SECONDS / 3 + 2 * retryDelay + 1) * 1000 + 5_000;

t.test('a fan-out whose worker is killed mid-delivery completes within the lease bound, each recipient once', async (t) => {
  await twoLiveWorkers();

  const tenant = await api.createTenant('crash');
  const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
  await api.db.owner.execute(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${tenant.tenantId}, 'member' || g, (select role_id from users where id = ${sender.id}), 'Member', 'No ' || g from generate_series(1, ${MEMBERS}) g`);
  const [department] = await api.db.owner.execute<{ id: number }>(
    sql`insert into departments (tenant_id, name) values (${tenant.tenantId}, 'Everyone') returning id::int`,
  );
  await api.db.owner.execute(sql`
    insert into department_users (tenant_id, department_id, user_id)
    select ${tenant.tenantId}, ${department!.id}, id from users where tenant_id = ${tenant.tenantId} and username like 'member%'`);

  // Hold the delivery inside its first batch: the insert waits for this lock, so the worker
  // is killed with the job running and nothing of it committed yet.
  const locker = postgres(api.config.databaseUrl!, { max: 1, onnotice: () => {} });
  t.teardown(() => locker.end({ timeout: 1 }));
  const held = await locker.reserve();
  await held`begin`;
  await held`lock table notifications in share mode`;

  const res = await api.call(t, 'createNotification', {
    token: sender.token,
    body: { title: 'Crash', body: 'b', url: '/', department_ids: [department!.id] },
  });
  t.equal(res.status, 202);
  const [dispatch] = await api.db.owner.select().from(notificationDispatches).where(eq(notificationDispatches.tenantId, tenant.tenantId));

  const waiting = await eventually(
    async () =>
      (await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from pg_locks where relation = 'notifications'::regclass and not granted`))[0]!
        .n,
    (n) => n > 0,
  );
  t.ok(waiting > 0, 'the delivery is inside its insert');
  const { victim, killedAt } = await killLeaseHolder(t, deliverNotifications.name);
  await held`rollback`;
  held.release();

  const bound = boundMs(deliverNotifications.queue!.retryDelay!);
  const stored = async () =>
    (
      await api.db.owner.execute<{ n: number; recipients: number }>(
        sql`select count(*)::int as n, count(distinct notifiable_id)::int as recipients from notifications where dispatch_id = ${dispatch!.id}`,
      )
    )[0]!;
  const done = await eventually(stored, (row) => row.n >= MEMBERS, bound + 5_000);
  const elapsedMs = Date.now() - killedAt;
  t.equal(done.n, MEMBERS, 'every member got the notification');
  t.equal(done.recipients, MEMBERS, 'each member exactly once');
  t.ok(elapsedMs <= bound, `recovered ${elapsedMs} ms after the kill (bound ${bound} ms)`);
  const [delivered] = await eventually(
    () => api.db.owner.select().from(notificationDispatches).where(eq(notificationDispatches.id, dispatch!.id)),
    ([row]) => row?.deliveredAt != null,
  );
  t.ok(delivered?.deliveredAt, 'the dispatch is marked delivered');
  t.match(workers.find((worker) => worker !== victim)!.output(), /job lost with its worker; retrying it/, 'the surviving worker swept the lost job');
  const after = await stored();
  t.equal(after.n, MEMBERS, 'nothing was stored twice');
  t.equal((await api.db.owner.select().from(notifications).where(eq(notifications.tenantId, tenant.tenantId))).length, MEMBERS);
});

t.test('a webhook attempt whose worker is killed mid-request is made again within the lease bound, with the same webhook-id', async (t) => {
  await twoLiveWorkers();
  const receiver = await startReceiver(t);
  receiver.script('/crash', ['hang', 200]);
  const created = await api.call(t, 'createAutomation', {
    token: (await api.createTenant('crash-hooks')).adminToken,
    body: { name: 'hook', config: { url: receiver.url('/crash'), headers: {} } },
  });
  t.equal(created.status, 201);
  const [tenant] = await api.db.owner.execute<{ id: number }>(sql`select tenant_id::int as id from automations where id = ${created.body.id}`);
  const token = await api.tokenFor(
    tenant!.id,
    (await api.db.owner.execute<{ id: number }>(sql`select id::int from users where tenant_id = ${tenant!.id}`))[0]!.id,
  );
  const run = await api.call(t, 'runAutomation', { token, params: { automation: created.body.id }, body: {} });
  t.equal(run.status, 202);

  await eventually(
    async () => receiver.received('/crash').length,
    (n) => n === 1,
  );
  const { killedAt } = await killLeaseHolder(t, deliverWebhook.name);

  const bound = boundMs(deliverWebhook.queue!.retryDelay!);
  await eventually(
    async () =>
      (await api.db.owner.execute<{ status: string }>(sql`select status from webhook_deliveries where automation_id = ${created.body.id}`))[0]?.status,
    (status) => status === 'succeeded',
    bound + 5_000,
  );
  const elapsedMs = Date.now() - killedAt;
  const [delivery] = (await api.call(t, 'listAutomationDeliveries', { token, params: { automation: created.body.id }, query: { relations: 'attempt_log' } }))
    .body;
  t.equal(delivery.status, 'succeeded');
  t.ok(elapsedMs <= bound, `delivered ${elapsedMs} ms after the kill (bound ${bound} ms)`);
  t.equal(delivery.attempts, 1, 'the interrupted attempt is made again, not counted twice');
  t.equal(delivery.attempt_log.length, 1);
  const requests = receiver.received('/crash');
  t.equal(requests.length, 2, 'the interrupted request and its repetition, nothing more');
  t.equal(requests[1]!.headers['webhook-id'], requests[0]!.headers['webhook-id'], 'the repetition carries the same webhook-id, so the receiver can drop it');
});
