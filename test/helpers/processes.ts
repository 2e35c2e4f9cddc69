/** Processes the process tests look at: Atrium in a process of its own, whether one still runs, an embedded server's postmaster, a port for a server they start. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Test } from 'tap';

/** Atrium started as it is deployed (`startAtriumProcess`). */
export interface AtriumProcess {
  child: ChildProcess;
  /** Its exit status once it has exited (null when a signal ended it). */
  exited: Promise<number | null>;
  /** What it has printed so far, standard output and error together. */
  output(): string;
}

/**
 * Atrium as it is deployed: `src/main.ts` in a process of its own, on the database `api`
 * serves (its application login too, when it has one), with `env` added to this process's
 * environment. Ended with `SIGTERM` when `t` ends, if still running.
 */
export function startAtriumProcess(t: Test, api: { config: { databaseUrl?: string; appDatabaseUrl?: string } }, env: Record<string, string>): AtriumProcess {
  const environment: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: api.config.databaseUrl, ...env };
  if (api.config.appDatabaseUrl) environment.ATRIUM_APP_DATABASE_URL = api.config.appDatabaseUrl;
  else delete environment.ATRIUM_APP_DATABASE_URL;
  return startNodeProcess(t, ['--import', 'tsx', 'src/main.ts'], environment, { stop: 'SIGTERM', stdin: 'ignore' });
}

/**
 * `node args…` in a process of its own with `env`, its output kept, its standard input a
 * pipe (`child.stdin`) or none; ended with `stop` when `t` ends, if still running.
 */
export function startNodeProcess(
  t: Test,
  args: string[],
  env: NodeJS.ProcessEnv,
  { stop, stdin }: { stop: NodeJS.Signals; stdin: 'pipe' | 'ignore' },
): AtriumProcess {
  const child = spawn(process.execPath, args, { env, stdio: [stdin, 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill(stop);
      await exited;
    }
  });
  return { child, exited, output: () => output };
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The postmaster of the embedded server in `dataDir`: its pid and port (postmaster.pid lines 1 and 4). */
export function postmasterOf(dataDir: string): { pid: number; port: number } {
  const lines = readFileSync(path.join(dataDir, 'pgdata', 'postmaster.pid'), 'utf8').split('\n');
  return { pid: Number(lines[0]), port: Number(lines[3]) };
}

/**
 * A port on 127.0.0.1 for a server a test starts with its port fixed in its configuration
 * (pg_autoctl's nodes, PgBouncer). `listen(0)` hands out a port of the kernel's ephemeral
 * range, where any outgoing connection of a test running beside this one may take it as
 * its local port before the server binds it; such a server then retries the same port for
 * ever. A port below that range is taken only by a listener, and this one is checked free.
 */
export async function serverPort(): Promise<number> {
  const range = '/proc/sys/net/ipv4/ip_local_port_range';
  const ephemeralFrom = existsSync(range) ? Number(readFileSync(range, 'utf8').trim().split(/\s+/)[0]) || 32768 : 32768;
  const lowest = 10_000;
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = lowest + Math.floor(Math.random() * Math.max(1, ephemeralFrom - lowest));
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port between ${lowest} and ${ephemeralFrom}`);
}

/**
 * Ends this process once `t`, a file's test, has ended and tap has taken everything the
 * process wrote. When files run in parallel, a finished file's process sometimes lingers
 * with nothing open but its pipes to tap, until tap's timeout kills it and fails the file.
 * Exiting keeps tap's exit code. A file that shares its process with others (a subtest of
 * shared-process.ts) leaves that to the process's last file.
 */
export function exitWhenEnded(t: Test): void {
  if (t.parent) return;
  t.on('end', () => setTimeout(exitOnceFlushed, 2_000).unref());
}

/**
 * Writes to a pipe are asynchronous: while tap is slow to read (a busy machine), the rest of
 * a file's results waits in the process, and exiting then drops it (the file's output ends
 * mid-test, exit code 0).
 */
function exitOnceFlushed(): void {
  if (process.stdout.writableLength === 0) process.exit();
  else process.stdout.once('drain', exitOnceFlushed);
}
