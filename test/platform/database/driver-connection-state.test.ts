/**
 * Defects of the database driver (postgres.js 3.4.9) that patches/postgres+*.patch mends
 * (applied on install); each test here fails without it
 * (docs/fault-tolerance.md#driver-defects-and-what-atrium-does-about-them):
 * - it counted the rows of the statement it was reading and reset that count only when a
 *   statement completed, so a statement cut off after its first rows left the next one's
 *   rows after as many holes (a valid token looked up just then was refused with a 401);
 * - it kept a statement its lost connection cut off as the connection's current one, so
 *   the server's refusal of the next login was taken for that statement's error and the
 *   statement waiting for the connection was never answered while the refusals lasted.
 * And one change of its behaviour: a transaction's first statements are written with its
 * `BEGIN` instead of after `BEGIN`'s answer (docs/performance.md#what-a-request-does).
 */
import net from 'node:net';
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

t.test('a statement cut off by its lost connection does not swallow the refusals of the reconnects after it', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {}, backoff: () => 0.05, connection: { application_name: 'atrium-stale-statement' } });
  // An owner connection to another database, which survives what it does to this one.
  const controlUrl = new URL(database.url);
  controlUrl.pathname = '/postgres';
  const control = postgres(controlUrl.toString(), { max: 1, onnotice: () => {} });
  const [{ name } = { name: '' }] = await sql<{ name: string }[]>`select current_database() as name`;
  t.teardown(async () => {
    await control.unsafe(`alter database "${name}" with allow_connections true`);
    await Promise.all([sql.end({ timeout: 1 }), control.end({ timeout: 1 })]);
  });
  const cut = sql`select pg_sleep(30)`.then(
    () => 'answered',
    () => 'lost',
  );
  await eventually(
    async () =>
      (
        await control<{ n: number }[]>`
          select count(*)::int as n from pg_stat_activity where application_name = 'atrium-stale-statement' and state = 'active'`
      )[0]!.n,
    (n) => n > 0,
  );
  // The database refuses new logins (as in maintenance), then its sessions are ended.
  await control.unsafe(`alter database "${name}" with allow_connections false`);
  await control`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'atrium-stale-statement'`;
  t.equal(await cut, 'lost', 'the statement was cut off');
  // The next statement's connection attempt is refused; the driver must say so, not keep
  // reconnecting for as long as the refusals last.
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    sql`select 1`.then(
      () => 'answered',
      (error: { code?: string }) => error.code,
    ),
    new Promise((resolve) => (timer = setTimeout(() => resolve('no answer after 10 s'), 10_000))),
  ]);
  clearTimeout(timer);
  t.equal(outcome, '55000', 'the statement fails with the refusal (database not accepting connections)');
});

t.test('a transaction’s first statements leave with its BEGIN: a round trip less, the same transaction', async (t) => {
  // A loopback relay in front of the server counts the client's writes while a transaction
  // runs: the client writes only after the answer to its previous write, so each is a
  // round trip.
  const server = new URL(database.url);
  let writes: string[] | null = null;
  const relay = net.createServer((client) => {
    const upstream = net.connect(Number(server.port), server.hostname);
    client.on('data', (data: Buffer) => {
      writes?.push(data.toString('latin1'));
      upstream.write(data);
    });
    upstream.pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  relay.listen(0, '127.0.0.1');
  await new Promise((resolve) => relay.once('listening', resolve));
  const relayed = new URL(database.url);
  relayed.hostname = '127.0.0.1';
  relayed.port = String((relay.address() as net.AddressInfo).port);
  const sql = postgres(relayed.toString(), { max: 1, onnotice: () => {} });
  t.teardown(async () => {
    await sql.end({ timeout: 1 });
    await new Promise((resolve) => relay.close(resolve));
  });
  await sql`select 1`;

  writes = [];
  const [first, second] = await sql.begin(async (tx) => {
    await tx`select set_config('atrium.test', 'inside', true)`;
    return Promise.all([
      tx<{ value: string; xact: string }[]>`select current_setting('atrium.test') as value, pg_current_xact_id()::text as xact`,
      tx<{ xact: string }[]>`select pg_current_xact_id()::text as xact`,
    ]);
  });
  const sent = writes;
  writes = null;
  t.equal(sent.length, 3, 'BEGIN with the first statement, the next two together, then COMMIT');
  t.match(sent[0], /begin[\s\S]*set_config/i, 'the first write holds BEGIN and the first statement');
  t.match(sent[2], /commit/i);
  t.equal(first![0]!.value, 'inside', 'a transaction-local setting holds for the later statements');
  t.equal(first![0]!.xact, second![0]!.xact, 'one transaction');
  const [after] = await sql<{ value: string | null }[]>`select current_setting('atrium.test', true) as value`;
  t.notOk(after?.value, 'and ends with it');

  // A statement that fails rolls the transaction back, as before.
  await sql`create temporary table pipelined (n int)`;
  const failed = await sql
    .begin(async (tx) => {
      await tx`insert into pipelined values (1)`;
      await tx`select 1 / 0`;
    })
    .then(
      () => 'committed',
      (error: { code?: string }) => error.code,
    );
  t.equal(failed, '22012', 'the division by zero fails the transaction');
  t.equal((await sql<{ n: number }[]>`select count(*)::int as n from pipelined`)[0]!.n, 0, 'its insert is rolled back');
});
