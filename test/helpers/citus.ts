/**
 * The suite on a Citus cluster (docs/scaling.md#the-test-suite-on-citus): when CITUS_DATABASE_URL names a
 * coordinator (a superuser login, a database where `citus` is installed and the workers
 * are added), the run's template database is made on the coordinator and on every worker,
 * migrated, its job queue installed and its tables distributed as an operator would
 * (`atrium citus:distribute`); each file's database is then a copy of it on every node.
 *
 * Copies: Citus refuses `CREATE DATABASE … TEMPLATE` when it propagates the statement, so
 * each node copies its own part (the coordinator's metadata names the workers by address,
 * and a session on the copy reaches the workers' copies of the same name). Citus keeps a
 * maintenance session on every database it is used in; PostgreSQL copies a database only
 * while no other session is on it, so that session is ended first.
 */
import postgres from 'postgres';
import { Database } from '../../src/platform/database/database.ts';
import { distribute, propagateSetCommands } from '../../src/platform/database/citus.ts';
import { unreadCountTriggersOnCitus } from '../../src/resources/notifications/citus.ts';

export const CITUS_ENV = 'CITUS_DATABASE_URL';

/** Shards per tenant table in test databases: enough to spread tenants over both workers, few enough to keep copies quick. */
const TEST_SHARD_COUNT = 4;

/** The coordinator's own address, then every worker's, as superuser connection strings of their `postgres` database. */
export async function citusNodes(coordinatorUrl: string): Promise<string[]> {
  const admin = postgres(coordinatorUrl, { max: 1, onnotice: () => {} });
  try {
    const [citus] = await admin`select 1 from pg_extension where extname = 'citus'`;
    if (!citus) throw new Error(`${CITUS_ENV} names a database without the citus extension`);
    const workers = await admin<{ nodename: string; nodeport: number }[]>`
      select nodename, nodeport from pg_dist_node where groupid <> 0 and noderole = 'primary' and isactive order by nodeid`;
    if (workers.length === 0) throw new Error(`${CITUS_ENV} names a coordinator without workers (citus_add_node)`);
    const url = (host: string, port: number) => {
      const node = new URL(coordinatorUrl);
      node.hostname = host;
      node.port = String(port);
      node.pathname = '/postgres';
      return node.toString();
    };
    const coordinator = new URL(coordinatorUrl);
    return [url(coordinator.hostname, Number(coordinator.port || 5432)), ...workers.map((w) => url(w.nodename, w.nodeport))];
  } finally {
    await admin.end({ timeout: 5 });
  }
}

const withDatabase = (url: string, name: string) => {
  const copy = new URL(url);
  copy.pathname = `/${name}`;
  return copy.toString();
};

async function onEveryNode(nodes: readonly string[], fn: (sql: postgres.Sql, index: number) => Promise<void>): Promise<void> {
  await Promise.all(
    nodes.map(async (node, index) => {
      const sql = postgres(node, { max: 1, onnotice: () => {} });
      try {
        await fn(sql, index);
      } finally {
        await sql.end({ timeout: 5 });
      }
    }),
  );
}

/**
 * Makes `name` on every node as a new Citus database: the extension everywhere, the
 * coordinator and the workers in the coordinator's metadata. `nodes[0]` is the coordinator.
 */
async function createCitusDatabase(nodes: readonly string[], name: string): Promise<void> {
  await onEveryNode(nodes, async (sql) => {
    await sql.unsafe(`create database "${name}"`);
  });
  await onEveryNode(nodes, async (_, index) => {
    const sql = postgres(withDatabase(nodes[index]!, name), { max: 1, onnotice: () => {} });
    try {
      await sql`create extension if not exists citus`;
    } finally {
      await sql.end({ timeout: 5 });
    }
  });
  const coordinator = postgres(withDatabase(nodes[0]!, name), { max: 1, onnotice: () => {} });
  try {
    const address = new URL(nodes[0]!);
    await coordinator`select citus_set_coordinator_host(${address.hostname}, ${Number(address.port || 5432)})`;
    for (const worker of nodes.slice(1)) {
      const { hostname, port } = new URL(worker);
      await coordinator`select citus_add_node(${hostname}, ${Number(port || 5432)})`;
    }
  } finally {
    await coordinator.end({ timeout: 5 });
  }
}

/**
 * The run's template on every node: migrated, the job queue installed (`install`), the
 * tables distributed. The application role logs in with `appPassword` (on every node:
 * Citus carries role changes to the workers), as ATRIUM_APP_DATABASE_URL would.
 */
export async function createCitusTemplate(
  nodes: readonly string[],
  template: string,
  appPassword: string,
  install: (url: string) => Promise<void>,
): Promise<void> {
  await createCitusDatabase(nodes, template);
  const url = withDatabase(nodes[0]!, template);
  const db = new Database(url);
  try {
    await db.migrate();
    await db.ownerSql.unsafe(`alter role atrium_app with login password '${appPassword}'`);
    await install(url);
    await distribute(db.ownerSql, { shardCount: TEST_SHARD_COUNT, adaptations: unreadCountTriggersOnCitus });
  } finally {
    await db.close();
  }
}

/** Ends the sessions on `name` (Citus' maintenance session), so that it can be copied or dropped. */
const endSessions = (sql: postgres.Sql, name: string) =>
  sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name} and pid <> pg_backend_pid()`;

/** A copy of `template` named `name` on every node, with the coordinator's database setting. */
export async function copyCitusDatabase(nodes: readonly string[], template: string, name: string): Promise<void> {
  await onEveryNode(nodes, async (sql) => {
    for (let attempt = 1; ; attempt++) {
      await endSessions(sql, template);
      try {
        await sql.unsafe(`create database "${name}" template "${template}"`);
        return;
      } catch (error) {
        // 55006: the maintenance session came back before the copy began.
        if ((error as { code?: string }).code !== '55006' || attempt === 20) throw error;
      }
    }
  });
  // Database settings stay with the database they were set on: the copy needs its own.
  const coordinator = postgres(withDatabase(nodes[0]!, name), { max: 1, onnotice: () => {} });
  try {
    await coordinator.unsafe(await propagateSetCommands(coordinator));
  } finally {
    await coordinator.end({ timeout: 5 });
  }
}

/** Drops `name` on every node. */
export async function dropCitusDatabase(nodes: readonly string[], name: string): Promise<void> {
  await onEveryNode(nodes, async (sql) => {
    await sql.unsafe(`drop database if exists "${name}" with (force)`);
  });
}
