/**
 * Backends terminated while statements are in flight (docs/fault-tolerance.md#lost-database-connections):
 * a real API process under concurrent reads and writes, and `pg_terminate_backend` on every
 * backend of its database several times during the load. No 500 and no dead process; every
 * failure is a 503 problem with Retry-After; reads are mostly served on fresh connections; a
 * write cut off after its transaction began answers 503, is not repeated, and leaves nothing
 * half-written; readiness and service are normal afterwards.
 */
import type { ChildProcess } from 'node:child_process';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import t from 'tap';
import { Pool } from 'undici';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually, readinessOnceReady } from '../../helpers/eventually.ts';
import { startAtriumProcess } from '../../helpers/processes.ts';

const KILLS = 5;
const CLIENTS = 12;
const DEPARTMENTS = 3;
const TARGETS = 6;

// This process only sets up the tenant; the API under test is the child process below.
const api = await startTestApi(t, { role: 'api' });
const tenant = await api.createTenant('termination');
const auth = { authorization: `Bearer ${tenant.adminToken}` };
const departmentIds = (
  await api.db.owner.execute<{ id: number }>(sql`
    insert into departments (tenant_id, name)
    select ${tenant.tenantId}, 'Department ' || g from generate_series(1, ${DEPARTMENTS}) g returning id::int`)
).map((row) => row.id);
const targets = await Promise.all(Array.from({ length: TARGETS }, (_, i) => api.createUser(tenant.tenantId, { username: `target${i}` })));

// One owner connection to the test database: `pid <> pg_backend_pid()` spares it alone.
const control = postgres(api.config.databaseUrl!, { max: 1, onnotice: () => {} });
t.teardown(() => control.end({ timeout: 1 }));

/**
 * When some of the API's backends are inside a statement or transaction, ends every other
 * backend of the database; answers how many were busy and how many it ended. While none
 * is busy it ends none: ending idle connections over and over would leave the API
 * reconnecting instead of serving the load the termination should land in.
 */
async function terminateBackends(on: postgres.Sql = control) {
  const [row] = await on<{ busy: number; terminated: number }[]>`
    with others as (select pid, application_name, state from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()),
         busy as (select count(*)::int as n from others where application_name = 'atrium' and state <> 'idle')
    select busy.n as busy, (select count(pg_terminate_backend(pid))::int from others where busy.n > 0) as terminated from busy`;
  return row!;
}

interface ApiProcess {
  child: ChildProcess;
  origin: string;
  output(): string;
  alive(): boolean;
}

/** The API as it is deployed: its own process (`ATRIUM_ROLE=api`), on a port of its own. */
async function startApiProcess(): Promise<ApiProcess> {
  const { child, output } = startAtriumProcess(t, api, {
    ATRIUM_ROLE: 'api',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    RATE_LIMIT_PER_TOKEN: '0',
    RATE_LIMIT_PER_ADDRESS: '0',
  });
  // Set before the process is ended: teardowns run last added first.
  let stopping = false;
  t.teardown(() => {
    stopping = true;
  });
  child.on('exit', (code, signal) => {
    // Where it died is the finding: show the end of what it printed.
    if (!stopping) t.comment(`the API process exited (${code ?? signal}):\n${output().slice(-4_000)}`);
  });
  const listening = await eventually(
    async () => /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output())?.[1] ?? (child.exitCode !== null ? 'exited' : undefined),
    (found) => found !== undefined,
    60_000,
  );
  if (!listening || listening === 'exited') throw new Error(`the API process did not start:\n${output()}`);
  return { child, origin: listening, output, alive: () => child.exitCode === null && child.signalCode === null };
}

const server = await startApiProcess();
const http = new Pool(server.origin, { connections: CLIENTS + 4 });
t.teardown(() => http.close());

interface Answer {
  kind: string;
  status: number;
  problem: boolean;
  retryAfter: string | undefined;
  body: string;
}

/** One request; an answer that never came (the connection closed) is recorded as status 0. */
async function send(kind: string, method: 'GET' | 'PUT', path: string, body?: unknown): Promise<Answer> {
  let response;
  try {
    response = await http.request({
      method,
      path,
      headers: body === undefined ? auth : { ...auth, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    return { kind, status: 0, problem: false, retryAfter: undefined, body: String(error) };
  }
  const text = await response.body.text();
  return {
    kind,
    status: response.statusCode,
    problem: String(response.headers['content-type']).startsWith('application/problem+json'),
    retryAfter: response.headers['retry-after'] as string | undefined,
    body: text.slice(0, 300),
  };
}

/** A write that sets two tables at once: the name says which department the user was put in. */
const assign = (user: number, department: number, serial: number) =>
  send('write', 'PUT', `/api/users/${user}`, { first_name: `d${department}-w${serial}`, department_ids: [departmentIds[department]!] });

const reads: Array<[string, () => string]> = [
  ['current user', () => '/api/users/current'],
  ['user list', () => '/api/users?limit=20'],
  ['department list', () => '/api/departments'],
  ['one user', () => `/api/users/${targets[Math.floor(Math.random() * TARGETS)]!.id}`],
];

/** Every target's name and departments must come from one write: none half-applied. */
async function halfWritten() {
  const rows = await control<{ id: number; first_name: string; departments: number[] }[]>`
    select u.id::int, u.first_name, coalesce(array_agg(du.department_id::int order by du.department_id) filter (where du.department_id is not null), '{}') as departments
    from users u left join department_users du on du.tenant_id = u.tenant_id and du.user_id = u.id
    where u.tenant_id = ${tenant.tenantId} and u.username like 'target%' group by u.id, u.first_name`;
  return rows.filter((row) => {
    const written = /^d(\d+)-w\d+$/.exec(row.first_name);
    if (!written) return row.departments.length !== 0; // never written: no department either
    return row.departments.length !== 1 || row.departments[0] !== departmentIds[Number(written[1])];
  });
}

t.test('backends terminated mid-load: no 500, every failure a 503 with Retry-After, no half-written write, the process lives', async (t) => {
  const answers: Answer[] = [];
  let serial = 0;
  let loading = true;
  const client = async () => {
    while (loading) {
      const n = serial++;
      if (n % 4 === 3) {
        answers.push(await assign(targets[n % TARGETS]!.id, n % DEPARTMENTS, n));
      } else {
        const [kind, path] = reads[n % reads.length]!;
        answers.push(await send(kind, 'GET', path()));
      }
    }
  };
  const clients = Array.from({ length: CLIENTS }, client);

  // Terminate only when some of the API's backends are inside a statement or a transaction.
  const kills: { busy: number; terminated: number }[] = [];
  for (let attempt = 0; kills.length < KILLS && attempt < 2_000 && server.alive(); attempt++) {
    const killed = await terminateBackends();
    if (killed.busy > 0) {
      kills.push(killed);
      // Let the load run on the fresh connections before the next termination.
      const sent = answers.length;
      await eventually(
        async () => answers.length,
        (n) => n >= sent + 4 * CLIENTS || !server.alive(),
      );
    }
  }
  // And some load after the last one.
  const settled = answers.length;
  await eventually(
    async () => answers.length,
    (n) => n >= settled + 4 * CLIENTS || !server.alive(),
  );
  loading = false;
  await Promise.allSettled(clients);

  t.ok(server.alive(), 'the API process is still running');
  t.equal(
    kills.length,
    KILLS,
    `${KILLS} terminations, each with statements of the API in flight (${kills.map((k) => `${k.busy}/${k.terminated}`).join(', ')})`,
  );
  const byStatus = (kind?: string) =>
    answers
      .filter((a) => kind === undefined || (kind === 'write' ? a.kind === 'write' : a.kind !== 'write'))
      .reduce<Record<number, number>>((counts, a) => ({ ...counts, [a.status]: (counts[a.status] ?? 0) + 1 }), {});
  t.comment(`reads ${JSON.stringify(byStatus('read'))}, writes ${JSON.stringify(byStatus('write'))}`);
  const unexpected = answers.filter((a) => a.status !== 200 && !(a.status === 503 && a.problem && a.retryAfter === '1'));
  t.strictSame(unexpected, [], 'every answer is a 200 or a 503 problem with Retry-After');
  t.equal(answers.filter((a) => a.status === 500).length, 0, 'no 500');
  const readAnswers = answers.filter((a) => a.kind !== 'write');
  const readsServed = readAnswers.filter((a) => a.status === 200).length;
  t.ok(readsServed > readAnswers.length - readsServed, `most reads were served (${readsServed} of ${readAnswers.length})`);
  t.strictSame(await halfWritten(), [], 'every user holds the name and the department of one and the same write');
  t.notMatch(server.output(), /uncaught|unhandled/i, 'nothing escaped to the process level');
});

t.test('a write cut off after its transaction began answers 503, is not repeated, and changes nothing', async (t) => {
  const victim = targets[0]!;
  const before = await control<{ first_name: string; departments: number[] }[]>`
    select u.first_name, array(select department_id::int from department_users where tenant_id = u.tenant_id and user_id = u.id order by 1) as departments
    from users u where u.tenant_id = ${tenant.tenantId} and u.id = ${victim.id}`;

  // Hold the write inside its transaction: its name is updated, its departments wait for this lock.
  const held = await control.reserve();
  try {
    await held`begin`;
    await held`lock table department_users in share mode`;
    const write = assign(victim.id, 1, 999_999);
    await eventually(
      async () => (await held<{ n: number }[]>`select count(*)::int as n from pg_locks where relation = 'department_users'::regclass and not granted`)[0]!.n,
      (n) => n > 0,
    );
    const killed = await terminateBackends(held);
    t.ok(killed.busy > 0, 'the write was inside its transaction when its backend was terminated');
    await held`rollback`;
    const answer = await write;
    t.equal(answer.status, 503, 'a write that began is not repeated on another connection: 503');
    t.ok(answer.problem, 'as a problem document');
    t.equal(answer.retryAfter, '1', 'saying when to try again');
  } finally {
    held.release();
  }
  const after = await control<{ first_name: string; departments: number[] }[]>`
    select u.first_name, array(select department_id::int from department_users where tenant_id = u.tenant_id and user_id = u.id order by 1) as departments
    from users u where u.tenant_id = ${tenant.tenantId} and u.id = ${victim.id}`;
  t.strictSame(after, before, 'neither its name nor its departments changed');
  t.ok(server.alive(), 'the API process is still running');
});

t.test('afterwards readiness says ready and every kind of request is served', async (t) => {
  const ready = await readinessOnceReady(async () => {
    const response = await http.request({ method: 'GET', path: '/health/ready' });
    await response.body.dump();
    return response.statusCode;
  });
  t.equal(ready, 200, 'ready: the database is up and reachable');
  for (const [kind, path] of reads) t.equal((await send(kind, 'GET', path())).status, 200, kind);
  t.equal((await assign(targets[1]!.id, 2, 1_000_000)).status, 200, 'a write');
  t.strictSame(await halfWritten(), []);
  t.ok(server.alive(), 'the API process is still running');
});
