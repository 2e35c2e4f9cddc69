import t from 'tap';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { Database } from '../../../src/platform/database/database.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { rejection } from '../../helpers/fixtures.ts';

const data = await startTestDatabase(t);
const a = await data.createTenant('alpha');
const b = await data.createTenant('beta');
await data.createUser(a.tenantId, { username: 'only-in-alpha' });

const TENANT_TABLES = ['users', 'roles', 'languages', 'access_tokens', 'notification_settings', 'departments', 'department_users', 'entity_permissions'];

t.test('the application role cannot bypass row-level security', async (t) => {
  const [role] = await data.db.appSql<{ current_user: string; rolsuper: boolean; rolbypassrls: boolean }[]>`
    select current_user, rolsuper, rolbypassrls from pg_roles where rolname = current_user`;
  t.equal(role!.current_user, 'atrium_app');
  t.equal(role!.rolsuper, false);
  t.equal(role!.rolbypassrls, false);
});

t.test('every table with tenant_id has row-level security enabled and a policy', async (t) => {
  const rows = await data.db.owner.execute<{ table_name: string; rls: boolean; policies: number }>(sql`
    select c.table_name, cl.relrowsecurity as rls,
           (select count(*)::int from pg_policies p where p.tablename = c.table_name) as policies
    from information_schema.columns c
    join pg_class cl on cl.relname = c.table_name and cl.relnamespace = 'public'::regnamespace
    where c.table_schema = 'public' and c.column_name = 'tenant_id'`);
  t.ok(rows.length >= TENANT_TABLES.length);
  for (const row of rows) {
    t.ok(row.rls, `${row.table_name} has RLS enabled`);
    t.ok(row.policies > 0, `${row.table_name} has a policy`);
  }
});

t.test('a deliberately unscoped query from the app role sees no tenant rows at all', async (t) => {
  for (const table of TENANT_TABLES) {
    const [row] = await data.db.appSql.unsafe<{ n: number }[]>(`select count(*)::int as n from ${table}`);
    t.equal(row!.n, 0, `${table}: nothing without a tenant`);
  }
});

t.test("inside one tenant's transaction, another tenant's rows are invisible", async (t) => {
  for (const table of TENANT_TABLES) {
    const rows = await data.db.tenant(b.tenantId, (tx) =>
      tx.execute<{ n: number }>(sql`select count(*)::int as n from ${sql.identifier(table)} where tenant_id <> ${b.tenantId}`),
    );
    t.equal(rows[0]!.n, 0, `${table}: no foreign rows`);
  }
  const names = await data.db.tenant(b.tenantId, (tx) => tx.execute<{ username: string }>(sql`select username from users`));
  t.notOk(names.some((r) => r.username === 'only-in-alpha'));
  const tenants = await data.db.tenant(b.tenantId, (tx) => tx.execute<{ slug: string }>(sql`select slug from tenants`));
  t.strictSame(
    tenants.map((r) => r.slug),
    ['beta'],
    'only its own tenant row',
  );
});

/** The database's own message (drizzle wraps it as the `cause`). */
async function failure(promise: Promise<unknown>): Promise<string> {
  const error = await rejection<Error>(promise);
  return error ? String((error.cause as Error | undefined)?.message ?? error.message) : 'no error';
}

t.test('writing a row for another tenant is refused by the policy', async (t) => {
  t.match(
    await failure(data.db.tenant(b.tenantId, (tx) => tx.execute(sql`insert into languages (tenant_id, id, name) values (${a.tenantId}, 'fr-FR', 'Français')`))),
    /row-level security/,
  );
  // Moving a row to another tenant: refused by the policy's check; on Citus, before it, by
  // Citus itself, which never lets an update change a row's distribution column.
  const moved = process.env[CITUS_ENV] ? /row-level security|modifying the partition value/ : /row-level security/;
  t.match(await failure(data.db.tenant(b.tenantId, (tx) => tx.execute(sql`update users set tenant_id = ${a.tenantId}`))), moved);
});

t.test('the app role cannot create tenants, and cannot reset the tenant setting to escape', async (t) => {
  await t.rejects(data.db.appSql`insert into tenants (slug, name) values ('evil', 'Evil')`, /permission denied/);
  const [row] = await data.db.tenant(b.tenantId, async (tx) => {
    await tx.execute(sql`select set_config('atrium.tenant_id', '', true)`);
    return tx.execute<{ all: number; others: number }>(
      sql`select count(*)::int as all, (count(*) filter (where tenant_id <> ${b.tenantId}))::int as others from users`,
    );
  });
  t.equal(row!.others, 0, "clearing the tenant shows no other tenant's rows");
  // On one PostgreSQL it shows none at all. On Citus the workers keep the tenant the
  // transaction began with (Citus carries SET LOCAL to them, not set_config), so the
  // rows of that tenant stay visible there, and only those.
  if (!process.env[CITUS_ENV]) t.equal(row!.all, 0, 'clearing the tenant shows nothing, not everything');
});

t.test('a connection made with the app role by URL is scoped the same way', async (t) => {
  const direct = postgres(data.db.url, { max: 1, connection: { options: '-c role=atrium_app' }, onnotice: () => {} });
  t.teardown(() => direct.end({ timeout: 1 }));
  const [row] = await direct<{ n: number }[]>`select count(*)::int as n from users`;
  t.equal(row!.n, 0);
});

t.test("one tenant's transactions never hold every connection of the request pool: another tenant's runs beside them", async (t) => {
  // docs/tenancy-and-security.md#the-request-pool. A pool of three: alpha's slow transactions may hold two.
  const pool = new Database(data.db.url, { appUrl: data.appUrl, poolSize: 3 });
  t.teardown(() => pool.close());
  // Alpha's transactions wait for a lock the test holds, on a connection of its own.
  const LOCK = 716_004_291;
  const holder = postgres(data.db.url, { max: 1, onnotice: () => {} });
  t.teardown(() => holder.end({ timeout: 5 }));
  const [{ pid } = { pid: 0 }] = await holder<{ pid: number }[]>`select pg_backend_pid() as pid, pg_advisory_lock(${LOCK})`;
  const waitingForLock = async () => {
    const [row] = await data.db.ownerSql<{ count: number }[]>`
      select count(*)::int as count from pg_locks where locktype = 'advisory' and objid = ${LOCK} and not granted and pid <> ${pid}`;
    return row!.count;
  };
  // The pool's connections opened first (by transactions without a tenant, which keep nothing back), so that beta's
  // transaction below takes a moment only.
  await Promise.all(Array.from({ length: 3 }, () => pool.transaction((tx) => tx.execute(sql`select pg_sleep(0.05)`))));
  // Beta is about (it took a connection a moment ago): alpha may not take the pool's last connection. Alpha's three
  // and beta's next transaction ask for their places in one go, so no wait comes between them.
  await pool.tenant(b.tenantId, (tx) => tx.execute(sql`select 1`));
  const slow = Array.from({ length: 3 }, () => pool.tenant(a.tenantId, (tx) => tx.execute(sql`select pg_advisory_xact_lock_shared(${LOCK})`)));
  const beta = pool.tenant(b.tenantId, (tx) => tx.execute(sql`select 'beta ran' as answer`));
  // Without the shares, all three of alpha's would hold the pool's three connections, waiting at the lock, and
  // beta's would wait behind them.
  let raced = false;
  const third = (async () => {
    while (!raced && (await waitingForLock()) < 3) await new Promise((resolve) => setTimeout(resolve, 20));
    return 'alpha took the third connection';
  })();
  const first = await Promise.race([beta.then(([row]) => row!.answer as string), third]);
  raced = true;
  t.equal(first, 'beta ran', "beta's transaction ran while alpha's held their connections");
  await holder`select pg_advisory_unlock(${LOCK})`;
  await third;
  await beta;
  t.equal((await Promise.all(slow)).length, 3, "alpha's transactions all ran once the lock was free");
});
