/**
 * The first deployment as compose.yaml runs it, without containers
 * (docs/operations.md#first-deployment): a new PostgreSQL cluster; deploy/postgres-init.sql
 * run by its superuser with the flags the postgres image uses; `atrium migrate` as the owner
 * role that script creates, which is no superuser: the migrations, the application login,
 * the first tenant and its password, printed once. Then an API and a worker start together
 * and that password signs in.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import postgres from 'postgres';
import t from 'tap';
import { loadConfig } from '../src/config.ts';
import { startEmbeddedPostgres } from '../src/platform/database/embedded.ts';
import { createAtrium } from '../src/server.ts';
import { TEST_CLUSTER_SETTINGS } from './helpers/database.ts';

// Every step is a process of its own, started through tsx: slow on a busy machine.
t.setTimeout(300_000);

const root = path.resolve(import.meta.dirname, '..');
const dataDir = path.join(os.tmpdir(), `atrium-first-deployment-${randomBytes(4).toString('hex')}`);
const cluster = await startEmbeddedPostgres(dataDir, { settings: TEST_CLUSTER_SETTINGS });
t.teardown(async () => {
  await cluster.stop();
  await rm(dataDir, { recursive: true, force: true });
});
const superuser = new URL(cluster.url);
const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
t.teardown(() => admin.end({ timeout: 5 }));

const ownerPassword = randomBytes(16).toString('hex');
const appPassword = randomBytes(16).toString('hex');
const urlAs = (user: string, password: string) => `postgres://${user}:${password}@127.0.0.1:${superuser.port}/atrium`;
/** What compose.yaml gives the Atrium services, and nothing of this process's environment. */
const deployment = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  DATABASE_URL: urlAs('atrium', ownerPassword),
  ATRIUM_APP_DATABASE_URL: urlAs('atrium_api', appPassword),
  ATRIUM_SECRET_KEY: randomBytes(32).toString('base64'),
  LOG_LEVEL: 'warn',
};

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd: root, env, timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
    });
  });
}
const atrium = (args: string[], env: NodeJS.ProcessEnv = {}) => run(process.execPath, ['bin/atrium.js', ...args], { ...deployment, ...env });

t.test('the postgres image runs deploy/postgres-init.sql: an owner role that is no superuser, and its database', async (t) => {
  // docker-entrypoint.sh runs *.sql files as `psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc --dbname "$POSTGRES_DB" -f`.
  const init = await run(
    'psql',
    ['-v', 'ON_ERROR_STOP=1', '--username', 'postgres', '--no-password', '--no-psqlrc', '--dbname', 'postgres', '-f', 'deploy/postgres-init.sql'],
    {
      PATH: process.env.PATH,
      PGHOST: '127.0.0.1',
      PGPORT: superuser.port,
      PGPASSWORD: decodeURIComponent(superuser.password),
      ATRIUM_OWNER_PASSWORD: ownerPassword,
    },
  );
  t.equal(init.code, 0, init.stderr);
  const [owner] = await admin<{ rolsuper: boolean; rolbypassrls: boolean; rolcreaterole: boolean; owns: boolean }[]>`
    select rolsuper, rolbypassrls, rolcreaterole,
      exists (select 1 from pg_database d where d.datname = 'atrium' and d.datdba = r.oid) as owns
    from pg_roles r where rolname = 'atrium'`;
  t.strictSame(owner, { rolsuper: false, rolbypassrls: false, rolcreaterole: true, owns: true });
});

let adminPassword = '';

t.test('atrium migrate as that owner: migrations, the application login, the first tenant and its password once', async (t) => {
  const first = await atrium(['migrate'], { ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme Inc.' });
  t.equal(first.code, 0, first.stderr);
  t.equal(first.stderr, '');
  t.match(first.stdout, /^applied \d+ migrations:\n/);
  t.match(first.stdout, '\ncreated the application login atrium_api (a member of atrium_app, no superuser, no BYPASSRLS)\n');
  const printed = /Acme Inc\. tenant created\. Sign in with tenant "acme", username "admin", password "([^"]+)"\.\n {2}This password is not shown again\./.exec(
    first.stdout,
  );
  t.ok(printed, 'the generated password is printed');
  adminPassword = printed?.[1] ?? '';

  const [login] = await admin<{ rolcanlogin: boolean; rolsuper: boolean; rolbypassrls: boolean; rolcreaterole: boolean; member: boolean }[]>`
    select rolcanlogin, rolsuper, rolbypassrls, rolcreaterole, pg_has_role(oid, 'atrium_app', 'MEMBER') as member
    from pg_roles where rolname = 'atrium_api'`;
  t.strictSame(login, { rolcanlogin: true, rolsuper: false, rolbypassrls: false, rolcreaterole: false, member: true });

  const again = await atrium(['migrate'], { ATRIUM_BOOTSTRAP_TENANT: 'acme' });
  t.equal(again.code, 0, again.stderr);
  t.equal(again.stdout, 'the database is up to date; no migration to apply\n', 'a second run creates nothing and prints no password');
});

t.test('an API and a worker start together without a first tenant of their own; the printed password signs in', async (t) => {
  const config = loadConfig(deployment);
  t.equal(config.bootstrapTenant, undefined, 'with DATABASE_URL and no ATRIUM_BOOTSTRAP_TENANT, no tenant is asked for');
  const printed: string[] = [];
  const logger = pino({ level: 'silent' });
  const [api, worker] = await Promise.all(
    (['api', 'worker'] as const).map((role) => createAtrium({ ...config, role }, { logger, onAdminPassword: (password) => printed.push(password) })),
  );
  t.teardown(async () => {
    await api!.stop();
    await worker!.stop();
  });
  t.strictSame(printed, [], 'neither prints a password');
  const atriumDatabase = new URL(cluster.url);
  atriumDatabase.pathname = '/atrium';
  const inAtrium = postgres(atriumDatabase.toString(), { max: 1, onnotice: () => {} });
  t.teardown(() => inAtrium.end({ timeout: 5 }));
  const tenants = await inAtrium<{ slug: string; name: string }[]>`select slug, name from tenants`;
  t.strictSame([...tenants], [{ slug: 'acme', name: 'Acme Inc.' }], 'no demo tenant');

  const login = await api!.app!.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'acme', username: 'admin', password: adminPassword } });
  t.equal(login.statusCode, 200, login.body);
  const sessions = await admin<{ usename: string }[]>`select distinct usename from pg_stat_activity where application_name = 'atrium'`;
  t.strictSame(
    sessions.map((row) => row.usename),
    ['atrium_api'],
    'the request pool logs in as the application login',
  );
});

t.test('tenant:create without --admin-password prints a generated password once, and it signs in', async (t) => {
  const created = await atrium(['tenant:create', 'beta', '--name', 'Beta', '--admin-username', 'boss']);
  t.equal(created.code, 0, created.stderr);
  const password = /Beta tenant created\. Sign in with tenant "beta", username "boss", password "([^"]+)"/.exec(created.stdout)?.[1];
  t.ok(password, created.stdout);
  const config = loadConfig(deployment);
  const api = await createAtrium({ ...config, role: 'api' }, { logger: pino({ level: 'silent' }) });
  t.teardown(() => api.stop());
  const login = await api.app!.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'beta', username: 'boss', password } });
  t.equal(login.statusCode, 200, login.body);
});
