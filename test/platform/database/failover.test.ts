/**
 * A PostgreSQL failover under load (docs/operations.md#high-availability): pg_auto_failover
 * (Debian's `postgresql-15-auto-failover`; `.ci/run` installs it) runs a monitor and two
 * nodes with synchronous replication; Atrium reaches them with one URL that lists both hosts
 * and asks for `target_session_attrs=read-write`. While users and departments are written
 * and read and notifications fan out, the primary is switched over (`pg_autoctl perform
 * failover`), then the new primary is killed with SIGKILL. Afterwards every write answered
 * 2xx is there, every notification accepted reached each recipient exactly once, nothing
 * answered a 5xx other than 503 with Retry-After, service came back soon after each
 * promotion, readiness told the truth, and a live stream opened before both failovers
 * still receives what is sent after them.
 */
import { promisify } from 'node:util';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { chown, mkdir, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import t from 'tap';
import type { OperationId } from '../../../generated/operations.ts';
import { formatConnectionUrl, parseConnectionUrl } from '../../../src/platform/database/connection-url.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { contractViolations } from '../../helpers/contract.ts';
import { eventually } from '../../helpers/eventually.ts';
import { bearer, sleep } from '../../helpers/fixtures.ts';
import { serverPort } from '../../helpers/processes.ts';
import { openSse } from '../../helpers/sse.ts';

// This file runs in a process of its own (it ends early by exiting where pg_autoctl is missing, and leaves pg_auto_failover's processes to its exit handler).

const PG_AUTOCTL = ['/usr/bin/pg_autoctl', '/usr/lib/postgresql/15/bin/pg_autoctl'].find((file) => existsSync(file));
const PG_BIN = '/usr/lib/postgresql/15/bin';
if (!PG_AUTOCTL || !existsSync(path.join(PG_BIN, 'pg_ctl'))) {
  t.plan(0, 'pg_autoctl is not installed (Debian package postgresql-15-auto-failover, with PostgreSQL 15)');
  process.exit(0);
}
t.setTimeout(300_000);

/** How soon after a promotion writes must succeed again (the operator's promise: a failover is a blip). */
const RECOVERY_LIMIT_MS = 15_000;

// pg_autoctl (initdb, postgres) refuses to run as root: as root, the nodes run as `postgres`.
const asRoot = process.getuid?.() === 0;
const owner = asRoot ? { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) } : undefined;
const superuser = asRoot ? 'postgres' : os.userInfo().username;

const dir = await mkdtemp(path.join(os.tmpdir(), 'atrium-failover-'));
if (owner) await chown(dir, owner.uid, owner.gid);
const home = path.join(dir, 'home');
await mkdir(home);
if (owner) await chown(home, owner.uid, owner.gid);
// pg_autoctl keeps each node's configuration and state under XDG folders: this run's own.
const env = {
  PATH: `${PG_BIN}:/usr/bin:/bin`,
  HOME: home,
  XDG_CONFIG_HOME: path.join(home, 'config'),
  XDG_DATA_HOME: path.join(home, 'data'),
  XDG_RUNTIME_DIR: path.join(home, 'run'),
  LANG: 'C.UTF-8',
};

interface Service {
  name: string;
  child: ChildProcess;
  log: string;
}
const services: Service[] = [];
/** Starts `pg_autoctl` in a process group of its own (it and its PostgreSQL can then be killed together). */
function autoctl(name: string, args: string[]): Service {
  const child = spawn(PG_AUTOCTL!, args, { cwd: dir, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'], ...owner });
  const service: Service = { name, child, log: '' };
  child.stdout!.on('data', (chunk) => (service.log += chunk));
  child.stderr!.on('data', (chunk) => (service.log += chunk));
  services.push(service);
  return service;
}
function killGroup(service: Service, signal: NodeJS.Signals): void {
  try {
    process.kill(-service.child.pid!, signal);
  } catch {
    // Gone already.
  }
}
// Also when set-up fails (an error thrown at the top ends the process without teardowns)
// and when tap ends the file for taking too long (SIGTERM).
const cleanUp = () => {
  for (const service of services) killGroup(service, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
};
process.on('exit', cleanUp);
process.once('SIGTERM', () => {
  cleanUp();
  process.exit(143);
});
/** The logs of every pg_autoctl service, for a failure's diagnosis. */
const logs = () => services.map((service) => `--- ${service.name}\n${service.log.slice(-4000)}`).join('\n');

const [monitorPort, portA, portB] = [await serverPort(), await serverPort(), await serverPort()];
const connect = (port: number, database: string) =>
  postgres(`postgres://${superuser}@127.0.0.1:${port}/${database}`, { max: 1, onnotice: () => {}, connect_timeout: 2, idle_timeout: 1 });

// The monitor, then its health checks made quick: a node that stops answering is failed
// over within seconds rather than the default half-minute (production keeps the defaults).
autoctl('monitor', [
  'create',
  'monitor',
  '--pgdata',
  path.join(dir, 'monitor'),
  '--pgport',
  String(monitorPort),
  '--hostname',
  '127.0.0.1',
  '--auth',
  'trust',
  '--no-ssl',
  '--run',
]);
const monitor = connect(monitorPort, 'pg_auto_failover');
t.teardown(() => monitor.end({ timeout: 1 }));
const monitorUp = await eventually(
  () =>
    monitor`select 1 from pgautofailover.formation limit 1`.then(
      () => true,
      () => false,
    ),
  (up) => up,
  60_000,
);
if (!monitorUp) throw new Error(`the monitor did not start\n${logs()}`);
for (const [setting, value] of [
  ['health_check_period', 1000],
  ['health_check_timeout', 1000],
  ['health_check_max_retries', 1],
  ['health_check_retry_delay', 500],
  ['node_considered_unhealthy_timeout', 2000],
  ['primary_demote_timeout', 3000],
  ['startup_grace_period', 1000],
] as const) {
  await monitor.unsafe(`alter system set pgautofailover.${setting} = ${value}`);
}
await monitor`select pg_reload_conf()`;

const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable`;
const createNode = (name: string, port: number) =>
  autoctl(name, [
    'create',
    'postgres',
    '--pgdata',
    path.join(dir, name),
    '--pgport',
    String(port),
    '--name',
    name,
    '--hostname',
    '127.0.0.1',
    '--dbname',
    'atrium',
    '--auth',
    'trust',
    '--no-ssl',
    '--monitor',
    monitorUrl,
    '--run',
  ]);
const nodeStates = () => monitor<{ name: string; port: number; reported: string; goal: string }[]>`
  select nodename as name, nodeport as port, reportedstate::text as reported, goalstate::text as goal from pgautofailover.node order by nodeid`;
const nodes = { node_a: createNode('node_a', portA), node_b: undefined as Service | undefined };
const single = (states: Awaited<ReturnType<typeof nodeStates>>) => states.some((node) => node.reported === 'single' || node.reported === 'primary');
if (!single(await eventually(nodeStates, single, 60_000))) throw new Error(`node_a did not start: ${JSON.stringify(await nodeStates())}\n${logs()}`);
nodes.node_b = createNode('node_b', portB);
// The standby is copied with pg_basebackup, which waits for a checkpoint that PostgreSQL
// spreads over minutes by default: a CHECKPOINT on the primary has it done at once.
const first = connect(portA, 'postgres');
t.teardown(() => first.end({ timeout: 1 }));
/** A formation at rest: a primary and a secondary, each in the state the monitor asks of it (synchronous replication on). */
const steady = (states: Awaited<ReturnType<typeof nodeStates>>) =>
  states.length === 2 &&
  states.every((node) => node.reported === node.goal) &&
  states
    .map((node) => node.reported)
    .sort()
    .join() === 'primary,secondary';
const formed = await eventually(
  async () => {
    const states = await nodeStates();
    if (states.some((node) => node.name === 'node_b' && node.reported !== 'secondary')) await first`checkpoint`.catch(() => {});
    return states;
  },
  steady,
  90_000,
);
if (
  formed
    .map((node) => node.reported)
    .sort()
    .join() !== 'primary,secondary'
)
  throw new Error(`the formation did not form: ${JSON.stringify(formed)}\n${logs()}`);

/** The node that accepts writes now, as the monitor says. */
const primaryName = async () => (await nodeStates()).find((node) => node.reported === 'primary' || node.reported === 'wait_primary')?.name;
/** Waits until the node on `port` accepts writes; answers when (Date.now()). */
async function writableAt(port: number): Promise<number> {
  const probe = connect(port, 'atrium');
  try {
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; await sleep(50)) {
      const writable = await probe`select not pg_is_in_recovery() and current_setting('transaction_read_only') = 'off' as writable`.then(
        ([row]) => Boolean(row?.writable),
        () => false,
      );
      if (writable) return Date.now();
    }
    throw new Error(`the node on port ${port} never accepted writes\n${logs()}`);
  } finally {
    await probe.end({ timeout: 1 });
  }
}

// The formation's URL as pg_autoctl gives it to operators (every node, target_session_attrs=read-write), with each role's login.
const shown = execFileSync(PG_AUTOCTL, ['show', 'uri', '--formation', 'default', '--pgdata', path.join(dir, 'monitor')], { env, cwd: dir, ...owner })
  .toString()
  .trim();
const formationUrl = parseConnectionUrl(shown);
if (!formationUrl) throw new Error(`pg_autoctl show uri printed no connection URL: ${shown}`);
t.comment(`pg_autoctl show uri: ${shown}`);
const login = (user: string, password: string) => formatConnectionUrl({ ...formationUrl, user, password });
const api = await startTestApi(t, {
  role: 'all',
  databaseUrl: login(superuser, ''),
  appDatabaseUrl: login('atrium_ha', 'ha-password'),
  streamHeartbeatMs: 500,
});
const app = api.atrium.app!;
const base = await app.listen({ port: 0, host: '127.0.0.1' });

const tenant = await api.createTenant('failover');
const recipients = await Promise.all(Array.from({ length: 25 }, () => api.createUser(tenant.tenantId)));
const [{ id: roleIdText }] = (await api.db.owner.execute<{ id: number }>(
  sql`select id from roles where tenant_id = ${tenant.tenantId} order by id limit 1`,
)) as unknown as [{ id: number }];
const roleId = Number(roleIdText);

interface Answer {
  operation: OperationId;
  key: string;
  startedAt: number;
  endedAt: number;
  status: number;
  retryAfter: string | undefined;
  body: unknown;
}
const answers: Answer[] = [];
const violations: string[] = [];
/** One request through the whole app; a request that takes longer than a minute is recorded as a hang (status 0). */
async function request(operation: OperationId, method: string, url: string, key: string, body?: unknown): Promise<Answer> {
  const startedAt = Date.now();
  const response = await Promise.race([
    app.inject({
      method: method as 'GET',
      url,
      headers: { ...bearer(tenant.adminToken), ...(body ? { 'content-type': 'application/json' } : {}) },
      payload: body ? JSON.stringify(body) : undefined,
    }),
    sleep(60_000).then(() => null),
  ]);
  const contentType = String(response?.headers['content-type'] ?? '');
  const parsed: unknown = response && /json/.test(contentType) && response.body.length > 0 ? response.json() : response?.body;
  const answer: Answer = {
    operation,
    key,
    startedAt,
    endedAt: Date.now(),
    status: response?.statusCode ?? 0,
    retryAfter: response?.headers['retry-after'] as string | undefined,
    body: parsed,
  };
  if (response) violations.push(...contractViolations(operation, answer.status, contentType, parsed === '' ? undefined : parsed));
  answers.push(answer);
  return answer;
}

// The load: writers of users and departments, readers of both, and notifications to every recipient.
let loading = true;
let counter = 0;
const loops = [
  (async () => {
    while (loading) {
      const key = `ha-user-${++counter}`;
      await request('createUser', 'POST', '/api/users', key, {
        username: key,
        password: 'a long enough password',
        first_name: 'Ha',
        last_name: key,
        role_id: roleId,
      });
    }
  })(),
  (async () => {
    while (loading) {
      const key = `ha-department-${++counter}`;
      await request('createDepartment', 'POST', '/api/departments', key, { name: key });
    }
  })(),
  (async () => {
    while (loading) {
      await request('listUsers', 'GET', '/api/users?limit=20', 'read');
      await request('listDepartments', 'GET', '/api/departments?limit=20', 'read');
    }
  })(),
  (async () => {
    while (loading) {
      const key = `ha-fanout-${++counter}`;
      await request('createNotification', 'POST', '/api/notifications', key, { title: key, body: 'b', url: '/', user_ids: recipients.map((user) => user.id) });
      await sleep(200);
    }
  })(),
];
const readiness: { at: number; status: number }[] = [];
const readinessLoop = (async () => {
  while (loading) {
    const response = await app.inject({ method: 'GET', url: '/health/ready' });
    readiness.push({ at: Date.now(), status: response.statusCode });
    await sleep(100);
  }
})();

/** Time from `promotedAt` to the first write answered 2xx that was sent after it. */
async function recovery(promotedAt: number): Promise<number> {
  const back = await eventually(
    async () =>
      answers.find(
        (answer) => answer.startedAt >= promotedAt && answer.operation !== 'listUsers' && answer.operation !== 'listDepartments' && answer.status < 300,
      ),
    (answer) => answer !== undefined,
    60_000,
  );
  if (!back) throw new Error(`no write succeeded after the promotion\n${logs()}`);
  return back.endedAt - promotedAt;
}

// A live stream of one recipient, open across both failovers.
const stream = await openSse(t, `${base}/api/notifications/stream`, bearer(recipients[0]!.token));
t.teardown(() => stream.close());

await sleep(1500);
const steadyWrites = answers.filter((answer) => answer.status < 300).length;

t.test('a switchover: pg_autoctl perform failover', async (t) => {
  const before = await primaryName();
  const standbyPort = before === 'node_a' ? portB : portA;
  const started = Date.now();
  // Asynchronously: the load and the Atrium under test run in this process, and a
  // synchronous child would stop them for as long as the switchover takes.
  // The monitor's own statements can deadlock with its state machine ("deadlock detected", once in CI): asked again then.
  for (let attempt = 1; ; attempt++) {
    try {
      await promisify(execFile)(PG_AUTOCTL, ['perform', 'failover', '--pgdata', path.join(dir, 'monitor')], { env, cwd: dir, ...owner, timeout: 180_000 });
      break;
    } catch (error) {
      if (attempt >= 3 || !/deadlock detected/.test(String((error as { stderr?: unknown }).stderr))) throw error;
    }
  }
  const promotedAt = await writableAt(standbyPort);
  const back = await recovery(promotedAt);
  t.comment(`switchover: the standby accepted writes ${promotedAt - started} ms after the command; Atrium wrote again ${back} ms after that`);
  t.ok(back <= RECOVERY_LIMIT_MS, `writes succeed again ${back} ms after the promotion (at most ${RECOVERY_LIMIT_MS})`);
  t.not(await primaryName(), before, 'the other node is the primary');
});

t.test('a crash: the primary and its keeper killed with SIGKILL', async (t) => {
  // Killed once the former primary has caught up and replication is synchronous again: until then the new primary
  // runs without a synchronous standby (`wait_primary`), and what it acknowledges may be lost with it, as
  // docs/operations.md says. A crash that soon after a switchover lost 40 acknowledged users in one CI run.
  const settled = await eventually(nodeStates, steady, 120_000);
  if (!steady(settled)) throw new Error(`the formation did not settle after the switchover: ${JSON.stringify(settled)}\n${logs()}`);
  const victim = (await primaryName())!;
  const survivorPort = victim === 'node_a' ? portB : portA;
  // And as the primary itself says: a standby it waits for (sync or quorum), which has flushed all it wrote. The
  // monitor's states alone let one CI run crash it while what it acknowledged was on no standby (71 users lost).
  const primary = connect(victim === 'node_a' ? portA : portB, 'postgres');
  const synchronous = await eventually(
    () =>
      primary<{ synced: boolean }[]>`
        select exists (select 1 from pg_stat_replication
          where sync_state in ('sync', 'quorum') and flush_lsn >= pg_current_wal_lsn()) as synced`.then(
        ([row]) => row!.synced,
        () => false,
      ),
    (synced) => synced,
    60_000,
  );
  await primary.end({ timeout: 1 });
  if (!synchronous) throw new Error(`the primary reported no synchronous standby after the switchover\n${logs()}`);
  const killedAt = Date.now();
  killGroup(nodes[victim as 'node_a' | 'node_b']!, 'SIGKILL');
  const promotedAt = await writableAt(survivorPort);
  const back = await recovery(promotedAt);
  t.comment(`crash: the standby accepted writes ${promotedAt - killedAt} ms after the kill; Atrium wrote again ${back} ms after that`);
  t.ok(back <= RECOVERY_LIMIT_MS, `writes succeed again ${back} ms after the promotion (at most ${RECOVERY_LIMIT_MS})`);
  t.ok(
    readiness.some((probe) => probe.at > killedAt && probe.at < promotedAt && probe.status === 503),
    'readiness answered 503 while no writable primary was reachable',
  );
  await eventually(
    async () => readiness.at(-1)?.status,
    (status) => status === 200,
    30_000,
  );
  t.equal(readiness.at(-1)?.status, 200, 'and 200 again once one is');
  await sleep(1000);
});

t.test('what the clients saw, and what the database holds', async (t) => {
  loading = false;
  await Promise.all([...loops, readinessLoop]);
  const writes = answers.filter((answer) => answer.operation !== 'listUsers' && answer.operation !== 'listDepartments');
  const byStatus = new Map<number, number>();
  for (const answer of answers) byStatus.set(answer.status, (byStatus.get(answer.status) ?? 0) + 1);
  t.comment(`${answers.length} requests (${writes.length} writes): ${[...byStatus].map(([status, n]) => `${n} × ${status}`).join(', ')}`);
  // A commit in flight on the former primary waits for its synchronous standby until that primary stops.
  t.comment(`the slowest answer took ${Math.max(...answers.map((answer) => answer.endedAt - answer.startedAt))} ms`);
  t.ok(steadyWrites > 0, 'writes succeeded before the failovers');
  t.strictSame(
    answers.filter((answer) => answer.status === 0),
    [],
    'no request hung',
  );
  t.strictSame(
    answers
      .filter((answer) => answer.status >= 500 && (answer.status !== 503 || !answer.retryAfter))
      .map(({ operation, status, body }) => ({ operation, status, body })),
    [],
    'no 5xx but 503, and every 503 says when to retry',
  );
  t.ok(
    answers.some((answer) => answer.status === 503),
    'some requests met the failover (503)',
  );
  t.strictSame(violations, [], 'every answer honours the spec');

  // Every acknowledged write is there.
  const ackedUsers = answers.filter((answer) => answer.operation === 'createUser' && answer.status === 201).map((answer) => answer.key);
  const ackedDepartments = answers.filter((answer) => answer.operation === 'createDepartment' && answer.status === 201).map((answer) => answer.key);
  const storedUsers = new Set(
    (await api.db.owner.execute<{ username: string }>(sql`select username from users where tenant_id = ${tenant.tenantId}`)).map((row) => row.username),
  );
  const storedDepartments = new Set(
    (await api.db.owner.execute<{ name: string }>(sql`select name from departments where tenant_id = ${tenant.tenantId}`)).map((row) => row.name),
  );
  t.ok(ackedUsers.length > 0 && ackedDepartments.length > 0, `${ackedUsers.length} users and ${ackedDepartments.length} departments acknowledged`);
  t.strictSame(
    ackedUsers.filter((key) => !storedUsers.has(key)),
    [],
    'every user answered 201 is stored',
  );
  t.strictSame(
    ackedDepartments.filter((key) => !storedDepartments.has(key)),
    [],
    'every department answered 201 is stored',
  );

  // Every accepted fan-out reached every recipient exactly once; none reached anyone twice.
  const accepted = answers.filter((answer) => answer.operation === 'createNotification' && answer.status === 202).map((answer) => answer.key);
  // A delivery whose runs failed during the failovers waits for its retry, with its queue's
  // delay doubled per failure (a minute or more after a few): the retries are brought
  // forward, so the check waits for pg-boss to run them, not for the clock. A fan-out whose
  // job could not be sent after its commit was accepted all the same and waits for the
  // safety net (notifications.deliver-pending, every minute, for dispatches two minutes
  // old): its dispatch is aged so that the next run takes it. The wait covers the accepted
  // fan-outs only: one answered 503 may have committed too, and is delivered the same way,
  // but the check below does not need it (it counts copies of every fan-out all the same).
  const pending = await eventually(
    async () => {
      await api.db.owner.execute(sql`update pgboss.job set start_after = now() where name = 'notifications.deliver' and state = 'retry'`);
      await api.db.owner.execute(
        sql`update notification_dispatches set created_at = now() - interval '5 minutes'
            where tenant_id = ${tenant.tenantId} and delivered_at is null and created_at > now() - interval '5 minutes'`,
      );
      const [row] = await api.db.owner.execute<{ n: number }>(
        sql`select count(*)::int as n from notification_dispatches
            where tenant_id = ${tenant.tenantId} and delivered_at is null and data->>'title' = any(array[${sql.join(
              accepted.map((title) => sql`${title}`),
              sql`, `,
            )}]::text[])`,
      );
      return row!.n;
    },
    (n) => n === 0,
    150_000,
  );
  if (pending > 0) {
    const jobs = await api.db.owner.execute(
      sql`select state, retry_count, start_after, output from pgboss.job where name = 'notifications.deliver' and state <> 'completed'`,
    );
    t.comment(`undelivered dispatches: ${pending}; their jobs: ${JSON.stringify(jobs)}`);
  }
  const delivered = await api.db.owner.execute<{ title: string; recipient: number; copies: number }>(sql`
    select data->>'title' as title, notifiable_id::int as recipient, count(*)::int as copies
    from notifications where tenant_id = ${tenant.tenantId} group by 1, 2`);
  const copies = new Map(delivered.map((row) => [`${row.title}/${row.recipient}`, row.copies]));
  t.ok(accepted.length > 0, `${accepted.length} fan-outs accepted`);
  t.strictSame(
    accepted.flatMap((title) =>
      recipients.filter((user) => copies.get(`${title}/${user.id}`) !== 1).map((user) => `${title}/${user.id}: ${copies.get(`${title}/${user.id}`) ?? 0}`),
    ),
    [],
    'each accepted fan-out delivered exactly once to each recipient',
  );
  t.strictSame(
    delivered.filter((row) => row.copies !== 1),
    [],
    'no notification delivered twice',
  );

  // The live stream opened before both failovers still receives what is sent now.
  const from = stream.events.length;
  const last = await request('createNotification', 'POST', '/api/notifications', 'ha-after', {
    title: 'ha-after',
    body: 'b',
    url: '/',
    user_ids: [recipients[0]!.id],
  });
  t.equal(last.status, 202);
  const event = await stream
    .next(
      (candidate) => candidate.event === 'notification' && (JSON.parse(candidate.data) as { data: { title: string } }).data.title === 'ha-after',
      30_000,
      from,
    )
    .catch(() => null);
  t.ok(event, 'the stream opened before the failovers receives a notification sent after them (LISTEN reconnected)');
});
