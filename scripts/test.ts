/**
 * `npm test`: runs the tap suite against ONE PostgreSQL server for the whole run, each test
 * file on a database of its own copied from a migrated template (fast and isolated).
 *
 * - Without DATABASE_URL it starts an embedded PostgreSQL under the system temp folder and
 *   removes it afterwards; with DATABASE_URL it uses that server (the role must be allowed
 *   to create databases) and drops everything it created.
 * - Arguments are passed to tap (`npm test -- test/resources/users/users.test.ts`).
 * - The embedded cluster runs without durability (TEST_CLUSTER_SETTINGS): its data lives
 *   for one run.
 * - Running `npx tap <file>` directly still works: each file then creates its own database
 *   (see test/helpers/database.ts).
 * - Files run several at a time: twice as many as the machine has cores (tap's own default
 *   leaves a core free, which on a two-core machine means one file at a time), because a test
 *   file mostly waits for PostgreSQL, child processes and background jobs. `--jobs=N` overrides.
 * - tap builds its test class for the plugins package.json configures; right after an install
 *   that build is missing, and tap would start every file of this run with the default plugins'
 *   loaders (the TypeScript one among them: hundreds of milliseconds per file). So the build
 *   happens first, once, when needed.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { Database } from '../src/platform/database/database.ts';
import { startEmbeddedPostgres } from '../src/platform/database/embedded.ts';
import { TEST_CLUSTER_ENV, TEST_CLUSTER_SETTINGS, type TestCluster } from '../test/helpers/database.ts';

const external = process.env.DATABASE_URL || undefined;
const dataDir = path.join(os.tmpdir(), `atrium-test-cluster-${process.pid}-${randomBytes(4).toString('hex')}`);
const server = external
  ? { url: external, appPassword: undefined, stop: async () => {} }
  : await startEmbeddedPostgres(dataDir, { settings: TEST_CLUSTER_SETTINGS });

const template = `atrium_template_${process.pid}_${randomBytes(4).toString('hex')}`;
const admin = postgres(server.url, { max: 1, onnotice: () => {} });

async function cleanUp(): Promise<void> {
  await admin.unsafe(`drop database if exists "${template}" with (force)`).catch(() => {});
  await admin.end({ timeout: 5 });
  await server.stop();
  if (!external) await rm(dataDir, { recursive: true, force: true });
}

const tapRunner = path.resolve('node_modules/tap/dist/esm/run.mjs');
const runNode = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  new Promise<number>((resolve) => {
    const child = spawn(process.execPath, args, { stdio: 'inherit', env });
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });

const { TapConfig } = await import('@tapjs/config');
const { signature } = await import('@tapjs/test');
if ((await TapConfig.load()).pluginSignature !== signature) await runNode([tapRunner, 'build']);

let status: number;
try {
  await admin.unsafe(`create database "${template}"`);
  const templateUrl = new URL(server.url);
  templateUrl.pathname = `/${template}`;
  const db = new Database(templateUrl.toString());
  try {
    await db.migrate();
  } finally {
    await db.close();
  }
  // The embedded server's application role logs in itself, as `npm start` sets it up.
  if (server.appPassword) await admin.unsafe(`alter role atrium_app with login password '${server.appPassword}'`);
  const cluster: TestCluster = { url: server.url, template, appPassword: server.appPassword };
  const jobs = `--jobs=${Math.max(2, os.availableParallelism() * 2)}`;
  status = await runNode([tapRunner, jobs, ...process.argv.slice(2)], { ...process.env, DATABASE_URL: undefined, [TEST_CLUSTER_ENV]: JSON.stringify(cluster) });
} finally {
  await cleanUp();
}
process.exit(status);
