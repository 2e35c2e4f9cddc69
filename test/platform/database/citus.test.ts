/**
 * Atrium on Citus (docs/scaling.md): where `atrium citus:distribute` puts each table, that
 * it is idempotent and follows later migrations, that the tenant setting reaches the
 * workers, and that a statement naming its tenant runs on one shard of one worker (the
 * plan's task count). The Citus cases need a Citus coordinator with workers in
 * CITUS_DATABASE_URL (docs/scaling.md#the-test-suite-on-citus) and are skipped without one; the refusal
 * where Citus is absent runs everywhere else.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { CitusRefusal, COORDINATOR_TABLES, distribute, tableStates } from '../../../src/platform/database/citus.ts';
import type { Tx } from '../../../src/platform/database/database.ts';
import { listRecords, listStatement } from '../../../src/platform/result-controls/listing.ts';
import { auditEventListing } from '../../../src/resources/audit-events/view.ts';
import { roleListing } from '../../../src/resources/roles/view.ts';
import { listedUserListing } from '../../../src/resources/users/view.ts';
import { unreadCountTriggersOnCitus } from '../../../src/resources/notifications/citus.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const onCitus = Boolean(process.env[CITUS_ENV]);
const { db, createTenant, createUser } = await startTestDatabase(t);

/** How many tasks Citus splits `statement` (with its bound `params`) into, and the workers they run on, in `tx` (its tenant set). */
async function plan(tx: Tx, statement: string, params: unknown[] = []): Promise<{ tasks: number; nodes: string[] }> {
  // The transaction's own client (drizzle's `$client`): the statement goes to its connection with its values bound.
  const client = (tx as unknown as { $client: { unsafe(query: string, params: unknown[]): Promise<{ 'QUERY PLAN': string }[]> } }).$client;
  const rows = await client.unsafe(`explain ${statement}`, params);
  const lines = rows.map((row) => row['QUERY PLAN']);
  const count = lines.map((line) => /Task Count: (\d+)/.exec(line)).find(Boolean);
  const nodes = new Set(lines.flatMap((line) => /Node: host=(\S+) port=(\d+)/.exec(line)?.slice(1, 3).join(':') ?? []));
  return { tasks: count ? Number(count[1]) : 0, nodes: [...nodes] };
}

t.test('without Citus, citus:distribute refuses with one line and changes nothing', { skip: onCitus && 'this database has Citus' }, async (t) => {
  const before = await db.owner.execute(sql`select count(*)::int as n from pg_event_trigger`);
  await t.rejects(
    distribute(db.ownerSql),
    new CitusRefusal('Citus is not installed in this database (CREATE EXTENSION citus on the coordinator and every worker; docs/scaling.md)'),
  );
  t.strictSame(await db.owner.execute(sql`select count(*)::int as n from pg_event_trigger`), before);
});

t.test('on Citus', { skip: !onCitus && `${CITUS_ENV} names no Citus coordinator (docs/scaling.md#the-test-suite-on-citus)` }, async (t) => {
  const a = await createTenant('citus-a');
  const b = await createTenant('citus-b');
  const member = await createUser(a.tenantId);

  t.test('every tenant table is distributed by tenant_id with users, tenants is a reference table, the rest stays on the coordinator', async (t) => {
    const states = await tableStates(db.ownerSql);
    const tenantOwned = await db.owner.execute<{ table: string }>(sql`
      select c.relname as table from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attname = 'tenant_id'
      where c.relnamespace = 'public'::regnamespace and c.relkind = 'r' order by 1`);
    t.ok(tenantOwned.length >= 30, `${tenantOwned.length} tables with tenant_id`);
    for (const { table } of tenantOwned) {
      const state = states.find((s) => s.table === table);
      t.strictSame([state?.current, state?.colocated], ['distributed', true], `${table} distributed, co-located with users`);
    }
    t.equal(states.find((s) => s.table === 'tenants')?.current, 'reference');
    for (const table of COORDINATOR_TABLES) t.equal(states.find((s) => s.table === table)?.current, 'plain', `${table} stays a plain table on the coordinator`);
    const [queue] = await db.owner.execute<{ n: number }>(sql`
      select count(*)::int as n from citus_tables where table_name::text like 'pgboss.%'`);
    t.equal(queue!.n, 0, "the job queue's tables stay on the coordinator");
    const keys = await db.owner.execute<{ n: number }>(sql`
      select count(*)::int as n from pg_constraint where contype = 'f' and confrelid = 'tenants'::regclass`);
    t.equal(keys[0]!.n, tenantOwned.length, 'every foreign key to tenants is back');
  });

  t.test('a second run changes nothing', async (t) => {
    const again = await distribute(db.ownerSql, { adaptations: unreadCountTriggersOnCitus });
    t.strictSame([again.distributed, again.referenced], [[], []]);
  });

  t.test('a tenant table a later migration creates is distributed as it is created, its keys accepted', async (t) => {
    await db.ownerSql.begin(async (tx) => {
      await tx`create table later_notes (tenant_id bigint not null, id bigint generated always as identity, user_id bigint not null, primary key (tenant_id, id))`;
      await tx`alter table later_notes add constraint later_notes_tenant_fk foreign key (tenant_id) references tenants (id) on delete cascade`;
      await tx`alter table later_notes add constraint later_notes_user_fk foreign key (tenant_id, user_id) references users (tenant_id, id)`;
    });
    t.teardown(() => db.ownerSql`drop table if exists later_notes`);
    const state = (await tableStates(db.ownerSql)).find((s) => s.table === 'later_notes');
    t.strictSame([state?.current, state?.colocated], ['distributed', true]);
  });

  t.test('a table no rule places is refused by name, and nothing changes', async (t) => {
    await db.ownerSql`create table stray_things (name text primary key)`;
    t.teardown(() => db.ownerSql`drop table if exists stray_things`);
    await t.rejects(distribute(db.ownerSql), { message: /^no rule places the table stray_things \(no tenant_id column\)/ });
    const [placed] = await db.owner.execute<{ n: number }>(sql`select count(*)::int as n from citus_tables where table_name = 'stray_things'::regclass`);
    t.equal(placed!.n, 0, 'left as it was');
  });

  t.test("the tenant setting reaches the workers: a tenant sees its own rows there, never another's", async (t) => {
    const seen = await db.tenant(a.tenantId, (tx) => tx.execute<{ tenant_id: number }>(sql`select distinct tenant_id from users`));
    t.strictSame(
      seen.map((row) => Number(row.tenant_id)),
      [a.tenantId],
    );
    const other = await db.tenant(a.tenantId, (tx) => tx.execute(sql`select id from users where tenant_id = ${b.tenantId}`));
    t.equal(other.length, 0);
  });

  t.test('a statement naming its tenant runs on one shard of one worker: a list and a write', async (t) => {
    await db.tenant(a.tenantId, async (tx) => {
      const list = await plan(tx, `select id, username from users where tenant_id = ${a.tenantId} order by id limit 50`);
      t.strictSame([list.tasks, list.nodes.length], [1, 1], `the list: ${JSON.stringify(list)}`);
      const joined = await plan(
        tx,
        `select u.id, r.name from users u join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id where u.tenant_id = ${a.tenantId} order by u.id limit 50`,
      );
      t.strictSame([joined.tasks, joined.nodes.length], [1, 1], `the list with its role: ${JSON.stringify(joined)}`);
      const write = await plan(tx, `update users set first_name = 'Renamed' where tenant_id = ${a.tenantId} and id = ${member.id}`);
      t.strictSame([write.tasks, write.nodes.length], [1, 1], `the write: ${JSON.stringify(write)}`);
      const insert = await plan(tx, `insert into departments (tenant_id, name, user_id) values (${a.tenantId}, 'One shard', ${member.id})`);
      t.strictSame([insert.tasks, insert.nodes.length], [1, 1], `the insert: ${JSON.stringify(insert)}`);
    });
  });

  t.test('a list of the list mechanism names its tenant, bound: one task on one worker, outer join included', async (t) => {
    const viewer = { tenantId: a.tenantId, userId: member.id, tokenId: 0, permissions: new Set([]), passwordChangeRequired: false, userLabel: 'x' };
    await db.tenant(a.tenantId, async (tx) => {
      const users = listStatement(tx, listedUserListing, viewer as never, { limit: 26 });
      t.ok(users.params.includes(a.tenantId), 'the tenant is a bound value');
      const usersPlan = await plan(tx, users.sql, users.params);
      t.strictSame([usersPlan.tasks, usersPlan.nodes.length], [1, 1], `the users' list, its pictures an outer join: ${JSON.stringify(usersPlan)}`);
      const roles = listStatement(tx, roleListing, viewer as never, { limit: 26, offset: 26 });
      const rolesPlan = await plan(tx, roles.sql, roles.params);
      t.strictSame([rolesPlan.tasks, rolesPlan.nodes.length], [1, 1], `the roles' list, a later page: ${JSON.stringify(rolesPlan)}`);
      const events = listStatement(tx, auditEventListing, viewer as never, { limit: 26 });
      const eventsPlan = await plan(tx, events.sql, events.params);
      t.strictSame([eventsPlan.tasks, eventsPlan.nodes.length], [1, 1], `the audit trail: ${JSON.stringify(eventsPlan)}`);
    });
    const listed = await listRecords(db, a.tenantId, listedUserListing, {}, { ...viewer, permissions: new Set(['users.view']) } as never);
    t.ok(
      listed.some((user) => user.id === member.id),
      'and it lists the tenant’s users',
    );
    const elsewhere = await db.transaction(async (tx) => listStatement(tx, listedUserListing, viewer as never));
    t.notOk(elsewhere.params.length, 'a transaction without a tenant names none (row-level security shows it nothing)');
  });

  t.test('an audited write of one tenant is one task on one worker: the change and its event', async (t) => {
    await db.tenant(a.tenantId, async (tx) => {
      const write = await plan(tx, 'update users set city = $1 where tenant_id = $2 and id = $3', ['Bound', a.tenantId, member.id]);
      t.strictSame([write.tasks, write.nodes.length], [1, 1], `the write: ${JSON.stringify(write)}`);
      const event = await plan(
        tx,
        `insert into audit_events (tenant_id, action, actor_type, actor_id, actor_label, target_type, target_id, target_label)
         values (current_setting('atrium.tenant_id')::bigint, 'user.updated', 'user', $1, $2, 'user', $3, $4)`,
        [member.id, 'Ada Lovelace', String(member.id), 'Test member'],
      );
      t.strictSame([event.tasks, event.nodes.length], [1, 1], `its event, the tenant taken from the transaction: ${JSON.stringify(event)}`);
    });
  });

  t.test('a statement that leaves its tenant to row-level security alone reaches every shard', async (t) => {
    const [count] = await db.owner.execute<{ shards: number }>(sql`select count(*)::int as shards from pg_dist_shard where logicalrelid = 'users'::regclass`);
    const shards = count!.shards;
    const rlsOnly = await db.tenant(a.tenantId, (tx) => plan(tx, 'select id, username from users order by id'));
    t.equal(rlsOnly.tasks, shards, 'Citus does not route by the policy: queries name the tenant to stay on one shard');
  });
  t.end();
});
