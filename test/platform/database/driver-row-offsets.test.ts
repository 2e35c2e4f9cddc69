/**
 * The database driver (postgres.js 3.4) counts the rows of the statement it is reading on
 * its connection and reset that count only when a statement completed. A statement cut off
 * after its first rows (an error on a later row, or its connection lost and reconnected)
 * left the count behind, and the next statement on that connection answered its rows after
 * as many holes: `[first] = rows` was undefined, so a valid token looked up just then was
 * refused with a 401. patches/postgres+*.patch resets the count (applied on install); these
 * tests fail without it (docs/fault-tolerance.md#lost-database-connections).
 */
import postgres from 'postgres';
import t from 'tap';
import { createTestDatabase } from '../../helpers/database.ts';
import { eventually } from '../../helpers/eventually.ts';

const database = await createTestDatabase();
t.teardown(() => database.drop());

/** Whether `rows` is a dense array of `expected` rows (no holes before or between them). */
const dense = (rows: readonly unknown[], expected: number) => rows.length === expected && Object.keys(rows).length === expected;

t.test('a statement that fails after its first rows leaves the next statement on its connection whole', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  // Rows 1–3 are sent before row 4 divides by zero; the second statement is pipelined behind it.
  const failing = sql`select i, 1 / (4 - i) as quotient from generate_series(1, 10) i`.then(
    () => 'answered',
    (error: { code?: string }) => error.code,
  );
  const next = sql<{ x: number }[]>`select x from generate_series(1, 5) x`;
  t.equal(await failing, '22012', 'the first statement fails (division by zero) after sending rows');
  const rows = await next;
  t.ok(dense(rows, 5), `the next statement answers its 5 rows and nothing else (length ${rows.length})`);
  t.equal(rows[0]?.x, 1, 'its first row first');
});

t.test('a statement whose connection is lost after its first rows leaves the statements after the reconnect whole', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {}, connection: { application_name: 'atrium-row-offsets' } });
  const control = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => Promise.all([sql.end({ timeout: 1 }), control.end({ timeout: 1 })]));
  await sql`select 1`;
  // Rows arrive one at a time (each waits 50 ms, flushed as it goes); the backend is
  // terminated once some have been sent.
  const cut = sql`select i, pg_sleep(0.05) from generate_series(1, 200) i`.then(
    () => 'answered',
    () => 'lost',
  );
  await eventually(
    async () =>
      (
        await control<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity
          where application_name = 'atrium-row-offsets' and state = 'active' and query_start < now() - interval '300 ms'`
      )[0]!.n,
    (n) => n > 0,
  );
  await control`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'atrium-row-offsets'`;
  t.equal(await cut, 'lost', 'the statement was cut off');
  // The driver may fail the first statement after the reconnect with the lost connection's
  // error (the application repeats such reads on a fresh connection): ask until answered.
  let rows: { x: number }[] | undefined;
  for (let attempt = 1; !rows && attempt <= 3; attempt++) rows = await sql<{ x: number }[]>`select x from generate_series(1, 3) x`.catch(() => undefined);
  if (!rows) throw new Error('no statement was answered after the reconnect');
  t.ok(dense(rows, 3), `the first statement answered on the new connection has its 3 rows and nothing else (length ${rows.length})`);
  t.equal(rows[0]?.x, 1, 'its first row first');
});
