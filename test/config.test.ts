/**
 * Configuration: every variable is checked before anything starts, and a mistake is one
 * line that names the variable and what it accepts (README "Configuration").
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import webPush from 'web-push';
import { ConfigError, loadConfig, unknownSettings } from '../src/config.ts';

const root = path.resolve(import.meta.dirname, '..');

/** A VAPID key pair, as npx web-push generate-vapid-keys makes one. */
function vapidPair(): { VAPID_PUBLIC_KEY: string; VAPID_PRIVATE_KEY: string } {
  const { publicKey, privateKey } = webPush.generateVAPIDKeys();
  return { VAPID_PUBLIC_KEY: publicKey, VAPID_PRIVATE_KEY: privateKey };
}

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], env: NodeJS.ProcessEnv, cwd = root): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(process.execPath, args, { env, cwd, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

/** The environment of a fresh process: none of Atrium's variables but the ones given. */
function environment(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME };
  return { ...env, ...vars };
}

t.test('unset and empty variables take their defaults', async (t) => {
  const config = loadConfig({ PORT: '', LOG_LEVEL: '' });
  t.equal(config.port, 3000);
  t.equal(config.logLevel, 'info');
  t.equal(config.role, 'all');
  t.equal(config.shutdownTimeoutMs, 20_000);
  t.equal(config.databasePoolSize, 10);
  t.equal(config.requestTimeoutSeconds, 300);
  t.equal(config.smtpTimeoutMs, 600_000);
  t.equal(loadConfig({ SMTP_TIMEOUT_MS: '3600000' }).smtpTimeoutMs, 3_600_000);
  t.equal(loadConfig({ DATABASE_POOL_SIZE: '' }).databasePoolSize, 10);
  t.equal(loadConfig({ DATABASE_POOL_SIZE: '25' }).databasePoolSize, 25);
  t.strictSame(loadConfig({ WEBHOOK_ALLOWED_CIDRS: '10.0.0.0/8, ::1/128' }).webhookAllowedCidrs, ['10.0.0.0/8', '::1/128']);
  t.strictSame(loadConfig({ WEBHOOK_ALLOWED_CIDRS: '10.0.0.0/8' }).pushAllowedCidrs, [], "the webhooks' list opens nothing to push");
  t.strictSame(loadConfig({ PUSH_ALLOWED_CIDRS: '10.0.0.5/32' }).pushAllowedCidrs, ['10.0.0.5/32']);
  t.equal(loadConfig({ PORT: '8080' }).port, 8080);
  for (const from of ['no-reply@example.com', 'Atrium <no-reply@example.com>', '"Atrium, Inc." <no-reply@example.com>']) {
    t.equal(loadConfig({ SMTP_FROM: from }).smtpFrom, from, `SMTP_FROM ${from}`);
  }
  for (const host of ['0.0.0.0', '::', '::1', '10.1.2.3', 'localhost', 'api.internal', 'atrium-1.example.com.']) {
    t.equal(loadConfig({ HOST: host }).host, host, `HOST ${host}`);
  }
});

t.test('the first tenant: demo on the embedded server, only what ATRIUM_BOOTSTRAP_TENANT names with DATABASE_URL', async (t) => {
  const external = 'postgres://atrium:secret@db.example:5432/atrium';
  t.strictSame(loadConfig({}).bootstrapTenant, { slug: 'demo', name: 'Demo' }, 'npm start without DATABASE_URL: demo, as ever');
  t.equal(loadConfig({ DATABASE_URL: external }).bootstrapTenant, undefined, 'a production database gets no tenant unasked');
  t.strictSame(loadConfig({ DATABASE_URL: external, ATRIUM_BOOTSTRAP_TENANT: 'acme' }).bootstrapTenant, { slug: 'acme', name: 'acme' });
  t.strictSame(loadConfig({ DATABASE_URL: external, ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme Inc.' }).bootstrapTenant, {
    slug: 'acme',
    name: 'Acme Inc.',
  });
  t.strictSame(loadConfig({ ATRIUM_BOOTSTRAP_TENANT: 'acme' }).bootstrapTenant, { slug: 'acme', name: 'acme' }, 'in place of demo');
  t.equal(loadConfig({ DATABASE_URL: external, ATRIUM_BOOTSTRAP_TENANT: '' }).bootstrapTenant, undefined, 'empty is unset');
});

t.test('each mistake is one line naming the variable and what it accepts', async (t) => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ PORT: 'abc' }, /^PORT: "abc" is not accepted; expected .*integer from 0 to 65535$/],
    [{ PORT: '99999' }, /^PORT: "99999" is not accepted/],
    [{ PORT: '1.5' }, /^PORT: /],
    [{ PORT: '0x10' }, /^PORT: "0x10" is not accepted; expected a TCP port, an integer from 0 to 65535$/],
    [{ SMTP_FROM: 'not an address' }, /^SMTP_FROM: "not an address" is not accepted; expected a sender address/],
    [{ SMTP_FROM: 'Atrium <no-reply>' }, /^SMTP_FROM: /],
    [{ ATRIUM_ADMIN_PASSWORD: 'short' }, /^ATRIUM_ADMIN_PASSWORD: its value is not accepted; expected a password of at least 10 characters/],
    [{ ATRIUM_ADMIN_PASSWORD: 'a-long-one', PASSWORD_MIN_LENGTH: '12' }, /^ATRIUM_ADMIN_PASSWORD: .* at least 12 characters/],
    [{ ATRIUM_ADMIN_PASSWORD: '😀'.repeat(9) }, /^ATRIUM_ADMIN_PASSWORD: /],
    // Counted as the API counts a password: nine accented letters, each a letter and a combining accent; one ligature.
    [{ ATRIUM_ADMIN_PASSWORD: 'e\u0301'.repeat(9) }, /^ATRIUM_ADMIN_PASSWORD: /],
    [{ ATRIUM_ADMIN_PASSWORD: '\ufdfa' }, /^ATRIUM_ADMIN_PASSWORD: /],
    // Longer than the API's limit: that administrator could never sign in.
    [{ ATRIUM_ADMIN_PASSWORD: 'p'.repeat(1025) }, /^ATRIUM_ADMIN_PASSWORD: its value is not accepted; expected a password of at most 1024 characters$/],
    [{ PORT: '3e3' }, /^PORT: "3e3" is not accepted/],
    // Longer, a push job could outlast its expiry and be sent again beside itself.
    [{ OUTBOUND_TIMEOUT_MS: '300001' }, /^OUTBOUND_TIMEOUT_MS: "300001" is not accepted; expected a number of milliseconds from 1 to 300000 \(five minutes\)$/],
    [{ SMTP_TIMEOUT_MS: '0' }, /^SMTP_TIMEOUT_MS: "0" is not accepted; expected a number of milliseconds from 1 to 3600000 \(an hour\)$/],
    [{ SMTP_TIMEOUT_MS: '3600001' }, /^SMTP_TIMEOUT_MS: "3600001" is not accepted/],
    [{ PORT: ' 3300' }, /^PORT: " 3300" is not accepted/],
    [{ PORT: '3300.0' }, /^PORT: "3300.0" is not accepted/],
    [{ PORT: '-0' }, /^PORT: "-0" is not accepted/],
    // So many digits that Number() reads them as Infinity: no bound would have held.
    [{ PORT: '9'.repeat(309) }, /^PORT: "9{309}" is not accepted; expected a TCP port, an integer from 0 to 65535$/],
    [{ SHUTDOWN_TIMEOUT_MS: '1'.repeat(400) }, /^SHUTDOWN_TIMEOUT_MS: "1{400}" is not accepted; expected a number of milliseconds from 100 to 3600000$/],
    [{ PASSWORD_MIN_LENGTH: '9'.repeat(400) }, /^PASSWORD_MIN_LENGTH: "9{400}" is not accepted/],
    [{ BODY_LIMIT: '2e3' }, /^BODY_LIMIT: "2e3" is not accepted; expected a number of bytes, at least 1024$/],
    [{ HOST: '999.1.1.1' }, /^HOST: "999.1.1.1" is not accepted; expected an IP address or host name to listen on/],
    [{ HOST: 'not_a_host!' }, /^HOST: "not_a_host!" is not accepted/],
    [{ HOST: '[::1]' }, /^HOST: "\[::1\]" is not accepted/],
    [{ HOST: '-leading.example' }, /^HOST: /],
    [{ DATABASE_POOL_SIZE: '0' }, /^DATABASE_POOL_SIZE: "0" is not accepted; expected a number of connections from 1 to 1000$/],
    [{ REQUEST_TIMEOUT: '0' }, /^REQUEST_TIMEOUT: "0" is not accepted; expected a number of seconds from 1 to 3600$/],
    [{ DATABASE_URL: 'garbage' }, /^DATABASE_URL: its value is not accepted; expected a PostgreSQL connection URL/],
    [{ DATABASE_URL: 'mysql://u:p@h/db' }, /^DATABASE_URL: /],
    [{ DATABASE_URL: 'postgres://u:p@db/atrium', ATRIUM_APP_DATABASE_URL: 'postgres://' }, /^ATRIUM_APP_DATABASE_URL: /],
    [{ DATABASE_URL: 'postgres://u:p@h1:5432,:5433/db' }, /^DATABASE_URL: its value is not accepted; expected .*host1:5432,host2:5432/],
    [{ DATABASE_URL: 'postgres://u:p@h1:5432,h2:99999/db' }, /^DATABASE_URL: its value is not accepted/],
    // The driver took any sslmode it does not know as "TLS, the certificate verified": a typo is no setting to guess at.
    [
      { DATABASE_URL: 'postgres://u:p@db/atrium?sslmode=bogus' },
      /^DATABASE_URL: its sslmode is not accepted; expected one of disable, allow, prefer, require, verify-ca, verify-full$/,
    ],
    [{ DATABASE_URL: 'postgres://u:p@db/atrium?sslmode=' }, /^DATABASE_URL: its sslmode is not accepted/],
    [{ DATABASE_URL: 'postgres://u:p@db/atrium?sslmode=REQUIRE' }, /^DATABASE_URL: its sslmode is not accepted/],
    [{ DATABASE_URL: 'postgres://u:p@db/atrium?sslmode=require&sslmode=requir' }, /^DATABASE_URL: its sslmode is not accepted/],
    [
      { ATRIUM_APP_DATABASE_URL: 'postgres://app:p@db1,db2/atrium?target_session_attrs=read-write&sslmode=verify_full' },
      /^ATRIUM_APP_DATABASE_URL: its sslmode /,
    ],
    [
      {
        DATABASE_URL: 'postgres://u:p@pooler/db',
        ATRIUM_APP_DATABASE_URL: 'postgres://app:p@pooler/db',
        DATABASE_DIRECT_URL: 'postgres://u:p@h1,h2/db?target_session_attrs=writable',
      },
      /^DATABASE_DIRECT_URL: its value is not accepted; expected .*bypasses/,
    ],
    [{ LOG_LEVEL: 'verbose' }, /^LOG_LEVEL: "verbose" is not accepted; expected one of fatal, error, warn, info, debug, trace, silent$/],
    [{ TRUST_PROXY: 'yes' }, /^TRUST_PROXY: "yes" is not accepted/],
    [{ ATRIUM_SECRET_KEY: 'c2hvcnQ=' }, /^ATRIUM_SECRET_KEY: its value is not accepted; expected 32 random bytes/],
    [{ ATRIUM_ROLE: 'both' }, /^ATRIUM_ROLE: "both" is not accepted; expected one of all, api, worker$/],
    [{ WEBHOOK_ALLOWED_CIDRS: '10.0.0.0/8,intranet' }, /^WEBHOOK_ALLOWED_CIDRS: /],
    [{ PUSH_ALLOWED_CIDRS: 'intranet' }, /^PUSH_ALLOWED_CIDRS: /],
    [{ SMTP_URL: 'mail.example.com' }, /^SMTP_URL: its value is not accepted/],
    [{ VAPID_SUBJECT: 'admin@example.com' }, /^VAPID_SUBJECT: /],
    // A push service refuses a VAPID contact that names no one: a scheme alone is none.
    [{ VAPID_SUBJECT: 'mailto:' }, /^VAPID_SUBJECT: /],
    [{ VAPID_SUBJECT: 'https://' }, /^VAPID_SUBJECT: /],
    [{ VAPID_SUBJECT: 'mailto:ops' }, /^VAPID_SUBJECT: /],
    [{ VAPID_PUBLIC_KEY: vapidPair().VAPID_PUBLIC_KEY }, /^VAPID_PRIVATE_KEY must be set together with VAPID_PUBLIC_KEY/],
    [{ VAPID_PRIVATE_KEY: vapidPair().VAPID_PRIVATE_KEY }, /^VAPID_PUBLIC_KEY must be set together with VAPID_PRIVATE_KEY/],
    [{ ACCESS_TOKEN_TTL: '10' }, /^ACCESS_TOKEN_TTL: "10" is not accepted; expected a number of seconds, at least 60$/],
    [{ SHUTDOWN_TIMEOUT_MS: 'soon' }, /^SHUTDOWN_TIMEOUT_MS: /],
    [
      { ATRIUM_BOOTSTRAP_TENANT: 'Acme Inc' },
      /^ATRIUM_BOOTSTRAP_TENANT: "Acme Inc" is not accepted; expected a tenant slug: lower-case letters, digits and dashes/,
    ],
    [{ ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme Inc.' }, /^ATRIUM_BOOTSTRAP_TENANT must be set when ATRIUM_BOOTSTRAP_TENANT_NAME is$/],
    // Judged as atrium tenant:create judges --name, and the API a role's name: shown to people, it must show as it is.
    [
      { ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: '   ' },
      /^ATRIUM_BOOTSTRAP_TENANT_NAME: " {3}" is not accepted; expected a tenant name of at most 200 characters, not blank, /,
    ],
    [{ ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme\nInc.' }, /^ATRIUM_BOOTSTRAP_TENANT_NAME: "Acme\\nInc\." is not accepted/],
    [{ ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme\u0007' }, /^ATRIUM_BOOTSTRAP_TENANT_NAME: /],
    [{ ATRIUM_BOOTSTRAP_TENANT: 'acme', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Acme Inc. ' }, /^ATRIUM_BOOTSTRAP_TENANT_NAME: /],
    // The embedded server sets up its application login itself: another login would reach another server.
    [{ ATRIUM_APP_DATABASE_URL: 'postgres://atrium_api:pw@db/atrium' }, /^DATABASE_URL must be set when ATRIUM_APP_DATABASE_URL is$/],
    [
      { DATABASE_URL: 'postgres://u:p@pooler/atrium', DATABASE_DIRECT_URL: 'postgres://u:p@db/atrium' },
      /^ATRIUM_APP_DATABASE_URL must be set when DATABASE_DIRECT_URL is$/,
    ],
    [
      { DATABASE_URL: 'postgres://atrium:one@db:5432/atrium', ATRIUM_APP_DATABASE_URL: 'postgres://atrium:two@db:5432/atrium' },
      /^ATRIUM_APP_DATABASE_URL: its value is not accepted; expected a login role other than the one of DATABASE_URL, which owns the tables$/,
    ],
  ];
  for (const [env, message] of cases) {
    const error = t.throws(() => loadConfig(env), JSON.stringify(env)) as Error;
    t.ok(error instanceof ConfigError, 'a ConfigError');
    t.match(error.message, message);
    t.notMatch(error.message, /\n/, 'one line');
  }
  const alone = t.throws(() => loadConfig({ DATABASE_DIRECT_URL: 'postgres://u:p@db/atrium' })) as Error;
  t.equal(
    alone.message,
    'DATABASE_URL must be set when DATABASE_DIRECT_URL is\nATRIUM_APP_DATABASE_URL must be set when DATABASE_DIRECT_URL is',
    'a direct URL alone: both it needs',
  );
});

t.test('VAPID_SUBJECT takes a mailto: address or an https:// URL', async (t) => {
  for (const value of ['mailto:ops@example.com', 'https://example.com', 'https://example.com/contact']) {
    t.equal(loadConfig({ VAPID_SUBJECT: value }).vapidSubject, value, value);
  }
});

t.test('a database URL may name several hosts and the session it wants, as libpq and the driver read it', async (t) => {
  const owner = 'postgres://atrium:one@db1:5432,db2:5433/atrium?target_session_attrs=read-write';
  const app = 'postgres://atrium_login:two@db1:5432,db2:5433/atrium?target_session_attrs=read-write';
  const config = loadConfig({ DATABASE_URL: owner, ATRIUM_APP_DATABASE_URL: app, DATABASE_DIRECT_URL: owner });
  t.equal(config.databaseUrl, owner, 'as given');
  t.equal(config.appDatabaseUrl, app);
  t.equal(config.databaseDirectUrl, owner);
  t.throws(
    () => loadConfig({ DATABASE_URL: owner, ATRIUM_APP_DATABASE_URL: 'postgres://atrium:two@db2:5433,db1/atrium' }),
    /^ATRIUM_APP_DATABASE_URL: its value is not accepted; expected a login role other than the one of DATABASE_URL/,
    'the owner login is recognised behind a host list too',
  );
});

t.test('a database URL takes the sslmode values libpq documents', async (t) => {
  for (const mode of ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full']) {
    const url = `postgres://atrium:secret@db.example:5432/atrium?sslmode=${mode}`;
    t.equal(loadConfig({ DATABASE_URL: url }).databaseUrl, url, mode);
  }
});

t.test('secret values are never repeated in the message', async (t) => {
  for (const [name, value] of [
    ['DATABASE_URL', 'postgres//admin:hunter2-secret@db'],
    ['DATABASE_URL', 'postgres://admin:hunter2-secret@db1:5432,db2:x/atrium'],
    ['ATRIUM_APP_DATABASE_URL', 'postgres://app:hunter2-secret@db1,db2/atrium?target_session_attrs=any'],
    ['ATRIUM_SECRET_KEY', 'hunter2-secret'],
    ['SMTP_URL', 'smtp:/user:hunter2-secret@mail'],
    ['VAPID_PRIVATE_KEY', 'hunter2-secret!'],
  ] as const) {
    const error = t.throws(() => loadConfig({ [name]: value, VAPID_PUBLIC_KEY: 'abc' })) as Error;
    t.match(error.message, name);
    t.notMatch(error.message, /hunter2/, name);
  }
});

t.test('VAPID keys are refused unless they are one pair as web-push takes it', async (t) => {
  const good = vapidPair();
  t.equal(loadConfig(good).vapidPublicKey, good.VAPID_PUBLIC_KEY, 'a generated pair is accepted');
  const other = vapidPair();
  const mistakes: [Record<string, string>, RegExp][] = [
    // Well-formed base64url, but no key: every push would fail, and browsers could not subscribe.
    [{ VAPID_PUBLIC_KEY: 'abc', VAPID_PRIVATE_KEY: 'hunter2-private' }, /^VAPID_PUBLIC_KEY: "abc" is not accepted; expected a P-256 public key/m],
    [{ VAPID_PUBLIC_KEY: 'abc', VAPID_PRIVATE_KEY: 'hunter2-private' }, /^VAPID_PRIVATE_KEY: its value is not accepted; expected a P-256 private key/m],
    // The two halves swapped.
    [{ VAPID_PUBLIC_KEY: good.VAPID_PRIVATE_KEY, VAPID_PRIVATE_KEY: good.VAPID_PUBLIC_KEY }, /^VAPID_PUBLIC_KEY: .* is not accepted/m],
    // Padded: web-push refuses a key with "=".
    [{ VAPID_PUBLIC_KEY: `${good.VAPID_PUBLIC_KEY}=`, VAPID_PRIVATE_KEY: good.VAPID_PRIVATE_KEY }, /^VAPID_PUBLIC_KEY: .* is not accepted/m],
    // Halves of two pairs.
    [
      { VAPID_PUBLIC_KEY: good.VAPID_PUBLIC_KEY, VAPID_PRIVATE_KEY: other.VAPID_PRIVATE_KEY },
      /^VAPID_PUBLIC_KEY: its value is not accepted; expected the public key of VAPID_PRIVATE_KEY/,
    ],
  ];
  for (const [env, message] of mistakes) {
    const error = t.throws(() => loadConfig(env), ConfigError) as ConfigError;
    t.match(error.message, message, JSON.stringify(env).slice(0, 60));
    t.notMatch(error.message, env.VAPID_PRIVATE_KEY!, 'the private key is not repeated');
  }
});

t.test('several mistakes give one line each', async (t) => {
  const error = t.throws(() => loadConfig({ PORT: 'abc', LOG_LEVEL: 'loud' })) as Error;
  t.strictSame(
    error.message
      .split('\n')
      .map((line) => line.split(':')[0])
      .sort(),
    ['LOG_LEVEL', 'PORT'],
  );
});

t.test('the weak password hashes of the test suite are refused outside NODE_ENV=test', async (t) => {
  t.equal(loadConfig({}).passwordHashCost, 'standard');
  t.equal(loadConfig({ NODE_ENV: 'test', PASSWORD_HASH_COST: 'test' }).passwordHashCost, 'test');
  for (const env of [{ PASSWORD_HASH_COST: 'test' }, { PASSWORD_HASH_COST: 'test', NODE_ENV: 'production' }, { PASSWORD_HASH_COST: 'test', NODE_ENV: '' }]) {
    const error = t.throws(() => loadConfig(env), ConfigError) as ConfigError;
    t.equal(error.message, 'PASSWORD_HASH_COST: "test" is not accepted unless NODE_ENV is test; expected standard', JSON.stringify(env));
  }
  t.throws(() => loadConfig({ NODE_ENV: 'test', PASSWORD_HASH_COST: 'weak' }), /^PASSWORD_HASH_COST: "weak" is not accepted; expected standard; test/);
});

t.test('the server refuses a bad variable before it starts anything: one line, exit 78, no stack trace', async (t) => {
  const dataDir = path.join(os.tmpdir(), `atrium-config-test-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // Both used to fail only after the embedded PostgreSQL had started (and the demo tenant was seeded).
  for (const [name, value] of [
    ['PORT', '99999'],
    ['ATRIUM_SECRET_KEY', 'not-a-key'],
    ['PASSWORD_HASH_COST', 'test'],
    // Read as Infinity, it stopped only at the listen, with status 1 and "127.0.0.1:Infinity".
    ['PORT', '9'.repeat(400)],
    // Nothing listens on port 1: a process that took this URL would fail to connect, with status 1.
    ['DATABASE_URL', 'postgres://postgres@127.0.0.1:1/atrium?sslmode=bogus'],
  ] as const) {
    const outcome = await run(['--import', 'tsx', 'src/main.ts'], environment({ DATA_DIR: dataDir, [name]: value }));
    t.equal(outcome.code, 78, `${name}=${value} exits 78`);
    t.equal(outcome.stdout, '', 'nothing on stdout');
    const lines = outcome.stderr.trimEnd().split('\n');
    t.equal(lines.length, 1, `one line: ${outcome.stderr}`);
    t.match(lines[0], new RegExp(`^atrium: ${name}\\b.*expected `));
    t.notMatch(outcome.stderr, /\bat .*:\d+:\d+/, 'no stack trace');
    t.notOk(existsSync(dataDir), 'the embedded PostgreSQL was not started');
  }
});

t.test('a port another process holds is one line, before anything starts or any password is printed', async (t) => {
  const dataDir = path.join(os.tmpdir(), `atrium-config-test-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen({ host: '127.0.0.1', port: 0 }, resolve));
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const port = (holder.address() as net.AddressInfo).port;
  const outcome = await run(['--import', 'tsx', 'src/main.ts'], environment({ DATA_DIR: dataDir, PORT: String(port) }));
  t.equal(outcome.code, 1);
  t.equal(outcome.stdout, '', 'no demo password printed');
  t.match(outcome.stderr, new RegExp(`^atrium: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE.*\\n$`));
  t.notOk(existsSync(dataDir), 'the embedded PostgreSQL was not started');
});

t.test('a variable that looks like a misspelt setting is named, with the setting it likely meant', async (t) => {
  t.strictSame(unknownSettings({ ATRIUM_ROLLE: 'api', ATRIUM_ROLE: 'api', ATRIUM_SECRT_KEY: 'x', PORTT: '1', ATRIUM_SOMETHING_ELSE: 'x' }), [
    'ATRIUM_ROLLE is not a setting of Atrium (did you mean ATRIUM_ROLE?); it is ignored',
    'ATRIUM_SECRT_KEY is not a setting of Atrium (did you mean ATRIUM_SECRET_KEY?); it is ignored',
  ]);
  // Names of the prefix far from every setting belong to someone else (compose, the test runner, a platform).
  t.strictSame(unknownSettings({ ATRIUM_TEST_CLUSTER: '1', ATRIUM_RUN: 'x', ATRIUM_PASSWORD: 'x' }), []);
  t.strictSame(unknownSettings({ ATRIUM_ROLE: 'worker', ATRIUM_SECRET_KEY: 'x' }), [], 'settings Atrium reads are not named');
  // The template of .env for compose: the variables compose reads are no mistake.
  const template = Object.fromEntries(
    readFileSync('.env.example', 'utf8')
      .split('\n')
      .filter((line) => /^[A-Z_]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
  t.ok(Object.keys(template).includes('ATRIUM_PUBLISH'));
  t.strictSame(unknownSettings(template), [], '.env.example names nothing');
  // Before the process starts anything: the line on stderr, and the process goes on (here: to a bad PORT, exit 78).
  const outcome = await run(['--import', 'tsx', 'src/main.ts'], environment({ ATRIUM_ROLLE: 'api', PORT: '99999' }));
  t.equal(outcome.code, 78);
  t.match(outcome.stderr, /^atrium: ATRIUM_ROLLE is not a setting of Atrium \(did you mean ATRIUM_ROLE\?\); it is ignored\natrium: PORT: /);
});

t.test('.env in the working folder is read; the environment takes precedence', async (t) => {
  const folder = await mkdtemp(path.join(os.tmpdir(), 'atrium-dotenv-'));
  t.teardown(() => rm(folder, { recursive: true, force: true }));
  await writeFile(path.join(folder, '.env'), '# development settings\nLOG_LEVEL=verbose\nPORT="abc"\n');
  const cli = path.join(root, 'bin', 'atrium.js');
  const fromFile = await run([cli, 'migrate'], environment({}), folder);
  t.equal(fromFile.code, 78);
  t.strictSame(fromFile.stderr.trimEnd().split('\n').sort(), [
    'atrium: LOG_LEVEL: "verbose" is not accepted; expected one of fatal, error, warn, info, debug, trace, silent',
    'atrium: PORT: "abc" is not accepted; expected a TCP port, an integer from 0 to 65535',
  ]);
  const overridden = await run([cli, 'migrate'], environment({ LOG_LEVEL: 'warn' }), folder);
  t.equal(overridden.code, 78);
  t.match(overridden.stderr, /^atrium: PORT: "abc" is not accepted; expected a TCP port, an integer from 0 to 65535\n$/);
  // An editor's byte order mark does not hide the first variable.
  await writeFile(path.join(folder, '.env'), '\uFEFFPORT=abc\n');
  const marked = await run([cli, 'migrate'], environment({}), folder);
  t.equal(marked.code, 78);
  t.match(marked.stderr, /^atrium: PORT: "abc" is not accepted/);
  // Nor does a line that is no setting hide the one after it: it is passed over, on every Node.
  await writeFile(path.join(folder, '.env'), 'LOG_LEVEL=warn\nthese are the development settings\nexport PORT=abc\n');
  const noted = await run([cli, 'migrate'], environment({}), folder);
  t.equal(noted.code, 78);
  t.match(noted.stderr, /^atrium: PORT: "abc" is not accepted/, 'the setting after the note is read');
});

t.test('a .env that cannot be read is one line and status 78, not a stack trace', async (t) => {
  const folder = await mkdtemp(path.join(os.tmpdir(), 'atrium-dotenv-'));
  t.teardown(() => rm(folder, { recursive: true, force: true }));
  // A folder by that name cannot be read as a file, whoever runs the test (root reads any file).
  await mkdir(path.join(folder, '.env'));
  const cli = path.join(root, 'bin', 'atrium.js');
  const outcome = await run([cli, 'migrate'], environment({}), folder);
  t.equal(outcome.code, 78);
  t.match(outcome.stderr, /^atrium: \.env: cannot be read \(EISDIR\); fix its permissions or remove it\n$/);
});
