/**
 * Atrium on Citus (docs/scaling.md): which table goes where, and the one step that puts
 * them there (`atrium citus:distribute`). Every Citus-specific statement Atrium runs lives
 * here; the migrations stay plain PostgreSQL.
 *
 * Where a table goes is read from the catalogue, not from a list of tenant tables: a table
 * of the schema `public` with a `tenant_id` column is tenant-owned and is distributed by
 * it, all co-located with `users` (a tenant's rows of every table on one node). `tenants`
 * is a reference table (a copy on every node). The tables below stay on the coordinator.
 * Any other table is refused by name: someone must decide where it goes.
 */
import type postgres from 'postgres';
import { APP_ROLE } from './database.ts';

/** Shared tables every node needs a copy of: every tenant table's `tenant_id` refers to it. */
export const REFERENCE_TABLES: readonly string[] = ['tenants'];

/**
 * Tables that are not tenant-owned and are read only by sessions on the coordinator:
 * sign-in failure counts (kept before a tenant is known), installation keys, job leases.
 * The job queue's own schema (`pgboss`) and the migration journal (`drizzle`) are outside
 * `public` and stay there too.
 */
export const COORDINATOR_TABLES: readonly string[] = ['login_failures', 'instance_secrets', 'job_leases'];

/** The table every tenant table is co-located with. */
export const COLOCATION_ANCHOR = 'users';

/** The distribution column of every tenant table. */
export const DISTRIBUTION_COLUMN = 'tenant_id';

/**
 * The function of the event trigger that distributes a tenant table as a later migration
 * creates it. A foreign key from a plain table to a distributed one is refused by Citus,
 * so the table must be distributed before the migration's next statement adds its keys.
 */
const NEW_TABLE_FUNCTION = 'atrium_distribute_new_tenant_table';
const NEW_TABLE_TRIGGER = 'atrium_distribute_new_tenant_tables';

/** Where a table is (`citus_tables`), or `plain` for a table Citus does not know. */
export type CitusPlacement = 'distributed' | 'reference' | 'local' | 'plain';

export interface TableState {
  table: string;
  wanted: 'distributed' | 'reference' | 'coordinator';
  current: CitusPlacement;
  /** For a distributed table: whether by `tenant_id` and in the anchor's co-location group. */
  colocated: boolean;
}

/** The command was understood but the database cannot be distributed (no Citus, an unknown table): one line for the operator. */
export class CitusRefusal extends Error {}

/** The Citus version installed in the connected database, or null when the extension is absent. */
export async function citusVersion(sql: postgres.Sql): Promise<string | null> {
  const [row] = await sql<{ extversion: string }[]>`select extversion from pg_extension where extname = 'citus'`;
  return row?.extversion ?? null;
}

/** Every table of the schema `public`, where it should go and where it is. Refuses tables no rule places. */
export async function tableStates(sql: postgres.Sql): Promise<TableState[]> {
  const rows = await sql<{ table: string; tenantOwned: boolean; type: string | null; column: string | null; colocationId: number | null }[]>`
    select c.relname as table,
      exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = ${DISTRIBUTION_COLUMN} and not a.attisdropped) as "tenantOwned",
      t.citus_table_type as type, t.distribution_column as column, t.colocation_id as "colocationId"
    from pg_class c
    left join citus_tables t on t.table_name = c.oid::regclass
    where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p') and not c.relispartition
    order by c.relname`;
  const anchor = rows.find((row) => row.table === COLOCATION_ANCHOR);
  if (!anchor) throw new CitusRefusal(`the table ${COLOCATION_ANCHOR} is missing: run atrium migrate first`);
  const unknown = rows.filter((row) => !row.tenantOwned && !REFERENCE_TABLES.includes(row.table) && !COORDINATOR_TABLES.includes(row.table));
  if (unknown.length > 0) {
    throw new CitusRefusal(
      `no rule places the table${unknown.length === 1 ? '' : 's'} ${unknown.map((row) => row.table).join(', ')} (no ${DISTRIBUTION_COLUMN} column): ` +
        'add it to REFERENCE_TABLES or COORDINATOR_TABLES in src/platform/database/citus.ts',
    );
  }
  return rows.map((row) => ({
    table: row.table,
    wanted: row.tenantOwned ? 'distributed' : REFERENCE_TABLES.includes(row.table) ? 'reference' : 'coordinator',
    current: (row.type ?? 'plain') as CitusPlacement,
    colocated: row.type === 'distributed' && row.column === DISTRIBUTION_COLUMN && anchor.type === 'distributed' && row.colocationId === anchor.colocationId,
  }));
}

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`;

export interface DistributionResult {
  citusVersion: string;
  /** Tables this run distributed, and made reference tables; both empty when everything was in place. */
  distributed: string[];
  referenced: string[];
  /** Every table by where it is now. */
  placements: Record<'distributed' | 'reference' | 'coordinator', string[]>;
}

export interface DistributionOptions {
  /** Shards of the co-location group when it is first created (Citus' `citus.shard_count` when absent). */
  shardCount?: number;
  /** The role the application pool logs in as: it must be able to log in on every worker. */
  appLogin?: string;
  /**
   * Statements of the resources that Citus needs in another form (a trigger that must write
   * row by row into a co-located shard), run once the tables are distributed.
   */
  adaptations?: readonly string[];
}

/**
 * Puts every table where it belongs, in one transaction, and keeps it so: idempotent (a
 * second run changes nothing and says so), and a table a later migration adds is
 * distributed by the event trigger as it is created, or by the next run.
 *
 * The order matters: made a reference table first, `tenants` would turn every table with a
 * foreign key to it into a Citus local table, and Citus cannot make a local table with an
 * identity column distributed. So the foreign keys between the tables that change are
 * dropped, the tenant tables distributed (the anchor first), `tenants` made a reference
 * table, and the keys added back as they were.
 */
export async function distribute(sql: postgres.Sql, options: DistributionOptions = {}): Promise<DistributionResult> {
  const version = await citusVersion(sql);
  if (version === null)
    throw new CitusRefusal('Citus is not installed in this database (CREATE EXTENSION citus on the coordinator and every worker; docs/scaling.md)');
  const [{ coordinator }] = await sql<[{ coordinator: boolean }]>`select coalesce((select groupid = 0 from pg_dist_local_group), true) as coordinator`;
  if (!coordinator) throw new CitusRefusal('this database is a Citus worker: run atrium citus:distribute against the coordinator');
  await checkAppLogin(sql, options.appLogin ?? APP_ROLE);

  const states = await tableStates(sql);
  const misplaced = states.filter(
    (state) =>
      (state.wanted === 'distributed' && state.current !== 'plain' && !state.colocated) ||
      (state.wanted === 'reference' && state.current !== 'plain' && state.current !== 'reference') ||
      (state.wanted === 'coordinator' && state.current !== 'plain' && state.current !== 'local'),
  );
  const anchorState = states.find((state) => state.table === COLOCATION_ANCHOR)!;
  // With the anchor not yet distributed, a distributed tenant table can only be in a group of its own.
  const blocking = misplaced.filter((state) => !(state.wanted === 'distributed' && state.current === 'distributed' && anchorState.current === 'plain'));
  if (blocking.length > 0) {
    const state = blocking[0]!;
    throw new CitusRefusal(
      `the table ${state.table} is a Citus ${state.current} table, where Atrium needs it ${state.wanted === 'distributed' ? `distributed by ${DISTRIBUTION_COLUMN} and co-located with ${COLOCATION_ANCHOR}` : `a ${state.wanted} table`}: ` +
        `undo that (undistribute_table('${state.table}')) and run citus:distribute again`,
    );
  }
  const toDistribute = states.filter((state) => state.wanted === 'distributed' && state.current === 'plain').map((state) => state.table);
  const toReference = states.filter((state) => state.wanted === 'reference' && state.current !== 'reference').map((state) => state.table);
  // Anchor first: the others are co-located with it.
  toDistribute.sort((a, b) => Number(b === COLOCATION_ANCHOR) - Number(a === COLOCATION_ANCHOR));
  const changing = [...toDistribute, ...toReference];

  await sql.begin(async (tx) => {
    // Only needed while distributing: the unread-count triggers of notifications run on its
    // shards (each writes the counts of its own rows, in the co-located shard; docs/scaling.md).
    await tx`set local citus.enable_unsafe_triggers = on`;
    // Keys to reference tables and distribution in one transaction need one connection per node.
    await tx`set local citus.multi_shard_modify_mode = 'sequential'`;
    const keys =
      changing.length === 0
        ? []
        : await tx<{ table: string; name: string; definition: string }[]>`
            select conrelid::regclass::text as table, conname as name, pg_get_constraintdef(oid) as definition
            from pg_constraint
            where contype = 'f' and (conrelid::regclass::text = any(${changing}) or confrelid::regclass::text = any(${changing}))
            order by conrelid::regclass::text, conname`;
    for (const key of keys) await tx.unsafe(`alter table ${quoted(key.table)} drop constraint ${quoted(key.name)}`);
    for (const table of toDistribute) {
      if (table === COLOCATION_ANCHOR) {
        await tx`select create_distributed_table(${table}, ${DISTRIBUTION_COLUMN}, colocate_with => 'none', shard_count => ${options.shardCount ?? null}::int)`;
      } else {
        await tx`select create_distributed_table(${table}, ${DISTRIBUTION_COLUMN}, colocate_with => ${COLOCATION_ANCHOR})`;
      }
    }
    for (const table of toReference) await tx`select create_reference_table(${table})`;
    for (const key of keys) await tx.unsafe(`alter table ${quoted(key.table)} add constraint ${quoted(key.name)} ${key.definition}`);
    for (const statement of options.adaptations ?? []) await tx.unsafe(statement);
    await keepNewTablesDistributed(tx);
    await tx.unsafe(await propagateSetCommands(tx));
  });
  // The rows copied into shards stay on disk in the coordinator's tables until removed.
  for (const table of changing) await sql`select truncate_local_data_after_distributing_table(${table})`;

  const placements: DistributionResult['placements'] = { distributed: [], reference: [], coordinator: [] };
  for (const state of await tableStates(sql)) placements[state.wanted].push(state.table);
  return { citusVersion: version, distributed: toDistribute, referenced: toReference, placements };
}

/**
 * The event trigger that distributes a tenant table created by a later migration at once,
 * co-located with the anchor, so that the migration's foreign keys to other tenant tables
 * are accepted. `sequential`: a migration runs in one transaction, and Citus needs one
 * connection per node there once a table with a key to a reference table was touched.
 */
async function keepNewTablesDistributed(tx: postgres.TransactionSql): Promise<void> {
  await tx.unsafe(`
    create or replace function ${NEW_TABLE_FUNCTION}() returns event_trigger
    language plpgsql set search_path = public, pg_catalog as $$
    declare created regclass;
    begin
      for created in
        select c.oid::regclass from pg_event_trigger_ddl_commands() d join pg_class c on c.oid = d.objid
        where d.command_tag = 'CREATE TABLE' and c.relnamespace = 'public'::regnamespace and c.relkind = 'r'
          and exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = '${DISTRIBUTION_COLUMN}' and not a.attisdropped)
          and not exists (select 1 from pg_dist_partition p where p.logicalrelid = c.oid)
      loop
        perform set_config('citus.multi_shard_modify_mode', 'sequential', true);
        perform create_distributed_table(created, '${DISTRIBUTION_COLUMN}', colocate_with => '${COLOCATION_ANCHOR}');
      end loop;
    end
    $$`);
  const [trigger] = await tx`select 1 from pg_event_trigger where evtname = ${NEW_TABLE_TRIGGER}`;
  if (!trigger) {
    await tx.unsafe(`create event trigger ${NEW_TABLE_TRIGGER} on ddl_command_end when tag in ('CREATE TABLE') execute function ${NEW_TABLE_FUNCTION}()`);
  }
}

/**
 * The statement that makes Citus carry `SET LOCAL` (the tenant setting, tenancy.ts) to the
 * sessions it opens on the workers, for every session of the connected database: a
 * database setting costs no statement per transaction. A copy of the database (CREATE
 * DATABASE … TEMPLATE) does not inherit it: run it there too.
 */
export async function propagateSetCommands(sql: postgres.Sql | postgres.TransactionSql): Promise<string> {
  const [{ statement }] = await sql<[{ statement: string }]>`
    select format('alter database %I set citus.propagate_set_commands = %L', current_database(), 'local') as statement`;
  return statement;
}

/**
 * Citus opens its sessions on the workers as the current role: the application login must
 * exist and be allowed to log in on every worker, or every query that leaves the
 * coordinator fails. Checked before anything changes.
 */
async function checkAppLogin(sql: postgres.Sql, role: string): Promise<void> {
  const nodes = await sql<{ node: string; result: string; success: boolean }[]>`
    select nodename || ':' || nodeport as node, result, success
    from run_command_on_workers(format('select rolcanlogin from pg_roles where rolname = %L', ${role}::text))`;
  const refused = nodes.filter((node) => !node.success || node.result !== 't');
  if (refused.length > 0) {
    throw new CitusRefusal(
      `the application role ${role} cannot log in on ${refused.map((node) => node.node).join(', ')}: Citus connects to the workers as that role; ` +
        `set ATRIUM_APP_DATABASE_URL (atrium migrate creates that login on every node) and allow it in each worker's pg_hba.conf`,
    );
  }
}
