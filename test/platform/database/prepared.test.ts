/**
 * `prepared` keeps one statement per owner and form, and no more than a bound of forms per
 * owner (the most recently used), so that forms chosen by clients (SCIM filters) cannot grow
 * the process without end; and the request pool prepares no more than a bound of statement
 * texts, so that they cannot grow the driver's or the server's memory without end either.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { Database, MAX_PREPARED_TEXTS, type Tx } from '../../../src/platform/database/database.ts';
import { prepared } from '../../../src/platform/database/prepared.ts';
import { createTestDatabase } from '../../helpers/database.ts';

/** A stand-in for the drizzle instance: `prepared` only keys its statements by it. */
const tx = {} as Tx;

t.test('a form is built once for its owner and kept; another owner builds its own', async (t) => {
  const owner = {};
  let built = 0;
  const build = () => ({ built: ++built });
  const first = prepared(tx, owner, 'form', build);
  t.equal(prepared(tx, owner, 'form', build), first);
  t.equal(built, 1);
  t.not(prepared(tx, {}, 'form', build), first, 'another owner');
  t.not(prepared(tx, owner, 'another form', build), first, 'another form');
  t.equal(built, 3);
});

t.test('past 100 forms of one owner, the least recently used one makes room for a new one', async (t) => {
  const owner = {};
  let built = 0;
  const build = () => ({ built: ++built });
  const kept = Array.from({ length: 100 }, (_, i) => prepared(tx, owner, `form ${i}`, build));
  t.equal(built, 100);
  t.equal(prepared(tx, owner, 'form 0', build), kept[0], 'form 0 used again: now the most recently used');
  const added = prepared(tx, owner, 'form 100', build);
  t.equal(prepared(tx, owner, 'form 100', build), added, 'the 101st form is kept');
  t.equal(built, 101);
  t.equal(prepared(tx, owner, 'form 0', build), kept[0], 'the recently used form stays');
  t.equal(built, 101);
  t.not(prepared(tx, owner, 'form 1', build), kept[1], 'the least recently used form made room: built again');
  t.equal(built, 102);
});

t.test('past MAX_PREPARED_TEXTS statement texts, a connection prepares no more; later texts still run', async (t) => {
  const database = await createTestDatabase();
  // One connection: every statement lands on it, and pg_prepared_statements shows what it keeps.
  const db = new Database(database.url, { appUrl: database.appUrl, poolSize: 1 });
  t.teardown(async () => {
    await db.close();
    await database.drop();
  });
  // Texts with a parameter (the driver sends those without one as simple queries, never prepared), each distinct.
  const texts = MAX_PREPARED_TEXTS + 50;
  const sums = await db.transaction(async (tx) => {
    const answers: number[] = [];
    for (let i = 0; i < texts; i++) answers.push((await tx.execute<{ n: number }>(sql`select ${sql.raw(String(i))} + ${1}::int as n`))[0]!.n);
    return answers;
  });
  t.strictSame(
    sums,
    Array.from({ length: texts }, (_, i) => i + 1),
    'every statement answered, prepared or not',
  );
  const kept = async () =>
    (
      await db.transaction((tx) =>
        tx.execute<{ n: number }>(sql`select count(*)::int as n from pg_prepared_statements where statement like ${'select % + $1::int as n'}`),
      )
    )[0]!.n;
  t.equal(await kept(), MAX_PREPARED_TEXTS, "the connection keeps the first texts only (the driver's own statements aside)");
  // A text past the bound runs again, still unprepared; one within it is still prepared.
  const again = await db.transaction(async (tx) => [
    (await tx.execute<{ n: number }>(sql`select ${sql.raw(String(texts - 1))} + ${2}::int as n`))[0]!.n,
    (await tx.execute<{ n: number }>(sql`select ${sql.raw('0')} + ${2}::int as n`))[0]!.n,
  ]);
  t.strictSame(again, [texts + 1, 2]);
  t.equal(await kept(), MAX_PREPARED_TEXTS);
});
