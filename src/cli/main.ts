/**
 * `atrium` command line (docs/running.md#command-line). Same configuration as the server;
 * works whether or not a server is running (an embedded database already running on
 * DATA_DIR is reused).
 *   atrium migrate
 *   atrium tenant:create <slug> --name <text> --admin-username <u> --admin-password <p>
 *   atrium token:create --tenant <slug> --username <u> [--expires-in <seconds>]
 */
import { parseArgs } from 'node:util';
import pino from 'pino';
import { loadConfig } from '../config.ts';
import { Database } from '../platform/database/database.ts';
import { findTenantId, issueAccessToken } from '../resources/auth/queries.ts';
import { createTenant } from '../resources/tenants/create-tenant.ts';
import { activeUserNamed } from '../resources/users/queries.ts';
import { passwordLength } from '../resources/users/rules.ts';
import { openDatabaseServer } from '../server.ts';

const USAGE = `usage:
  atrium migrate
  atrium tenant:create <slug> --name <text> --admin-username <username> --admin-password <password>
  atrium token:create --tenant <slug> --username <username> [--expires-in <seconds>]`;

class UsageError extends Error {}

function required(values: Record<string, string | undefined>, name: string): string {
  const value = values[name];
  if (!value) throw new UsageError(`--${name} is required`);
  return value;
}

async function run(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      'admin-username': { type: 'string' },
      'admin-password': { type: 'string' },
      tenant: { type: 'string' },
      username: { type: 'string' },
      'expires-in': { type: 'string' },
    },
  });
  if (!['migrate', 'tenant:create', 'token:create'].includes(command ?? '')) throw new UsageError(`unknown command "${command ?? ''}"`);

  const config = loadConfig();
  // Logs go to stderr: stdout carries only the command's answer (token:create prints the token).
  const logger = pino({ level: process.env.LOG_LEVEL ?? 'warn' }, pino.destination(2));
  const server = await openDatabaseServer(config, logger);
  const db = new Database(server.url, { poolSize: 2, directUrl: config.databaseUrl ? config.databaseDirectUrl : undefined });
  try {
    await db.migrate();
    if (command === 'tenant:create') {
      const slug = positionals[0];
      if (!slug) throw new UsageError('tenant:create needs a <slug>');
      const password = required(values, 'admin-password');
      // Counted as the API counts a password (code points).
      if (passwordLength(password) < config.passwordMinLength) {
        throw new UsageError(`--admin-password must have at least ${config.passwordMinLength} characters`);
      }
      const created = await createTenant(db, {
        slug,
        name: required(values, 'name'),
        adminUsername: required(values, 'admin-username'),
        adminPassword: password,
      });
      process.stdout.write(`tenant ${slug} created (id ${created.tenantId}), administrator id ${created.adminUserId}\n`);
    } else if (command === 'token:create') {
      const expiresIn = values['expires-in'] === undefined ? config.accessTokenTtlSeconds : Number(values['expires-in']);
      if (!Number.isInteger(expiresIn) || expiresIn < 1) throw new UsageError('--expires-in must be a positive integer of seconds');
      const tenantSlug = required(values, 'tenant');
      const username = required(values, 'username');
      const tenantId = await findTenantId(db, tenantSlug);
      if (!tenantId) throw new UsageError(`no tenant "${tenantSlug}"`);
      const token = await db.tenant(tenantId, async (tx) => {
        const user = await activeUserNamed(tx, username);
        if (!user) throw new UsageError(`no active user "${username}" in tenant "${tenantSlug}"`);
        return issueAccessToken(tx, tenantId, user.id, expiresIn);
      });
      process.stdout.write(`${token.access_token}\n`);
    }
  } finally {
    await db.close();
    await server.stop();
  }
}

run(process.argv.slice(2)).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`atrium: ${error instanceof Error ? error.message : String(error)}\n`);
    if (error instanceof UsageError) process.stderr.write(`${USAGE}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  },
);
