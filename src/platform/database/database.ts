import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import { tenantSettingName } from './tenancy.ts';

export type Db = PostgresJsDatabase;
/** A transaction whose tenant is set: every row-level security policy is in force. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];

export const APP_ROLE = 'atrium_app';

/**
 * Makes `tenantId` the tenant of the transaction `tx` until it ends: the one place the
 * tenant setting is written (docs/tenancy-and-security.md#the-tenant-setting).
 * `Database.tenant()` calls it; code that learns the tenant only inside its transaction
 * (a consumed login token names it) calls it there.
 */
export async function setTenant(tx: Tx, tenantId: number): Promise<void> {
  await tx.execute(sql`select set_config(${tenantSettingName}, ${String(tenantId)}, true)`);
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
const migrationsFolder = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../drizzle');
/** Arbitrary constant: serialises concurrent `migrate` runs (several processes starting). */
const MIGRATION_LOCK = 720_431_977;
/** The migrations of this build, oldest first: `tag` names the SQL file, `when` orders them (drizzle's journal). */
const journal = (JSON.parse(readFileSync(path.join(migrationsFolder, 'meta/_journal.json'), 'utf8')) as { entries: { tag: string; when: number }[] }).entries;
const migrationCount = journal.length;

export interface DatabaseOptions {
  poolSize?: number;
  /**
   * How the application pool logs in: a role that cannot bypass row-level security
   * (`atrium_app`, or a login role that is a member of it). Without it the pool logs in
   * as the owner and switches to `atrium_app` at connection start (weaker: code able to
   * run arbitrary SQL could switch back).
   */
  appUrl?: string;
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
  readonly owner: Db;
  readonly app: Db;
  /** Statements sent through drizzle on the app pool; tests use it to prove query counts are constant. */
  queryCount = 0;

  /** Whether the application pool logs in as its own role (see `DatabaseOptions.appUrl`). */
  readonly dedicatedAppLogin: boolean;
  /** Most connections each pool opens (metrics). */
  readonly poolSizes: { owner: number; app: number };

  constructor(
    readonly url: string,
    options: DatabaseOptions = {},
  ) {
    this.ownerSql = postgres(url, { max: OWNER_POOL_SIZE, onnotice: () => {}, connection: { application_name: 'atrium-owner' } });
    this.poolSizes = { owner: OWNER_POOL_SIZE, app: options.poolSize ?? 10 };
    this.dedicatedAppLogin = options.appUrl !== undefined;
    this.appSql = postgres(options.appUrl ?? url, {
      max: this.poolSizes.app,
      onnotice: () => {},
      connection: options.appUrl ? { application_name: 'atrium' } : { options: `-c role=${APP_ROLE}`, application_name: 'atrium' },
    });
    this.owner = drizzle(this.ownerSql);
    this.app = drizzle(
      preparing(this.appSql, () => {
        this.queryCount++;
      }),
    );
  }

  /** Runs `fn` in one transaction scoped to `tenantId` (row-level security). */
  tenant<T>(tenantId: number, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.app.transaction(async (tx) => {
      await setTenant(tx, tenantId);
      return fn(tx);
    });
  }

  /** Applies the pending migrations; answers the names of those it applied (none when up to date). */
  async migrate(): Promise<string[]> {
    // One connection, so the session-level advisory lock covers the whole migration.
    const connection = postgres(this.url, { max: 1, onnotice: () => {} });
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

  /** Ready = reachable and every migration of this build applied. */
  async isReady(): Promise<boolean> {
    try {
      const [row] = await this.ownerSql<{ count: number }[]>`
        select count(*)::int as count from drizzle.__drizzle_migrations`;
      return (row?.count ?? 0) >= migrationCount;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.appSql.end({ timeout: 5 }), this.ownerSql.end({ timeout: 5 })]);
  }
}
