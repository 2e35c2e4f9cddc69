/**
 * `npm test`: runs the tap suite against ONE PostgreSQL server for the whole run, each test
 * file on a database of its own copied from a migrated template (fast and isolated).
 *
 * - Without DATABASE_URL it starts an embedded PostgreSQL under the system temp folder and
 *   removes it afterwards; with DATABASE_URL it uses that server (the role must be allowed
 *   to create databases) and drops everything it created, the files' copies all together
 *   when the run ends (each `DROP DATABASE` makes the server write a checkpoint).
 * - The template holds the migrations and the job queue's schema and queues (pg-boss).
 * - Arguments are passed to tap (`npm test -- test/resources/users/users.test.ts`), a folder
 *   as the test files under it, but for
 *   `--tier=<tier>[,<tier>…]`, which runs the files of those tiers (docs/testing.md#tiers):
 *   `unit`, `database`, `http`, `process`. A file's tier is the most it starts (`tierOf`).
 *   Unit files alone need no PostgreSQL, and none is started for them (by tier or by name).
 * - The embedded cluster runs without durability (TEST_CLUSTER_SETTINGS): its data lives
 *   for one run.
 * - Running `npx tap <file>` directly still works: each file then creates its own database
 *   (see test/helpers/database.ts).
 * - Files share a few processes, which take them one after another from one queue
 *   (test/helpers/shared-process.ts, docs/testing.md#files-sharing-a-process); a file that
 *   says so, and each file of a run of a few, runs in a process of its own.
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
import { rmSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import postgres from 'postgres';
import { runCopies, TEST_CLUSTER_ENV, TEST_CLUSTER_SETTINGS, type TestCluster } from '../test/helpers/database.ts';

const TIERS = ['unit', 'database', 'http', 'process'] as const;
type Tier = (typeof TIERS)[number];

/**
 * The most a test file starts: programs as child processes (Atrium, the CLI, PgBouncer), a
 * whole Atrium in the test process (`startTestApi`), a database (`startTestDatabase`,
 * `createTestDatabase`), or nothing (rules and mechanisms on their own).
 */
function tierOf(source: string): Tier {
  if (/from 'node:child_process'/.test(source)) return 'process';
  if (/\bstartTestApi\(/.test(source)) return 'http';
  if (/\b(startTestDatabase|createTestDatabase|startEmbeddedPostgres)\(/.test(source)) return 'database';
  return 'unit';
}

async function testFiles(folder = 'test'): Promise<string[]> {
  const entries = await readdir(folder, { withFileTypes: true, recursive: true });
  return entries
    .filter((entry) => entry.isFile() && entry.name.endsWith('.test.ts'))
    .map((entry) => path.join(entry.parentPath, entry.name))
    .sort();
}

/** Whether `args` name test files, and only files of the unit tier: such a run needs no PostgreSQL. */
async function unitFilesOnly(args: string[]): Promise<boolean> {
  const files = args.filter((arg) => !arg.startsWith('-'));
  if (files.length === 0) return false;
  for (const file of files) {
    const source = await readFile(file, 'utf8').catch(() => null);
    if (source === null || tierOf(source) !== 'unit') return false;
  }
  return true;
}

/**
 * tap's arguments, with a folder replaced by its test files (tap finds none in a folder:
 * without its TypeScript plugin it does not take `.ts` files for tests) and `--tier=…` by
 * the files of those tiers.
 */
async function tapArguments(given: string[]): Promise<{ args: string[]; needsDatabase: boolean }> {
  const args: string[] = [];
  for (const arg of given) {
    const folder = !arg.startsWith('-') && (await stat(arg).catch(() => null))?.isDirectory();
    args.push(...(folder ? await testFiles(arg) : [arg]));
  }
  const option = args.find((arg) => arg.startsWith('--tier='));
  if (!option) return { args, needsDatabase: !(await unitFilesOnly(args)) };
  const wanted = option.slice('--tier='.length).split(',');
  const unknown = wanted.filter((tier) => !(TIERS as readonly string[]).includes(tier));
  if (unknown.length > 0) {
    process.stderr.write(`npm test: unknown tier ${unknown.join(', ')}; the tiers are ${TIERS.join(', ')}\n`);
    process.exit(2);
  }
  const files: string[] = [];
  for (const file of await testFiles()) {
    if (wanted.includes(tierOf(await readFile(file, 'utf8')))) files.push(file);
  }
  return { args: [...args.filter((arg) => arg !== option), ...files], needsDatabase: wanted.some((tier) => tier !== 'unit') };
}

/** A file that needs a process to itself says so in a comment of this form (docs/testing.md#files-sharing-a-process). */
const OWN_PROCESS = /^\/\/ This file runs in a process of its own\b/m;

/**
 * `args` with the files that may share a process (all but those that say OWN_PROCESS) given
 * to `processes` processes instead, which take them one at a time from one queue
 * (test/helpers/shared-process.ts): loading Node, tsx and Atrium's modules for each file took
 * most of a small file's time, and a queue lets the processes end together whatever the
 * files' lengths. The queue puts the longest files first, as far as their sizes tell: the
 * process tier's (which wait on the programs they start), then the others, each by size. A
 * run of few files runs each in a process of its own. The queue and the entry file of each
 * process are written to `folder`.
 */
async function sharingProcesses(given: string[], processes: number, folder: string): Promise<string[]> {
  // No file named: every test file (tap would find them by its `include`).
  const args = given.some((arg) => !arg.startsWith('-')) ? given : [...given, ...(await testFiles())];
  const queue: { file: string; processTier: boolean; size: number }[] = [];
  for (const file of args.filter((arg) => !arg.startsWith('-'))) {
    const source = await readFile(file, 'utf8').catch(() => null);
    if (source !== null && !OWN_PROCESS.test(source)) queue.push({ file, processTier: tierOf(source) === 'process', size: source.length });
  }
  if (queue.length < 2 * processes) return given;
  queue.sort((a, b) => Number(b.processTier) - Number(a.processTier) || b.size - a.size);
  await mkdir(folder, { recursive: true });
  const queueFile = path.join(folder, 'queue.json');
  await writeFile(queueFile, JSON.stringify(queue.map((entry) => entry.file)));
  const runner = pathToFileURL(path.resolve('test/helpers/shared-process.ts')).href;
  const entries: string[] = [];
  for (let index = 0; index < processes; index++) {
    const entry = path.join(folder, `shared-${index + 1}.test.mjs`);
    await writeFile(entry, `import { runQueue } from ${JSON.stringify(runner)};\nawait runQueue(${JSON.stringify(queueFile)});\n`);
    entries.push(entry);
  }
  const queued = new Set(queue.map((entry) => entry.file));
  return [...args.filter((arg) => !queued.has(arg)), ...entries];
}

const tap = await tapArguments(process.argv.slice(2));
// tap's configuration (read below) parses this process's arguments too: it knows no `--tier`.
process.argv.splice(2, Infinity, ...tap.args);
const tapRunner = path.resolve('node_modules/tap/dist/esm/run.mjs');
const jobCount = Math.max(2, os.availableParallelism() * 2);
const jobs = `--jobs=${jobCount}`;
// tap starts files in the order of their paths: tmp/ after test/. So a file that needs a
// process of its own starts first, and the shared processes take the places as those end.
const sharesFolder = path.resolve('tmp', `test-shares-${process.pid}`);
const places = Number(
  tap.args
    .filter((arg) => arg.startsWith('--jobs='))
    .at(-1)
    ?.slice('--jobs='.length) ?? jobCount,
);
tap.args = await sharingProcesses(tap.args, places, sharesFolder);
process.on('exit', () => rmSync(sharesFolder, { recursive: true, force: true }));
const runNode = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  new Promise<number>((resolve) => {
    const child = spawn(process.execPath, args, { stdio: 'inherit', env });
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });

const { TapConfig } = await import('@tapjs/config');
const { signature } = await import('@tapjs/test');
if ((await TapConfig.load()).pluginSignature !== signature) await runNode([tapRunner, 'build']);
if (!tap.needsDatabase) process.exit(await runNode([tapRunner, jobs, ...tap.args], { ...process.env, DATABASE_URL: undefined }));

const { Database } = await import('../src/platform/database/database.ts');
const { startEmbeddedPostgres } = await import('../src/platform/database/embedded.ts');
const { jobDefinitions } = await import('../src/jobs.ts');
const { Jobs } = await import('../src/platform/jobs/jobs.ts');

const { CITUS_ENV, citusNodes, createCitusTemplate, dropCitusDatabase } = await import('../test/helpers/citus.ts');
// On a Citus cluster (docs/scaling.md#the-test-suite-on-citus) the template spans the coordinator and its workers.
const citus = process.env[CITUS_ENV] || undefined;
const nodes = citus ? await citusNodes(citus) : undefined;
const external = nodes?.[0] ?? (process.env.DATABASE_URL || undefined);
const dataDir = path.join(os.tmpdir(), `atrium-test-cluster-${process.pid}-${randomBytes(4).toString('hex')}`);
const server = external
  ? { url: external, appPassword: undefined, stop: async () => {} }
  : await startEmbeddedPostgres(dataDir, { settings: TEST_CLUSTER_SETTINGS });

const template = `atrium_template_${process.pid}_${randomBytes(4).toString('hex')}`;
const admin = postgres(server.url, { max: 1, onnotice: () => {} });

async function cleanUp(): Promise<void> {
  if (nodes) await dropCitusDatabase(nodes, template).catch(() => {});
  if (external && !nodes) await dropRunCopies().catch(() => {});
  await admin.unsafe(`drop database if exists "${template}" with (force)`).catch(() => {});
  await admin.end({ timeout: 5 });
  await server.stop();
  if (!external) await rm(dataDir, { recursive: true, force: true });
}

/**
 * Drops the databases the run's files copied from the template, several at once: drops
 * that wait together share the checkpoint each asks for. (The embedded cluster is removed
 * whole instead.)
 */
async function dropRunCopies(): Promise<void> {
  const copies = await admin<{ datname: string }[]>`select datname from pg_database where datname like ${runCopies(template)}`;
  const dropper = postgres(server.url, { max: 8, onnotice: () => {} });
  try {
    await Promise.all(copies.map(({ datname }) => dropper.unsafe(`drop database if exists "${datname}" with (force)`)));
  } finally {
    await dropper.end({ timeout: 5 });
  }
}

let status: number;
try {
  let cluster: TestCluster;
  if (nodes) {
    const appPassword = randomBytes(12).toString('hex');
    await createCitusTemplate(nodes, template, appPassword, (url) => Jobs.install(url, jobDefinitions));
    cluster = { url: server.url, template, appPassword, citusNodes: nodes };
  } else {
    await admin.unsafe(`create database "${template}"`);
    const templateUrl = new URL(server.url);
    templateUrl.pathname = `/${template}`;
    const db = new Database(templateUrl.toString());
    try {
      await db.migrate();
    } finally {
      await db.close();
    }
    // The job queue's schema and queues too: a test process then starts pg-boss on them as is.
    await Jobs.install(templateUrl.toString(), jobDefinitions);
    // The embedded server's application role logs in itself, as `npm start` sets it up.
    if (server.appPassword) await admin.unsafe(`alter role atrium_app with login password '${server.appPassword}'`);
    cluster = { url: server.url, template, appPassword: server.appPassword };
  }
  status = await runNode([tapRunner, jobs, ...tap.args], { ...process.env, DATABASE_URL: undefined, [TEST_CLUSTER_ENV]: JSON.stringify(cluster) });
} finally {
  await cleanUp();
}
process.exit(status);
