/**
 * A running Atrium for one test file: its own database (a copy of the run's template, which
 * holds the migrations and the job queue's schema), the demo seed, and an HTTP client that
 * checks every response against the spec. It serves the API without job workers (the `api`
 * role) unless the file asks for them with `{ role: 'all' }`.
 */
import { and, eq } from 'drizzle-orm';
import pino from 'pino';
import qs from 'qs';
import type { Test } from 'tap';
import { operations, type OperationId } from '../../generated/operations.ts';
import { loggerOptions } from '../../src/app.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { toleratingConnectionLoss } from '../../src/platform/database/connection-loss.ts';
import type { Database } from '../../src/platform/database/database.ts';
import { users } from '../../src/resources/users/table.ts';
import { createAtrium, type Atrium } from '../../src/server.ts';
import { contractViolations, headerViolations, serializerViolations } from './contract.ts';
import { createTestDatabase } from './database.ts';
import { exitWhenEnded } from './processes.ts';
import { DEMO_PASSWORD, tenantData, type TenantData } from './tenant-data.ts';

export { DEMO_PASSWORD, type TestTenant } from './tenant-data.ts';

/** The `X-Request-Id` that `api.call` sends unless told otherwise. */
export const TEST_REQUEST_ID = 'atrium-test';

export interface CallOptions {
  params?: Record<string, string | number>;
  query?: Record<string, unknown>;
  body?: unknown;
  /** Raw request body (sent as is, with `contentType`). */
  payload?: string | Buffer;
  contentType?: string;
  token?: string | null;
  headers?: Record<string, string>;
}

export interface CallResult<T = any> {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: T;
  text: string;
  /** The response bytes as sent (binary answers such as pictures). */
  raw: Buffer;
}

export interface TestApi extends TenantData {
  atrium: Atrium;
  db: Database;
  config: Config;
  /** Every line the server logged at its `logLevel` (none at `silent`, the default), as JSON text. */
  logLines: string[];
  call<T = any>(t: Test, operationId: OperationId, options?: CallOptions): Promise<CallResult<T>>;
}

/**
 * As the entry point does (src/main.ts): a lost connection under a statement of the driver's
 * own that nobody awaits (the array types it reads on each new connection) does not end
 * the process; any other unhandled rejection still does. Files that terminate the
 * server's connections ended mid-test now and then without it (`read ECONNRESET`).
 */
process.on(
  'unhandledRejection',
  toleratingConnectionLoss(() => {}),
);

export async function startTestApi(t: Test, overrides: Partial<Config> = {}): Promise<TestApi> {
  const database = await createTestDatabase();
  const config: Config = {
    // The suite's weak password hashes: configuration refuses them outside NODE_ENV=test.
    ...loadConfig({ NODE_ENV: 'test', PASSWORD_HASH_COST: 'test' }),
    role: 'api',
    databaseUrl: database.url,
    appDatabaseUrl: database.appUrl,
    logLevel: process.env.TEST_LOG_LEVEL ?? 'silent',
    adminPassword: DEMO_PASSWORD,
    // The general rate limit stays in force, out of reach of files that send many requests.
    rateLimitPerToken: 1_000_000,
    rateLimitPerAddress: 1_000_000,
    ...overrides,
  };
  const logged = errorsLogged(config.logLevel);
  const atrium = await createAtrium(config, { logger: logged.logger });
  t.teardown(async () => {
    await atrium.stop();
    await database.drop();
  });
  exitWhenEnded(t);
  const db = atrium.services.db;
  const app = atrium.app!;

  const api: TestApi = {
    atrium,
    db,
    config,
    logLines: logged.lines,
    async call(t, operationId, options = {}) {
      const meta = operations[operationId] as (typeof operations)[typeof operationId] | undefined;
      if (!meta) throw new Error(`${operationId} is not in generated/operations.ts: add it to openapi/ and run npm run generate`);
      const url = meta.path.replace(/\{(\w+)\}/g, (_, name: string) => {
        const value = options.params?.[name];
        if (value === undefined) throw new Error(`${operationId}: missing path parameter ${name}`);
        return encodeURIComponent(String(value));
      });
      const query = options.query ? qs.stringify(options.query, { encodeValuesOnly: true }) : '';
      // One request id for every call unless a test sends its own: answers that must be
      // indistinguishable (another tenant's record, a missing one) stay byte for byte equal.
      const headers: Record<string, string> = { 'x-request-id': TEST_REQUEST_ID, ...options.headers };
      if (options.token) headers.authorization = `Bearer ${options.token}`;
      let payload: string | Buffer | undefined = options.payload;
      if (options.body !== undefined) {
        payload = JSON.stringify(options.body);
        headers['content-type'] = 'application/json';
      }
      if (options.contentType) headers['content-type'] = options.contentType;
      const before = logged.messages.length;
      const response = await app.inject({ method: meta.method, url: query ? `${url}?${query}` : url, headers, payload });
      const contentType = String(response.headers['content-type'] ?? '');
      // NDJSON (the audit export) is text: only JSON and problem+json are parsed.
      const body = /[/+]json\b/.test(contentType) && response.body.length > 0 ? response.json() : response.body;
      const violations = [
        ...contractViolations(operationId, response.statusCode, contentType, body === '' ? undefined : body),
        ...headerViolations(operationId, response.statusCode, response.headers),
      ];
      if (response.statusCode === 500) {
        violations.push(...serializerViolations(logged.messages.slice(before)));
        // The answer says only "internal server error": the cause is what the server logged.
        for (const message of logged.messages.slice(before)) t.comment(`${operationId} → 500; the server logged: ${message}`);
      }
      t.strictSame(violations, [], `${operationId} → ${response.statusCode} honours the spec`);
      return { status: response.statusCode, headers: response.headers, body, text: response.body, raw: response.rawPayload };
    },

    ...tenantData(db),
  };
  return api;
}

/**
 * A worker process (`ATRIUM_ROLE=worker`) on `api`'s database, for a file whose server
 * serves the API alone: the jobs the API sends run there, as in a deployment, and the
 * API's statement counts (`db.queryCount`) stay its own. Stopped at the file's end.
 */
export async function startTestWorker(t: Test, api: TestApi): Promise<Atrium> {
  const worker = await createAtrium({ ...api.config, role: 'worker' }, { logger: pino({ level: 'silent' }) });
  t.teardown(() => worker.stop());
  return worker;
}

/**
 * The test server's logger, with the options production logs with (redaction, the request
 * serializer): every line at `level` kept in `lines` (and written to stderr when
 * `TEST_LOG_LEVEL` asks for it), and the message of every error logged kept in `messages`,
 * so that a 500 can be told apart by its cause (see `serializerViolations`).
 */
function errorsLogged(level: string): { logger: pino.Logger; messages: string[]; lines: string[] } {
  const messages: string[] = [];
  const lines: string[] = [];
  const keepErrors = {
    write(line: string) {
      const entry = JSON.parse(line) as { err?: { message?: unknown } };
      if (typeof entry.err?.message === 'string') messages.push(entry.err.message);
    },
  };
  const streams: pino.StreamEntry[] = [{ level: 'error', stream: keepErrors }];
  if (level !== 'silent') {
    streams.push({ level: level as pino.Level, stream: { write: (line: string) => void lines.push(line) } });
    if (process.env.TEST_LOG_LEVEL) streams.push({ level: level as pino.Level, stream: pino.destination(2) });
  }
  const lowest = Math.min(...streams.map((entry) => pino.levels.values[entry.level!]!));
  const options = loggerOptions(pino.levels.labels[lowest]!) as pino.LoggerOptions;
  return { logger: pino(options, pino.multistream(streams)), messages, lines };
}

/** Looks a user row up as the owner (bypassing tenancy), for assertions. */
export async function ownerUser(db: Database, tenantId: number, userId: number) {
  const [row] = await db.owner
    .select()
    .from(users)
    .where(and(eq(users.tenantId, tenantId), eq(users.id, userId)));
  return row;
}
