/**
 * A transaction whose statement fails throws that statement's error, also when a later
 * statement, sent together with it and failing only because the transaction was aborted
 * by then ("current transaction is aborted", 25P02), reaches the caller first. Otherwise
 * input the database refuses (a NUL character, a taken key: a 4xx) could be answered as
 * the 25P02 that followed it: a 500.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import type { Tx } from '../../../src/platform/database/database.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;
const tenant = await data.createTenant('first-failure');

/** The SQLSTATE of `promise`'s error (drizzle's error holds the driver's as its cause), or 'no error'. */
const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => 'no error',
    (error: { code?: string; cause?: { code?: string } }) => error.code ?? error.cause?.code ?? String(error),
  );

/**
 * Two statements sent together, the first failing (division by zero, 22012); the caller
 * learns of the first a few turns of the event loop later (as a function that awaits more
 * around its statement does), so the second's 25P02 reaches `Promise.all` first.
 */
async function both(tx: Tx) {
  // `then` issues a drizzle query at once: the first statement leaves before the second.
  const first = tx.execute(sql`select 1 / 0`).then((rows) => rows);
  const slower = (async () => {
    for (let turn = 0; turn < 5; turn++) await null;
    return first;
  })();
  await Promise.all([slower, tx.execute(sql`select 1`)]);
}

t.test('the statement that failed is the error, not the 25P02 of the statement after it', async (t) => {
  for (let attempt = 0; attempt < 5; attempt++) {
    t.equal(await codeOf(db.tenant(tenant.tenantId, both)), '22012', `attempt ${attempt + 1}`);
  }
  t.equal(await codeOf(db.transaction(both)), '22012', 'in a transaction without a tenant too');
});

t.test('a later statement that fails for a reason of its own is its own error', async (t) => {
  const code = await codeOf(
    db.tenant(tenant.tenantId, async (tx) => {
      await tx.execute(sql`select 1`);
      await tx.execute(sql`select 1 / 0`);
    }),
  );
  t.equal(code, '22012');
});
