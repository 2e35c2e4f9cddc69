/**
 * The commands of the `atrium` command line (docs/running.md#command-line); `main.ts` is the
 * process around them. Same configuration as the server; works whether or not a server is
 * running (an embedded database already running on DATA_DIR is reused). `atrium --help`
 * lists the commands, `atrium <command> --help` explains one.
 */
import { parseArgs } from 'node:util';
import { entryPointConfig, readDotEnv, type Config } from '../config.ts';
import { parseConnectionUrl } from '../platform/database/connection-url.ts';
import { failureMessage } from '../platform/database/failure-message.ts';
import type { Database } from '../platform/database/database.ts';
import type { DatabaseServer } from '../database-server.ts';
import { setPasswordHashCost } from '../platform/auth/passwords.ts';
import { onTerminationSignals, signalExitStatus } from '../platform/process/signals.ts';
import { Interrupted, readPassword } from './password-input.ts';
import { displayNameProblems, storedName } from '../resources/roles/names.ts';
import { SLUG } from '../resources/tenants/slug.ts';

/** The longest `--expires-in`: the longest ACCESS_TOKEN_TTL (about 68 years). */
const MAX_EXPIRES_IN = 2 ** 31 - 1;

// The database and resource modules load only when a command runs, so that --help and
// usage mistakes answer at once.
const auth = () => import('../resources/auth/queries.ts');
const users = () => import('../resources/users/queries.ts');

type Options = Record<string, string | boolean | undefined>;

interface Command {
  usage: string;
  summary: string;
  options: Record<string, { type: 'string' }>;
  /** Further lines of `atrium <command> --help`. */
  details?: string;
  /** How many arguments besides options it takes (none unless said). */
  positionals?: number;
  /**
   * Checks the arguments, then calls `open` for the database (started, migrated, the
   * application login set up) once it needs it: a usage mistake is told before the
   * database is opened, the same whether it is up, down or not migrated yet.
   */
  run(context: { open: () => Promise<Database>; config: Config; values: Options; positionals: string[]; write: (text: string) => void }): Promise<void>;
}

/** What a command reads and where it writes: in `atrium`, the process's environment, stdout and stderr. */
export interface CommandIo {
  env: NodeJS.ProcessEnv;
  /** The answer (stdout): only what the command was asked for, a token or a report. */
  write: (text: string) => void;
  /** Messages (stderr): what went wrong, and the usage after a mistake. */
  tell: (text: string) => void;
}

/** A mistake in how the command was called: the message and that command's usage, exit 2. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly command?: string,
  ) {
    super(message);
  }
}

/** The command was understood but cannot be done (no such tenant, …): the message only, exit 1. */
class Failure extends Error {}

function required(values: Options, name: string): string {
  const value = values[name];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

async function checkPasswordLength(password: string, config: Config, what: string): Promise<void> {
  const { PASSWORD_MAX_LENGTH } = await import('../resources/users/rules.ts');
  const { characterCount } = await import('../platform/http/validation.ts');
  const { passwordLength } = await import('../platform/auth/passwords.ts');
  // Counted as the API counts a password; a longer one than the API takes (in code points, as sent) could never sign in.
  if (passwordLength(password) < config.passwordMinLength) {
    throw new UsageError(`${what} must have at least ${config.passwordMinLength} characters`);
  }
  if (characterCount(password) > PASSWORD_MAX_LENGTH) throw new UsageError(`${what} must have at most ${PASSWORD_MAX_LENGTH} characters`);
}

/** A username the API would refuse (its schema, a reserved name) is a usage error: such an administrator could never sign in. */
async function checkUsername(username: string, what: string): Promise<void> {
  const { usernameProblems, usernameShapeProblem } = await import('../resources/users/rules.ts');
  const [problem] = [usernameShapeProblem(username), ...usernameProblems(username).map((issue) => issue.message)].filter(Boolean);
  if (problem) throw new UsageError(`${what} ${problem}`);
}

/**
 * `--name` as it is stored (NFC), judged as the API judges the names people read (a role's,
 * a department's: src/resources/roles/names.ts): not blank, no whitespace at either end, no
 * control, format or other invisible character (a newline, a bell, a bidirectional override).
 * At most 200 characters, as ATRIUM_BOOTSTRAP_TENANT_NAME.
 */
function tenantName(sent: string): string {
  if (sent.trim() === '') throw new UsageError('--name must not be blank');
  const [problem] = displayNameProblems(sent);
  if (problem) throw new UsageError(`--name ${problem}`);
  const name = storedName(sent);
  if ([...name].length > 200) throw new UsageError('--name must have at most 200 characters');
  return name;
}

async function tenantIdOf(db: Database, slug: string): Promise<number> {
  const tenantId = await (await auth()).findTenantId(db, slug);
  if (!tenantId) throw new Failure(`no tenant "${slug}"`);
  return tenantId;
}

const commands: Record<string, Command> = {
  migrate: {
    usage: 'atrium migrate',
    summary: 'Apply the pending database migrations and name them; set up the application login and the first tenant.',
    details:
      'Migrations only go forward. Run this before starting processes of a new version.\n' +
      'With ATRIUM_APP_DATABASE_URL it creates or updates that login (a member of atrium_app, no superuser, no BYPASSRLS).\n' +
      'With ATRIUM_BOOTSTRAP_TENANT (without DATABASE_URL, on the embedded server: the tenant "demo" when it is unset),\n' +
      'on a database without any tenant, it creates that tenant with the administrator "admin" and prints the\n' +
      'generated password once (ATRIUM_ADMIN_PASSWORD chooses it instead).',
    options: {},
    // Every command migrates and sets up the application login as it opens the database; this one reports both, and seeds.
    async run({ open, config, write }) {
      const db = await open();
      const first = config.bootstrapTenant;
      if (!first) return;
      const { seedFirstTenant, generatedPasswordNotice } = await import('../resources/tenants/create-tenant.ts');
      const { commandSource } = await import('../resources/audit-events/record.ts');
      const seeded = await seedFirstTenant(db, first, config.adminPassword, commandSource('migrate'));
      if (!seeded) return;
      write(
        seeded.generatedPassword
          ? generatedPasswordNotice(first, 'admin', seeded.generatedPassword)
          : `tenant ${first.slug} created with the administrator admin (password: ATRIUM_ADMIN_PASSWORD)\n`,
      );
    },
  },
  'tenant:create': {
    usage: 'atrium tenant:create <slug> --name <text> --admin-username <username> [--admin-password <password>]',
    positionals: 1,
    summary: 'Create a tenant with its roles, languages, notification settings and one administrator.',
    details:
      'The slug is lower-case letters, digits and dashes. Without --admin-password a password is generated and\n' +
      'printed once. A password given here is visible in the process list; change it after signing in.',
    options: { name: { type: 'string' }, 'admin-username': { type: 'string' }, 'admin-password': { type: 'string' } },
    async run({ open, config, values, positionals, write }) {
      const slug = positionals[0];
      if (!slug) throw new UsageError('tenant:create needs a <slug>');
      // A malformed argument is a usage error (status 2), told before the database is asked.
      if (!SLUG.test(slug)) throw new UsageError('the <slug> must be 1 to 63 lower-case letters, digits and dashes, not starting or ending with a dash');
      const name = tenantName(required(values, 'name'));
      const adminUsername = required(values, 'admin-username');
      await checkUsername(adminUsername, '--admin-username');
      const given = values['admin-password'];
      if (typeof given === 'string') await checkPasswordLength(given, config, '--admin-password');
      const { createTenant, generatePassword, generatedPasswordNotice } = await import('../resources/tenants/create-tenant.ts');
      const { commandSource } = await import('../resources/audit-events/record.ts');
      const password = typeof given === 'string' ? given : generatePassword();
      const source = commandSource('tenant:create');
      const db = await open();
      const created = await createTenant(db, { slug, name, adminUsername, adminPassword: password }, source).catch((error: unknown) => {
        throw new Failure(error instanceof Error ? error.message : String(error));
      });
      write(`tenant ${slug} created (id ${created.tenantId}), administrator id ${created.adminUserId}\n`);
      if (given === undefined) write(generatedPasswordNotice({ slug, name }, adminUsername, password));
    },
  },
  'token:create': {
    usage: 'atrium token:create --tenant <slug> --username <username> [--expires-in <seconds>]',
    summary: 'Issue an access token for an active user; prints only the token.',
    details: 'The lifetime defaults to ACCESS_TOKEN_TTL.',
    options: { tenant: { type: 'string' }, username: { type: 'string' }, 'expires-in': { type: 'string' } },
    async run({ open, config, values, write }) {
      const raw = values['expires-in'];
      // Decimal digits only, as the configuration's integers, and no later than ACCESS_TOKEN_TTL may be.
      if (typeof raw === 'string' && !/^\d{1,10}$/.test(raw))
        throw new UsageError(`--expires-in must be a whole number of seconds from 1 to ${MAX_EXPIRES_IN}`);
      const expiresIn = typeof raw === 'string' ? Number(raw) : config.accessTokenTtlSeconds;
      if (expiresIn < 1 || expiresIn > MAX_EXPIRES_IN) throw new UsageError(`--expires-in must be a whole number of seconds from 1 to ${MAX_EXPIRES_IN}`);
      const tenantSlug = required(values, 'tenant');
      const username = required(values, 'username');
      const db = await open();
      const tenantId = await tenantIdOf(db, tenantSlug);
      const [{ issueAccessToken }, { activeUserNamed }] = await Promise.all([auth(), users()]);
      const token = await db.tenant(tenantId, async (tx) => {
        const user = await activeUserNamed(tx, username);
        if (!user) throw new Failure(`no active user "${username}" in tenant "${tenantSlug}"`);
        const { audit, commandSource } = await import('../resources/audit-events/record.ts');
        // The value is a credential: the trail records that a token was issued, and to whom.
        await audit(tx, commandSource('token:create'), {
          action: 'access_token.created',
          target: { type: 'user', id: user.id, label: user.label },
          details: { expires_in: expiresIn },
        });
        return issueAccessToken(tx, tenantId, user.id, expiresIn);
      });
      write(`${token.access_token}\n`);
    },
  },
  'user:set-password': {
    usage: 'atrium user:set-password --tenant <slug> --username <username>',
    summary: "Set an active user's password (a lost password); ends the user's sessions.",
    details:
      'The password is read from standard input (one line), or asked for twice at a prompt that does not echo it.\n' +
      'Every session and pending login token of the user ends, and the sign-in failure counts start over.\n' +
      'Example: printf %s "$NEW_PASSWORD" | atrium user:set-password --tenant demo --username admin',
    options: { tenant: { type: 'string' }, username: { type: 'string' } },
    async run({ open, config, values, write }) {
      const tenantSlug = required(values, 'tenant');
      const username = required(values, 'username');
      // Asked for once the database is open: the embedded PostgreSQL's start comes before the prompt, not after the answer.
      const db = await open();
      const password = await readPassword('New password: ', 'Repeat it: ').catch((error: unknown) => {
        if (error instanceof Interrupted) throw error;
        throw new UsageError(error instanceof Error ? error.message : String(error));
      });
      await checkPasswordLength(password, config, 'the password');
      const tenantId = await tenantIdOf(db, tenantSlug);
      const { hashPassword } = await import('../platform/auth/passwords.ts');
      const { activeUserNamed, resetPassword } = await users();
      const passwordHash = await hashPassword(password, tenantId);
      await db.tenant(tenantId, async (tx) => {
        const user = await activeUserNamed(tx, username);
        if (!user) throw new Failure(`no active user "${username}" in tenant "${tenantSlug}"`);
        await resetPassword(tx, config, { id: user.id, username }, passwordHash);
        const { audit, commandSource } = await import('../resources/audit-events/record.ts');
        const { SECRET_CHANGED } = await import('../platform/audit/audit.ts');
        await audit(tx, commandSource('user:set-password'), {
          action: 'user.password_changed',
          target: { type: 'user', id: user.id, label: user.label },
          changes: { password: SECRET_CHANGED },
        });
      });
      write(`password of ${username} in tenant ${tenantSlug} set; the user's sessions ended\n`);
    },
  },
  'pictures:strip-metadata': {
    usage: 'atrium pictures:strip-metadata',
    summary: 'Store the profile pictures kept from before Atrium removed their metadata (EXIF, XMP, …) without it.',
    details:
      "Every tenant's pictures are read in turn; each that carries metadata is stored again without it, the image data\n" +
      "byte for byte, as an upload is stored now, and recorded in its tenant's audit trail as a change of the user's\n" +
      'profile picture. A picture whose structure cannot be followed is left as stored and counted. Safe to run again\n' +
      '(it then changes nothing) and while servers run. See docs/users.md#profile-pictures.',
    options: {},
    async run({ open, write }) {
      const db = await open();
      const [{ stripStoredPictures }, { commandSource }] = await Promise.all([
        import('../resources/users/stored-pictures.ts'),
        import('../resources/audit-events/record.ts'),
      ]);
      const { read, stripped, unreadable } = await stripStoredPictures(db, commandSource('pictures:strip-metadata'));
      write(
        `${read} profile picture(s) read: ${stripped} stored again without their metadata` +
          (unreadable > 0 ? `, ${unreadable} left as stored (their structure could not be followed)` : '') +
          '\n',
      );
    },
  },
  'citus:distribute': {
    usage: 'atrium citus:distribute [--shard-count <n>]',
    summary: 'On a Citus coordinator: distribute the tenant tables by tenant_id, make tenants a reference table.',
    details:
      'Run it after atrium migrate, against the coordinator, as a superuser; safe to run again (it then changes nothing).\n' +
      'Every table with a tenant_id column is distributed by it, co-located with users; tenants becomes a reference\n' +
      'table; the sign-in counts, installation keys, job leases and the job queue stay on the coordinator. From then\n' +
      'on a tenant table that a later migration creates is distributed as it is created. --shard-count sets the\n' +
      "shards of the tenant tables the first time (Citus' citus.shard_count otherwise). See docs/scaling.md.",
    options: { 'shard-count': { type: 'string' } },
    async run({ open, config, values, write }) {
      const raw = values['shard-count'];
      // Decimal digits only, as --expires-in and the configuration's integers ("0x10" or "1e3" are no shard count).
      const shardCount = typeof raw === 'string' && /^\d{1,5}$/.test(raw) ? Number(raw) : undefined;
      if (typeof raw === 'string' && (shardCount === undefined || shardCount < 1 || shardCount > 64_000)) {
        throw new UsageError('--shard-count must be an integer from 1 to 64000');
      }
      const db = await open();
      const [{ distribute, CitusRefusal }, { unreadCountTriggersOnCitus }] = await Promise.all([
        import('../platform/database/citus.ts'),
        import('../resources/notifications/citus.ts'),
      ]);
      // As the driver reads it: the URL may list several hosts, which `URL` cannot parse.
      const appLogin = config.appDatabaseUrl ? parseConnectionUrl(config.appDatabaseUrl)?.user : undefined;
      const result = await distribute(db.ownerSql, { shardCount, appLogin, adaptations: unreadCountTriggersOnCitus }).catch((error: unknown) => {
        throw error instanceof CitusRefusal ? new Failure(error.message) : error;
      });
      const { distributed, reference, coordinator } = result.placements;
      write(
        (result.distributed.length + result.referenced.length === 0
          ? `every table is already in place (Citus ${result.citusVersion}); nothing changed\n`
          : `Citus ${result.citusVersion}: distributed ${result.distributed.length} table(s) by tenant_id, made ${result.referenced.length} a reference table\n`) +
          `  distributed by tenant_id, co-located with users: ${distributed.join(', ')}\n` +
          `  reference tables (a copy on every node): ${reference.join(', ')}\n` +
          `  on the coordinator: ${[...coordinator, 'the job queue (schema pgboss)'].join(', ')}\n`,
      );
    },
  },
};

function overview(): string {
  const width = Math.max(...Object.keys(commands).map((name) => name.length));
  return [
    'usage: atrium <command> [options]',
    '',
    'Commands:',
    ...Object.entries(commands).map(([name, command]) => `  ${name.padEnd(width)}  ${command.summary}`),
    '',
    'atrium <command> --help explains a command. In a checkout the command is npx atrium;',
    'in the container image, node bin/atrium.js. Configuration comes from the environment',
    '(and .env in the working folder), as for the server; see the README.',
  ].join('\n');
}

function commandHelp(name: string): string {
  const command = commands[name]!;
  return [`usage: ${command.usage}`, '', command.summary, ...(command.details ? [command.details] : [])].join('\n');
}

async function run(argv: string[], { env, write }: CommandIo): Promise<void> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    const topic = rest[0];
    if (topic !== undefined && !Object.hasOwn(commands, topic)) throw new UsageError(`unknown command "${topic}"`);
    write(`${topic ? commandHelp(topic) : overview()}\n`);
    return;
  }
  if (name === undefined) throw new UsageError('no command given');
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!command) throw new UsageError(`unknown command "${name}"`);
  let parsed: { values: Options; positionals: string[] };
  try {
    const { values, positionals, tokens } = parseArgs({
      args: rest,
      allowPositionals: true,
      strict: true,
      tokens: true,
      options: { ...command.options, help: { type: 'boolean', short: 'h' } },
    });
    parsed = { values, positionals };
    // parseArgs keeps the last of an option given twice: `--name a --name b` would pass over `a` without a word.
    const seen = new Set<string>();
    for (const token of tokens) {
      if (token.kind !== 'option') continue;
      if (seen.has(token.name)) throw new UsageError(`--${token.name} is given more than once`, name);
      seen.add(token.name);
    }
  } catch (error) {
    if (error instanceof UsageError) throw error;
    // Node's own message ("Unknown option '--x'. …"), without its error code.
    throw new UsageError(error instanceof Error ? error.message : String(error), name);
  }
  if (parsed.values.help) {
    write(`${commandHelp(name)}\n`);
    return;
  }
  const extra = parsed.positionals[command.positionals ?? 0];
  if (extra !== undefined) throw new UsageError(`unexpected argument "${extra}"`, name);

  const config = entryPointConfig(env);
  // Opened when the command asks (`Command.run`), once: after its arguments are checked.
  // Until then the command has started nothing and holds no process-wide state.
  let opening: Promise<DatabaseServer> | undefined;
  let db: Database | undefined;
  let opened: Promise<Database> | undefined;
  const open = () =>
    (opened ??= (async () => {
      setPasswordHashCost(config.passwordHashCost);
      const [{ default: pino }, { Database }, { openDatabaseServer }, { toleratingConnectionLoss }] = await Promise.all([
        import('pino'),
        import('../platform/database/database.ts'),
        import('../database-server.ts'),
        import('../platform/database/connection-loss.ts'),
      ]);
      // Logs go to stderr: stdout carries only the command's answer (token:create prints the token).
      // LOG_LEVEL from the environment or `.env`, as every other setting; unset, only warnings.
      const logger = pino({ level: env.LOG_LEVEL || readDotEnv().LOG_LEVEL ? config.logLevel : 'warn' }, pino.destination(2));
      // As the server does (src/main.ts): a connection lost under a statement of the driver's own
      // (the database stopping on a signal while the command runs) does not end the process
      // before the signal's own exit.
      process.on(
        'unhandledRejection',
        toleratingConnectionLoss((error) => logger.debug({ err: error }, 'database connection lost under a statement of the driver')),
      );
      // The embedded PostgreSQL runs in a session of its own, out of reach of a terminal's
      // Ctrl-C: on a signal, stop what this command started, then end as the signal would
      // (128 + its number). A second signal a second later or more ends at once.
      onTerminationSignals({
        first: (signal) =>
          void (async () => {
            await db?.close();
            await (await opening)?.stop();
          })().finally(() => process.exit(signalExitStatus(signal))),
        again: (signal) => process.exit(signalExitStatus(signal)),
      });
      opening = openDatabaseServer(config, logger, undefined, true);
      const server = await opening;
      const database = (db = new Database(server.url, { poolSize: 2, directUrl: config.databaseUrl ? config.databaseDirectUrl : undefined }));
      const applied = await database.migrate();
      const appLogin = config.appDatabaseUrl ? await database.ensureAppLogin(config.appDatabaseUrl) : 'unchanged';
      if (name === 'migrate') {
        write(
          applied.length > 0
            ? `applied ${applied.length} migration${applied.length === 1 ? '' : 's'}:\n${applied.map((tag) => `  ${tag}\n`).join('')}`
            : 'the database is up to date; no migration to apply\n',
        );
        if (appLogin !== 'unchanged') {
          const role = parseConnectionUrl(config.appDatabaseUrl!)?.user;
          write(`${appLogin} the application login ${role} (a member of atrium_app, no superuser, no BYPASSRLS)\n`);
        }
      }
      return database;
    })());
  try {
    await command.run({ open, config, write, ...parsed }).catch((error: unknown) => {
      if (error instanceof UsageError && error.command === undefined) throw new UsageError(error.message, name);
      throw error;
    });
  } finally {
    await db?.close();
    // A server that did not start has nothing to stop (its error is the command's).
    await (await opening?.catch(() => undefined))?.stop();
  }
}

/**
 * Runs `atrium <argv>`: the answer through `io.write`, a failure's message through `io.tell`
 * (after a usage mistake, with the usage). Resolves to the exit status: 0 done, 1 failed,
 * 2 a usage mistake, 130 interrupted at a prompt (Ctrl-C), as SIGINT would end it.
 */
export async function runCommand(argv: string[], io: CommandIo): Promise<0 | 1 | 2 | 130> {
  try {
    await run(argv, io);
    return 0;
  } catch (error) {
    if (error instanceof Interrupted) return 130;
    io.tell(`atrium: ${failureMessage(error)}\n`);
    if (!(error instanceof UsageError)) return 1;
    io.tell(`\n${error.command ? commandHelp(error.command) : overview()}\n`);
    return 2;
  }
}
