/**
 * A worker process killed mid-job (SIGKILL: no shutdown code runs) loses the job only
 * for a lease's length: another worker's sweeper fails it and pg-boss retries it there
 * (docs/fault-tolerance.md). Real processes, a real fan-out, no duplicates.
 */
import { spawn } from 'node:child_process';
import { eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import t from 'tap';
import { jobLeases } from '../../../src/platform/jobs/leases.ts';
import { deliverNotifications } from '../../../src/resources/notifications/deliver.job.ts';
import { notificationDispatches, notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

const LEASE_SECONDS = 3;
const MEMBERS = 3000;

// The API only: the workers are the child processes below.
const api = await startTestApi(t, { role: 'api', jobLeaseSeconds: LEASE_SECONDS });

function startWorker() {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ATRIUM_ROLE: 'worker',
    DATABASE_URL: api.config.databaseUrl,
    JOB_LEASE_SECONDS: String(LEASE_SECONDS),
    LOG_LEVEL: 'info',
  };
  if (api.config.appDatabaseUrl) env.ATRIUM_APP_DATABASE_URL = api.config.appDatabaseUrl;
  else delete env.ATRIUM_APP_DATABASE_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const started = new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (output.includes('job workers started')) {
        clearInterval(timer);
        resolve();
      }
    }, 50);
    void exited.then(() => {
      clearInterval(timer);
      reject(new Error(`worker exited early:\n${output}`));
    });
  });
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  return { child, started, exited, output: () => output };
}

t.test('a fan-out whose worker is killed mid-delivery completes within the lease bound, each recipient once', async (t) => {
  const workers = [startWorker(), startWorker()];
  await Promise.all(workers.map((worker) => worker.started));

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

  const lease = await eventually(
    async () => (await api.db.owner.select().from(jobLeases).where(eq(jobLeases.queue, deliverNotifications.name)))[0],
    (row) => row !== undefined,
  );
  t.ok(lease, 'the delivery job runs under a lease');
  const waiting = await eventually(
    async () =>
      (await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from pg_locks where relation = 'notifications'::regclass and not granted`))[0]!
        .n,
    (n) => n > 0,
  );
  t.ok(waiting > 0, 'the delivery is inside its insert');
  const victim = workers.find((worker) => lease!.holder.endsWith(`:${worker.child.pid}`));
  t.ok(victim, `the lease names the worker process that holds the job (${lease!.holder})`);

  victim!.child.kill('SIGKILL');
  await victim!.exited;
  const killedAt = Date.now();
  await held`rollback`;
  held.release();

  // Lease expiry, one sweep, the queue's first retry delay (at most twice its retryDelay), one poll.
  const retryDelay = deliverNotifications.queue!.retryDelay!;
  const boundMs = (LEASE_SECONDS + LEASE_SECONDS / 3 + 2 * retryDelay + 1) * 1000 + 5_000;
  const stored = async () =>
    (
      await api.db.owner.execute<{ n: number; recipients: number }>(
        sql`select count(*)::int as n, count(distinct notifiable_id)::int as recipients from notifications where dispatch_id = ${dispatch!.id}`,
      )
    )[0]!;
  const done = await eventually(stored, (row) => row.n >= MEMBERS, boundMs + 5_000);
  const elapsedMs = Date.now() - killedAt;
  t.equal(done.n, MEMBERS, 'every member got the notification');
  t.equal(done.recipients, MEMBERS, 'each member exactly once');
  t.ok(elapsedMs <= boundMs, `recovered ${elapsedMs} ms after the kill (bound ${boundMs} ms)`);
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
