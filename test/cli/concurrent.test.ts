/**
 * Two commands at once on the embedded PostgreSQL: the one that started the server stops it
 * when its work is done, so another command, or a server, refuses to borrow it, with one
 * line saying so, rather than lose it half-way (docs/running.md). Processes started at the
 * same moment on an empty DATA_DIR take turns: one creates the cluster and starts it, the
 * others then find it made and running.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';
import { startAtriumProcess, startNodeProcess, type AtriumProcess } from '../helpers/processes.ts';

t.setTimeout(300_000);

const root = path.resolve(import.meta.dirname, '../..');
const dataDir = path.join(os.tmpdir(), `atrium-cli-concurrent-${randomBytes(4).toString('hex')}`);
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

type Command = AtriumProcess;

/** `atrium args…` on the test's data folder (or `folder`), on the embedded PostgreSQL. */
function atrium(t: Test, args: string[], folder = dataDir): Command {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: folder, LOG_LEVEL: 'debug' };
  delete env.DATABASE_URL;
  delete env.ATRIUM_APP_DATABASE_URL;
  return startNodeProcess(t, [path.join(root, 'bin/atrium.js'), ...args], env, { stop: 'SIGKILL', stdin: 'pipe' });
}

async function until(command: Command, text: string): Promise<void> {
  while (!command.output().includes(text)) {
    if (command.child.exitCode !== null) throw new Error(`the command exited:\n${command.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('a command or a server started while a command runs the embedded PostgreSQL refuses, and changes nothing; the first goes on', async (t) => {
  const migrate = atrium(t, ['migrate']);
  t.equal(await migrate.exited, 0, 'the data folder and the demo tenant are there');

  // It waits for the password on standard input once its database is open: a command in progress.
  const setPassword = ['user:set-password', '--tenant', 'demo', '--username', 'admin'];
  const first = atrium(t, setPassword);
  await until(first, 'database system is ready to accept connections');
  // A server started meanwhile would lose its database when the command ends: it refuses too.
  const server = startAtriumProcess(t, { config: {} }, { DATA_DIR: dataDir, PORT: '0' });
  t.not(await server.exited, 0, 'a server does not start on it');
  t.match(
    server.output(),
    new RegExp(`another command \\(pid ${first.child.pid}\\) runs the embedded PostgreSQL of .*: start once it has ended`),
    'saying why',
  );
  const second = atrium(t, setPassword);
  second.child.stdin!.end('second-new-password\n');
  t.not(await second.exited, 0, 'the second command fails');
  const lines = second
    .output()
    .split('\n')
    .filter((line) => line.startsWith('atrium:'));
  t.match(
    lines.join('\n'),
    new RegExp(`another command \\(pid ${first.child.pid}\\) runs the embedded PostgreSQL of .* run one command at a time`),
    'saying why',
  );
  t.notMatch(second.output(), /password of admin in tenant demo set/, 'having set nothing');

  first.child.stdin!.end('first-new-password\n');
  t.equal(await first.exited, 0, 'the first command is done, on the server it started');
  t.match(first.output(), /password of admin in tenant demo set/);
});

/** An empty DATA_DIR of its own, removed when `t` ends. */
function emptyDataDir(t: Test): string {
  const folder = path.join(os.tmpdir(), `atrium-concurrent-first-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(folder, { recursive: true, force: true }));
  return folder;
}

/** A server started on `folder`: 'serves' once it listens, or its exit status if it exits first. */
function serverOn(t: Test, folder: string): { server: Command; outcome: Promise<'serves' | number | null> } {
  const server = startAtriumProcess(t, { config: {} }, { DATA_DIR: folder, PORT: '0', LOG_LEVEL: 'info' });
  const outcome = new Promise<'serves' | number | null>((resolve) => {
    const timer = setInterval(() => {
      if (server.output().includes('Server listening')) resolve('serves');
    }, 50);
    void server.exited.then((status) => resolve(server.output().includes('Server listening') ? 'serves' : status)).finally(() => clearInterval(timer));
  });
  return { server, outcome };
}

/**
 * What the starts leave in `folder` once every process has ended: no owner, no running
 * server, nothing of initdb (the start lock's file stays, held by nobody: the start below
 * takes it); and its superuser password file is the one its cluster takes, so that a
 * further start works.
 */
async function leftIntact(t: Test, folder: string): Promise<void> {
  t.strictSame(
    readdirSync(folder).filter((name) => /initdb|owner/.test(name)),
    [],
    'no owner or initdb file is left',
  );
  t.notOk(existsSync(path.join(folder, 'pgdata', 'postmaster.pid')), 'no server runs on it');
  // The start connects with the file's password (`url`).
  const next = await startEmbeddedPostgres(folder);
  const sql = postgres(next.url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql<{ user: string }[]>`select current_user as user`;
    t.equal(row?.user, 'postgres', 'the cluster takes the superuser password of the file');
  } finally {
    await sql.end({ timeout: 1 });
    await next.stop();
  }
}

t.test('two servers started at once on an empty DATA_DIR: one creates the cluster and serves, the other refuses in one line', async (t) => {
  const folder = emptyDataDir(t);
  const first = serverOn(t, folder);
  const second = serverOn(t, folder);
  const outcomes = await Promise.all([first.outcome, second.outcome]);
  const serving = outcomes.indexOf('serves');
  t.equal(outcomes.filter((outcome) => outcome === 'serves').length, 1, 'one serves', { output: [first.server.output(), second.server.output()] });
  if (serving === -1) return;
  const [server, other] = serving === 0 ? [first.server, second.server] : [second.server, first.server];
  t.equal(outcomes[1 - serving], 1, 'the other exits with status 1');
  t.match(
    other.output(),
    new RegExp(`atrium: could not start: the embedded PostgreSQL of .* is run by another Atrium \\(pid ${server.child.pid}\\)`),
    'saying why',
  );
  server.child.kill('SIGTERM');
  t.equal(await server.exited, 0, 'the server stops');
  await leftIntact(t, folder);
});

t.test('a server and a command started at once on an empty DATA_DIR: the command is done, the server serves or refuses in one line', async (t) => {
  const folder = emptyDataDir(t);
  const { server, outcome } = serverOn(t, folder);
  const migrate = atrium(t, ['migrate'], folder);
  t.equal(await migrate.exited, 0, 'the command is done', { output: migrate.output() });
  const served = await outcome;
  // The one that came first started the cluster: a server borrowed by the command serves on; a server that found the command's refuses.
  if (served === 'serves') {
    server.child.kill('SIGTERM');
    t.equal(await server.exited, 0, 'the server stops');
  } else {
    t.equal(served, 1, 'the server exits with status 1', { output: server.output() });
    t.match(
      server.output(),
      new RegExp(`another command \\(pid ${migrate.child.pid}\\) runs the embedded PostgreSQL of .*: start once it has ended`),
      'saying why',
    );
  }
  await leftIntact(t, folder);
});

t.test('a server whose start waits for another start says so in a warning, then serves once the other is done', async (t) => {
  const folder = emptyDataDir(t);
  mkdirSync(folder, { mode: 0o711 });
  // Another process holds the start lock, as a start in its turn does.
  const holder = spawn(
    process.execPath,
    [
      '-e',
      `require('fs-native-extensions').tryLock(require('fs').openSync(${JSON.stringify(path.join(folder, 'start.lock'))}, 'a')); console.log('held'); setInterval(() => {}, 1000)`,
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  t.teardown(() => holder.kill('SIGKILL'));
  await new Promise((resolve) => holder.stdout.once('data', resolve));
  const server = startAtriumProcess(t, { config: {} }, { DATA_DIR: folder, PORT: '0', LOG_LEVEL: 'info' });
  await until(server, 'waiting for it');
  t.match(
    server.output(),
    /"level":40.*another start is starting the embedded PostgreSQL of .*; waiting for it \(up to 120 s\)/,
    'a warning says why it waits',
  );
  t.notMatch(server.output(), /Server listening/, 'and it does not serve yet');
  holder.kill('SIGKILL');
  await until(server, 'Server listening');
  server.child.kill('SIGTERM');
  t.equal(await server.exited, 0, 'the server stops');
});
