/**
 * The command line at a terminal: a command that started the embedded PostgreSQL (no server
 * was running on DATA_DIR) and is interrupted by Ctrl-C, which the terminal sends to the
 * whole foreground process group, stops that PostgreSQL before it exits with 130, as a
 * program ended by SIGINT does. The PostgreSQL runs in a session of its own, so the Ctrl-C
 * does not reach it: the command must stop it (docs/operations.md#signals-and-shutdown).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { alive, postmasterOf } from '../helpers/processes.ts';

t.setTimeout(300_000);

const root = path.resolve(import.meta.dirname, '../..');
const dataDir = path.join(os.tmpdir(), `atrium-cli-signal-${randomBytes(4).toString('hex')}`);
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

t.test('Ctrl-C during a command stops the embedded PostgreSQL it started, then exits 130', async (t) => {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'debug' };
  delete env.DATABASE_URL;
  // Waits for the password on standard input, which stays open: a command in progress.
  const child = spawn(process.execPath, ['bin/atrium.js', 'user:set-password', '--tenant', 'demo', '--username', 'admin'], {
    cwd: root,
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
    detached: true, // a terminal's foreground job: a process group of its own
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  // The server's own log line, which the command logs at debug level.
  while (!output.includes('database system is ready to accept connections')) {
    if (child.exitCode !== null) throw new Error(`the command exited:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const postmaster = postmasterOf(dataDir).pid;

  process.kill(-child.pid!, 'SIGINT');
  const code = await exited;
  t.equal(code, 130, 'exit status 128 + SIGINT');
  if (code !== 130) t.comment(output);
  t.notOk(alive(postmaster), 'the embedded PostgreSQL it started is gone');
  t.notOk(existsSync(path.join(dataDir, 'pgdata', 'postmaster.pid')), 'and shut down cleanly');
  child.stdin.end();
});
