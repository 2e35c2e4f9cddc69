/**
 * `sendAhead`: a statement whose answer nobody reads (an audit event) leaves with the
 * transaction's next statement, or its `COMMIT`, instead of waiting for a round trip of its
 * own. Its failure is still the transaction's: the change rolls back, and the error is the
 * statement's own.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { checkBeforeCommit, sendAhead, type Tx } from '../../../src/platform/database/database.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;
const tenant = await data.createTenant('send-ahead');

// A table of this test alone, written by the application role as a resource's table is.
await db.owner.execute(sql.raw(`create table send_ahead_probe (n integer primary key, label text not null)`));
await db.owner.execute(sql.raw(`grant select, insert on send_ahead_probe to atrium_app`));

const insert = (tx: Tx, n: number, label: string | null = 'probe') => tx.execute(sql`insert into send_ahead_probe (n, label) values (${n}, ${label})`);
const labels = async (n: number) => (await db.owner.execute<{ label: string }>(sql`select label from send_ahead_probe where n = ${n}`)).map((row) => row.label);
/** The SQLSTATE of `promise`'s error (drizzle's error holds the driver's as its cause), or 'no error'. */
const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => 'no error',
    (error: { code?: string; cause?: { code?: string } }) => error.code ?? error.cause?.code ?? String(error),
  );

t.test('a statement sent ahead that fails fails its transaction with its own error; nothing stays', async (t) => {
  const code = await codeOf(
    db.tenant(tenant.tenantId, async (tx) => {
      await insert(tx, 1);
      await sendAhead(tx, insert(tx, 2, null)); // not null violated
      // The next statement fails too (the transaction is aborted), but the cause is reported.
      await insert(tx, 3);
    }),
  );
  t.equal(code, '23502', 'the not-null violation, not "current transaction is aborted" (25P02)');
  t.strictSame(await labels(1), [], 'the change before it rolled back');
  t.strictSame(await labels(3), []);
});

t.test('the failing statement sent ahead last: COMMIT rolls back and the transaction throws its error', async (t) => {
  const code = await codeOf(
    db.tenant(tenant.tenantId, async (tx) => {
      await insert(tx, 4);
      await sendAhead(tx, insert(tx, 4)); // duplicate key
      return 'answered';
    }),
  );
  t.equal(code, '23505');
  t.strictSame(await labels(4), [], 'nothing committed');
});

t.test('a transaction that fails after a statement sent ahead rolls it back', async (t) => {
  await t.rejects(
    db.tenant(tenant.tenantId, async (tx) => {
      await sendAhead(tx, insert(tx, 5));
      throw new Error('refused');
    }),
    { message: 'refused' },
  );
  t.strictSame(await labels(5), []);
});

t.test('outside its transaction, a statement sent ahead is refused', async (t) => {
  let kept: Tx | undefined;
  await db.tenant(tenant.tenantId, async (tx) => {
    kept = tx;
  });
  const refusal = await sendAhead(kept!, insert(kept!, 6)).then(
    () => 'no error',
    (error: Error) => (error.cause instanceof Error ? error.cause : error).message,
  );
  t.match(refusal, /outside its transaction/);
  t.strictSame(await labels(6), []);
});

t.test('a statement sent ahead is seen by the next statement and commits with the transaction', async (t) => {
  const seen = await db.tenant(tenant.tenantId, async (tx) => {
    await sendAhead(tx, insert(tx, 7, 'ahead'));
    return (await tx.execute<{ label: string }>(sql`select label from send_ahead_probe where n = 7`)).map((row) => row.label);
  });
  t.strictSame(seen, ['ahead'], 'the server ran it before the statement that followed');
  t.strictSame(await labels(7), ['ahead'], 'committed');
});

t.test('sent ahead as the last statement, it commits with the transaction', async (t) => {
  await db.tenant(tenant.tenantId, async (tx) => {
    await insert(tx, 8, 'before');
    await sendAhead(tx, insert(tx, 9, 'last'));
  });
  t.strictSame([...(await labels(8)), ...(await labels(9))], ['before', 'last']);
});

t.test("in the owner pool's transaction, a statement sent ahead is awaited there", async (t) => {
  await db.owner.transaction(async (tx) => {
    await sendAhead(tx, insert(tx, 10, 'owner'));
  });
  t.strictSame(await labels(10), ['owner']);
  t.equal(
    await codeOf(
      db.owner.transaction(async (tx) => {
        await sendAhead(tx, insert(tx, 10, 'owner'));
      }),
    ),
    '23505',
    "its failure is the owner transaction's at once",
  );
});

t.test('checkBeforeCommit: a refusing verdict rolls the transaction back with its error; a passing one commits', async (t) => {
  const probe = (tx: Tx, n: number) => tx.execute<{ n: number }>(sql`select n from send_ahead_probe where n = ${n}`);
  const refused = db.tenant(tenant.tenantId, async (tx) => {
    await sendAhead(tx, insert(tx, 40));
    await checkBeforeCommit(tx, probe(tx, 41), (rows) => (rows.length > 0 ? undefined : new Error('no row 41')));
    await insert(tx, 42); // a later statement: the check's answer arrives with it
  });
  await t.rejects(refused, { message: 'no row 41' });
  t.strictSame([...(await labels(40)), ...(await labels(42))], [], 'nothing of it stays');
  // The check as the transaction's last statement: the COMMIT waits for its answer.
  await t.rejects(
    db.tenant(tenant.tenantId, async (tx) => {
      await sendAhead(tx, insert(tx, 43));
      await checkBeforeCommit(tx, probe(tx, 41), (rows) => (rows.length > 0 ? undefined : new Error('still no row 41')));
    }),
    { message: 'still no row 41' },
  );
  t.strictSame(await labels(43), [], 'rolled back');
  await db.tenant(tenant.tenantId, async (tx) => {
    await sendAhead(tx, insert(tx, 44));
    await checkBeforeCommit(tx, probe(tx, 44), (rows) => (rows.length === 1 ? undefined : new Error('row 44 missing')));
  });
  t.strictSame(await labels(44), ['probe'], 'a passing check commits');
  // A checked statement that fails is the transaction's failure.
  t.equal(await codeOf(db.tenant(tenant.tenantId, async (tx) => checkBeforeCommit(tx, tx.execute(sql`select 1 / 0`), () => undefined))), '22012');
});
