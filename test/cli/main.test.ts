import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { eq, sql } from 'drizzle-orm';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { userProfilePictures } from '../../src/resources/users/table.ts';
import { startTestApi } from '../helpers/atrium.ts';
import { jpegWithMetadata } from '../helpers/pictures.ts';

// Every case is a process of its own, started through tsx: slow on a busy machine.
t.setTimeout(600_000);
const api = await startTestApi(t);
const env = { ...process.env, DATABASE_URL: api.db.url, LOG_LEVEL: 'silent' };

interface RunOptions {
  /** Standard input (closed at once when absent). */
  input?: string;
  env?: NodeJS.ProcessEnv;
}

/** Runs `atrium …` as a user would. */
function atrium(...args: (string | RunOptions)[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const options = args.find((arg): arg is RunOptions => typeof arg === 'object') ?? {};
  const input = options.input ?? '';
  const argv = args.filter((arg): arg is string => typeof arg === 'string');
  return new Promise((resolve) => {
    const child = execFile(process.execPath, ['bin/atrium.js', ...argv], { env: options.env ?? env }, (error, stdout, stderr) => {
      resolve({ code: error ? (error as { code: number }).code : 0, stdout, stderr });
    });
    child.stdin!.end(input);
  });
}

/**
 * `run` over every item, at most four processes at a time (each case is a process of its
 * own: run one after another, they made this file the longest of the suite); answers in
 * the order of `items`.
 */
async function inParallel<T, R>(items: readonly T[], run: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await run(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(4, items.length) }, worker));
  return results;
}

async function signIn(t: Test, tenant: string, username: string, password: string): Promise<number> {
  return (await api.call(t, 'login', { body: { tenant, username, password } })).status;
}

t.test('tenant:create, then token:create prints only a working access token', async (t) => {
  const created = await atrium('tenant:create', 'cli-co', '--name', 'CLI Co', '--admin-username', 'root', '--admin-password', 'long-enough-password');
  t.equal(created.code, 0, created.stderr);
  t.match(created.stdout, /tenant cli-co created/);
  const issued = await atrium('token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '600');
  t.equal(issued.code, 0, issued.stderr);
  t.match(issued.stdout, /^atr_[A-Za-z0-9_-]{43}\n$/, 'stdout is the token alone');
  const me = await api.call(t, 'getCurrentUser', { token: issued.stdout.trim() });
  t.equal(me.status, 200);
  t.equal(me.body.username, 'root');
  const tenantId = Number(/\(id (\d+)\)/.exec(created.stdout)![1]);
  const events = await api.db.owner.execute<{ action: string; actor_type: string; command: string; target_id: string; changes: unknown; details: unknown }>(
    sql`select action, actor_type, command, target_id, changes, details from audit_events
        where tenant_id = (select id from tenants where slug = 'cli-co') order by occurred_at, action desc`,
  );
  t.strictSame(
    [...events],
    [
      {
        action: 'tenant.created',
        actor_type: 'command_line',
        command: 'tenant:create',
        target_id: String(tenantId),
        changes: { slug: { from: null, to: 'cli-co' }, name: { from: null, to: 'CLI Co' } },
        details: { administrator_id: me.body.id },
      },
      {
        action: 'access_token.created',
        actor_type: 'command_line',
        command: 'token:create',
        target_id: String(me.body.id),
        changes: {},
        details: { expires_in: 600 },
      },
    ],
    'the tenant begins its trail with its creation, in its own trail',
  );
  const trail = await api.call(t, 'listAuditEvents', { token: issued.stdout.trim(), query: { filter: { action: 'tenant.' } } });
  t.equal(trail.status, 200);
  t.match(trail.body, [
    { action: 'tenant.created', actor: { type: 'command_line', id: null }, target: { type: 'tenant', label: 'CLI Co' }, origin: { command: 'tenant:create' } },
  ]);
  t.notOk(JSON.stringify(events).includes(issued.stdout.trim()), 'the token is not in the trail');
});

/** The URL of a new, empty database on the test server (no migration applied), dropped when `t` ends. */
async function emptyDatabase(t: Test, prefix: string): Promise<string> {
  const admin = postgres(api.db.url, { max: 1, onnotice: () => {} });
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  await admin.unsafe(`create database "${name}"`);
  t.teardown(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 5 });
  });
  const url = new URL(api.db.url);
  url.pathname = `/${name}`;
  return url.toString();
}

t.test('migrate names the migrations it applied, then says nothing is left', async (t) => {
  const migrations = (JSON.parse(readFileSync('drizzle/meta/_journal.json', 'utf8')) as { entries: { tag: string }[] }).entries.map((e) => e.tag);
  const url = await emptyDatabase(t, 'atrium_cli_fresh');
  const fresh = { env: { ...env, DATABASE_URL: url } };
  const first = await atrium('migrate', fresh);
  t.equal(first.code, 0, first.stderr);
  t.equal(first.stdout, `applied ${migrations.length} migrations:\n${migrations.map((tag) => `  ${tag}\n`).join('')}`);
  const again = await atrium('migrate', fresh);
  t.equal(again.code, 0, again.stderr);
  t.equal(again.stdout, 'the database is up to date; no migration to apply\n');
  const migrated = postgres(url, { max: 1, onnotice: () => {} });
  const [{ count } = { count: -1 }] = await migrated<{ count: number }[]>`select count(*)::int as count from tenants`;
  await migrated.end({ timeout: 5 });
  t.equal(count, 0, 'with DATABASE_URL and no ATRIUM_BOOTSTRAP_TENANT, no tenant appears');
});

t.test('migrate with ATRIUM_BOOTSTRAP_TENANT creates that tenant on a database without any, once', async (t) => {
  const admin = postgres(api.db.url, { max: 1, onnotice: () => {} });
  const name = `atrium_cli_bootstrap_${randomBytes(4).toString('hex')}`;
  await admin.unsafe(`create database "${name}"`);
  t.teardown(async () => {
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 5 });
  });
  const url = new URL(api.db.url);
  url.pathname = `/${name}`;
  const bootstrap = { env: { ...env, DATABASE_URL: url.toString(), ATRIUM_BOOTSTRAP_TENANT: 'first', ATRIUM_ADMIN_PASSWORD: 'a chosen password' } };
  const first = await atrium('migrate', bootstrap);
  t.equal(first.code, 0, first.stderr);
  t.match(first.stdout, /\ntenant first created with the administrator admin \(password: ATRIUM_ADMIN_PASSWORD\)\n$/);
  t.notMatch(first.stdout, /a chosen password/, 'a chosen password is not printed');
  const again = await atrium('migrate', bootstrap);
  t.equal(again.stdout, 'the database is up to date; no migration to apply\n', 'nothing the second time');
  const signIn = await atrium('token:create', '--tenant', 'first', '--username', 'admin', bootstrap);
  t.equal(signIn.code, 0, signIn.stderr);
  const migrated = postgres(url.toString(), { max: 1, onnotice: () => {} });
  t.teardown(() => migrated.end({ timeout: 5 }));
  const created = await migrated<{ actor_type: string; command: string }[]>`select actor_type, command from audit_events where action = 'tenant.created'`;
  t.strictSame([...created], [{ actor_type: 'command_line', command: 'migrate' }], 'the seeded tenant records its creation once');
});

t.test('atrium --help: the overview on stdout, nothing on stderr, exit 0', async (t) => {
  // Each command's help, help on an unknown command: commands.test.ts.
  const result = await atrium('--help');
  t.equal(result.code, 0);
  t.equal(result.stderr, '');
  t.match(result.stdout, /^usage: atrium <command> \[options\]\n/);
  t.match(result.stdout, '\n  token:create ');
});

t.test('a usage mistake prints the message and the usage on stderr, exit 2; a failure prints only the message, exit 1', async (t) => {
  // Every usage mistake's message: commands.test.ts.
  const mistake = await atrium('token:create', '--tenant', 'cli-co');
  t.equal(mistake.code, 2);
  t.equal(mistake.stdout, '');
  t.match(mistake.stderr, /^atrium: --username is required\n\nusage: atrium token:create /);
  t.notMatch(mistake.stderr, /\bat .*:\d+:\d+/, 'no stack trace');
  const failure = await atrium('token:create', '--tenant', 'no-such', '--username', 'root');
  t.equal(failure.code, 1);
  t.equal(failure.stderr, 'atrium: no tenant "no-such"\n', 'no usage for a command that was understood');
});

t.test(
  'citus:distribute refuses with one line, exit 1, where Citus is absent',
  { skip: Boolean(process.env.CITUS_DATABASE_URL) && 'this run is on Citus' },
  async (t) => {
    // An application login naming several hosts (the high-availability form) is read as the driver reads it.
    const login = `atrium_cli_${randomBytes(4).toString('hex')}`;
    t.teardown(() => api.db.ownerSql.unsafe(`drop role if exists ${login}`));
    const url = new URL(api.db.url);
    const hosts = `postgres://${login}:pw-${login}@${url.host},${url.host}${url.pathname}?target_session_attrs=read-write`;
    const [absent, severalHosts] = await Promise.all([
      atrium('citus:distribute'),
      atrium('citus:distribute', { env: { ...env, ATRIUM_APP_DATABASE_URL: hosts } }),
    ]);
    const refusal = 'atrium: Citus is not installed in this database (CREATE EXTENSION citus on the coordinator and every worker; docs/scaling.md)\n';
    t.equal(absent.code, 1);
    t.equal(absent.stdout, '');
    t.equal(absent.stderr, refusal);
    t.equal(severalHosts.stderr, refusal, 'several hosts in ATRIUM_APP_DATABASE_URL');
  },
);

t.test('a tenant:create refused by the database exits 1 and records nothing', async (t) => {
  // The arguments refused before the database is asked: commands.test.ts.
  const recorded = async () =>
    (await api.db.owner.execute<{ count: number }>(sql`select count(*)::int as count from audit_events where action = 'tenant.created'`))[0]!.count;
  const before = await recorded();
  const again = await atrium('tenant:create', 'cli-co', '--name', 'Dup', '--admin-username', 'root', '--admin-password', 'long-enough-password');
  t.equal(again.code, 1);
  t.match(again.stderr, /exists already/);
  t.equal(await recorded(), before, 'a refused tenant:create records nothing');
});

t.test('a usage mistake is told before the database is opened: status 2 with the database down, and no migration applied', async (t) => {
  // Nothing listens on port 1: a command that opened the database fails with status 1 and says so.
  const down = { env: { ...env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/atrium' } };
  const [mistake, opened] = await Promise.all([
    atrium('token:create', '--tenant', 'cli-co', '--expires-in', 'soon', down),
    atrium('token:create', '--tenant', 'cli-co', '--username', 'root', down),
  ]);
  t.equal(mistake.code, 2, mistake.stderr);
  t.match(mistake.stderr, /^atrium: --expires-in must be/);
  t.notMatch(mistake.stderr, /the database at/, 'the database is not asked');
  t.equal(opened.code, 1);
  t.equal(opened.stdout, '');
  t.match(opened.stderr, /^atrium: the database at 127\.0\.0\.1:1: .*\n$/, 'a command that opens the database says where it failed, in one line');
  t.notMatch(opened.stderr, /usage:/);

  // A database not migrated yet stays as it was.
  const url = await emptyDatabase(t, 'atrium_cli_usage');
  const unmigrated = await atrium('token:create', '--tenant', 'cli-co', { env: { ...env, DATABASE_URL: url } });
  t.equal(unmigrated.code, 2, unmigrated.stderr);
  const fresh = postgres(url, { max: 1, onnotice: () => {} });
  const [{ tables } = { tables: -1 }] = await fresh<{ tables: number }[]>`select count(*)::int as tables from pg_tables where schemaname = 'public'`;
  await fresh.end({ timeout: 5 });
  t.equal(tables, 0, 'no migration was applied');
});

t.test('user:set-password sets a lost password from standard input and ends the sessions', async (t) => {
  const tenant = await api.createTenant('cli-reset');
  const user = await api.createUser(tenant.tenantId, { username: 'forgetful' });
  const before = await api.call(t, 'getCurrentUser', { token: user.token });
  t.equal(before.status, 200);

  const mistakes = [
    [['user:set-password', '--tenant', 'cli-reset', '--username', 'forgetful', { input: '' }], 2, /no password on standard input/],
    [['user:set-password', '--tenant', 'cli-reset', '--username', 'forgetful', { input: 'short\n' }], 2, /the password must have at least 10 characters/],
    [
      ['user:set-password', '--tenant', 'cli-reset', '--username', 'forgetful', { input: `${'p'.repeat(1025)}\n` }],
      2,
      /the password must have at most 1024 characters/,
    ],
    [['user:set-password', '--tenant', 'cli-reset', { input: 'a new long password\n' }], 2, /--username is required/],
    [['user:set-password', '--tenant', 'cli-reset', '--username', 'nobody', { input: 'a new long password\n' }], 1, /no active user "nobody"/],
    [['user:set-password', '--tenant', 'no-such', '--username', 'forgetful', { input: 'a new long password\n' }], 1, /no tenant "no-such"/],
  ] as const;
  const results = await inParallel(mistakes, ([args]) => atrium(...args));
  for (const [i, [args, code, message]] of mistakes.entries()) {
    const result = results[i]!;
    t.equal(result.code, code, JSON.stringify(args));
    t.match(result.stderr, message);
  }
  t.equal(await signIn(t, 'cli-reset', 'forgetful', user.password), 200, 'mistakes changed nothing');
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 200, 'the session still works');

  // Locked out: the account's failure counts are at their limit.
  t.equal(await signIn(t, 'cli-reset', 'forgetful', 'a wrong password'), 401);
  await api.db.owner.execute(sql`update login_failures set failures = 1000 where key not like 'ip:%'`);
  t.equal(await signIn(t, 'cli-reset', 'forgetful', user.password), 429, 'locked out');
  const result = await atrium('user:set-password', '--tenant', 'cli-reset', '--username', 'forgetful', { input: 'a new long password\n' });
  t.equal(result.code, 0, result.stderr);
  t.equal(result.stdout, "password of forgetful in tenant cli-reset set; the user's sessions ended\n");
  t.notMatch(result.stdout + result.stderr, /a new long password/, 'the password is not echoed');
  t.equal(await signIn(t, 'cli-reset', 'forgetful', 'a new long password'), 200, 'the new password signs in');
  t.equal(await signIn(t, 'cli-reset', 'forgetful', user.password), 401, 'the old one does not');
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401, 'the old session ended');
  // The command line's events: the sign-ins above record their own (access_token.created).
  const events = await api.db.owner.execute<{ action: string; actor_type: string; command: string; target_id: string; changes: unknown }>(
    sql`select action, actor_type, command, target_id, changes from audit_events where tenant_id = ${tenant.tenantId} and actor_type = 'command_line'`,
  );
  t.strictSame(
    [...events],
    [
      {
        action: 'user.password_changed',
        actor_type: 'command_line',
        command: 'user:set-password',
        target_id: String(user.id),
        changes: { password: { changed: true } },
      },
    ],
    'one event, the mistakes left none',
  );
});

t.test('user:set-password takes the first line of an input that stays open (kubectl exec -i), and does not wait for its end', async (t) => {
  const tenant = await api.createTenant('cli-open-input');
  await api.createUser(tenant.tenantId, { username: 'typist' });
  const child = spawn(process.execPath, ['bin/atrium.js', 'user:set-password', '--tenant', 'cli-open-input', '--username', 'typist'], {
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  // Typed and sent with Enter; the input is not closed.
  child.stdin.write('an open input password\n');
  let timer: NodeJS.Timeout | undefined;
  const waited = await Promise.race([exited.then(() => 'exited'), new Promise((resolve) => (timer = setTimeout(() => resolve('still waiting'), 60_000)))]);
  clearTimeout(timer);
  t.equal(waited, 'exited', 'the command ends without the end of its input');
  child.stdin.end();
  t.equal(await exited, 0, output);
  t.equal(await signIn(t, 'cli-open-input', 'typist', 'an open input password'), 200, 'the line typed is the new password');
});

t.test('an answer whose reader went away (| head -1) is one line on stderr, not a stack trace; the command is carried out', async (t) => {
  const child = spawn(
    process.execPath,
    ['bin/atrium.js', 'tenant:create', 'cli-closed-output', '--name', 'Closed', '--admin-username', 'root', '--admin-password', 'long-enough-password'],
    { env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // Nobody reads the answer: writing it fails (EPIPE).
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('close', (status) => resolve(status)));
  t.equal(code, 1, stderr);
  t.match(stderr, /^atrium: standard output was closed before the answer was written \(write EPIPE\); the command was carried out\n$/);
  t.notMatch(stderr, /\bat .*:\d+:\d+/, 'no stack trace');
  const issued = await atrium('token:create', '--tenant', 'cli-closed-output', '--username', 'root');
  t.equal(issued.code, 0, 'the tenant was created');
});

t.test('an answer written last, just before the exit, whose reader went away is told too (the exit does not come first)', async (t) => {
  // --help writes its answer and ends without any database to close: nothing stands between the failed write and the exit.
  const cases = [['--help'], ['tenant:create', '--help']];
  const results = await inParallel(cases, async (args) => {
    const child = spawn(process.execPath, ['bin/atrium.js', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('close', (status) => resolve(status)));
    return { code, stderr };
  });
  for (const [i, args] of cases.entries()) {
    const { code, stderr } = results[i]!;
    t.equal(code, 1, `${args.join(' ')}: status 1`);
    t.match(stderr, /^atrium: standard output was closed before the answer was written \(write EPIPE\); the command was carried out\n$/);
  }
});

t.test('a command whose statement fails says why, without the parameters it sent (a password hash)', async (t) => {
  const tenant = await api.createTenant('cli-refused');
  await api.createUser(tenant.tenantId, { username: 'refused-reset' });
  // The database refuses this user's new password, as a statement timeout or a lost connection would.
  await api.db.owner.execute(
    sql.raw(`create function cli_refuse_password() returns trigger language plpgsql as $$ begin raise exception 'password change refused'; end $$;
      create trigger cli_refuse_password before update of password_hash on users for each row when (new.username = 'refused-reset')
        execute function cli_refuse_password();`),
  );
  t.teardown(() => api.db.owner.execute(sql.raw('drop trigger cli_refuse_password on users; drop function cli_refuse_password()')));
  const result = await atrium('user:set-password', '--tenant', 'cli-refused', '--username', 'refused-reset', { input: 'a refused long password\n' });
  t.equal(result.code, 1);
  t.match(result.stderr, /password change refused/, 'the reason is told');
  t.notMatch(result.stderr, /\$argon2/, 'the new password hash is not');
  t.notMatch(result.stderr, /params:/);
  t.notMatch(result.stdout + result.stderr, /a refused long password/);
});

t.test('pictures:strip-metadata stores the pictures kept with their metadata without it, and says how many', async (t) => {
  const tenant = await api.createTenant('cli-pictures');
  const user = await api.createUser(tenant.tenantId, { username: 'photographer' });
  // As an earlier version stored an upload: the file as sent, GPS position and camera included.
  const sent = jpegWithMetadata(6);
  await api.db.owner
    .insert(userProfilePictures)
    .values({ tenantId: tenant.tenantId, userId: user.id, mediaType: 'image/jpeg', fileName: 'p.jpg', content: sent, etag: 'before' });
  const first = await atrium('pictures:strip-metadata');
  t.equal(first.code, 0, first.stderr);
  t.equal(first.stdout, '1 profile picture(s) read: 1 stored again without their metadata\n');
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, user.id));
  t.notMatch(stored!.content.toString('latin1'), /SECRET/, 'no metadata left');
  const again = await atrium('pictures:strip-metadata');
  t.equal(again.stdout, '1 profile picture(s) read: 0 stored again without their metadata\n', 'nothing the second time');
});

t.test(
  'Ctrl-C at the password prompt is an interrupt: exit 130, no usage text',
  { skip: !existsSync('/usr/bin/script') && 'no script(1) for a terminal' },
  async (t) => {
    // script(1) runs the command on a pseudo-terminal: it prompts with echo off, and reads Ctrl-C as a character.
    const command = `${process.execPath} bin/atrium.js user:set-password --tenant cli-co --username root`;
    const child = spawn('/usr/bin/script', ['-qfec', command, '/dev/null'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    for (let waited = 0; !output.includes('New password:') && waited < 60_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    t.match(output, /New password:/, 'it asks');
    child.stdin.write('\u0003');
    t.equal(await exited, 130, `the interrupt's status: ${output}`);
    t.notMatch(output, /usage:/, 'no usage text: it was no usage mistake');
  },
);
