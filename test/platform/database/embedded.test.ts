/**
 * The embedded PostgreSQL (src/platform/database/embedded.ts) starts on another port when
 * the port it chose was taken before the server bound it: a free port is only free until
 * another process (a parallel test, any outgoing connection) takes it. A server in a
 * session of its own is stopped by its owner, however the owner ends, or by the next
 * process that finds it without one.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { freePort, startEmbeddedPostgres } from '../../../src/platform/database/embedded.ts';
import { eventually } from '../../helpers/eventually.ts';
import { alive, postmasterOf, startAtriumProcess } from '../../helpers/processes.ts';

// Embedded PostgreSQL servers initialised, started and stopped: 50 s here, more on a slower machine than tap's 120 s allow.
t.setTimeout(300_000);

const root = path.resolve(import.meta.dirname, '../../..');

t.test('a DATA_DIR that cannot be a folder is refused in one sentence naming it, before anything starts', async (t) => {
  const file = path.join(os.tmpdir(), `atrium-not-a-folder-${randomBytes(4).toString('hex')}`);
  writeFileSync(file, '');
  t.teardown(() => rm(file, { force: true }));
  for (const dataDir of [file, path.join(file, 'data')]) {
    await t.rejects(startEmbeddedPostgres(dataDir), {
      message: `The embedded PostgreSQL's folder ${dataDir} (DATA_DIR) cannot be created: a file is in the way. Set DATA_DIR to a folder this user may create, or DATABASE_URL to use an existing PostgreSQL server.`,
    });
  }
});

t.test(
  'a DATA_DIR in a folder that takes no new folder (/proc) stops the start in one line, at once',
  { skip: !existsSync('/proc/self') && 'no /proc on this system' },
  async (t) => {
    // Node's recursive mkdir asks for /proc/atrium-… (ENOENT), then for /proc (EEXIST), then again, for ever.
    const dataDir = `/proc/atrium-${randomBytes(4).toString('hex')}`;
    const atrium = startAtriumProcess(t, { config: {} }, { DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'silent' });
    let timer: NodeJS.Timeout | undefined;
    const ended = await Promise.race([atrium.exited, new Promise<'running'>((resolve) => (timer = setTimeout(() => resolve('running'), 60_000)))]);
    clearTimeout(timer);
    // A start still under way would wait for the mkdir before acting on SIGTERM.
    if (ended === 'running') atrium.child.kill('SIGKILL');
    t.equal(ended, 1, `the start ends with status 1: ${atrium.output()}`);
    t.equal(
      atrium.output(),
      `atrium: could not start: The embedded PostgreSQL's folder ${dataDir} (DATA_DIR) cannot be created: the folder above it takes no new folder. ` +
        'Set DATA_DIR to a folder this user may create, or DATABASE_URL to use an existing PostgreSQL server.\n',
    );
  },
);

t.test('initdb failing is one line saying why, not its whole output', async (t) => {
  // A data folder with something in it but no cluster: initdb refuses it (as it stops, quoting its SQL, on a Ctrl-C).
  const dataDir = path.join(os.tmpdir(), `atrium-initdb-${randomBytes(4).toString('hex')}`);
  mkdirSync(path.join(dataDir, 'pgdata'), { recursive: true });
  writeFileSync(path.join(dataDir, 'pgdata', 'stray'), '');
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const failed = await startEmbeddedPostgres(dataDir).then(
    () => null,
    (error: Error) => error,
  );
  t.match(failed?.message, /^creating the embedded PostgreSQL's data folder \(initdb\) failed: .*\bexists but is not empty/);
  t.notMatch(failed?.message, /\n/, 'one line');
});

t.test('a port taken between its choice and the start: the server starts on the next one chosen, with the settings asked for', async (t) => {
  // A folder of its own that startEmbeddedPostgres creates (it makes it traversable for the postgres user).
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // A real listener on the first port offered.
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const taken = (holder.address() as net.AddressInfo).port;

  const offered: number[] = [];
  const lines: string[] = [];
  const server = await startEmbeddedPostgres(dataDir, {
    log: (line) => lines.push(line),
    choosePort: async () => {
      const port = offered.length === 0 ? taken : await freePort();
      offered.push(port);
      return port;
    },
    settings: { fsync: 'off', synchronous_commit: 'off' },
  });
  t.teardown(() => server.stop());

  t.equal(offered.length, 2, 'a second port was chosen');
  t.equal(new URL(server.url).port, String(offered[1]), 'the server listens on the second');
  t.ok(
    lines.some((line) => line.includes(`port ${taken} was taken`)),
    'the retry is logged',
  );
  const sql = postgres(server.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end());
  const [row] = await sql<{ answer: number }[]>`select 42 as answer`;
  t.equal(row!.answer, 42, 'and answers');
  const [durability] = await sql<{ fsync: string; commit: string }[]>`
    select current_setting('fsync') as fsync, current_setting('synchronous_commit') as commit`;
  t.strictSame({ ...durability }, { fsync: 'off', commit: 'off' }, 'the settings asked for are in force');
});

t.test('a postmaster whose owner is gone is taken over and stopped; a living owner keeps it', async (t) => {
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-owner-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const first = await startEmbeddedPostgres(dataDir, { ownSession: true });
  t.teardown(() => first.stop());
  const { pid } = postmasterOf(dataDir);
  t.equal(readFileSync(path.join(dataDir, 'postmaster.owner'), 'utf8'), String(process.pid), 'the starter owns it');

  // Another process owns it, and lives: a second start uses it and leaves it running.
  const owner = spawn('sleep', ['60']);
  t.teardown(() => owner.kill());
  writeFileSync(path.join(dataDir, 'postmaster.owner'), String(owner.pid));
  const guest = await startEmbeddedPostgres(dataDir, { ownSession: true });
  t.equal(guest.url, first.url, 'the running server is used');
  await guest.stop();
  t.ok(alive(pid), 'and left running for its owner');

  // Its owner was killed (as `tsx watch` kills a process slow to stop): the next start takes it over.
  owner.kill('SIGKILL');
  await new Promise((resolve) => owner.once('exit', resolve));
  const heir = await startEmbeddedPostgres(dataDir, { ownSession: true });
  t.equal(heir.url, first.url);
  t.equal(readFileSync(path.join(dataDir, 'postmaster.owner'), 'utf8'), String(process.pid), 'taken over');
  await heir.stop();
  t.notOk(alive(pid), 'and stopped');
  t.notOk(existsSync(path.join(dataDir, 'postmaster.owner')), 'ownership ends with it');
});

t.test('a start waits while another process holds the start lock, and goes on once that process is killed; a file left over blocks nothing', async (t) => {
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-turn-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  mkdirSync(dataDir, { mode: 0o711 });
  const lock = path.join(dataDir, 'start.lock');

  // What an earlier start left, whatever it holds and however old: nobody holds its lock.
  writeFileSync(lock, '12345');
  utimesSync(lock, new Date(Date.now() - 86_400_000), new Date(Date.now() - 86_400_000));
  // Run as root (`sudo npx atrium …`) in a data dir another user owns, a start leaves the file to that user, whose starts lock it too.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) chownSync(dataDir, 4242, 4242);
  const first = await startEmbeddedPostgres(dataDir, { ownSession: true });
  await first.stop();
  if (asRoot) t.equal(statSync(lock).uid, 4242, "the file is the data dir owner's");

  // Another process holds the lock, as a start in its turn does, and is then killed.
  const holder = spawn(
    process.execPath,
    ['-e', `require('fs-native-extensions').tryLock(require('fs').openSync(${JSON.stringify(lock)}, 'a')); console.log('held'); setInterval(() => {}, 1000)`],
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  t.teardown(() => holder.kill('SIGKILL'));
  await new Promise((resolve) => holder.stdout.once('data', resolve));
  const notices: string[] = [];
  let started = false;
  const next = startEmbeddedPostgres(dataDir, { ownSession: true, notice: (line) => notices.push(line) }).then((server) => ((started = true), server));
  const waiting = await eventually(
    async () => notices.some((line) => line.startsWith('another start is starting the embedded PostgreSQL')),
    (seen) => seen,
  );
  t.ok(waiting, 'the start tells the operator it waits', { notices });
  t.notOk(started, 'and has not started');
  holder.kill('SIGKILL');
  const server = await next;
  t.ok(started, 'started once the holder was killed: the kernel let go of its lock');
  await server.stop();
});

t.test('an owner that exits without stopping its postmaster stops it on the way out', async (t) => {
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-exit-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const embedded = path.resolve(import.meta.dirname, '../../../src/platform/database/embedded.ts');
  // A process that starts it in a session of its own, says its pid, then exits at once (as a forced stop does).
  const script = [
    `import { readFileSync } from 'node:fs';`,
    `import { startEmbeddedPostgres } from ${JSON.stringify(embedded)};`,
    `await startEmbeddedPostgres(${JSON.stringify(dataDir)}, { ownSession: true });`,
    `console.log(readFileSync(${JSON.stringify(path.join(dataDir, 'pgdata', 'postmaster.pid'))}, 'utf8').split('\\n')[0]);`,
    `process.exit(1);`,
  ].join('\n');
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  t.equal(await new Promise((resolve) => child.once('exit', resolve)), 1);
  const pid = Number(output.trim());
  t.ok(pid > 0, 'it had started the postmaster');
  // The fast shutdown it asked for takes a moment after the owner has gone.
  for (let waited = 0; alive(pid) && waited < 30_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  t.notOk(alive(pid), 'the postmaster is gone');
});

t.test('the superuser password initdb reads is never in the system temp folder, not even after a start killed during initdb', async (t) => {
  // A temp folder of its own, open to all as /tmp is (initdb, as root the postgres user, reads the file there).
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'atrium-initdb-tmp-'));
  chmodSync(tmp, 0o1777);
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-killed-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(tmp, { recursive: true, force: true }));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const atrium = startAtriumProcess(t, { config: {} }, { DATA_DIR: dataDir, TMPDIR: tmp, PORT: '0', LOG_LEVEL: 'silent' });
  // initdb has begun writing the cluster: it has read the password file, which is kept until it ends.
  const versionFile = path.join(dataDir, 'pgdata', 'PG_VERSION');
  for (let waited = 0; !existsSync(versionFile) && waited < 60_000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10));
  t.ok(existsSync(versionFile), `initdb runs: ${atrium.output()}`);
  atrium.child.kill('SIGKILL');
  await atrium.exited;
  // initdb, orphaned, finishes the cluster by itself.
  const initdbRuns = () =>
    readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .some((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`--pgdata=${path.join(dataDir, 'pgdata')}`);
        } catch {
          return false;
        }
      });
  for (let waited = 0; initdbRuns() && waited < 60_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  const password = readFileSync(path.join(dataDir, 'superuser-password'), 'utf8').trim();
  const holding = readdirSync(tmp, { withFileTypes: true })
    .filter((entry) => entry.isFile() && readFileSync(path.join(tmp, entry.name), 'utf8').includes(password))
    .map((entry) => entry.name);
  t.strictSame(holding, [], 'no file of the temp folder, where every user may read it, holds the password');
  // The next start, on the cluster initdb finished, is not held up by the killed one's turn and removes what it left in DATA_DIR.
  const next = await startEmbeddedPostgres(dataDir, { ownSession: true });
  t.teardown(() => next.stop());
  t.strictSame(
    readdirSync(dataDir).filter((name) => name.startsWith('initdb-')),
    [],
    'nothing of it is left in DATA_DIR either',
  );
});
