/**
 * Benchmark: a mixed workload on real processes, with 1 API process and then with 2, beside
 * each other (the same worker processes each time; docs/scaling.md#a-mixed-load-on-several-processes).
 *
 * One PostgreSQL (embedded, or a fresh database on DATABASE_URL) holds a tenant with one
 * department of MEMBERS users. API processes (`ATRIUM_ROLE=api`) and worker processes
 * (`ATRIUM_ROLE=worker`) are child processes of `src/main.ts` (through tsx, as
 * `bin/atrium.js` runs the source; COMPILED=1 runs `dist/src/main.js` after `npm run build`),
 * each on a port of its own. For SECONDS, CONNECTIONS clients send a mix of list and show
 * reads, notification counts and writes (user updates, new departments), spread over the
 * API processes; STREAMS members hold `GET /api/notifications/stream` open; FAN_OUTS
 * notifications are sent to the whole department during the run.
 *
 * Printed per run: throughput, p50/p99 per kind, answers by status, and each fan-out's
 * completion time (POST → dispatch delivered and every member's notification stored).
 * Checked (exit status 1 otherwise): no 5xx, no lost or doubled notification (each member
 * holds each fan-out's notification exactly once), and each open stream received each
 * fan-out exactly once.
 *
 *   npx tsx scripts/bench/load.ts
 *   API_PROCESSES=1,2,4 WORKERS=2 MEMBERS=50000 SECONDS=60 CONNECTIONS=64 STREAMS=200 npx tsx scripts/bench/load.ts
 *
 * No baseline: this bench measures Atrium alone (no bare route answers a mix of reads,
 * writes, streams and fan-outs); its TARGET lines at the end are the checks above, per run.
 *
 * The general rate limit is switched off in the API processes (RATE_LIMIT_PER_TOKEN=0,
 * RATE_LIMIT_PER_ADDRESS=0): one client address sends everything.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { sql } from 'drizzle-orm';
import { Pool } from 'undici';
import { hashToken, newAccessToken } from '../../src/platform/auth/tokens.ts';
import { benchAtrium, printTargets, target, throwawayDatabase } from './support.ts';

const setting = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number`);
  return value;
};
const apiCounts = (process.env.API_PROCESSES ?? '1,2').split(',').map(Number);
const workerCount = setting('WORKERS', 1);
const members = setting('MEMBERS', 10_000);
const seconds = setting('SECONDS', 20);
const connections = setting('CONNECTIONS', 16);
const streamCount = setting('STREAMS', 20);
const fanOuts = setting('FAN_OUTS', 2);
const compiled = process.env.COMPILED === '1';

/** The share of each kind of request in the mix (fan-outs and streams come on top). */
const MIX = [
  ['list users', 30],
  ['show user', 25],
  ['list departments', 10],
  ['count notifications', 20],
  ['update user', 10],
  ['create department', 5],
] as const;
type Kind = (typeof MIX)[number][0] | 'fan-out';

// --- The database and the tenant --------------------------------------------------------

const database = await throwawayDatabase();
// A short-lived Atrium migrates the database and creates the demo tenant; its owner
// connection sets up and checks the data (it answers no request).
const setup = await benchAtrium(database.url);
const db = setup.services.db;
const [tenant] = await db.owner.execute<{ id: number; admin_id: number; employee_id: number }>(sql`
  select t.id::int, a.id::int as admin_id, r.id::int as employee_id
  from tenants t join users a on a.tenant_id = t.id and a.username = 'admin' join roles r on r.tenant_id = t.id and r.name = 'Employee'
  where t.slug = 'demo'`);
const tenantId = tenant!.id;
await db.owner.execute(sql`
  insert into users (tenant_id, username, role_id, first_name, last_name)
  select ${tenantId}, 'member' || g, ${tenant!.employee_id}, 'Member', 'No ' || g from generate_series(1, ${members}) g`);
const [department] = await db.owner.execute<{ id: number }>(sql`insert into departments (tenant_id, name) values (${tenantId}, 'Everyone') returning id::int`);
await db.owner.execute(sql`
  insert into department_users (tenant_id, department_id, user_id)
  select ${tenantId}, ${department!.id}, id from users where tenant_id = ${tenantId} and username like 'member%'`);
await db.owner.execute(sql`analyze`);
const memberIds = (
  await db.owner.execute<{ id: number }>(sql`select id::int from users where tenant_id = ${tenantId} and username like 'member%' order by id`)
).map((row) => row.id);
/** A bearer token of `userId` for a day, stored as the owner (only its hash is kept, as Atrium keeps it). */
const tokenOf = async (userId: number) => {
  const token = newAccessToken();
  await db.owner.execute(sql`
    insert into access_tokens (tenant_id, user_id, token_hash, expires_at) values (${tenantId}, ${userId}, ${hashToken(token)}, now() + interval '1 day')`);
  return token;
};
const adminToken = await tokenOf(tenant!.admin_id);
/** Members whose counts are read, and who hold streams open. */
const readers = await Promise.all(memberIds.slice(0, Math.max(streamCount, 20)).map(async (id) => ({ id, token: await tokenOf(id) })));

// --- Processes --------------------------------------------------------------------------

interface Child {
  process: ChildProcess;
  origin: string | null;
  output: () => string;
  exited: Promise<void>;
}

function startChild(role: 'api' | 'worker'): Promise<Child> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ATRIUM_ROLE: role,
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    RATE_LIMIT_PER_TOKEN: '0',
    RATE_LIMIT_PER_ADDRESS: '0',
  };
  delete env.ATRIUM_APP_DATABASE_URL;
  const args = compiled ? ['dist/src/main.js'] : ['--import', 'tsx', 'src/main.ts'];
  const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  // Keep the start and the end of what it prints (request logs would fill memory).
  const keep = (chunk: Buffer) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(0, 20_000) + output.slice(-100_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    const ready = role === 'api' ? /Server listening at (http:\/\/127\.0\.0\.1:\d+)/ : /job workers started/;
    const timer = setInterval(() => {
      const found = ready.exec(output);
      if (found) {
        clearInterval(timer);
        resolve({ process: child, origin: role === 'api' ? found[1]! : null, output: () => output, exited });
      }
    }, 50);
    void exited.then(() => {
      clearInterval(timer);
      reject(new Error(`the ${role} process exited while starting:\n${output.slice(-4_000)}`));
    });
  });
}

async function stopChild(child: Child): Promise<void> {
  if (child.process.exitCode === null && child.process.signalCode === null) {
    child.process.kill('SIGTERM');
    await child.exited;
  }
}

// --- Measuring --------------------------------------------------------------------------

class Tally {
  readonly durations = new Map<Kind, number[]>();
  readonly statuses = new Map<string, number>();
  add(kind: Kind, ms: number, status: number): void {
    if (!this.durations.has(kind)) this.durations.set(kind, []);
    this.durations.get(kind)!.push(ms);
    const key = `${kind} ${status}`;
    this.statuses.set(key, (this.statuses.get(key) ?? 0) + 1);
  }
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

interface StreamWatch {
  received: Map<string, number>;
  close(): void;
}

/** A member's live stream; counts the `notification` events per title. */
function openStream(origin: string, token: string): Promise<StreamWatch> {
  return new Promise((resolve, reject) => {
    const received = new Map<string, number>();
    const request = http.get(
      `${origin}/api/notifications/stream`,
      { headers: { accept: 'text/event-stream', authorization: `Bearer ${token}` } },
      (response) => {
        if (response.statusCode !== 200) {
          reject(new Error(`stream answered ${response.statusCode}`));
          response.resume();
          return;
        }
        let buffer = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          buffer += chunk;
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            if (!block.split('\n').includes('event: notification')) continue;
            const data = block
              .split('\n')
              .filter((line) => line.startsWith('data: '))
              .map((line) => line.slice(6))
              .join('');
            const title = (JSON.parse(data) as { data?: { title?: string } }).data?.title ?? '?';
            received.set(title, (received.get(title) ?? 0) + 1);
          }
        });
        response.on('error', () => {});
        resolve({ received, close: () => request.destroy() });
      },
    );
    request.on('error', (error) => reject(error));
  });
}

interface FanOut {
  title: string;
  dispatchId: string | null;
  status: number;
  completedMs: number | null;
}

interface RunResult {
  apis: number;
  tally: Tally;
  elapsedS: number;
  fanOuts: FanOut[];
  lost: string[];
}

async function run(apis: number, workers: Child[]): Promise<RunResult> {
  const servers = await Promise.all(Array.from({ length: apis }, () => startChild('api')));
  const pools = servers.map((server) => new Pool(server.origin!, { connections: Math.ceil(connections / apis) + 2 }));
  const streams = await Promise.all(readers.slice(0, streamCount).map((reader, i) => openStream(servers[i % apis]!.origin!, reader.token)));
  const tally = new Tally();
  const label = `${apis}api`;
  let serial = 0;
  const request = async (kind: Kind, method: 'GET' | 'POST' | 'PUT', path: string, token: string, body?: unknown) => {
    const pool = pools[serial++ % pools.length]!;
    const started = performance.now();
    let status = 0;
    let text = '';
    try {
      const response = await pool.request({
        method,
        path,
        headers: body === undefined ? { authorization: `Bearer ${token}` } : { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      status = response.statusCode;
      text = await response.body.text();
    } catch {
      // No answer (the connection failed): counted as status 0.
    }
    tally.add(kind, performance.now() - started, status);
    return { status, text };
  };

  const weights = MIX.reduce((sum, [, weight]) => sum + weight, 0);
  const pick = () => {
    let roll = Math.random() * weights;
    for (const [kind, weight] of MIX) if ((roll -= weight) < 0) return kind;
    return MIX[0][0];
  };
  const randomMember = () => memberIds[Math.floor(Math.random() * memberIds.length)]!;
  let created = 0;
  const one = (kind: (typeof MIX)[number][0]) => {
    switch (kind) {
      case 'list users':
        return request(kind, 'GET', '/api/users?limit=20', adminToken);
      case 'show user':
        return request(kind, 'GET', `/api/users/${randomMember()}`, adminToken);
      case 'list departments':
        return request(kind, 'GET', '/api/departments', adminToken);
      case 'count notifications':
        return request(kind, 'GET', '/api/notifications/count', readers[Math.floor(Math.random() * readers.length)]!.token);
      case 'update user':
        return request(kind, 'PUT', `/api/users/${randomMember()}`, adminToken, { first_name: `Member ${serial}` });
      case 'create department':
        return request(kind, 'POST', '/api/departments', adminToken, { name: `${label} department ${++created}` });
    }
  };

  const started = performance.now();
  const until = started + seconds * 1000;
  const clients = Array.from({ length: connections }, async () => {
    while (performance.now() < until) await one(pick());
  });
  // The fan-outs, spread over the run; each is timed until its dispatch is delivered and every member holds it.
  const sent: FanOut[] = [];
  const fanOutsDone = (async () => {
    for (let i = 0; i < fanOuts; i++) {
      await new Promise((resolve) => setTimeout(resolve, (seconds * 1000) / (fanOuts + 1)));
      const title = `${label} fan-out ${i + 1}`;
      const posted = performance.now();
      const answer = await request('fan-out', 'POST', '/api/notifications', adminToken, {
        title,
        body: 'Load',
        url: '/bench',
        department_ids: [department!.id],
      });
      const fanOut: FanOut = { title, dispatchId: null, status: answer.status, completedMs: null };
      sent.push(fanOut);
      if (answer.status !== 202) continue;
      void (async () => {
        for (;;) {
          const [row] = await db.owner.execute<{ id: string; delivered: boolean; stored: number }>(sql`
            select d.id::text, d.delivered_at is not null as delivered,
                   (select count(*)::int from notifications n where n.tenant_id = d.tenant_id and n.dispatch_id = d.id) as stored
            from notification_dispatches d where d.tenant_id = ${tenantId} and d.data->>'title' = ${title}`);
          if (row?.delivered && row.stored >= members) {
            fanOut.dispatchId = row.id;
            fanOut.completedMs = performance.now() - posted;
            return;
          }
          if (performance.now() - posted > 600_000) return; // reported as not completed
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();
    }
  })();
  await Promise.all(clients);
  const elapsedS = (performance.now() - started) / 1000;
  await fanOutsDone;
  // Wait for the fan-outs to complete and reach the streams (bounded, reported when not).
  const deadline = performance.now() + 600_000;
  while (sent.some((f) => f.status === 202 && f.completedMs === null) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const expected = sent.filter((f) => f.completedMs !== null);
  const streamDeadline = performance.now() + 30_000;
  while (streams.some((s) => expected.some((f) => (s.received.get(f.title) ?? 0) < 1)) && performance.now() < streamDeadline) {
    await new Promise((r) => setTimeout(r, 100));
  }

  const lost: string[] = [];
  for (const fanOut of sent) {
    if (fanOut.status !== 202) continue;
    if (fanOut.completedMs === null) {
      lost.push(`${fanOut.title}: not delivered`);
      continue;
    }
    const [row] = await db.owner.execute<{ stored: number; recipients: number }>(sql`
      select count(*)::int as stored, count(distinct notifiable_id)::int as recipients
      from notifications where tenant_id = ${tenantId} and dispatch_id = ${fanOut.dispatchId}`);
    if (row!.stored !== members || row!.recipients !== members)
      lost.push(`${fanOut.title}: ${row!.stored} stored for ${row!.recipients} of ${members} members`);
  }
  streams.forEach((stream, i) => {
    for (const fanOut of expected) {
      const times = stream.received.get(fanOut.title) ?? 0;
      if (times !== 1) lost.push(`${fanOut.title}: stream ${i} received it ${times} times`);
    }
  });

  for (const stream of streams) stream.close();
  await Promise.all(pools.map((pool) => pool.close()));
  await Promise.all(servers.map(stopChild));
  for (const worker of workers) if (worker.process.exitCode !== null) lost.push(`a worker process exited:\n${worker.output().slice(-2_000)}`);
  return { apis, tally, elapsedS, fanOuts: sent, lost };
}

// --- Runs and the report ----------------------------------------------------------------

const workers = await Promise.all(Array.from({ length: workerCount }, () => startChild('worker')));
const results: RunResult[] = [];
try {
  for (const apis of apiCounts) results.push(await run(apis, workers));
} finally {
  await Promise.all(workers.map(stopChild));
  await setup.stop();
  await database.drop();
}

const format = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '—');
console.log(
  `mixed load: ${members} members in one department, ${connections} clients, ${streamCount} open streams, ${fanOuts} fan-outs, ` +
    `${seconds} s per run, ${workerCount} worker process(es), ${compiled ? 'compiled' : 'tsx'} entry`,
);
const kinds: Kind[] = [...MIX.map(([kind]) => kind), 'fan-out'];
console.log(`\n${'kind'.padEnd(22)}${results.map((r) => `${`${r.apis} API: req/s`.padStart(18)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}`).join('')}`);
for (const kind of kinds) {
  const cells = results.map((r) => {
    const durations = [...(r.tally.durations.get(kind) ?? [])].sort((a, b) => a - b);
    return `${format(durations.length / r.elapsedS).padStart(18)}${format(percentile(durations, 50)).padStart(9)}${format(percentile(durations, 99)).padStart(9)}`;
  });
  console.log(`${kind.padEnd(22)}${cells.join('')}`);
}
const totals = results.map((r) => [...r.tally.durations.values()].reduce((sum, d) => sum + d.length, 0) / r.elapsedS);
console.log(`${'all'.padEnd(22)}${totals.map((total) => format(total).padStart(18).padEnd(36)).join('')}`);

let failed = false;
for (const r of results) {
  console.log(`\n${r.apis} API process(es):`);
  const statuses = [...r.tally.statuses.entries()].sort();
  console.log(`  answers by status: ${statuses.map(([key, n]) => `${key}: ${n}`).join(', ')}`);
  for (const fanOut of r.fanOuts) {
    console.log(
      `  ${fanOut.title}: POST ${fanOut.status}, completed (dispatch delivered, ${members} stored) in ${fanOut.completedMs === null ? '—' : `${(fanOut.completedMs / 1000).toFixed(2)} s`}`,
    );
  }
  const serverErrors = statuses.filter(([key]) => /\s(5\d\d|0)$/.test(key));
  target(
    `mixed load, ${r.apis} API process(es)`,
    'answers_5xx_or_none',
    serverErrors.reduce((sum, [, n]) => sum + n, 0),
    '=',
    0,
    0,
  );
  target(`mixed load, ${r.apis} API process(es)`, 'fan-outs_refused', r.fanOuts.filter((f) => f.status !== 202).length, '=', 0, 0);
  target(`mixed load, ${r.apis} API process(es)`, 'lost_or_doubled', r.lost.length, '=', 0, 0);
  if (serverErrors.length > 0) {
    failed = true;
    console.log(`  FAILED: answers 5xx or none: ${serverErrors.map(([key, n]) => `${key}: ${n}`).join(', ')}`);
  }
  if (r.fanOuts.some((f) => f.status !== 202)) failed = true;
  if (r.lost.length > 0) {
    failed = true;
    console.log(`  FAILED: notifications lost or doubled:\n    ${r.lost.slice(0, 20).join('\n    ')}`);
  } else {
    console.log(`  every member holds each fan-out's notification exactly once; every open stream received each once`);
  }
}
printTargets();
process.exitCode = failed ? 1 : 0;
