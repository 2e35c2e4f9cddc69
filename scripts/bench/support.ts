/** Shared set-up for benchmarks: a throwaway database and a running Atrium on it. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { BroadcastChannel } from 'node:worker_threads';
import autocannon from 'autocannon';
import pino from 'pino';
import postgres from 'postgres';
import { loadConfig } from '../../src/config.ts';
import { toleratingConnectionLoss } from '../../src/platform/database/connection-loss.ts';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';
import { postmasterOf } from '../../test/helpers/processes.ts';
import type { createAtrium as createAtriumFromSource } from '../../src/server.ts';

/** The folder of the embedded server `throwawayDatabase` started, whose CPU `measure` reports; none on DATABASE_URL's server. */
let embeddedDataDir: string | undefined;

/**
 * CPU time in ms of the embedded server so far: its postmaster and every process it
 * started (Linux's /proc, at 100 ticks a second); undefined where that cannot be read.
 */
async function serverCpuMs(): Promise<number | undefined> {
  if (!embeddedDataDir) return undefined;
  try {
    const postmaster = postmasterOf(embeddedDataDir).pid;
    let ticks = 0;
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
      // After the command's name in parentheses: state, ppid, …, utime (12th), stime (13th).
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(entry) === postmaster || Number(fields[1]) === postmaster) ticks += Number(fields[11]) + Number(fields[12]);
    }
    return ticks * 10;
  } catch {
    return undefined;
  }
}

/** What the throwaway databases of this process leave behind, undone when a signal ends it. */
const drops = new Set<() => Promise<void>>();

/**
 * Ctrl-C or a kill of a bench drops its throwaway databases too (a signal ends Node without
 * its exit hooks: an embedded server would outlive a killed bench, and a database on
 * DATABASE_URL's server stay behind), every one before the process exits. Answers `drop`,
 * which no longer runs on a signal once it has run.
 */
function dropOnSignal(drop: () => Promise<void>): () => Promise<void> {
  if (drops.size === 0) {
    for (const [signal, code] of [
      ['SIGINT', 130],
      ['SIGTERM', 143],
    ] as const) {
      process.once(signal, () => void Promise.allSettled([...drops].map((each) => each())).finally(() => process.exit(code)));
    }
  }
  const once = async () => {
    drops.delete(once);
    await drop();
  };
  drops.add(once);
  return once;
}

export async function throwawayDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const name = `atrium_bench_${randomBytes(4).toString('hex')}`;
    const admin = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database "${name}"`);
    const url = new URL(process.env.DATABASE_URL);
    url.pathname = `/${name}`;
    return {
      url: url.toString(),
      drop: dropOnSignal(async () => {
        await admin.unsafe(`drop database "${name}" with (force)`);
        await admin.end();
      }),
    };
  }
  const dir = path.join(os.tmpdir(), `atrium-bench-${randomBytes(4).toString('hex')}`);
  const server = await startEmbeddedPostgres(dir);
  embeddedDataDir = dir;
  const drop = async () => {
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  };
  return { url: server.url, drop: dropOnSignal(drop) };
}

/**
 * Atrium on `url` as an API process (`role: 'all'`: with its job workers too), from the
 * source or, with BENCH_COMPILED=1, from the compiled output (dist/; `npm run build` first)
 * as `npm start` runs it. `passwordHashCost: 'test'` hashes new passwords at the test
 * suite's cost, for a bench whose subject is not Argon2 (the configuration allows it only
 * under NODE_ENV=test, which a bench does not set).
 */
export async function benchAtrium(url: string, options: { role?: 'api' | 'all'; passwordHashCost?: 'standard' | 'test' } = {}) {
  // As the entry point does (src/main.ts): the driver's own statement on a connection lost
  // while the bench tears down (the database stops) is no failure of the bench.
  process.on(
    'unhandledRejection',
    toleratingConnectionLoss(() => {}),
  );
  const { createAtrium } = (
    process.env.BENCH_COMPILED ? await import(new URL('../../dist/src/server.js', import.meta.url).href) : await import('../../src/server.ts')
  ) as { createAtrium: typeof createAtriumFromSource };
  return createAtrium(
    // Limits no bench reaches (a benchmark's one token would be answered 429 after the default 600 requests a
    // minute), not none: the limiter's hook runs on every request, as in production, and is timed with it.
    {
      ...loadConfig({ DATABASE_POOL_SIZE: process.env.DATABASE_POOL_SIZE }),
      databaseUrl: url,
      logLevel: 'silent',
      adminPassword: 'benchmark-password',
      role: options.role ?? 'api',
      ...(options.passwordHashCost ? { passwordHashCost: options.passwordHashCost } : {}),
      rateLimitPerToken: 2 ** 31 - 1,
      rateLimitPerAddress: 2 ** 31 - 1,
    },
    { logger: pino({ level: 'silent' }) },
  );
}

export interface Measured {
  name: string;
  requests: number;
  /** Latency percentiles in ms, to the microsecond (see `measure`). */
  p50: number;
  p99: number;
  /** p99 over p50 of one run; of several, the median of the runs' (not the median p99 over the median p50, which may come from other runs). */
  tail: number;
  non2xx: number;
  /**
   * CPU time of this process per answered request, in ms (autocannon's share included,
   * the same on both sides): steadier than throughput on a machine others load too.
   */
  cpuPerRequest: number;
  /**
   * CPU time of the PostgreSQL server per answered request, in ms (its every process), when
   * the bench started it; absent on DATABASE_URL's server, which other work may share.
   */
  serverCpuPerRequest?: number;
}

/**
 * Worker threads that generate the load (BENCH_WORKERS, default 1; 0 runs autocannon on the
 * server's own event loop). On that loop the client's work lands between the server's and
 * stretches the measured tail: p99 at 64 connections read twice what the server spends.
 */
const loadWorkers = Number(process.env.BENCH_WORKERS ?? 1);

/** Where the next run's requests start in a file of tokens (`measure`'s `tokensFile`): after the last run's. */
let tokenCursor = 0;

/** Requests other than a plain GET: each connection sends them in turn (a write that must change something every time). */
/**
 * Requests other than a plain GET: each connection sends them in turn. A single request whose
 * body holds `{n}` is sent with a value there that no other request of the bench sends
 * (`latency-recorder.cjs`), so that a write changes something every time.
 */
export type BenchRequests = { method: 'PUT' | 'POST' | 'PATCH' | 'DELETE'; body: string }[];

/** autocannon's `setupClient` that sends each answer's latency to `measure` (see the file). */
const latencyRecorder = new URL('latency-recorder.cjs', import.meta.url).pathname;

/** The `q` quantile of ascending `sorted` (nearest rank). */
const quantile = (sorted: Float64Array, q: number) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? 0;

/**
 * One run of autocannon. Throughput and answers are autocannon's; p50 and p99 are computed
 * from every answer's latency as autocannon's client measured it (`latency-recorder.cjs`),
 * because autocannon's own percentiles are whole milliseconds: a p50 under one read as 0,
 * and p99 over p50 could not be read. Fails when fewer than 99 % of the answers' figures
 * arrived.
 */
export async function measure(
  name: string,
  url: string,
  headers: Record<string, string>,
  seconds: number,
  connections = 10,
  requests?: BenchRequests,
  /** A file of access tokens, one a line: each request sends the next (`latency-recorder.cjs`); `headers` the first. */
  tokensFile?: string,
): Promise<Measured> {
  const channelName = `atrium-bench-latency-${randomBytes(6).toString('hex')}`;
  const channel = new BroadcastChannel(channelName);
  const batches: Float64Array[] = [];
  channel.onmessage = (event) => batches.push((event as { data: Float64Array }).data);
  // autocannon's worker threads copy the environment when they start; the recorder reads its channel there.
  process.env.ATRIUM_BENCH_LATENCY_CHANNEL = channelName;
  const unique = requests?.find((request) => request.body.includes('{n}'));
  if (unique && requests!.length > 1) throw new Error(`${name}: a body with {n} is the one request of a run`);
  if (unique) process.env.ATRIUM_BENCH_BODY = unique.body;
  else delete process.env.ATRIUM_BENCH_BODY;
  let tokenCount = 0;
  if (tokensFile) {
    // One thread sends them all, in turn: several would each walk the same sequence.
    if (loadWorkers > 1) throw new Error(`${name}: a file of tokens takes BENCH_WORKERS=1 or 0`);
    tokenCount = readFileSync(tokensFile, 'utf8').split('\n').filter(Boolean).length;
    process.env.ATRIUM_BENCH_TOKENS = tokensFile;
    process.env.ATRIUM_BENCH_TOKENS_START = String(tokenCursor);
  } else {
    delete process.env.ATRIUM_BENCH_TOKENS;
  }
  const cpu = process.cpuUsage();
  const serverCpu = await serverCpuMs();
  const result = await autocannon({
    url,
    headers,
    duration: seconds,
    connections,
    ...(requests ? { requests } : {}),
    // A worker requires the recorder by its path; on this thread it is the function itself.
    ...(loadWorkers > 0
      ? { workers: loadWorkers, setupClient: latencyRecorder }
      : { setupClient: createRequire(import.meta.url)(latencyRecorder) as (client: unknown) => void }),
  } as autocannon.Options);
  const used = process.cpuUsage(cpu);
  if (tokensFile) {
    tokenCursor += result.requests.sent + connections;
    // A token asked again within a second would be remembered: the run would time the cache, not the look-ups.
    if (result.requests.average >= tokenCount)
      throw new Error(`${name}: ${result.requests.average} requests a second reuse ${tokenCount} tokens within a second`);
  }
  const serverUsed = serverCpu === undefined ? undefined : ((await serverCpuMs()) ?? serverCpu) - serverCpu;
  // The recorder's last batches travel on their own channel, beside autocannon's result.
  const answered = result.requests.total;
  const received = () => batches.reduce((sum, batch) => sum + batch.length, 0);
  for (let waited = 0; received() < answered && waited < 3000; waited += 20) await sleep(20);
  channel.close();
  const latencies = new Float64Array(received());
  let at = 0;
  for (const batch of batches) {
    latencies.set(batch, at);
    at += batch.length;
  }
  if (latencies.length < 0.99 * answered) throw new Error(`${name}: latencies of ${latencies.length} answers of ${answered} arrived`);
  latencies.sort();
  const p50 = quantile(latencies, 0.5);
  const p99 = quantile(latencies, 0.99);
  return {
    name,
    requests: result.requests.average,
    p50,
    p99,
    tail: p99 / p50,
    non2xx: result.non2xx,
    cpuPerRequest: (used.user + used.system) / 1000 / Math.max(1, answered),
    ...(serverUsed === undefined ? {} : { serverCpuPerRequest: serverUsed / Math.max(1, answered) }),
  };
}

export function report(subject: Measured, baseline: Measured): void {
  const row = (m: Measured) =>
    `${m.name.padEnd(52)} ${m.requests.toFixed(0).padStart(8)} req/s   p50 ${m.p50.toFixed(2).padStart(6)} ms   p99 ${m.p99.toFixed(2).padStart(6)} ms   ` +
    `node ${m.cpuPerRequest.toFixed(2)} ms/req   ${m.serverCpuPerRequest === undefined ? '' : `postgres ${m.serverCpuPerRequest.toFixed(2)} ms/req   `}non-2xx ${m.non2xx}`;
  console.log(row(subject));
  console.log(row(baseline));
}

/**
 * Fails unless Atrium and the baseline answer the same JSON (compared after JSON.parse:
 * key order may differ). A baseline is only a baseline when it answers the same body.
 */
export async function assertSameBody(subjectUrl: string, baselineUrl: string, headers: Record<string, string>): Promise<number> {
  const [subject, baseline] = await Promise.all([fetch(subjectUrl, { headers }), fetch(baselineUrl, { headers })]);
  if (subject.status !== 200 || baseline.status !== 200) throw new Error(`answers ${subject.status} (Atrium) and ${baseline.status} (baseline)`);
  const [subjectText, baselineText] = await Promise.all([subject.text(), baseline.text()]);
  try {
    assert.deepStrictEqual(JSON.parse(baselineText), JSON.parse(subjectText));
  } catch (error) {
    console.error(`bodies differ for ${subjectUrl}:\n  Atrium:   ${subjectText.slice(0, 600)}\n  baseline: ${baselineText.slice(0, 600)}`);
    throw error;
  }
  return subjectText.length;
}

const WARM_UP_SECONDS = 3;

export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** Seconds per slice (argv[2], default 3) and rounds (argv[3] or ROUNDS, default 3) of a bench's command line. */
export function slices(): { seconds: number; rounds: number } {
  return { seconds: Number(process.argv[2] ?? 3), rounds: Number(process.argv[3] ?? process.env.ROUNDS ?? 3) };
}

/**
 * The connections of Atrium's request pool (DATABASE_POOL_SIZE, default 10): a baseline's
 * pool holds as many, so neither side waits for a connection the other would have.
 */
export const requestPoolSize = loadConfig({ DATABASE_POOL_SIZE: process.env.DATABASE_POOL_SIZE }).databasePoolSize;

/** A baseline's database client: the owner's URL (no row-level security), as many connections as Atrium's request pool. */
export function baselineSql(url: string) {
  return postgres(url, { max: requestPoolSize, onnotice: () => {} });
}

/** One side's figures at one number of connections: the median of the rounds. */
export interface Compared {
  name: string;
  connections: number;
  /** The median of the rounds' ratios of Atrium's throughput to the baseline's. */
  ratio: number;
  subject: Measured;
  baseline: Measured;
  /** Answers other than 2xx, on either side, over all rounds. */
  non2xx: number;
}

/**
 * Atrium and its baseline measured in alternating slices (`rounds` each, so both meet the
 * same load from the other agents of a shared machine) at each number of connections. The
 * order alternates too: round 1 Atrium then the baseline, round 2 the baseline then Atrium,
 * and so on, so neither side always runs on a machine the other has just warmed or loaded.
 * Prints the median of the rounds for both sides, the median of the rounds' throughput
 * ratios and each round's ratio; answers the figures for `target`. `label` names what the
 * ratio is (an overhead ratio unless said otherwise).
 */
export async function comparePair(
  name: string,
  subject: { url: string; headers: Record<string, string>; requests?: BenchRequests; tokensFile?: string },
  baseline: { url: string; headers: Record<string, string>; requests?: BenchRequests; tokensFile?: string },
  options: { seconds: number; rounds: number; connections: number[]; label?: string; baselineName?: string },
): Promise<Compared[]> {
  const compared: Compared[] = [];
  const label = options.label ?? 'ratio (Atrium / baseline throughput)';
  const baselineName = options.baselineName ?? 'baseline';
  for (const connections of options.connections) {
    const runs: { subject: Measured; baseline: Measured }[] = [];
    // Warm-up: connections opened, statements prepared, code optimised on both sides (a
    // second at ~300 requests a second left Atrium's first round visibly slower than its later ones).
    await measure('warm-up', subject.url, subject.headers, WARM_UP_SECONDS, connections, subject.requests, subject.tokensFile);
    await measure('warm-up', baseline.url, baseline.headers, WARM_UP_SECONDS, connections, baseline.requests, baseline.tokensFile);
    for (let round = 0; round < options.rounds; round++) {
      const measureSubject = () =>
        measure(`Atrium   ${name}`, subject.url, subject.headers, options.seconds, connections, subject.requests, subject.tokensFile);
      const measureBaseline = () =>
        measure(`${baselineName} ${name}`, baseline.url, baseline.headers, options.seconds, connections, baseline.requests, baseline.tokensFile);
      if (round % 2 === 0) {
        const s = await measureSubject();
        runs.push({ subject: s, baseline: await measureBaseline() });
      } else {
        const b = await measureBaseline();
        runs.push({ subject: await measureSubject(), baseline: b });
      }
    }
    const pick = (side: 'subject' | 'baseline'): Measured => ({
      name: runs[0]![side].name,
      requests: median(runs.map((run) => run[side].requests)),
      p50: median(runs.map((run) => run[side].p50)),
      p99: median(runs.map((run) => run[side].p99)),
      tail: median(runs.map((run) => run[side].tail)),
      non2xx: runs.reduce((sum, run) => sum + run[side].non2xx, 0),
      cpuPerRequest: median(runs.map((run) => run[side].cpuPerRequest)),
      ...(runs.every((run) => run[side].serverCpuPerRequest !== undefined)
        ? { serverCpuPerRequest: median(runs.map((run) => run[side].serverCpuPerRequest!)) }
        : {}),
    });
    const ratios = runs.map((run) => run.subject.requests / Math.max(1, run.baseline.requests));
    const result: Compared = {
      name,
      connections,
      ratio: median(ratios),
      subject: pick('subject'),
      baseline: pick('baseline'),
      non2xx: runs.reduce((sum, run) => sum + run.subject.non2xx + run.baseline.non2xx, 0),
    };
    compared.push(result);
    console.log(`\n${name}: ${connections} connections, median of ${options.rounds} alternating ${options.seconds}s rounds (odd rounds Atrium first)`);
    report(result.subject, result.baseline);
    console.log(`${label}: ${result.ratio.toFixed(2)} (median of the rounds); Atrium p99/p50 ${tailRatio(result.subject)} (median of the rounds)`);
    console.log(`${label} per round: ${ratios.map((ratio) => ratio.toFixed(2)).join(' ')}`);
    const tails = (side: 'subject' | 'baseline') => runs.map((run) => tailRatio(run[side])).join(' ');
    console.log(`p99/p50 per round: Atrium ${tails('subject')}; ${baselineName} ${tails('baseline')}`);
    if (result.non2xx > 0) {
      console.log('SOME ANSWERS WERE NOT 2xx: the figures above do not count.');
      process.exitCode = 1;
    }
  }
  return compared;
}

/** p99 over p50 as printed. */
const tailRatio = (m: Measured) => m.tail.toFixed(1);

/** The TARGET lines of a bench, printed together at its end (`printTargets`). */
const targetLines: string[] = [];

/** Records one target: `TARGET <what> <figure>=<value> (target <op> <bound>) met|not met`. */
export function target(what: string, figure: string, value: number, op: '>=' | '<=' | '<' | '=', bound: number, digits = 2): void {
  const met = op === '>=' ? value >= bound : op === '<=' ? value <= bound : op === '<' ? value < bound : value === bound;
  targetLines.push(`TARGET ${what} ${figure}=${value.toFixed(digits)} (target ${op} ${bound}) ${met ? 'met' : 'not met'}`);
}

/** Records the tail target of `measured`: p99 at most `bound` × p50. */
export function tailTarget(what: string, measured: Measured, bound = 3): void {
  target(what, 'p99/p50', measured.tail, '<=', bound, 1);
}

/**
 * The usual targets of an endpoint's comparison: the throughput ratio at each number of
 * connections (>= `minRatio`), Atrium's p99 <= 3 x its p50 at 64 connections, no answer
 * other than 2xx on either side.
 */
export function endpointTargets(compared: Compared[], minRatio: number): void {
  for (const c of compared) target(`${c.name} @${c.connections}`, 'ratio', c.ratio, '>=', minRatio);
  for (const c of compared.filter((c) => c.connections === 64)) {
    tailTarget(`${c.name} @64`, c.subject);
  }
  target(
    compared[0]!.name,
    'non2xx',
    compared.reduce((sum, c) => sum + c.non2xx, 0),
    '=',
    0,
    0,
  );
}

/** Prints the recorded TARGET lines. */
export function printTargets(): void {
  console.log('');
  for (const line of targetLines) console.log(line);
}

/** A user row as the baselines read it: the user's columns, its role's and its language's name. */
export interface BaselineUserRow {
  id: string;
  username: string;
  first_name: string | null;
  last_name: string | null;
  lang_id: string | null;
  group_account: boolean;
  email: string | null;
  phone: string | null;
  street: string | null;
  zipcode: string | null;
  city: string | null;
  birthdate: string | null;
  gender: string | null;
  staff_number: string | null;
  entering_date: string | null;
  leaving_date: string | null;
  active: boolean;
  role_id: string;
  request_password_change: boolean;
  prevent_logout: boolean;
  wants_email_notifications: boolean;
  default_route: string | null;
  last_login_at: Date | null;
  created_at: Date | null;
  updated_at: Date | null;
  deleted_at: Date | null;
  role_name: string;
  role_active: boolean;
  role_permissions: string[];
  language_name: string | null;
}

const iso = (value: Date | null) => (value ? value.toISOString() : null);

/** A baseline's user record: the fields in the order Atrium presents them, with its default relations (no picture). */
export function presentBaselineUser(u: BaselineUserRow) {
  return {
    id: Number(u.id),
    username: u.username,
    first_name: u.first_name,
    last_name: u.last_name,
    full_name: [u.first_name, u.last_name].filter((part) => part !== null && part !== '').join(' '),
    lang_id: u.lang_id,
    group_account: u.group_account,
    profile_picture_url: null,
    email: u.email,
    phone: u.phone,
    street: u.street,
    zipcode: u.zipcode,
    city: u.city,
    birthdate: u.birthdate,
    gender: u.gender,
    staff_number: u.staff_number,
    entering_date: u.entering_date,
    leaving_date: u.leaving_date,
    active: u.active,
    role_id: Number(u.role_id),
    request_password_change: u.request_password_change,
    prevent_logout: u.prevent_logout,
    wants_email_notifications: u.wants_email_notifications,
    default_route: u.default_route,
    last_login_at: iso(u.last_login_at),
    created_at: iso(u.created_at),
    updated_at: iso(u.updated_at),
    deleted_at: iso(u.deleted_at),
    role: { id: Number(u.role_id), name: u.role_name, active: u.role_active, permissions: u.role_permissions },
    language: u.lang_id === null ? null : { id: u.lang_id, name: u.language_name },
  };
}
