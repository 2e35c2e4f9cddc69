/** Shared set-up for benchmarks: a throwaway database and a running Atrium on it. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pino from 'pino';
import postgres from 'postgres';
import { loadConfig } from '../../src/config.ts';
import { toleratingConnectionLoss } from '../../src/platform/database/connection-loss.ts';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';
import type { createAtrium as createAtriumFromSource } from '../../src/server.ts';

export async function throwawayDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const name = `atrium_bench_${randomBytes(4).toString('hex')}`;
    const admin = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database "${name}"`);
    const url = new URL(process.env.DATABASE_URL);
    url.pathname = `/${name}`;
    return {
      url: url.toString(),
      drop: async () => {
        await admin.unsafe(`drop database "${name}" with (force)`);
        await admin.end();
      },
    };
  }
  const dir = path.join(os.tmpdir(), `atrium-bench-${randomBytes(4).toString('hex')}`);
  const server = await startEmbeddedPostgres(dir);
  return {
    url: server.url,
    drop: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Atrium on `url` as an API process, from the source or, with BENCH_COMPILED=1, from the
 * compiled output (dist/; `npm run build` first) as `npm start` runs it.
 */
export async function benchAtrium(url: string) {
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
    // No rate limit: a benchmark's one token would otherwise be answered 429 after 600 requests.
    {
      ...loadConfig({ DATABASE_POOL_SIZE: process.env.DATABASE_POOL_SIZE }),
      databaseUrl: url,
      logLevel: 'silent',
      adminPassword: 'benchmark-password',
      role: 'api',
      rateLimitPerToken: 0,
      rateLimitPerAddress: 0,
    },
    { logger: pino({ level: 'silent' }) },
  );
}

export interface Measured {
  name: string;
  requests: number;
  p50: number;
  p99: number;
  non2xx: number;
  /**
   * CPU time of this process per answered request, in ms (autocannon's share included,
   * the same on both sides): steadier than throughput on a machine others load too.
   */
  cpuPerRequest: number;
}

/**
 * Worker threads that generate the load (BENCH_WORKERS, default 1; 0 runs autocannon on the
 * server's own event loop). On that loop the client's work lands between the server's and
 * stretches the measured tail: p99 at 64 connections read twice what the server spends.
 */
const loadWorkers = Number(process.env.BENCH_WORKERS ?? 1);

export async function measure(name: string, url: string, headers: Record<string, string>, seconds: number, connections = 10): Promise<Measured> {
  const cpu = process.cpuUsage();
  const result = await autocannon({ url, headers, duration: seconds, connections, ...(loadWorkers > 0 ? { workers: loadWorkers } : {}) });
  const used = process.cpuUsage(cpu);
  const answered = Math.max(1, result.requests.total);
  return {
    name,
    requests: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    cpuPerRequest: (used.user + used.system) / 1000 / answered,
  };
}

export function report(subject: Measured, baseline: Measured): void {
  const row = (m: Measured) =>
    `${m.name.padEnd(52)} ${m.requests.toFixed(0).padStart(8)} req/s   p50 ${String(m.p50).padStart(4)} ms   p99 ${String(m.p99).padStart(4)} ms   ` +
    `node ${m.cpuPerRequest.toFixed(2)} ms/req   non-2xx ${m.non2xx}`;
  console.log(row(subject));
  console.log(row(baseline));
  console.log(
    `ratio (Atrium / baseline throughput): ${(subject.requests / baseline.requests).toFixed(2)}; Atrium p99/p50 ${(subject.p99 / subject.p50).toFixed(1)}`,
  );
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

/**
 * Atrium and its baseline measured in alternating slices (`rounds` each, so both meet the
 * same load from the other agents of a shared machine) at each number of connections;
 * prints the median of the rounds, both sides and the throughput ratio.
 */
export async function comparePair(
  name: string,
  subject: { url: string; headers: Record<string, string> },
  baseline: { url: string; headers: Record<string, string> },
  options: { seconds: number; rounds: number; connections: number[] },
): Promise<void> {
  for (const connections of options.connections) {
    const runs: { subject: Measured; baseline: Measured }[] = [];
    // Warm-up: connections opened, statements prepared, code optimised on both sides (a
    // second at ~300 requests a second left Atrium's first round visibly slower than its later ones).
    await measure('warm-up', baseline.url, baseline.headers, WARM_UP_SECONDS, connections);
    await measure('warm-up', subject.url, subject.headers, WARM_UP_SECONDS, connections);
    for (let round = 0; round < options.rounds; round++) {
      const b = await measure(`baseline ${name}`, baseline.url, baseline.headers, options.seconds, connections);
      const s = await measure(`Atrium   ${name}`, subject.url, subject.headers, options.seconds, connections);
      runs.push({ subject: s, baseline: b });
    }
    const pick = (side: 'subject' | 'baseline'): Measured => ({
      name: runs[0]![side].name,
      requests: median(runs.map((run) => run[side].requests)),
      p50: median(runs.map((run) => run[side].p50)),
      p99: median(runs.map((run) => run[side].p99)),
      non2xx: runs.reduce((sum, run) => sum + run[side].non2xx, 0),
      cpuPerRequest: median(runs.map((run) => run[side].cpuPerRequest)),
    });
    console.log(`\n${name}: ${connections} connections, median of ${options.rounds} alternating ${options.seconds}s rounds`);
    report(pick('subject'), pick('baseline'));
    console.log(`ratios per round: ${runs.map((run) => (run.subject.requests / run.baseline.requests).toFixed(2)).join(' ')}`);
    const tails = (side: 'subject' | 'baseline') => runs.map((run) => (run[side].p99 / Math.max(1, run[side].p50)).toFixed(1)).join(' ');
    console.log(`p99/p50 per round: Atrium ${tails('subject')}; baseline ${tails('baseline')}`);
    const failed = runs.some((run) => run.subject.non2xx > 0 || run.baseline.non2xx > 0);
    if (failed) {
      console.log('SOME ANSWERS WERE NOT 2xx: the figures above do not count.');
      process.exitCode = 1;
    }
  }
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
