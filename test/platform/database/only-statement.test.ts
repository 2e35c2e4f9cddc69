/**
 * `onlyStatement`: a transaction whose one statement is a read sends `BEGIN` with the
 * tenant setting, the read and `COMMIT` together, and ends without a round trip of its own.
 * The read still runs inside the transaction and its tenant, nothing can follow it into a
 * transaction that has ended, a failing read fails the transaction with its own error, and
 * the connection is left with no transaction and no tenant. A write, or a read after other
 * statements, is an ordinary statement of its transaction.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { Database, onlyStatement, type Tx } from '../../../src/platform/database/database.ts';
import { currentTenant } from '../../../src/platform/database/tenancy.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const one = await data.createTenant('only-one');
const two = await data.createTenant('only-two');
const single = new Database(data.db.url, { poolSize: 1 });
t.teardown(() => single.close());

await data.db.owner.execute(sql.raw(`create table only_statement_probe (n integer primary key)`));
await data.db.owner.execute(sql.raw(`grant select, insert on only_statement_probe to atrium_app`));

const seenBy = (tx: Tx) =>
  tx.execute<{ tenant: string; seen: string[]; open: boolean }>(
    sql`select ${currentTenant} as tenant, array(select distinct tenant_id from users)::text[] as seen, now() = statement_timestamp() as open`,
  );
/** The connection's state outside any transaction of ours: its tenant setting and whether a transaction is open. */
const afterwards = async () => {
  const [row] = await single.transaction((tx) =>
    tx.execute<{ tenant: string | null; began: boolean }>(sql`select ${currentTenant} as tenant, now() = statement_timestamp() as began`),
  );
  return row;
};

t.test('the only read runs in its transaction and tenant, and the connection is left clean', async (t) => {
  for (const tenant of [one, two, one]) {
    const [row] = await single.tenant(tenant.tenantId, (tx) => onlyStatement(tx, () => seenBy(tx)));
    t.equal(Number(row!.tenant), tenant.tenantId, 'the read sees the tenant');
    t.strictSame(row!.seen.map(Number), [tenant.tenantId], 'and that tenant’s rows only');
    t.equal(row!.open, false, 'inside a transaction opened before it (its start is not the statement’s)');
  }
  const row = await afterwards();
  t.equal(row?.tenant, null, 'the same connection afterwards has no tenant');
  t.equal(row?.began, false, 'and runs its next statement in a transaction of its own');
});

t.test('nothing is issued after it: a later statement fails instead of running outside the transaction', async (t) => {
  await t.rejects(
    single.tenant(one.tenantId, async (tx) => {
      await onlyStatement(tx, () => seenBy(tx));
      return tx.execute(sql`select 1`);
    }),
    { cause: { message: /outside its transaction/ } },
  );
  t.equal((await afterwards())?.tenant, null);
});

t.test('a failing read fails the transaction with its own error and leaves nothing behind', async (t) => {
  await t.rejects(
    single.tenant(one.tenantId, (tx) => onlyStatement(tx, () => tx.execute(sql`select 1 / ${0}::int`))),
    { cause: { code: '22012' } },
  );
  t.equal((await afterwards())?.tenant, null);
  await t.rejects(
    single.tenant(one.tenantId, async (tx) => {
      await onlyStatement(tx, () => tx.execute(sql`select 1 / ${0}::int`)).catch(() => {});
      return 'went on';
    }),
    /rolled back/,
    'a function that went on after it is not answered as committed',
  );
});

t.test('a write, or a read after another statement, stays an ordinary statement of its transaction', async (t) => {
  await t.rejects(
    single.tenant(one.tenantId, async (tx) => {
      await onlyStatement(tx, () => tx.execute(sql`insert into only_statement_probe (n) values (1)`));
      throw new Error('refused');
    }),
    /refused/,
  );
  const [kept] = await data.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from only_statement_probe`);
  t.equal(kept!.n, 0, 'the refused transaction’s write rolled back');
  const answered = await single.tenant(one.tenantId, async (tx) => {
    await tx.execute(sql`insert into only_statement_probe (n) values (2)`);
    const [row] = await onlyStatement(tx, () => seenBy(tx));
    await tx.execute(sql`insert into only_statement_probe (n) values (3)`);
    return row;
  });
  t.equal(Number(answered!.tenant), one.tenantId);
  const [after] = await data.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from only_statement_probe`);
  t.equal(after!.n, 2, 'statements after it still ran in the transaction and committed');
});
