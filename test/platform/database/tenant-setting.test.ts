/**
 * The tenant setting: `setTenant` writes it for one transaction, `currentTenant` reads it
 * for policies (null without a tenant), `requiredTenant` reads it where a tenant is a must.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { Database, setTenant, type Tx } from '../../../src/platform/database/database.ts';
import { currentTenant, requiredTenant, TENANT_SETTING } from '../../../src/platform/database/tenancy.ts';
import { users } from '../../../src/resources/users/table.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;
const one = await data.createTenant('setting-one');
const two = await data.createTenant('setting-two');

const readCurrent = async (tx: Tx) => (await tx.execute<{ tenant: string | null }>(sql`select ${currentTenant} as tenant`))[0]!.tenant;
const readRequired = async (tx: Tx) => (await tx.execute<{ tenant: string }>(sql`select ${requiredTenant} as tenant`))[0]!.tenant;

t.test('Database.tenant sets the tenant both readers see', async (t) => {
  const [current, required] = await db.tenant(one.tenantId, async (tx) => [await readCurrent(tx), await readRequired(tx)]);
  t.equal(Number(current), one.tenantId);
  t.equal(Number(required), one.tenantId);
});

t.test('setTenant scopes a plain transaction: its policies show that tenant only', async (t) => {
  const seen = await db.transaction(async (tx) => {
    const before = await tx.select({ tenantId: users.tenantId }).from(users);
    await setTenant(tx, two.tenantId);
    const after = await tx.select({ tenantId: users.tenantId }).from(users);
    return { before, after, current: await readCurrent(tx) };
  });
  t.strictSame(seen.before, [], 'no tenant, no rows');
  t.ok(seen.after.length > 0, 'its rows are visible');
  t.ok(
    seen.after.every((row) => row.tenantId === two.tenantId),
    'only the tenant set',
  );
  t.equal(Number(seen.current), two.tenantId);
});

t.test('without a tenant: currentTenant is null, requiredTenant fails', async (t) => {
  t.equal(await db.transaction(readCurrent), null);
  await t.rejects(db.transaction(readRequired));
  await t.rejects(db.owner.transaction(readRequired), 'the owner pool has no tenant either');
});

t.test('the setting lasts until the transaction ends, on the same connection', async (t) => {
  const single = new Database(db.url, { poolSize: 1 });
  t.teardown(() => single.close());
  t.equal(Number(await single.tenant(one.tenantId, readCurrent)), one.tenantId);
  // The same (only) connection afterwards: the setting exists but is empty.
  t.equal(await single.transaction(readCurrent), null, 'currentTenant: no tenant');
  await t.rejects(single.transaction(readRequired), 'requiredTenant: the empty setting is refused');
});

t.test('a cleared setting reads as no tenant', async (t) => {
  const clear = (tx: Tx) => tx.execute(sql`select set_config(${TENANT_SETTING}, '', true)`);
  t.equal(
    await db.tenant(one.tenantId, async (tx) => {
      await clear(tx);
      return readCurrent(tx);
    }),
    null,
  );
  await t.rejects(
    db.tenant(one.tenantId, async (tx) => {
      await clear(tx);
      return readRequired(tx);
    }),
  );
});

t.test('Database.tenant on one connection: the setting lasts for its transaction only, and a failure leaves none behind', async (t) => {
  const single = new Database(db.url, { poolSize: 1 });
  t.teardown(() => single.close());
  const seenBy = (tx: Tx) =>
    tx.execute<{ tenant: string; seen: string[] }>(sql`select ${currentTenant} as tenant, array(select distinct tenant_id from users)::text[] as seen`);
  for (const tenant of [one, two, one]) {
    const [row] = await single.tenant(tenant.tenantId, seenBy);
    t.equal(Number(row!.tenant), tenant.tenantId, 'the statement sees the tenant');
    t.strictSame(row!.seen.map(Number), [tenant.tenantId], 'and that tenant’s rows only');
  }
  t.equal(await single.transaction(readCurrent), null, 'the same connection afterwards has no tenant');
  await t.rejects(
    single.tenant(one.tenantId, (tx) => tx.execute(sql`select 1 / ${0}::int`)),
    { cause: { code: '22012' } },
    'a failing statement fails the transaction',
  );
  t.equal(await single.transaction(readCurrent), null, 'and leaves no tenant behind');
  await t.rejects(
    single.tenant(one.tenantId, async (tx) => {
      await tx.execute(sql`select 1 / ${0}::int`).catch(() => {});
      return 'went on';
    }),
    /rolled back/,
    'a transaction whose statement failed is not answered as committed when its function went on',
  );
});

t.test('a statement belongs to the transaction that issued it: outside one, or after it ended, it fails and reaches no connection', async (t) => {
  const single = new Database(db.url, { poolSize: 1 });
  t.teardown(() => single.close());
  const outside = /issued outside its transaction/;
  // The transactions' drizzle instance kept past its transaction: a promise left running.
  let kept: Tx | undefined;
  let later: Promise<unknown> | undefined;
  let ended!: () => void;
  const afterEnd = new Promise<void>((resolve) => (ended = resolve));
  await single.tenant(one.tenantId, async (tx) => {
    kept = tx;
    later = afterEnd.then(() => tx.execute(sql`select ${currentTenant} as tenant`));
    await readCurrent(tx);
  });
  ended();
  // The same connection now serves another tenant's transaction, which the late statement must not join.
  const seen = await single.tenant(two.tenantId, async (tx) => {
    // drizzle wraps the client's error: the cause is the refusal.
    const settled = await later!.then(
      () => 'ran',
      (error: Error) => (error.cause as Error).message,
    );
    return { settled, current: await readCurrent(tx) };
  });
  t.match(seen.settled, outside, 'a statement after its transaction ended fails');
  t.equal(Number(seen.current), two.tenantId);
  await t.rejects(async () => kept!.execute(sql`select 1`), { cause: { message: outside } }, 'a statement outside any transaction fails');
  // Inside another transaction, the kept instance sends to that transaction: it is the same instance.
  t.equal(Number(await single.tenant(one.tenantId, () => readCurrent(kept!))), one.tenantId);
});

t.test('a tenant id is formatted by Atrium: anything but a positive integer is refused before a statement is sent', async (t) => {
  for (const bad of [0, -1, 1.5, Number.NaN, Number('1; drop table users')]) {
    await t.rejects(db.tenant(bad, readCurrent), TypeError, String(bad));
  }
});

t.test('a prepared statement whose table changed: the next transaction answers from the table as it is now', async (t) => {
  const single = new Database(db.url, { poolSize: 1 });
  t.teardown(async () => {
    await single.close();
    await db.owner.execute(sql`drop table if exists reshaped_read`);
  });
  await db.owner.execute(sql`create table reshaped_read (n int)`);
  await db.owner.execute(sql`insert into reshaped_read values (1)`);
  await db.owner.execute(sql.raw('grant select on reshaped_read to atrium_app'));
  const read = (tx: Tx) => tx.execute<Record<string, number | null>>(sql`select * from reshaped_read where n = ${1}`);
  t.strictSame([...(await single.tenant(one.tenantId, read))], [{ n: 1 }]);
  await db.owner.execute(sql`alter table reshaped_read add column m int`);
  const again = await single.tenant(one.tenantId, read).catch((error: unknown) => error);
  const now = again instanceof Error ? await single.tenant(one.tenantId, read) : (again as Record<string, number | null>[]);
  t.strictSame([...now], [{ n: 1, m: null }], 'answered from the table as it is now');
});
