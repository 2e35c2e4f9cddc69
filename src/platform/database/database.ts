import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql, type ExtractTablesWithRelations } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { drizzle, PostgresJsSession, PostgresJsTransaction, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import { type Principal, type PrincipalCheck, samePrincipal } from '../auth/principal-cache.ts';
import type { Permission } from '../auth/permissions.ts';
import { isConnectionLoss } from './connection-loss.ts';
import type { SelectStatement, Statement } from './select-statement.ts';
import { TENANT_SETTING, tenantSettingName } from './tenancy.ts';
import { guardTransactions } from './transaction-guard.ts';

export type Db = PostgresJsDatabase;
/** A transaction whose tenant is set: every row-level security policy is in force. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

/** The relational schema drizzle is given: none (queries name their tables). */
type NoSchema = Record<string, never>;

export const APP_ROLE = 'atrium_app';

/**
 * Makes `tenantId` the tenant of the transaction `tx` until it ends: the one place the
 * tenant setting is written (docs/tenancy-and-security.md#the-tenant-setting).
 * `Database.tenant()` sends the same statement (`SET_TENANT`); code that learns the tenant
 * only inside its transaction (a consumed login token names it) calls it there.
 */
export async function setTenant(tx: Tx, tenantId: number): Promise<void> {
  await tx.execute(sql`select set_config(${tenantSettingName}, ${String(tenantId)}, true)`);
}

/** `setTenant`'s statement, sent by `Database.tenant()` straight to the driver (see there). */
const SET_TENANT = `select set_config('${TENANT_SETTING}', $1, true)`;
/**
 * The same, and in the same statement the principal the bearer token `$2` yields now
 * (none: null columns), for a request that started from a remembered one.
 */
const SET_TENANT_AND_LOOK_UP_PRINCIPAL = `select set_config('${TENANT_SETTING}', $1, true) as tenant,
  a.tenant_id, a.user_id, a.token_id, a.permissions, a.password_change_required
  from (values (1)) as one left join lateral atrium_authenticate($2::bytea) as a on true`;

/** A row of `atrium_authenticate` (null columns: the token yields no principal). */
export interface PrincipalRow {
  tenant_id: string | null;
  user_id: string | null;
  token_id: string | null;
  permissions: Permission[] | null;
  password_change_required: boolean | null;
}

export function principalOf(row: PrincipalRow | undefined): Principal | null {
  if (!row || row.tenant_id === null) return null;
  return {
    tenantId: Number(row.tenant_id),
    userId: Number(row.user_id),
    tokenId: Number(row.token_id),
    permissions: row.permissions ?? [],
    passwordChangeRequired: row.password_change_required === true,
  };
}

/** Marks `check` confirmed or stale by the principal the token yields now (`row`); stale throws. */
function confirm(check: PrincipalCheck, row: PrincipalRow | undefined): void {
  const found = principalOf(row);
  if (found && samePrincipal(found, check.expected)) check.confirmed = true;
  else check.stale = true;
  if (check.stale) throw new StalePrincipalError();
}

/**
 * The driver's statement groups (as patched, `patches/postgres+*.patch`): statements made
 * by the pool, not yet awaited, written back to back with one Sync after the last, so the
 * server runs them as one implicit transaction; all fail when one does.
 */
type Grouping = postgres.Sql & { group(parts: readonly postgres.PendingQuery<postgres.Row[]>[]): Promise<unknown[]> };

/**
 * Failures of a prepared statement the connection holds that another try prepares anew:
 * it no longer exists on the server (a pooler discarded it), or its plan no longer fits
 * the table (a migration changed it). The driver retries such a statement alone; a group
 * fails, and is sent again.
 */
const PREPARED_STATEMENT_GONE = new Set(['FetchPreparedStatement', 'RevalidateCachedQuery', 'transformAssignedExpr']);
const isStalePreparedStatement = (error: unknown) => PREPARED_STATEMENT_GONE.has((error as { routine?: unknown } | null)?.routine as string);

/**
 * Thrown by a transaction whose request started from a remembered principal that the
 * token no longer yields: the transaction is rolled back, and the request is answered
 * again from the principal the token yields now (src/platform/http/operations.ts).
 */
export class StalePrincipalError extends Error {
  constructor() {
    super('The remembered principal of this request no longer holds.');
  }
}

/**
 * drizzle sends every query that is not explicitly `.prepare()`d with `prepare: false`,
 * so PostgreSQL plans it anew each time (≈0.3 ms with row-level security, more than the
 * query itself). postgres.js caches prepared statements per connection by query text;
 * this wrapper turns that on for every query, inside transactions too.
 */
function preparing(client: postgres.Sql, onQuery: () => void): postgres.Sql {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (query: string, params?: unknown[], options?: postgres.UnsafeQueryOptions) => {
          onQuery();
          return target.unsafe(query, params as never, { ...options, prepare: true });
        };
      }
      if (property === 'begin') {
        return (...args: unknown[]) => {
          const callback = args.pop() as (tx: postgres.TransactionSql) => unknown;
          return (target.begin as (...a: unknown[]) => unknown)(...args, (tx: postgres.TransactionSql) =>
            callback(preparing(tx as unknown as postgres.Sql, onQuery) as unknown as postgres.TransactionSql),
          );
        };
      }
      return Reflect.get(target, property, receiver) as unknown;
    },
  });
}
/** Counts the statements sent through `client` (behind a pooler, where they are not prepared). */
function counting(client: postgres.Sql, onQuery: () => void): postgres.Sql {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (query: string, params?: unknown[], options?: postgres.UnsafeQueryOptions) => {
          onQuery();
          return target.unsafe(query, params as never, options);
        };
      }
      if (property === 'begin') {
        return (...args: unknown[]) => {
          const callback = args.pop() as (tx: postgres.TransactionSql) => unknown;
          return (target.begin as (...a: unknown[]) => unknown)(...args, (tx: postgres.TransactionSql) =>
            callback(counting(tx as unknown as postgres.Sql, onQuery) as unknown as postgres.TransactionSql),
          );
        };
      }
      return Reflect.get(target, property, receiver) as unknown;
    },
  });
}

const migrationsFolder = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../drizzle');
/** Arbitrary constant: serialises concurrent `migrate` runs (several processes starting). */
const MIGRATION_LOCK = 720_431_977;
/** The migrations of this build, oldest first: `tag` names the SQL file, `when` orders them (drizzle's journal). */
const journal = (JSON.parse(readFileSync(path.join(migrationsFolder, 'meta/_journal.json'), 'utf8')) as { entries: { tag: string; when: number }[] }).entries;
const migrationCount = journal.length;

/**
 * Delay before a pool reconnects, by the pool's count of connections lost with an error.
 * postgres.js counts those across the whole pool, so a restart that drops every
 * connection at once would otherwise hold reconnection off for up to 20 s (its default
 * grows as 3^n / 100 s). Capped at half a second: a server that stays away is still not
 * hammered, and one that is back is used at once.
 */
const reconnectDelaySeconds = (lost: number) => Math.min(0.01 * lost, 0.5);

/**
 * How long a request waits for a connection while the server refuses or does not answer
 * (postgres.js keeps trying until then); it then answers 503.
 */
const CONNECT_TIMEOUT_SECONDS = 5;
/** How long readiness waits for the database before it answers "not ready". */
const READINESS_TIMEOUT_MS = 2_000;

/** `check`'s answer, or false when it takes longer than `ms`. */
async function within(check: Promise<boolean>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([check, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Lets the sockets of lost connections finish closing before a retry. postgres.js reports
 * a reset connection on the socket's `error` event and takes it out of the pool only on
 * the `close` that follows; a query handed to it in between is never answered (it waits
 * out the connect timeout).
 */
const settleClosedConnections = () => new Promise((resolve) => setTimeout(resolve, 10));

export interface DatabaseOptions {
  poolSize?: number;
  /**
   * How the application pool logs in: a role that cannot bypass row-level security
   * (`atrium_app`, or a login role that is a member of it). Without it the pool logs in
   * as the owner and switches to `atrium_app` at connection start (weaker: code able to
   * run arbitrary SQL could switch back).
   */
  appUrl?: string;
  /**
   * A direct connection to the same database, when `url` (and `appUrl`) go through a
   * transaction-pooling proxy: migrations (a session advisory lock) and LISTEN need a
   * session of their own, and the pooled connections then send no named prepared
   * statements (a later transaction may run on another server connection).
   */
  directUrl?: string;
}

const OWNER_POOL_SIZE = 4;

/**
 * Two pools over one server: `owner` (the role in DATABASE_URL: migrations, tenant
 * creation, the job queue) and `app`, whose connections run as `atrium_app`, which cannot
 * bypass row-level security. Requests only ever use `app`, through `tenant()`.
 */
export class Database {
  readonly ownerSql: postgres.Sql;
  readonly appSql: postgres.Sql;
  /** The pool LISTEN runs on: the direct connection behind a pooler, else the owner pool. */
  readonly listenSql: postgres.Sql;
  /** Where migrations, LISTEN and the job queue connect: the direct URL when one is set. */
  readonly sessionUrl: string;
  readonly owner: Db;
  readonly app: Db;
  /** The application pool as the driver made it, for statement groups (`tenantRead`); null behind a pooler. */
  private readonly appGroups: Grouping | null;
  /** The driver under `app` (preparing or counting its statements), and what drizzle needs to build a transaction over it. */
  private readonly appClient: postgres.Sql;
  private readonly dialect = new PgDialect();
  /** Statements sent through drizzle on the app pool; tests use it to prove query counts are constant. */
  queryCount = 0;

  /** Whether the application pool logs in as its own role (see `DatabaseOptions.appUrl`). */
  readonly dedicatedAppLogin: boolean;
  /** Most connections each pool opens (metrics). */
  readonly poolSizes: { owner: number; app: number };

  /**
   * Tries at a statement that failed on a lost connection: after a restart every pooled
   * connection may be dead, and each is found out only by using it, so one more than the
   * larger pool holds.
   */
  private readonly reconnectAttempts: number;
  /** How a connection of its own reaches the server as each pool does (readiness' second opinion). */
  private readonly probes: { url: string; options: postgres.Options<Record<string, never>> }[];

  constructor(
    readonly url: string,
    options: DatabaseOptions = {},
  ) {
    const appPoolSize = options.poolSize ?? 10;
    this.poolSizes = { owner: OWNER_POOL_SIZE, app: appPoolSize };
    this.reconnectAttempts = Math.max(OWNER_POOL_SIZE, appPoolSize) + 1;
    const pooled = options.directUrl !== undefined;
    this.sessionUrl = options.directUrl ?? url;
    // Both pools' transactions are guarded against the driver's writes to a closed connection (transaction-guard.ts).
    const appConnection = options.appUrl ? { application_name: 'atrium' } : { options: `-c role=${APP_ROLE}`, application_name: 'atrium' };
    const probe = { max: 1, onnotice: () => {}, connect_timeout: READINESS_TIMEOUT_MS / 1000, prepare: false, idle_timeout: 1 };
    this.probes = [
      { url, options: { ...probe, connection: { application_name: 'atrium-owner' } } },
      { url: options.appUrl ?? url, options: { ...probe, connection: appConnection } },
    ];
    this.ownerSql = guardTransactions(
      postgres(url, {
        max: OWNER_POOL_SIZE,
        onnotice: () => {},
        backoff: reconnectDelaySeconds,
        connect_timeout: CONNECT_TIMEOUT_SECONDS,
        prepare: !pooled,
        connection: { application_name: 'atrium-owner' },
      }),
    );
    this.listenSql = pooled
      ? postgres(this.sessionUrl, { max: 1, onnotice: () => {}, backoff: reconnectDelaySeconds, connection: { application_name: 'atrium-owner' } })
      : this.ownerSql;
    this.dedicatedAppLogin = options.appUrl !== undefined;
    const appPool = postgres(options.appUrl ?? url, {
      max: appPoolSize,
      onnotice: () => {},
      backoff: reconnectDelaySeconds,
      connect_timeout: CONNECT_TIMEOUT_SECONDS,
      prepare: !pooled,
      connection: appConnection,
    });
    this.appSql = guardTransactions(appPool);
    // Groups are made of prepared statements: behind a pooler (no named prepared statements) reads take `tenant()`.
    this.appGroups = pooled ? null : (appPool as Grouping);
    this.owner = drizzle(this.ownerSql);
    const countQuery = () => {
      this.queryCount++;
    };
    this.appClient = pooled ? counting(this.appSql, countQuery) : preparing(this.appSql, countQuery);
    this.app = drizzle(this.appClient);
  }

  /**
   * Runs `fn` in one transaction scoped to `tenantId` (row-level security).
   *
   * `BEGIN`, the tenant setting and `fn`'s first statement leave in one write and cost one
   * round trip (the driver, as patched, writes a transaction's statements behind its
   * `BEGIN` without waiting for its answer, in order on its one connection). Were the
   * setting to fail, the transaction is aborted and every later statement fails with it,
   * so nothing runs without the tenant; `fn`'s result is returned only once the setting
   * has succeeded.
   *
   * A transaction whose connection is lost before the tenant setting is answered (a pooled
   * connection the server has closed) is started again on a fresh one: the server answers
   * in order, so none of `fn`'s statements can have taken effect, and `fn` must be safe to
   * run again up to its first statement's answer. Once the setting is answered, a lost
   * connection is the caller's error (the error handler answers 503).
   */
  tenant<T>(tenantId: number, fn: (tx: Tx) => Promise<T>, check?: PrincipalCheck): Promise<T> {
    return this.transaction(
      tenantId,
      (client) => {
        // What drizzle's own `transaction()` builds over the driver's transaction (its
        // declarations type the session's client as a pool and a transaction at once).
        const session = new PostgresJsSession(client as unknown as postgres.Sql, this.dialect, undefined);
        return fn(new PostgresJsTransaction<NoSchema, ExtractTablesWithRelations<NoSchema>>(this.dialect, session as never, undefined));
      },
      check,
    );
  }

  /** `tenant()` over the driver's own transaction: `body` is given the driver's client. */
  private async transaction<T>(tenantId: number, body: (client: postgres.TransactionSql) => Promise<T>, check?: PrincipalCheck): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      let settingAnswered = false;
      try {
        return (await this.appClient.begin(async (client) => {
          const tenantSet = check
            ? client.unsafe<PrincipalRow[]>(SET_TENANT_AND_LOOK_UP_PRINCIPAL, [String(tenantId), check.tokenHash]).execute()
            : client.unsafe<PrincipalRow[]>(SET_TENANT, [String(tenantId)]).execute();
          // Awaited below; when `fn` throws first, its failure (if any) is that same error's echo.
          tenantSet.then(
            () => (settingAnswered = true),
            () => {},
          );
          const result = await body(client);
          const [row] = await tenantSet;
          if (check) confirm(check, row);
          return result;
        })) as T;
      } catch (error) {
        if (settingAnswered || attempt >= this.reconnectAttempts || !isConnectionLoss(error)) throw error;
        await settleClosedConnections();
      }
    }
  }

  /**
   * One statement that only reads, in `tenantId`'s scope, as `tenant()` runs it alone but
   * without `BEGIN` and `COMMIT`: the tenant setting (with the look-up of `check`) and the
   * statement leave as one statement group of the driver, which PostgreSQL runs as one
   * implicit transaction (one Sync). The setting is local to that transaction, as in
   * `tenant()`; when it fails, the statement is not run; and like any one query, groups of
   * several requests share the pool's connections and writes. Answers the statement's rows
   * as arrays of column values, in the select's order.
   *
   * Repeating a read is always safe: a group whose connection is lost, or whose prepared
   * statement the server no longer holds in that form, is sent again. Behind a pooler
   * (no prepared statements) it runs through `tenant()`.
   */
  async tenantRead(tenantId: number, statement: Statement, check?: PrincipalCheck): Promise<unknown[][]> {
    const pool = this.appGroups;
    if (!pool) return this.transaction(tenantId, (client) => client.unsafe(statement.sql, statement.params as never).values(), check);
    for (let attempt = 1; ; attempt++) {
      const setting = check
        ? pool.unsafe<PrincipalRow[]>(SET_TENANT_AND_LOOK_UP_PRINCIPAL, [String(tenantId), check.tokenHash], { prepare: true })
        : pool.unsafe<PrincipalRow[]>(SET_TENANT, [String(tenantId)], { prepare: true });
      const read = pool.unsafe(statement.sql, statement.params as never, { prepare: true }).values();
      this.queryCount += 2;
      try {
        const [[row], rows] = (await pool.group([setting as never, read as never])) as [PrincipalRow[], unknown[][]];
        if (check) confirm(check, row);
        return rows;
      } catch (error) {
        if (attempt >= this.reconnectAttempts || !(isConnectionLoss(error) || isStalePreparedStatement(error))) throw error;
        if (isConnectionLoss(error)) await settleClosedConnections();
      }
    }
  }

  /**
   * The rows of `select` (`selectStatement` or `preparedSelect`) in `tenantId`'s scope,
   * read as `tenantRead` reads one statement.
   */
  async tenantSelect<Row>(tenantId: number, select: SelectStatement<Row>): Promise<Row[]> {
    if (!select.mapRows) throw new Error('tenantSelect takes a select whose fields are all top-level (no nested objects)');
    return select.mapRows(await this.tenantRead(tenantId, select.statement));
  }

  /**
   * This database, with every `tenant()` transaction and `tenantRead()` also confirming
   * `check` (see src/platform/auth/principal-cache.ts): what a request that started from a
   * remembered principal is given.
   */
  confirming(check: PrincipalCheck): Database {
    const confirming = Object.create(this) as Database;
    confirming.tenant = (tenantId, fn) => this.tenant(tenantId, fn, check);
    confirming.tenantRead = (tenantId, statement) => this.tenantRead(tenantId, statement, check);
    return confirming;
  }

  /**
   * Runs a statement that changes nothing (a read, or a function that only reads), again on
   * a fresh connection when the connection is lost: repeating it is always safe.
   */
  async read<T>(statement: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await statement();
      } catch (error) {
        if (attempt >= this.reconnectAttempts || !isConnectionLoss(error)) throw error;
        await settleClosedConnections();
      }
    }
  }

  /** Applies the pending migrations; answers the names of those it applied (none when up to date). */
  async migrate(): Promise<string[]> {
    // One connection, so the session-level advisory lock covers the whole migration.
    const connection = postgres(this.sessionUrl, { max: 1, onnotice: () => {} });
    try {
      await connection`select pg_advisory_lock(${MIGRATION_LOCK})`;
      // drizzle applies every journal entry newer than the last one it recorded.
      const [{ recorded } = { recorded: false }] = await connection<{ recorded: boolean }[]>`
        select to_regclass('drizzle.__drizzle_migrations') is not null as recorded`;
      const [last] = recorded ? await connection<{ when: string | null }[]>`select max(created_at)::text as when from drizzle.__drizzle_migrations` : [];
      await migrate(drizzle(connection), { migrationsFolder });
      const appliedUpTo = last?.when == null ? -Infinity : Number(last.when);
      return journal.filter((entry) => entry.when > appliedUpTo).map((entry) => entry.tag);
    } finally {
      await connection.end({ timeout: 5 });
    }
  }

  /**
   * Refuses an application role that could see past row-level security: superuser,
   * BYPASSRLS, or not a member of `atrium_app` (whose grants the policies assume).
   */
  async verifyAppRole(): Promise<void> {
    const [role] = await this.appSql<{ name: string; rolsuper: boolean; rolbypassrls: boolean; member: boolean }[]>`
      select r.rolname as name, r.rolsuper, r.rolbypassrls, pg_has_role(current_user, ${APP_ROLE}, 'MEMBER') as member
      from pg_roles r where r.rolname = current_user`;
    if (!role || role.rolsuper || role.rolbypassrls || !role.member) {
      throw new Error(
        `The application database role "${role?.name ?? '?'}" must not be a superuser or have BYPASSRLS, and must be a member of ${APP_ROLE} ` +
          '(see ATRIUM_APP_DATABASE_URL in the README).',
      );
    }
  }

  /** Gives `atrium_app` a login (embedded server: the cluster belongs to this installation). */
  async enableAppLogin(password: string): Promise<void> {
    await this.ownerSql.unsafe(`alter role ${APP_ROLE} with login password '${password.replace(/'/g, "''")}'`);
  }

  /**
   * Ready = both pools reach the server within half of READINESS_TIMEOUT_MS (a connection
   * the server dropped is replaced, not reported) and every migration of this build is
   * applied. A pooled connection the server dropped while a statement was being written can hold
   * that statement until the driver's connect timeout, so when the pools do not answer in
   * time, connections of their own ask again (within READINESS_TIMEOUT_MS): readiness is about the server, and the pools
   * recover by themselves.
   */
  async isReady(): Promise<boolean> {
    if (await within(this.readyThrough(this.ownerSql, this.appSql), READINESS_TIMEOUT_MS / 2)) return true;
    const [owner, app] = this.probes.map(({ url, options }) => postgres(url, options)) as [postgres.Sql, postgres.Sql];
    try {
      return await within(this.readyThrough(owner, app), READINESS_TIMEOUT_MS);
    } finally {
      void Promise.all([owner.end({ timeout: 1 }), app.end({ timeout: 1 })]).catch(() => {});
    }
  }

  private readyThrough(owner: postgres.Sql, app: postgres.Sql): Promise<boolean> {
    return Promise.all([
      this.read(() => owner<{ count: number }[]>`select count(*)::int as count from drizzle.__drizzle_migrations`),
      this.read(() => app`select 1`),
    ]).then(
      ([[row]]) => (row?.count ?? 0) >= migrationCount,
      () => false,
    );
  }

  async close(): Promise<void> {
    await Promise.all([this.appSql.end({ timeout: 5 }), this.ownerSql.end({ timeout: 5 }), this.listenSql.end({ timeout: 5 })]);
  }
}
