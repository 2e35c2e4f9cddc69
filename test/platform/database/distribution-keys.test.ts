/**
 * Tenant-owned tables are ready to be distributed by `tenant_id` (docs/scaling.md): every
 * primary key, unique constraint and foreign key of a table with `tenant_id` includes it,
 * and a foreign key between two tenant-owned tables pairs `tenant_id` with `tenant_id`.
 * The migration that moved the primary keys to `(tenant_id, id)` keeps existing rows.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { drizzle } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import t from 'tap';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { createTestDatabase } from '../../helpers/database.ts';

const MIGRATIONS = path.resolve(import.meta.dirname, '../../../drizzle');
/** The migration that made `(tenant_id, id)` the primary keys (its journal index). */
const PRIMARY_KEY_MIGRATION = 16;

const database = await createTestDatabase();
const owner = postgres(database.url, { max: 2, onnotice: () => {} });
t.teardown(async () => {
  await owner.end({ timeout: 5 });
  await database.drop();
});
await migrate(drizzle(owner), { migrationsFolder: MIGRATIONS });

interface KeyRow {
  table_name: string;
  name: string;
  kind: 'p' | 'u' | 'f';
  definition: string;
  has_tenant_id: boolean;
  /** Foreign keys only: the referenced table has `tenant_id` too. */
  references_tenant_table: boolean;
  /** Foreign keys only: `tenant_id` is paired with the referenced table's `tenant_id`. */
  pairs_tenant_ids: boolean;
}

/** Every key of every public table that has a `tenant_id` column, read from pg_constraint. */
async function keysOfTenantTables(sql: postgres.Sql): Promise<KeyRow[]> {
  return await sql<KeyRow[]>`
    with tenant_column as (
      select a.attrelid as relid, a.attnum
      from pg_attribute a join pg_class c on c.oid = a.attrelid
      where c.relnamespace = 'public'::regnamespace and c.relkind = 'r' and a.attname = 'tenant_id' and not a.attisdropped
    )
    select con.conrelid::regclass::text as table_name, con.conname as name, con.contype as kind,
           pg_get_constraintdef(con.oid) as definition,
           tc.attnum = any (con.conkey) as has_tenant_id,
           rc.attnum is not null as references_tenant_table,
           coalesce(con.confkey[array_position(con.conkey, tc.attnum)] = rc.attnum, false) as pairs_tenant_ids
    from pg_constraint con
    join tenant_column tc on tc.relid = con.conrelid
    left join tenant_column rc on rc.relid = con.confrelid
    where con.contype in ('p', 'u', 'f')
    order by 1, 2`;
}

t.test('every primary key, unique constraint and foreign key of a tenant-owned table includes tenant_id', async (t) => {
  const keys = await keysOfTenantTables(owner);
  const tables = new Set(keys.map((key) => key.table_name));
  t.ok(tables.size >= 28, `all tenant-owned tables are checked (${tables.size})`);
  for (const table of tables) {
    const primary = keys.filter((key) => key.table_name === table && key.kind === 'p');
    t.equal(primary.length, 1, `${table} has a primary key`);
  }
  for (const key of keys) {
    t.ok(key.has_tenant_id, `${key.table_name}.${key.name} includes tenant_id: ${key.definition}`);
    if (key.kind === 'f' && key.references_tenant_table) {
      t.ok(key.pairs_tenant_ids, `${key.table_name}.${key.name} pairs tenant_id with the referenced tenant_id: ${key.definition}`);
    }
  }
});

t.test('the check notices a key without tenant_id', async (t) => {
  if (process.env[CITUS_ENV]) {
    // On Citus a new tenant table is distributed as it is created (docs/scaling.md), and Citus
    // itself refuses a key without the distribution column: such a table cannot exist there.
    await t.rejects(owner`create table distribution_probe (id bigint primary key, tenant_id bigint not null, code text unique)`, {
      message: /cannot create constraint/,
      detail: /do not include the partition column/,
    });
    return;
  }
  await owner`create table distribution_probe (id bigint primary key, tenant_id bigint not null, code text unique)`;
  t.teardown(async () => {
    await owner`drop table distribution_probe`;
  });
  const keys = (await keysOfTenantTables(owner)).filter((key) => key.table_name === 'distribution_probe');
  t.strictSame(keys.map((key) => [key.name, key.has_tenant_id]).sort(), [
    ['distribution_probe_code_key', false],
    ['distribution_probe_pkey', false],
  ]);
});

t.test('the primary key migration keeps existing rows and their references', async (t) => {
  // A database at the schema before the migration, with rows in it.
  const name = `${new URL(database.url).pathname.slice(1)}_keys`;
  await owner.unsafe(`create database "${name}"`);
  const url = new URL(database.url);
  url.pathname = `/${name}`;
  const old = postgres(url.toString(), { max: 1, onnotice: () => {} });
  const folder = await mkdtemp(path.join(os.tmpdir(), 'atrium-migrations-'));
  t.teardown(async () => {
    await old.end({ timeout: 5 });
    await owner.unsafe(`drop database if exists "${name}" with (force)`);
    await rm(folder, { recursive: true, force: true });
  });
  await cp(MIGRATIONS, folder, { recursive: true });
  const journalPath = path.join(folder, 'meta/_journal.json');
  const journal = JSON.parse(await readFile(journalPath, 'utf8')) as { entries: { idx: number }[] };
  await writeFile(journalPath, JSON.stringify({ ...journal, entries: journal.entries.filter((entry) => entry.idx < PRIMARY_KEY_MIGRATION) }));
  await migrate(drizzle(old), { migrationsFolder: folder });
  const [before] = await old`select count(*)::int as n from pg_constraint where conname = 'users_pkey'`;
  t.equal(before!.n, 1, 'the old schema has users_pkey on (id)');

  await old.unsafe(`
    insert into tenants (slug, name) values ('alpha', 'Alpha'), ('beta', 'Beta');
    insert into roles (tenant_id, name) select id, 'Staff' from tenants;
    insert into languages (tenant_id, id, name) select id, 'en', 'English' from tenants;
    insert into users (tenant_id, username, role_id, lang_id) select r.tenant_id, 'user-' || g, r.id, 'en' from roles r, generate_series(1, 3) g;
    insert into departments (tenant_id, name, user_id) select tenant_id, 'Sales', min(id) from users group by tenant_id;
    insert into department_users (tenant_id, department_id, user_id) select d.tenant_id, d.id, u.id from departments d join users u using (tenant_id);
    insert into notification_dispatches (tenant_id, type, data) select id, 'customNotification', '{"title": "t", "body": "b", "url": "/"}' from tenants;
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
      select d.tenant_id, d.id, d.type, u.id, d.data from notification_dispatches d join users u using (tenant_id);
    insert into automations (tenant_id, name, config) select id, 'Hook', '{}' from tenants;
    insert into webhook_deliveries (tenant_id, automation_id, event_id, payload) select tenant_id, id, 'event-' || id, '{}' from automations;
    insert into webhook_delivery_attempts (tenant_id, delivery_id, number, started_at) select tenant_id, id, 1, now() from webhook_deliveries;
    insert into forms (tenant_id, title, form_type) select id, 'Form', 'survey' from tenants;
    insert into form_fields (tenant_id, form_id, name, field_type, sort_number) select tenant_id, id, 'name', 'text', 1 from forms;`);
  const snapshot = async () =>
    await old<{ table_name: string; rows: string }[]>`
      select table_name, (xpath('/row/n/text()', query_to_xml(format('select count(*) as n from %I', table_name), false, true, '')))[1]::text as rows
      from information_schema.columns where table_schema = 'public' and column_name = 'tenant_id' order by table_name`;
  const rowsBefore = await snapshot();
  t.ok(rowsBefore.filter((row) => row.rows !== '0').length >= 12, 'rows in the old schema');

  await migrate(drizzle(old), { migrationsFolder: MIGRATIONS });

  const tablesBefore = new Set(rowsBefore.map((row) => row.table_name));
  t.strictSame(
    (await snapshot()).filter((row) => tablesBefore.has(row.table_name)),
    [...rowsBefore],
    'every table keeps its rows',
  );
  // Tables made by later migrations start from what is stored: each user's unread count.
  t.strictSame(
    [...(await old`select count(*)::int as users, sum(unread)::int as unread from notification_unread_counts`)],
    [{ users: 6, unread: 6 }],
    'the unread counts of the stored notifications',
  );
  t.strictSame(
    (await keysOfTenantTables(old)).filter((key) => !key.has_tenant_id),
    [],
    'no key without tenant_id',
  );
  const [users] = await old`select pg_get_constraintdef(oid) as definition from pg_constraint where conname = 'users_tenant_id_id_pk'`;
  t.equal(users!.definition, 'PRIMARY KEY (tenant_id, id)');
  // The foreign keys hold again: a membership naming another tenant's user is refused.
  const refused = await old`
    insert into department_users (tenant_id, department_id, user_id)
    select d.tenant_id, d.id, (select max(id) from users where tenant_id <> d.tenant_id) from departments d limit 1`.then(
    () => null,
    (error: { code?: string }) => error.code,
  );
  t.equal(refused, '23503', 'a reference across tenants violates the foreign key');
  // Deleting a user still cascades to its memberships and notifications.
  const [user] = await old<{ tenant_id: string; id: string }[]>`select tenant_id, id from users order by id desc limit 1`;
  await old`delete from users where tenant_id = ${user!.tenant_id} and id = ${user!.id}`;
  const [left] = await old`
    select (select count(*)::int from department_users where user_id = ${user!.id}) + (select count(*)::int from notifications where notifiable_id = ${user!.id}) as n`;
  t.equal(left!.n, 0, 'cascades still run');
});
