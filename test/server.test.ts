/**
 * The process as operators run it: `npm start` (which builds dist/ and then runs
 * `node dist/src/main.js` in place of itself) and the container's command, plain
 * `node dist/src/main.js`. Embedded PostgreSQL in DATA_DIR, first-start seed, API on PORT,
 * and a graceful shutdown on SIGTERM/SIGINT that lets an in-flight request finish and
 * leaves no process behind (docs/operations.md#signals-and-shutdown).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { REPEAT_GRACE_MS } from '../src/platform/process/signals.ts';
import { readinessOnceReady } from './helpers/eventually.ts';
import { alive, postmasterOf, serverPort } from './helpers/processes.ts';

// `npm start` compiles first (incremental; a cold build takes a while on a busy machine).
t.setTimeout(400_000);

const root = path.resolve(import.meta.dirname, '..');
const dataDir = path.join(os.tmpdir(), `atrium-server-test-${randomBytes(4).toString('hex')}`);
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

/** The embedded server's postmaster: its pid and port. */
const postmaster = () => postmasterOf(dataDir);

/** Which roles the API pool's connections logged in as, read from the embedded server. */
async function applicationLogins(): Promise<string> {
  const password = readFileSync(path.join(dataDir, 'superuser-password'), 'utf8').trim();
  const sql = postgres(`postgres://postgres:${password}@127.0.0.1:${postmaster().port}/postgres`, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ usename: string }[]>`select distinct usename from pg_stat_activity where application_name = 'atrium'`;
    return rows.map((r) => r.usename).join(',');
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * `how` as an operator runs it. `(terminal)` puts the command in a process group of its
 * own, as a terminal's foreground job, so that `ctrlC()` can signal the whole group as a
 * terminal's Ctrl-C does (npm, the shell it runs, node; the embedded PostgreSQL, in a
 * session of its own, is out of reach).
 */
function start(port: number, how: 'npm start' | 'npm start (terminal)' | 'node dist' | 'node dist (terminal)', password?: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: 'info' };
  delete env.DATABASE_URL;
  if (password) env.ATRIUM_ADMIN_PASSWORD = password;
  else delete env.ATRIUM_ADMIN_PASSWORD;
  const [command, args] = how.startsWith('node dist') ? [process.execPath, ['dist/src/main.js']] : ['npm', ['start']];
  const child = spawn(command, args as string[], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'], detached: how.endsWith('(terminal)') });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitFor = (text: string) =>
    new Promise<void>((resolve, reject) => {
      const timer = setInterval(() => {
        if (output.includes(text)) {
          clearInterval(timer);
          resolve();
        }
      }, 50);
      void exited.then(() => {
        clearInterval(timer);
        if (output.includes(text)) resolve();
        else reject(new Error(`exited before "${text}":\n${output}`));
      });
    });
  /** The pid of the server process (from its JSON log), which `npm start` runs in its place. */
  const serverPid = () => Number(/"pid":(\d+)/.exec(output)?.[1]);
  const ctrlC = () => process.kill(-child.pid!, 'SIGINT');
  return { child, listening: waitFor('Server listening'), waitFor, exited, serverPid, output: () => output, ctrlC };
}

/** The status `/health/ready` answers at `base`, asked until it is 200 (up to 15 s). */
const readiness = (base: string) => readinessOnceReady(() => fetch(`${base}/health/ready`).then((res) => res.status));

/**
 * A sign-in whose body is only half sent: in flight on the server. `finish()` sends the
 * rest and resolves with the raw HTTP answer. A first request on the same connection makes
 * sure the server has accepted the connection before anything else happens.
 */
async function halfSentLogin(port: number, password: string): Promise<{ finish(): Promise<string> }> {
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  socket.on('data', (chunk) => (received += chunk));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.write('GET /health/live HTTP/1.1\r\nHost: atrium\r\n\r\n');
  while (!received.includes('{"status":"ok"}')) await new Promise((r) => setTimeout(r, 20));
  received = '';
  const body = JSON.stringify({ tenant: 'demo', username: 'admin', password });
  const half = Math.floor(body.length / 2);
  socket.write(
    `POST /api/auth/login HTTP/1.1\r\nHost: atrium\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`,
  );
  socket.write(body.slice(0, half));
  return {
    async finish() {
      socket.write(body.slice(half));
      await closed;
      return received;
    },
  };
}

/** The demo administrator's password, printed by the first start. */
let generatedPassword: string | undefined;

t.test('npm start: first start seeds demo, prints the password once, serves the API, and drains on SIGTERM', async (t) => {
  const port = await serverPort();
  const server = start(port, 'npm start');
  await server.listening;
  const password = /password "([^"]+)"/.exec(server.output())?.[1];
  t.ok(password, 'the generated admin password is printed');
  generatedPassword = password;
  t.match(
    server.output(),
    /\n {2}Demo tenant created\. Sign in with tenant "demo", username "admin", password "/,
    'the embedded default creates demo, as ever',
  );
  const logLines = server
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'));
  t.ok(logLines.length > 0, 'logs are JSON lines');
  t.notOk(
    logLines.some((line) => line.includes(password!)),
    'the password is not in the JSON log',
  );

  const base = `http://127.0.0.1:${port}`;
  t.equal(await readiness(base), 200);
  t.equal(await applicationLogins(), 'atrium_app', 'the API pool logs in as atrium_app itself, the role that cannot bypass row-level security');

  const serverPid = server.serverPid();
  t.not(serverPid, server.child.pid, 'npm runs the server as a process of its own');
  const database = postmaster();
  const login = await halfSentLogin(port, password!);
  // As a container runtime does: the signal goes to the top process only, here npm.
  server.child.kill('SIGTERM');
  await server.waitFor('"signal":"SIGTERM"');
  const answer = await login.finish();
  t.match(answer, /^HTTP\/1\.1 200 /, 'the in-flight sign-in completes during shutdown');
  const token = /"access_token":"([^"]+)"/.exec(answer)?.[1];
  t.ok(token, 'with a token');
  t.notOk(server.output().includes(token!), 'the token is not logged');
  t.equal(await server.exited, 0, 'npm start exits 0');
  t.notOk(alive(serverPid), 'the server process is gone');
  t.notOk(alive(database.pid), 'the embedded PostgreSQL is gone');
  t.notOk(existsSync(path.join(dataDir, 'pgdata', 'postmaster.pid')), 'and shut down cleanly');
});

t.test('node dist/src/main.js: a restart keeps the data, seeds nothing, and stops on SIGINT; PORT=0 takes a free port and says which', async (t) => {
  const server = start(0, 'node dist');
  await server.waitFor('API docs at');
  t.notMatch(server.output(), /Demo tenant created/);
  const base = /"msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/.exec(server.output())?.[1];
  t.ok(base && !base.endsWith(':0'), 'the port the system gave');
  t.match(server.output(), `"msg":"API docs at ${base}/docs"`, 'the docs address is the one listened on');
  t.equal(await readiness(base!), 200);
  t.equal(server.serverPid(), server.child.pid);
  // A second server on the same data folder is refused: the first stops the database when it ends.
  const second = start(0, 'node dist');
  second.listening.catch(() => {}); // It never listens.
  t.equal(await second.exited, 1, 'a second server exits');
  t.match(second.output(), /atrium: could not start: the embedded PostgreSQL of .* is run by another Atrium \(pid \d+\)/);
  t.equal(await readiness(base!), 200, 'the first serves on');
  const database = postmaster();
  server.child.kill('SIGINT');
  t.equal(await server.exited, 0);
  t.notOk(alive(database.pid), 'the embedded PostgreSQL is gone');
});

/** The JSON log lines whose `msg` is `message`. */
const logged = (output: string, message: string) => output.split('\n').filter((line) => line.startsWith('{') && line.includes(`"msg":"${message}"`));

t.test('npm start at a terminal: Ctrl-C reaches npm and node alike, and the server drains once', async (t) => {
  const port = await serverPort();
  const server = start(port, 'npm start (terminal)');
  await server.listening;
  const serverPid = server.serverPid();
  const database = postmaster();
  const login = await halfSentLogin(port, generatedPassword!);
  server.ctrlC();
  await server.waitFor('"signal":"SIGINT"');
  t.ok(alive(database.pid), 'the embedded PostgreSQL did not get the Ctrl-C');
  const answer = await login.finish();
  t.match(answer, /^HTTP\/1\.1 200 /, 'the in-flight sign-in completes during shutdown');
  t.equal(await server.exited, 0, 'npm start exits 0');
  t.equal(logged(server.output(), 'shutting down').length, 1, 'one shutdown, though node got the signal from the terminal and from npm');
  t.same(logged(server.output(), 'second signal: stopping at once'), [], 'not taken for a second Ctrl-C');
  t.notOk(alive(serverPid), 'the server process is gone');
  t.notOk(alive(database.pid), 'the embedded PostgreSQL is gone');
  t.notOk(existsSync(path.join(dataDir, 'pgdata', 'postmaster.pid')), 'and shut down cleanly');
});

t.test('at a terminal, a second Ctrl-C a second later stops at once', async (t) => {
  const port = await serverPort();
  const server = start(port, 'node dist (terminal)');
  await server.listening;
  const database = postmaster();
  // A sign-in that never finishes keeps the drain waiting (up to SHUTDOWN_TIMEOUT_MS).
  await halfSentLogin(port, 'never sent in full');
  server.ctrlC();
  await server.waitFor('"signal":"SIGINT"');
  await new Promise((resolve) => setTimeout(resolve, REPEAT_GRACE_MS + 200));
  t.equal(logged(server.output(), 'stopped').length, 0, 'still draining');
  server.ctrlC();
  t.equal(await server.exited, 1, 'exit status 1');
  t.equal(logged(server.output(), 'second signal: stopping at once').length, 1);
  t.notOk(alive(database.pid), 'the embedded PostgreSQL is gone');
});
