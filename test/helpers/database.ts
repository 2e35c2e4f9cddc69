/**
 * One isolated PostgreSQL database per test file, so tap can run files in parallel:
 * with DATABASE_URL, a fresh database on that server (dropped afterwards); without it, a
 * fresh embedded cluster under os.tmpdir() (stopped and removed afterwards).
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';

export interface TestDatabase {
  url: string;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const external = process.env.DATABASE_URL;
  if (external) {
    const name = `atrium_test_${process.pid}_${randomBytes(4).toString('hex')}`;
    const admin = postgres(external, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database "${name}"`);
    const url = new URL(external);
    url.pathname = `/${name}`;
    return {
      url: url.toString(),
      async drop() {
        await admin.unsafe(`drop database if exists "${name}" with (force)`);
        await admin.end({ timeout: 5 });
      },
    };
  }
  const dataDir = path.join(os.tmpdir(), `atrium-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  const server = await startEmbeddedPostgres(dataDir);
  return {
    url: server.url,
    async drop() {
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
