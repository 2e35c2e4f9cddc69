/**
 * A tenant the planner's statistics do not know yet (created, or grown from nothing, since
 * the last ANALYZE) must not be taken for an empty one: a look-up in it by an index other
 * than the primary key would then read every row of the tenant (the migration
 * tenant-statistics; docs/performance.md#scim-provisioning).
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;

/** `count` users of `tenantId`, named `<prefix><n>`, written in one statement. */
async function addUsers(tenantId: number, prefix: string, count: number) {
  await db.owner.execute(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${tenantId}, ${prefix} || g, (select min(id) from roles where tenant_id = ${tenantId}), 'Given', 'Family'
    from generate_series(1, ${count}) g`);
}

/** The plan of `statement`, as text, run in `tenantId`'s transaction as requests run. */
async function planOf(tenantId: number, statement: ReturnType<typeof sql>): Promise<string> {
  const rows = await db.tenant(tenantId, (tx) => tx.execute<{ 'QUERY PLAN': string }>(sql`explain ${statement}`));
  return rows.map((row) => row['QUERY PLAN']).join('\n');
}

t.test('a look-up by username in any case, in a tenant grown since the last ANALYZE, uses its index', async (t) => {
  // Large enough other tenants that the (tenant_id, username_lower) index is deeper than the
  // primary key: with a tenant taken for empty, the planner then prefers the primary key.
  const known = [await data.createTenant('stats-a'), await data.createTenant('stats-b')];
  for (const [i, tenant] of known.entries()) await addUsers(tenant.tenantId, `known${i}-`, 15_000);
  await db.owner.execute(sql`analyze users`);
  const fresh = await data.createTenant('stats-fresh');
  await addUsers(fresh.tenantId, 'fresh-', 3_000);

  const plan = await planOf(fresh.tenantId, sql`select id from users where username_lower = lower('nobody@example.com') limit 1`);
  t.match(
    plan,
    /Index (Only )?Scan using users_tenant_id_username_lower_idx/,
    'the (tenant_id, username_lower) index, not one that reads all the tenant’s users',
  );
  t.notMatch(plan, /users_tenant_id_id_pk/, 'and not the primary key');
  const found = await db.tenant(fresh.tenantId, (tx) => tx.execute<{ n: number }>(sql`select count(*)::int as n from users where username_lower = 'fresh-7'`));
  t.equal(found[0]!.n, 1, 'the tenant holds the users the plan was made for');
});
