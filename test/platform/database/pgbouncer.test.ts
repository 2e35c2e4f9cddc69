/**
 * Atrium behind PgBouncer in transaction pooling mode (docs/fault-tolerance.md#connection-poolers):
 * DATABASE_URL and ATRIUM_APP_DATABASE_URL go through a real PgBouncer, DATABASE_DIRECT_URL
 * reaches the server for migrations, LISTEN and the job queue. Needs the `pgbouncer` binary
 * (Debian's package; `.ci/run` installs it).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { Database } from '../../../src/platform/database/database.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { createTestDatabase } from '../../helpers/database.ts';
import { eventually, readinessOnceReady } from '../../helpers/eventually.ts';
import { serverPort } from '../../helpers/processes.ts';

const database = await createTestDatabase();
t.teardown(() => database.drop());
const direct = new URL(database.url);
// Migrated directly, then a login of the application role's own for the pooled connections.
const migrating = new Database(database.url);
await migrating.migrate();
await migrating.close();
const appRole = `atrium_pgb_${randomBytes(4).toString('hex')}`;
const appPassword = randomBytes(12).toString('hex');
const admin = postgres(database.url, { max: 1, onnotice: () => {} });
await admin.unsafe(`create role ${appRole} login password '${appPassword}' in role atrium_app`);
t.teardown(async () => {
  await admin.unsafe(`drop role if exists ${appRole}`).catch(() => {});
  await admin.end({ timeout: 1 });
});

const dir = await mkdtemp(path.join(os.tmpdir(), 'atrium-pgbouncer-'));
await chmod(dir, 0o755);
t.teardown(() => rm(dir, { recursive: true, force: true }));
const port = await serverPort();
const quote = (value: string) => `"${value.replace(/"/g, '""')}"`;
await writeFile(
  path.join(dir, 'users.txt'),
  `${quote(decodeURIComponent(direct.username))} ${quote(decodeURIComponent(direct.password))}\n${quote(appRole)} ${quote(appPassword)}\n`,
  { mode: 0o644 },
);
await writeFile(
  path.join(dir, 'pgbouncer.ini'),
  [
    '[databases]',
    `* = host=${direct.hostname} port=${direct.port}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = scram-sha-256',
    `auth_file = ${path.join(dir, 'users.txt')}`,
    'pool_mode = transaction',
    'default_pool_size = 4',
    'max_client_conn = 200',
    '',
  ].join('\n'),
  { mode: 0o644 },
);
// PgBouncer refuses to run as root; `-u` switches to the (embedded server's) postgres user.
const asRoot = process.getuid?.() === 0;
// Debian installs it in /usr/sbin, which a non-root PATH may lack.
const binary = existsSync('/usr/sbin/pgbouncer') ? '/usr/sbin/pgbouncer' : 'pgbouncer';
const bouncer = spawn(binary, [...(asRoot ? ['-u', 'postgres'] : []), path.join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'pipe', 'pipe'] });
let bouncerLog = '';
bouncer.stdout.on('data', (chunk) => (bouncerLog += chunk));
bouncer.stderr.on('data', (chunk) => (bouncerLog += chunk));
const bouncerExited = new Promise<void>((resolve) => bouncer.on('exit', () => resolve()));
t.teardown(async () => {
  if (bouncer.exitCode === null && bouncer.signalCode === null) {
    bouncer.kill('SIGTERM');
    await bouncerExited;
  }
});
await eventually(
  async () => bouncerLog,
  (log) => /process up|listening on/i.test(log) || bouncer.exitCode !== null,
);
if (bouncer.exitCode !== null) throw new Error(`pgbouncer did not start:\n${bouncerLog}`);

const viaBouncer = (user: string, password: string) => {
  const url = new URL(database.url);
  url.port = String(port);
  url.hostname = '127.0.0.1';
  url.username = user;
  url.password = password;
  return url.toString();
};

const api = await startTestApi(t, {
  role: 'all',
  databaseUrl: viaBouncer(decodeURIComponent(direct.username), decodeURIComponent(direct.password)),
  appDatabaseUrl: viaBouncer(appRole, appPassword),
  databaseDirectUrl: database.url,
});

t.test('requests, writes and background delivery work through a transaction pooler', async (t) => {
  const ready = await readinessOnceReady(async () => (await api.atrium.app!.inject({ method: 'GET', url: '/health/ready' })).statusCode);
  t.equal(ready, 200);
  const tenant = await api.createTenant('pooled');
  for (let round = 0; round < 3; round++) {
    // The same statements again and again, concurrently: with named prepared statements they
    // would land on server connections that never prepared them.
    const answers = await Promise.all(Array.from({ length: 8 }, () => api.call(t, 'listUsers', { token: tenant.adminToken, query: { limit: 5 } })));
    t.same(
      answers.map((answer) => answer.status),
      answers.map(() => 200),
      `round ${round}: every list answered`,
    );
  }
  const recipient = await api.createUser(tenant.tenantId);
  const renamed = await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: recipient.id }, body: { first_name: 'Pooled' } });
  t.equal(renamed.status, 200, 'a write');
  const sent = await api.call(t, 'createNotification', {
    token: tenant.adminToken,
    body: { title: 'Pooled', body: 'b', url: '/', user_ids: [recipient.id] },
  });
  t.equal(sent.status, 202);
  const token = recipient.token;
  const count = await eventually(
    async () => (await api.call(t, 'countNotifications', { token })).body,
    (n) => n === 1,
  );
  t.equal(count, 1, 'the job queue delivered it');
});
