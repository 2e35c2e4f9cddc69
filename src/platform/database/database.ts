import { AsyncLocalStorage } from 'node:async_hooks';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import type postgres from 'postgres';
import { dropConnection, isConnectionLoss, isReadOnlyServer } from './connection-loss.ts';
import { connectTo, driverUrl, parseConnectionUrl } from './connection-url.ts';
import { TenantShares } from '../tenant-shares.ts';
import { setLocalTenant } from './tenancy.ts';

export type Db = PostgresJsDatabase;
/** A transaction of `Database.tenant()` (its tenant set: every row-level security policy is in force) or `Database.transaction()`. */
export type Tx = PostgresJsDatabase;

export const APP_ROLE = 'atrium_app';

/**
 * Makes `tenantId` the tenant of the transaction `tx` until it ends, for code that learns
 * the tenant only inside its transaction (a consumed login token names it).
 * `Database.tenant()` sends the same statement when it opens the transaction.
 */
export async function setTenant(tx: Tx, tenantId: number): Promise<void> {
  await tx.execute(sql.raw(setLocalTenant(tenantId)));
  const transaction = openTransactions.getStore();
  if (transaction?.tx === tx) transaction.tenantId = tenantId;
}

/**
 * The tenant `tx`'s transaction was opened for (`Database.tenant`) or set to (`setTenant`),
 * as the integer Atrium set, never text from a request; undefined when it has none or is
 * not one of `Database`'s. For statements that name their tenant as a bound value, which
 * Citus routes to the one worker holding it (docs/scaling.md); row-level security still
 * decides what they see.
 */
export function transactionTenant(tx: Tx): number | undefined {
  const transaction = openTransactions.getStore();
  return transaction?.tx === tx && transaction.open ? transaction.tenantId : undefined;
}

/** The transaction a statement belongs to: its reserved connection, until the transaction ends. */
interface OpenTransaction {
  connection: postgres.ReservedSql;
  open: boolean;
  /** The drizzle instance its statements are issued on (`Database.tx`). */
  tx: Tx;
  /** Statements sent ahead (`sendAhead`), each answering its error or undefined once answered. */
  ahead: Promise<Error | undefined>[];
  /** Statements whose answers decide whether the transaction commits (`checkBeforeCommit`): each answers the refusal or undefined. */
  checks: Promise<Error | undefined>[];
  /** How many of `fn`'s statements were issued so far, and whether all were reads (`READ`). */
  issued: number;
  onlyRead: boolean;
  /** The `COMMIT`, once sent behind the transaction's only statement (`onlyStatement`). */
  committing?: Promise<postgres.RowList<postgres.Row[]>>;
  /** The transaction's tenant (`transactionTenant`). */
  tenantId?: number;
  /**
   * The error of the first of `fn`'s statements that failed. Every statement after it fails
   * only because it did ("current transaction is aborted", 25P02), and may reach `fn`'s
   * caller first (statements sent together under `Promise.all`): the transaction throws
   * this one instead.
   */
  failure?: unknown;
}

/** Whether `error` (drizzle's, holding the driver's as its cause, or the driver's) is PostgreSQL's "current transaction is aborted". */
const abortedBefore = (error: unknown) => ((error as { cause?: { code?: string } }).cause ?? (error as { code?: string })).code === '25P02';

/** The open transaction of the running code, whichever `Database` opened it. */
const openTransactions = new AsyncLocalStorage<OpenTransaction>();

/**
 * Sends `statement` (a drizzle query on `tx`, not yet awaited) in `tx`'s transaction
 * without waiting for its answer: it leaves in the same write as the transaction's next
 * statement, or as its `COMMIT`, and the server runs them in order. A write whose result
 * nobody reads (an audit event) so costs no round trip of its own. Its failure is the
 * transaction's: every later statement fails, `COMMIT` rolls back, and the transaction
 * throws this statement's error (not the later statements'). In a transaction other than
 * `Database.tenant()`'s or `Database.transaction()`'s (the owner's), it is awaited.
 */
export async function sendAhead(tx: Tx, statement: PromiseLike<unknown>): Promise<void> {
  const transaction = openTransactions.getStore();
  if (transaction?.tx !== tx) {
    await statement;
    return;
  }
  if (!transaction.open) throw new Error('A statement was sent ahead outside its transaction: it runs inside db.tenant() or db.transaction().');
  transaction.ahead.push(
    Promise.resolve(statement).then(
      () => undefined,
      (error: unknown) => (error instanceof Error ? error : new Error(`A statement sent ahead failed: ${String(error)}`)),
    ),
  );
}

/**
 * Issues `statement` (a drizzle read on `tx`, not yet awaited) now, without waiting for its
 * answer, and judges the answer with `verdict` before the transaction commits: an error it
 * answers rolls the transaction back, and the transaction throws it. The answer usually
 * arrives with a statement the function awaits later, so the check costs no round trip of
 * its own; when none follows, the `COMMIT` waits for it. A failure of the statement itself
 * is the transaction's, as a statement sent ahead. Outside the owner's transactions it is
 * awaited and judged at once.
 */
export async function checkBeforeCommit<T>(tx: Tx, statement: PromiseLike<T>, verdict: (answer: T) => Error | undefined): Promise<void> {
  const transaction = openTransactions.getStore();
  if (transaction?.tx !== tx) {
    const refusal = verdict(await statement);
    if (refusal) throw refusal;
    return;
  }
  const answered = Promise.resolve(statement);
  if (!transaction.open) {
    // Already started by the caller: its failure must not be left unobserved (it would end the process).
    answered.catch(() => {});
    throw new Error('A check was sent outside its transaction: it runs inside db.tenant() or db.transaction().');
  }
  const failed = (error: unknown) => (error instanceof Error ? error : new Error(`A checked statement failed: ${String(error)}`));
  transaction.checks.push(
    answered.then((answer) => {
      try {
        return verdict(answer);
      } catch (error) {
        return failed(error);
      }
    }, failed),
  );
}

/** A read: a statement that changes nothing, so ending its transaction early can commit nothing else. */
const READ = /^\s*select\b/i;

/**
 * Issues `statement` (a drizzle read on `tx`: a query, or a prepared statement's
 * `execute`) as the one statement of `tx`'s transaction, with the `COMMIT`
 * right behind it: `BEGIN` with the tenant setting, the read and `COMMIT` leave in one
 * write, and the transaction ends without a round trip of its own. After it the
 * transaction takes no statement (one issued fails as outside its transaction); a failing
 * read makes the server answer the `COMMIT` with a rollback, and the transaction throws
 * the read's error. When `tx` has issued a statement before, or the statement is not a
 * `select`, it is an ordinary statement of the transaction.
 */
export function onlyStatement<T>(tx: Tx, statement: () => PromiseLike<T>): Promise<T> {
  const transaction = openTransactions.getStore();
  if (transaction?.tx !== tx || !transaction.open || transaction.issued > 0) return Promise.resolve(statement());
  // `then` issues a drizzle query now (it is lazy until then).
  const answer = Promise.resolve(statement().then((value) => value));
  if (transaction.issued === 1 && transaction.onlyRead) {
    transaction.open = false;
    transaction.committing = transaction.connection.unsafe('commit').execute();
    transaction.committing.catch(() => {});
  }
  return answer;
}

/** The first error of the statements sent ahead in `transaction`, once all are answered; undefined when none failed. */
async function aheadFailure(transaction: OpenTransaction): Promise<Error | undefined> {
  for (const error of await Promise.all(transaction.ahead)) if (error !== undefined) return error;
  return undefined;
}

/**
 * The client of the one drizzle instance transactions use (`Database.tx`): each statement
 * goes to the reserved connection of the transaction whose function issued it, found in
 * the asynchronous context `run` opened. Every transaction shares that instance, so a
 * statement prepared once with drizzle's `.prepare()` (prepared.ts) runs in any of them.
 * A statement issued outside a transaction, or after its transaction ended (a promise left
 * running), fails: it could otherwise land in another request's transaction. Statements
 * are prepared on each connection unless a transaction-pooling proxy is in between
 * (PostgreSQL plans a statement with row-level security in about 0.3 ms; a prepared one
 * is planned once per connection), as `prepare` says of each text (`MAX_PREPARED_TEXTS`).
 */
function transactionClient(
  pool: postgres.Sql,
  current: AsyncLocalStorage<OpenTransaction>,
  prepare: (query: string) => boolean,
  onQuery: () => void,
): postgres.Sql {
  const client = {
    // The pool's (the reserved connections' too): drizzle sets its type parsers there.
    options: pool.options,
    unsafe(query: string, params?: unknown[], options?: postgres.UnsafeQueryOptions) {
      const transaction = current.getStore();
      if (!transaction?.open) throw new Error('A statement was issued outside its transaction: it runs inside db.tenant() or db.transaction().');
      onQuery();
      transaction.issued++;
      if (!READ.test(query)) transaction.onlyRead = false;
      // Handed to the connection now, not when first awaited: statements leave in the order they are issued.
      const pending = transaction.connection.unsafe(query, params as never, { ...options, prepare: prepare(query) }).execute();
      // Answered in order: the first failure is recorded before any statement after it settles.
      pending.catch((error: unknown) => (transaction.failure ??= error));
      return pending;
    },
  };
  return client as unknown as postgres.Sql;
}

/**
 * Statement texts the application pool prepares, at most: the driver keeps each text a
 * connection prepared until the connection closes (after 30 to 60 minutes), and the server
 * keeps its plans, tens of kilobytes each with row-level security. The texts follow client
 * input (a SCIM filter's shape, the filters and relations a list names, how many ids a page
 * loads), so they are taken first come: past this many, a new text runs unprepared (planned
 * on every execution) and no client can make either side keep statements without end
 * (docs/performance.md#prepared-statements).
 */
export const MAX_PREPARED_TEXTS = 1_000;

/** Whether a text is prepared: every text seen while fewer than `max` were, and no later one. */
function preparedTexts(max: number): (query: string) => boolean {
  const admitted = new Set<string>();
  return (query) => {
    if (admitted.has(query)) return true;
    if (admitted.size >= max) return false;
    admitted.add(query);
    return true;
  };
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
/**
 * Whether the session's server accepts writes: not a standby (in recovery), and not made
 * read-only (pg_auto_failover does so to a primary it demotes or has not finished promoting).
 */
const WRITABLE = `not pg_is_in_recovery() and current_setting('transaction_read_only') = 'off' as writable`;
/** How long readiness waits for the database before it answers "not ready". */
const READINESS_TIMEOUT_MS = 2_000;
/**
 * How long start-up (migrations, the application login) waits to reach the database. A
 * server that refuses, or accepts and closes (a URL naming an HTTP port: the answer is not
 * PostgreSQL's), fails at once; one that accepts and answers nothing would be waited for
 * without a word. A minute: a pooler that queues its clients (RDS Proxy, PgBouncer in
 * session mode) or a slow authentication may take long to answer.
 */
const REACH_TIMEOUT_MS = 60_000;

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
 * the `close` that follows; a transaction handed to it in between fails as lost too, and
 * uses up one of its attempts (after a restart, every pooled connection is such a one).
 */
const settleClosedConnections = () => new Promise((resolve) => setTimeout(resolve, 10));

/** `the database at host:port, …` of `url` (`fallback` for one that names none): a failure names the server it could not reach. */
function databaseAt(url: string, fallback: string): string {
  const hosts = parseConnectionUrl(url)?.hosts.map(({ host, port }) => `${host}:${port ?? 5432}`);
  return `the database at ${hosts?.join(', ') ?? fallback}`;
}

/** Refusals of a login, not of a server: 28000 no such role (or no pg_hba.conf entry), 28P01 another password. */
const NO_LOGIN: ReadonlySet<unknown> = new Set(['28000', '28P01']);

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
  /** How long start-up waits to reach the database (`REACH_TIMEOUT_MS` unless set; tests shorten it). */
  reachTimeoutMs?: number;
}

const OWNER_POOL_SIZE = 4;

/**
 * Which database `sql` reaches: its name, and its cluster's system identifier (a standby
 * shares its primary's); null where the role may not read it (`pg_control_system` revoked).
 */
async function reachedDatabase(sql: postgres.Sql): Promise<{ database: string; system: string | null }> {
  try {
    const [row] = await sql<{ database: string; system: string }[]>`
      select current_database() as database, (select system_identifier::text from pg_control_system()) as system`;
    return row!;
  } catch (error) {
    if ((error as { code?: unknown }).code !== '42501') throw error;
    const [row] = await sql<{ database: string }[]>`select current_database() as database`;
    return { database: row!.database, system: null };
  }
}

/**
 * Two pools over one server: `owner` (the role in DATABASE_URL: migrations, tenant
 * creation, the job queue) and the application pool, whose connections run as
 * `atrium_app`, which cannot bypass row-level security. Requests only ever use the
 * application pool, through `tenant()` (docs/architecture.md#the-request-path).
 */
export class Database {
  readonly ownerSql: postgres.Sql;
  readonly appSql: postgres.Sql;
  /** Where LISTEN connects (listener.ts copies its options for a connection of its own): the direct URL behind a pooler, else the owner pool. */
  readonly listenSql: postgres.Sql;
  /** Where migrations, LISTEN and the job queue connect: the direct URL when one is set. */
  readonly sessionUrl: string;
  readonly owner: Db;
  /** What every transaction's function is given: one drizzle instance whose statements go to the transaction they run in. */
  private readonly tx: Tx;
  private readonly transactions = openTransactions;
  /** Statements sent in `tenant()` and `transaction()`; tests use it to prove query counts are constant. */
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
  /** The readiness check under way: the probes that ask meanwhile share it. */
  private readiness: Promise<boolean> | null = null;
  /** Whether statements are prepared: not behind a transaction-pooling proxy (see `DatabaseOptions.directUrl`). */
  private readonly prepare: boolean;
  /** `DatabaseOptions.reachTimeoutMs`. */
  private readonly reachTimeoutMs: number;
  /** The request pool's connections, shared between tenants: no tenant's transactions take them all (the one kept back serves token look-ups too, which reserve none). */
  private readonly shares: TenantShares;

  constructor(
    readonly url: string,
    options: DatabaseOptions = {},
  ) {
    const appUrl = options.appUrl ?? url;
    const appPoolSize = options.poolSize ?? 10;
    this.poolSizes = { owner: OWNER_POOL_SIZE, app: appPoolSize };
    this.shares = new TenantShares(appPoolSize);
    this.reconnectAttempts = Math.max(OWNER_POOL_SIZE, appPoolSize) + 1;
    this.prepare = options.directUrl === undefined;
    this.reachTimeoutMs = options.reachTimeoutMs ?? REACH_TIMEOUT_MS;
    this.sessionUrl = driverUrl(options.directUrl ?? url);
    const appConnection = options.appUrl ? { application_name: 'atrium' } : { options: `-c role=${APP_ROLE}`, application_name: 'atrium' };
    const probe = { max: 1, onnotice: () => {}, connect_timeout: READINESS_TIMEOUT_MS / 1000, prepare: false, idle_timeout: 1 };
    this.probes = [
      { url, options: { ...probe, connection: { application_name: 'atrium-owner' } } },
      { url: appUrl, options: { ...probe, connection: appConnection } },
    ];
    this.ownerSql = connectTo(url, {
      max: OWNER_POOL_SIZE,
      onnotice: () => {},
      backoff: reconnectDelaySeconds,
      connect_timeout: CONNECT_TIMEOUT_SECONDS,
      prepare: this.prepare,
      connection: { application_name: 'atrium-owner' },
    });
    this.listenSql = this.prepare
      ? this.ownerSql
      : connectTo(this.sessionUrl, { max: 1, onnotice: () => {}, backoff: reconnectDelaySeconds, connection: { application_name: 'atrium-owner' } });
    this.dedicatedAppLogin = options.appUrl !== undefined;
    this.appSql = connectTo(appUrl, {
      max: appPoolSize,
      onnotice: () => {},
      backoff: reconnectDelaySeconds,
      connect_timeout: CONNECT_TIMEOUT_SECONDS,
      prepare: this.prepare,
      connection: appConnection,
    });
    this.owner = drizzle(this.ownerSql);
    const prepared = this.prepare ? preparedTexts(MAX_PREPARED_TEXTS) : () => false;
    this.tx = drizzle(transactionClient(this.appSql, this.transactions, prepared, () => this.queryCount++));
  }

  /**
   * Runs `fn` in one transaction of the application pool scoped to `tenantId`: row-level
   * security shows and accepts that tenant's rows only
   * (docs/tenancy-and-security.md#the-tenant-setting). The one way a request reaches the
   * database.
   */
  async tenant<T>(tenantId: number, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.run(`begin; ${setLocalTenant(tenantId)}`, fn, tenantId);
  }

  /**
   * Runs `fn` in one transaction of the application pool without a tenant (row-level
   * security shows no row): for work that learns its tenant inside (`setTenant`).
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.run('begin', fn);
  }

  /**
   * A transaction on a connection reserved for it. `begin` (one message: `BEGIN` and the
   * tenant setting) is not awaited: it leaves in the same write as `fn`'s first statement,
   * and the server runs them in order, so a failed `begin` fails every later statement
   * and nothing runs without its tenant. `COMMIT` follows once `fn` is done; when `fn`
   * fails, `ROLLBACK`. A statement on a connection that closed fails at once (the driver
   * as patched: `patches/README.md`), and the pool reconnects it by itself.
   *
   * A transaction whose connection turns out lost before `begin` is answered (a pooled
   * connection the server has closed) starts again on another: none of `fn`'s statements
   * can have taken effect, and `fn` must be safe to run again up to its first statement's
   * answer. Once `begin` is answered, a lost connection is the caller's error (the error
   * handler answers 503).
   */
  private async run<T>(begin: string, fn: (tx: Tx) => Promise<T>, tenantId?: number): Promise<T> {
    // A place among the tenants' shares of the pool first (tenant-shares.ts), kept through the retries.
    const share = tenantId ?? 0;
    const entering = this.shares.enter(share);
    if (entering) await entering;
    try {
      for (let attempt = 1; ; attempt++) {
        let begun = false;
        let connection: postgres.ReservedSql | undefined;
        try {
          connection = await this.appSql.reserve();
          const opening = connection.unsafe(begin);
          this.queryCount++;
          opening.then(
            () => (begun = true),
            () => {},
          );
          let result: T;
          const transaction: OpenTransaction = { connection, open: true, tx: this.tx, ahead: [], checks: [], issued: 0, onlyRead: true, tenantId };
          // Behind statements sent ahead, COMMIT leaves without waiting for them: the server commits only if they succeeded.
          // Behind a transaction's only statement (`onlyStatement`), it has left already.
          let committing: Promise<postgres.RowList<postgres.Row[]>> | undefined;
          try {
            // `fn` may answer a drizzle query (a thenable): it must be awaited inside the transaction's context, which `then` runs in.
            result = await this.transactions.run(transaction, async () => await fn(this.tx));
            transaction.open = false;
            // The checks decide whether to commit; their answers are usually in already.
            for (const refusal of await Promise.all(transaction.checks)) if (refusal !== undefined) throw refusal;
            committing = transaction.committing;
            if (!committing && transaction.ahead.length > 0) {
              committing = connection.unsafe('commit');
              committing.catch(() => {});
            }
            await opening;
            const failure = await aheadFailure(transaction);
            if (failure !== undefined) throw failure;
          } catch (error) {
            transaction.open = false;
            committing ??= transaction.committing;
            if (committing) await committing.catch(() => {});
            else await connection.unsafe('rollback').catch(() => {});
            // A statement sent ahead that failed made every later one fail: its error is the cause; so is the first of fn's that failed.
            throw (await aheadFailure(transaction)) ?? (abortedBefore(error) && transaction.failure !== undefined ? transaction.failure : error);
          }
          const committed = await (committing ?? connection.unsafe('commit'));
          // A statement failed inside and `fn` went on: the server ended the transaction with a rollback.
          if (committed.command !== 'COMMIT') throw new Error('The transaction was rolled back: one of its statements failed.');
          return result;
        } catch (error) {
          // A read-only server answered (the primary failed over): this connection is no use any more.
          if (connection && isReadOnlyServer(error)) await dropConnection(connection);
          if (begun || attempt >= this.reconnectAttempts || !isConnectionLoss(error)) throw error;
          await settleClosedConnections();
        } finally {
          connection?.release();
        }
      }
    } finally {
      this.shares.leave(share);
    }
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
    return this.underMigrationLock(async (connection) => {
      // drizzle applies every journal entry newer than the last one it recorded.
      const [{ recorded } = { recorded: false }] = await connection<{ recorded: boolean }[]>`
        select to_regclass('drizzle.__drizzle_migrations') is not null as recorded`;
      const [last] = recorded ? await connection<{ when: string | null }[]>`select max(created_at)::text as when from drizzle.__drizzle_migrations` : [];
      await migrate(drizzle(connection), { migrationsFolder });
      const appliedUpTo = last?.when == null ? -Infinity : Number(last.when);
      return journal.filter((entry) => entry.when > appliedUpTo).map((entry) => entry.tag);
    });
  }

  /**
   * Runs `fn` on a connection of its own that holds the migration lock: concurrent starts
   * (an API and a worker process) take their turns at changing the schema and the roles.
   */
  private async underMigrationLock<T>(fn: (connection: postgres.Sql) => Promise<T>): Promise<T> {
    // One connection, so the session-level advisory lock covers the whole of `fn`.
    // The deadline below, not the driver's connect timeout (30 s by default), says when the server did not answer.
    const connection = connectTo(this.sessionUrl, { max: 1, onnotice: () => {}, connect_timeout: this.reachTimeoutMs / 1000 + 1 });
    try {
      // Reached first, within a deadline; the lock may then wait as long as another process's migrations take.
      // A failure names the server and the setting: the driver's own message names neither.
      const where = databaseAt(this.sessionUrl, 'DATABASE_URL');
      const setting = 'check DATABASE_URL (or DATABASE_DIRECT_URL)';
      const reached = await within(
        connection`select 1`.then(() => true),
        this.reachTimeoutMs,
      ).catch((error: unknown) => {
        // Closed before any answer: a server that speaks something else (the URL names another service's port).
        if ((error as { code?: unknown }).code === 'CONNECTION_CLOSED') {
          throw new Error(`${where} closed the connection without answering as PostgreSQL: ${setting}.`, { cause: error });
        }
        throw new Error(`${where}: ${error instanceof Error ? error.message : String(error)}: ${setting}.`, { cause: error });
      });
      if (!reached) throw new Error(`${where} did not answer as PostgreSQL within ${this.reachTimeoutMs / 1000} s: ${setting}.`);
      await connection`select pg_advisory_lock(${MIGRATION_LOCK})`;
      return await fn(connection);
    } finally {
      await connection.end({ timeout: 1 });
    }
  }

  /**
   * Makes the login of `appUrl` (ATRIUM_APP_DATABASE_URL) what the application pool needs,
   * as the owner role: a LOGIN role with that URL's password, a member of `atrium_app`,
   * neither superuser nor BYPASSRLS nor able to create roles or databases
   * (docs/operations.md#first-deployment). A login that signs in and is a member already is
   * left alone, so a role an administrator made keeps its settings and no start writes to
   * the catalog. A role of that name that could see past row-level security (superuser,
   * BYPASSRLS, a member of a table's owner) is refused, never changed. Answers what it did.
   *
   * The owner needs CREATEROLE for this (PostgreSQL 16 and later: and ADMIN OPTION on
   * `atrium_app`, which it has when it created that role).
   */
  async ensureAppLogin(appUrl: string): Promise<'created' | 'updated' | 'unchanged'> {
    const url = parseConnectionUrl(appUrl);
    if (!url) throw new Error('ATRIUM_APP_DATABASE_URL is not a PostgreSQL connection URL.');
    const name = url.user;
    const password = url.password === '' ? null : url.password;
    if (name === '') throw new Error('ATRIUM_APP_DATABASE_URL names no user: Atrium cannot create its application login.');
    const signsIn = await this.appLoginState(appUrl);
    if (signsIn === 'ready') return 'unchanged';
    return this.underMigrationLock(async (connection) => {
      const [role] = await connection<{ rolsuper: boolean; rolbypassrls: boolean; member: boolean; owner: boolean }[]>`
        select r.rolsuper, r.rolbypassrls, pg_has_role(r.oid, ${APP_ROLE}, 'MEMBER') as member,
          exists (select 1 from pg_class c where c.relrowsecurity and pg_has_role(r.oid, c.relowner, 'MEMBER')) as owner
        from pg_roles r where r.rolname = ${name}`;
      // Role statements take no parameters: the server quotes the name (%I) and the password (%L) itself.
      const run = async (template: string) => {
        const [{ statement }] = await connection<[{ statement: string }]>`
          select format(${template}, ${APP_ROLE}::text, ${name}::text, ${password}::text) as statement`;
        await connection.unsafe(statement).catch((error: unknown) => {
          if ((error as { code?: unknown }).code !== '42501') throw error;
          throw new Error(
            `The DATABASE_URL role may not set up the application login "${name}" (${(error as Error).message}): it needs CREATEROLE ` +
              '(docs/operations.md#the-database-roles-and-what-needs-a-superuser).',
            { cause: error },
          );
        });
      };
      if (!role) {
        await run(
          password === null
            ? 'create role %2$I login nosuperuser nobypassrls nocreatedb nocreaterole noreplication in role %1$I'
            : 'create role %2$I login password %3$L nosuperuser nobypassrls nocreatedb nocreaterole noreplication in role %1$I',
        );
        return 'created';
      }
      if (role.rolsuper || role.rolbypassrls || role.owner) {
        const why = role.rolsuper ? 'is a superuser' : role.rolbypassrls ? 'has BYPASSRLS' : "is (a member of) the owner of Atrium's tables";
        throw new Error(
          `The role "${name}" of ATRIUM_APP_DATABASE_URL ${why}: it would see past row-level security. Name another role there; Atrium creates it.`,
        );
      }
      if (signsIn === 'no login') await run(password === null ? 'alter role %2$I with login' : 'alter role %2$I with login password %3$L');
      if (!role.member) await run('grant %1$I to %2$I');
      return 'updated';
    });
  }

  /**
   * Whether `appUrl` signs in, and whether that role is ready: a member of `atrium_app` that
   * could not see past row-level security. Any other is judged (and refused, or set up)
   * under the migration lock.
   */
  private async appLoginState(appUrl: string): Promise<'ready' | 'not ready' | 'no login'> {
    const probe = connectTo(appUrl, { max: 1, onnotice: () => {}, connect_timeout: CONNECT_TIMEOUT_SECONDS, prepare: false });
    try {
      const [row] = await probe<{ ready: boolean }[]>`
        select pg_has_role(current_user, ${APP_ROLE}, 'MEMBER') and not r.rolsuper and not r.rolbypassrls
          and not exists (select 1 from pg_class c where c.relrowsecurity and pg_has_role(r.oid, c.relowner, 'MEMBER')) as ready
        from pg_roles r where r.rolname = current_user`.catch((error: unknown) => {
        if (NO_LOGIN.has((error as { code?: unknown }).code)) throw error;
        // As a failure of DATABASE_URL is told (`underMigrationLock`): the driver's message names neither server nor setting.
        throw new Error(
          `${databaseAt(appUrl, 'ATRIUM_APP_DATABASE_URL')}: ${error instanceof Error ? error.message : String(error)}: check ATRIUM_APP_DATABASE_URL.`,
          { cause: error },
        );
      });
      // Before any role statement: a login of another database is not the one to set up here.
      await this.refuseAnotherDatabase(probe);
      return row?.ready ? 'ready' : 'not ready';
    } catch (error) {
      if (NO_LOGIN.has((error as { code?: unknown }).code)) return 'no login';
      throw error;
    } finally {
      await probe.end({ timeout: 1 });
    }
  }

  /**
   * Refuses an application role that could see past row-level security: superuser,
   * BYPASSRLS, (a member of) the owner of a table with row-level security (owners are not
   * subject to it), or not a member of `atrium_app` (whose grants the policies assume); and
   * an application pool that reaches another database than the owner's, which it would
   * answer from without a word while readiness, asked of the owner's, said all was well.
   */
  async verifyAppRole(): Promise<void> {
    if (this.dedicatedAppLogin) await this.refuseAnotherDatabase(this.appSql);
    const [role] = await this.appSql<{ name: string; rolsuper: boolean; rolbypassrls: boolean; member: boolean; owner: boolean }[]>`
      select r.rolname as name, r.rolsuper, r.rolbypassrls, pg_has_role(current_user, ${APP_ROLE}, 'MEMBER') as member,
        exists (select 1 from pg_class c where c.relrowsecurity and pg_has_role(r.oid, c.relowner, 'MEMBER')) as owner
      from pg_roles r where r.rolname = current_user`;
    if (!role || role.rolsuper || role.rolbypassrls || role.owner || !role.member) {
      throw new Error(
        `The application database role "${role?.name ?? '?'}" must not be a superuser, have BYPASSRLS or own the tables, and must be a member of ${APP_ROLE} ` +
          '(see ATRIUM_APP_DATABASE_URL in the README).',
      );
    }
  }

  /** Throws when `app` (a connection of the application login) reaches another database than the owner pool. */
  private async refuseAnotherDatabase(app: postgres.Sql): Promise<void> {
    const [reached, owner] = await Promise.all([reachedDatabase(app), reachedDatabase(this.ownerSql)]);
    const otherServer = reached.system !== null && owner.system !== null && reached.system !== owner.system;
    if (reached.database === owner.database && !otherServer) return;
    throw new Error(
      `The application pool (ATRIUM_APP_DATABASE_URL) reaches the database "${reached.database}"${otherServer ? ' on another PostgreSQL server' : ''}, ` +
        `not the database "${owner.database}" that DATABASE_URL names and migrates: both must name the same database.`,
    );
  }

  /** Gives `atrium_app` a login (embedded server: the cluster belongs to this installation). */
  async enableAppLogin(password: string): Promise<void> {
    await this.ownerSql.unsafe(`alter role ${APP_ROLE} with login password '${password.replace(/'/g, "''")}'`);
  }

  /**
   * Ready = both pools reach a server that accepts writes (a primary; not a standby, nor a
   * primary being demoted or promoted) within half of READINESS_TIMEOUT_MS (a connection
   * the server dropped is replaced, not reported) and every migration of this build is
   * applied. When the pools do not answer in time (all their connections busy, or being
   * replaced), connections of their own ask again (within READINESS_TIMEOUT_MS): readiness
   * is about the server, and the pools recover by themselves. Probes that ask while a check
   * runs share its answer: readiness is unauthenticated, and a flood of it costs the
   * database one check at a time, not a pool's statements and two fresh connections per
   * request.
   */
  isReady(): Promise<boolean> {
    this.readiness ??= this.checkReadiness().finally(() => {
      this.readiness = null;
    });
    return this.readiness;
  }

  private async checkReadiness(): Promise<boolean> {
    if (await within(this.readyThrough(this.ownerSql, this.appSql), READINESS_TIMEOUT_MS / 2)) return true;
    const [owner, app] = this.probes.map(({ url, options }) => connectTo(url, options)) as [postgres.Sql, postgres.Sql];
    try {
      return await within(this.readyThrough(owner, app), READINESS_TIMEOUT_MS);
    } finally {
      void Promise.all([owner.end({ timeout: 1 }), app.end({ timeout: 1 })]).catch(() => {});
    }
  }

  private readyThrough(owner: postgres.Sql, app: postgres.Sql): Promise<boolean> {
    return Promise.all([
      this.read(() =>
        owner.unsafe<{ count: number; writable: boolean }[]>(`select (select count(*)::int from drizzle.__drizzle_migrations) as count, ${WRITABLE}`),
      ),
      this.read(() => app.unsafe<{ writable: boolean }[]>(`select ${WRITABLE}`)),
    ]).then(
      ([[row], [appRow]]) => (row?.count ?? 0) >= migrationCount && row!.writable && appRow!.writable,
      () => false,
    );
  }

  async close(): Promise<void> {
    await Promise.all([this.appSql.end({ timeout: 5 }), this.ownerSql.end({ timeout: 5 }), this.listenSql.end({ timeout: 5 })]);
  }
}
