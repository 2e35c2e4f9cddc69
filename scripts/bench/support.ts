/** Shared set-up for benchmarks: a throwaway database and a running Atrium on it. */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import pino from 'pino';
import postgres from 'postgres';
import { loadConfig } from '../../src/config.ts';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';
import { createAtrium } from '../../src/server.ts';

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

export async function benchAtrium(url: string) {
  return createAtrium(
    { ...loadConfig({}), databaseUrl: url, logLevel: 'silent', adminPassword: 'benchmark-password', role: 'api' },
    { logger: pino({ level: 'silent' }) },
  );
}

export interface Measured {
  name: string;
  requests: number;
  p50: number;
  p99: number;
  non2xx: number;
}

export async function measure(name: string, url: string, headers: Record<string, string>, seconds: number, connections = 10): Promise<Measured> {
  const result = await autocannon({ url, headers, duration: seconds, connections });
  return { name, requests: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, non2xx: result.non2xx };
}

export function report(subject: Measured, baseline: Measured): void {
  const row = (m: Measured) =>
    `${m.name.padEnd(44)} ${m.requests.toFixed(0).padStart(8)} req/s   p50 ${String(m.p50).padStart(4)} ms   p99 ${String(m.p99).padStart(4)} ms   non-2xx ${m.non2xx}`;
  console.log(row(subject));
  console.log(row(baseline));
  console.log(`ratio (Atrium / baseline throughput): ${(subject.requests / baseline.requests).toFixed(2)}`);
}
