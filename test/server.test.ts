/**
 * The process as `npm start` runs it: embedded PostgreSQL in DATA_DIR, first-start seed,
 * API on PORT, and a graceful shutdown on SIGTERM that lets an in-flight request finish.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { freePort } from '../src/platform/database/embedded.ts';

const dataDir = path.join(os.tmpdir(), `atrium-server-test-${randomBytes(4).toString('hex')}`);
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

/** Which roles the API pool's connections logged in as, read from the embedded server. */
async function applicationLogins(): Promise<string> {
  const pgPort = readFileSync(path.join(dataDir, 'pgdata', 'postmaster.pid'), 'utf8').split('\n')[3];
  const password = readFileSync(path.join(dataDir, 'superuser-password'), 'utf8').trim();
  const sql = postgres(`postgres://postgres:${password}@127.0.0.1:${pgPort}/postgres`, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ usename: string }[]>`select distinct usename from pg_stat_activity where application_name = 'atrium'`;
    return rows.map((r) => r.usename).join(',');
  } finally {
    await sql.end({ timeout: 1 });
  }
}

function start(port: number, password?: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, PORT: String(port), LOG_LEVEL: 'info' };
  delete env.DATABASE_URL;
  if (password) env.ATRIUM_ADMIN_PASSWORD = password;
  else delete env.ATRIUM_ADMIN_PASSWORD;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const listening = new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (output.includes('Server listening')) {
        clearInterval(timer);
        resolve();
      }
    }, 50);
    void exited.then(() => {
      clearInterval(timer);
      reject(new Error(`exited early:\n${output}`));
    });
  });
  return { child, listening, exited, output: () => output };
}

t.test('first start seeds demo, prints the generated password once, and serves the API', async (t) => {
  const port = await freePort();
  const server = start(port);
  await server.listening;
  const password = /password "([^"]+)"/.exec(server.output())?.[1];
  t.ok(password, 'the generated admin password is printed');
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
  const ready = await fetch(`${base}/health/ready`);
  t.equal(ready.status, 200);
  t.equal(await applicationLogins(), 'atrium_app', 'the API pool logs in as atrium_app itself, the role that cannot bypass row-level security');
  const login = fetch(`${base}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ tenant: 'demo', username: 'admin', password }),
  });
  await new Promise((r) => setTimeout(r, 5)); // the request is in flight (Argon2 takes a while)
  server.child.kill('SIGTERM');
  const answer = await login;
  t.equal(answer.status, 200, 'the in-flight sign-in completes during shutdown');
  const body = (await answer.json()) as { access_token: string };
  t.notOk(server.output().includes(body.access_token), 'the token is not logged');
  t.equal(await server.exited, 0, 'exits cleanly');
  t.notOk(existsSync(path.join(dataDir, 'pgdata', 'postmaster.pid')), 'the embedded PostgreSQL stopped');
});

t.test('a restart keeps the data and does not seed or print a password again', async (t) => {
  const port = await freePort();
  const server = start(port);
  await server.listening;
  t.notMatch(server.output(), /Demo tenant created/);
  const res = await fetch(`http://127.0.0.1:${port}/health/ready`);
  t.equal(res.status, 200);
  server.child.kill('SIGINT');
  t.equal(await server.exited, 0);
});
