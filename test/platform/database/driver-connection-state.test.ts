/**
 * Defects of the database driver (postgres.js 3.4.9) that patches/postgres+*.patch mends
 * (applied on install); each test here fails without it
 * (docs/fault-tolerance.md#driver-defects-and-what-atrium-does-about-them):
 * - it counted the rows of the statement it was reading and reset that count only when a
 *   statement completed, so a statement cut off after its first rows left the next one's
 *   rows after as many holes (a valid token looked up just then was refused with a 401);
 * - it kept a statement its lost connection cut off as the connection's current one, so
 *   the server's refusal of the next login was taken for that statement's error and the
 *   statement waiting for the connection was never answered while the refusals lasted;
 * - statements written to a connection after its socket error, before its close, stayed
 *   queued for the next socket (answers then went to the wrong statements);
 * - a statement whose prepared plan the server refused was written again at once, between
 *   the messages of a statement ahead of it that was still being described.
 * And two changes of its behaviour: a transaction's first statements are written with its
 * `BEGIN` instead of after `BEGIN`'s answer, and statement groups (`sql.group`), several
 * prepared statements written as one implicit transaction under one Sync
 * (docs/performance.md#what-a-request-does).
 */
import net from 'node:net';
import postgres from 'postgres';
import t, { type Test } from 'tap';
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

/**
 * A pool of one connection through a loopback relay in front of the server, which records
 * the client's writes while `writes` is an array: the client writes only after the answer
 * to its previous write, so each is a round trip.
 */
async function relayedConnection(t: Test) {
  const server = new URL(database.url);
  const recording: { writes: string[] | null } = { writes: null };
  const clients = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    clients.add(client);
    client.on('close', () => clients.delete(client));
    const upstream = net.connect(Number(server.port), server.hostname);
    client.on('data', (data: Buffer) => {
      recording.writes?.push(data.toString('latin1'));
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
  /** Resets the client's connections (TCP RST): the driver sees an error event, then the close. */
  const reset = () => {
    for (const client of clients) client.resetAndDestroy();
  };
  return { sql, recording, reset };
}

t.test('a transaction’s first statements leave with its BEGIN: a round trip less, the same transaction', async (t) => {
  const { sql, recording } = await relayedConnection(t);
  recording.writes = [];
  const [first, second] = await sql.begin(async (tx) => {
    await tx`select set_config('atrium.test', 'inside', true)`;
    return Promise.all([
      tx<{ value: string; xact: string }[]>`select current_setting('atrium.test') as value, pg_current_xact_id()::text as xact`,
      tx<{ xact: string }[]>`select pg_current_xact_id()::text as xact`,
    ]);
  });
  const sent = recording.writes;
  recording.writes = null;
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

/** The driver's statement groups (as patched): statements made by the pool, not yet awaited, sent as one. */
type Grouping = { group(parts: readonly unknown[]): Promise<unknown[]> };
const groupOf = (sql: postgres.Sql) => (sql as unknown as Grouping).group.bind(sql);
/** A prepared statement of `sql` (groups take prepared statements only). */
const prepared = <T extends object[] = postgres.Row[]>(sql: postgres.Sql, text: string, params: unknown[] = []) =>
  sql.unsafe<T>(text, params as never, { prepare: true });

t.test('a statement group is one implicit transaction: one write once prepared, its setting for its statements only', async (t) => {
  const { sql, recording } = await relayedConnection(t);
  const group = groupOf(sql);
  const setting = (value: string) => prepared<{ value: string }[]>(sql, `select set_config('atrium.test', $1, true) as value`, [value]);
  const read = () =>
    prepared<{ value: string; xact: string; n: number }[]>(
      sql,
      `select current_setting('atrium.test') as value, pg_current_xact_id_if_assigned()::text as xact, $1::int as n`,
      [7],
    );
  // The first group on the connection prepares its statements (one round trip more).
  const [[set], [first]] = (await group([setting('one'), read()])) as [{ value: string }[], { value: string; n: number }[]];
  t.equal(set?.value, 'one');
  t.same({ value: first?.value, n: first?.n }, { value: 'one', n: 7 }, 'the second statement sees the setting of the first');

  recording.writes = [];
  const [, [second]] = (await group([setting('two'), read()])) as [unknown, { value: string }[]];
  const sent = recording.writes;
  recording.writes = null;
  t.equal(second?.value, 'two');
  t.equal(sent.length, 1, 'a prepared group is one write');
  t.equal(sent[0]!.split('S\u0000\u0000\u0000\u0004').length - 1, 1, 'with one Sync');
  const [after] = await sql<{ value: string | null }[]>`select current_setting('atrium.test', true) as value`;
  t.notOk(after?.value, 'the setting ends with the group');

  // A write in a group commits at its Sync, in one transaction with the statements before it.
  await sql`create temporary table grouped (n int)`;
  const [, [xacts]] = (await group([
    prepared(sql, 'insert into grouped values ($1)', [1]),
    prepared(sql, `select pg_current_xact_id_if_assigned()::text as xact, (select count(*)::int from grouped) as n`),
  ])) as [unknown, { xact: string | null; n: number }[]];
  t.ok(xacts?.xact, 'the insert and the select share a transaction');
  t.equal(xacts?.n, 1, 'the later statement sees the earlier one');
  t.equal((await sql<{ n: number }[]>`select count(*)::int as n from grouped`)[0]!.n, 1, 'committed');
});

t.test('when a statement of a group fails, every statement of it fails and nothing of it is committed', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const group = groupOf(sql);
  await sql`create temporary table failing (n int)`;
  const outcome = (parts: unknown[]) =>
    group(parts).then(
      () => 'answered',
      (error: { code?: string; message: string }) => error.code ?? error.message,
    );
  const insert = (n: number) => prepared(sql, 'insert into failing values ($1)', [n]);
  const divide = (by: number) => prepared(sql, 'select 1 / $1::int as q', [by]);
  t.equal(await outcome([insert(1), divide(0)]), '22012', 'the last statement fails');
  t.equal(await outcome([divide(0), insert(2)]), '22012', 'the first statement fails');
  // Statements the connection has not prepared yet fail while they are described.
  t.equal(await outcome([insert(3), prepared(sql, 'select no_such_column from failing where n = $1', [1])]), '42703', 'an unknown column');
  t.equal(await outcome([prepared(sql, 'select no_such_column_either from failing where n = $1', [1]), insert(4)]), '42703');
  const parts = [insert(5), divide(0)];
  const grouped = group(parts).catch(() => {});
  const each = await Promise.allSettled(parts);
  await grouped;
  t.same(
    each.map((settled) => settled.status),
    ['rejected', 'rejected'],
    'each statement of a failed group is rejected, the insert before the failure too',
  );
  t.equal(await outcome([insert(6), prepared(sql, 'select $1::timestamptz as at', ['not a date'])]), 'Invalid time value', 'a value the driver cannot bind');
  await prepared(sql, 'select $1::timestamptz as at', ['2026-01-01']);
  t.equal(await outcome([insert(7), prepared(sql, 'select $1::timestamptz as at', ['not a date'])]), 'Invalid time value', 'also once prepared');
  t.equal(await outcome([prepared(sql, '  '), insert(8)]), 'GROUP_EMPTY_STATEMENT', 'an empty statement');
  t.equal((await sql<{ n: number }[]>`select count(*)::int as n from failing`)[0]!.n, 0, 'no insert of a failed group is committed');
  t.same(await sql<{ one: number }[]>`select 1 as one`, [{ one: 1 }], 'the connection goes on');
});

t.test('groups of many callers share the pool’s connections, each with its own setting, beside single statements', async (t) => {
  const sql = postgres(database.url, { max: 2, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const group = groupOf(sql);
  const answers = await Promise.all(
    Array.from({ length: 60 }, (_, i) =>
      i % 3 === 0
        ? sql<{ value: string }[]>`select ${'single ' + i}::text as value`.then(([row]) => row!.value)
        : group([
            prepared(sql, `select set_config('atrium.test', $1, true)`, [`caller ${i}`]),
            prepared<{ value: string; list: number[] }[]>(sql, `select current_setting('atrium.test') as value, $1::int[] as list`, [[i, i + 1]]),
          ]).then((results) => {
            const [, [row]] = results as [unknown, { value: string; list: number[] }[]];
            const { value, list } = row!;
            return `${value} ${list.join('+')}`;
          }),
    ),
  );
  t.same(
    answers,
    Array.from({ length: 60 }, (_, i) => (i % 3 === 0 ? `single ${i}` : `caller ${i} ${i}+${i + 1}`)),
    'every caller gets its own answer (an array parameter included, typed by the first description)',
  );
});

t.test('a group whose prepared statement no longer fits its table fails once, and is prepared anew', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const group = groupOf(sql);
  await sql`create temporary table reshaped (n int)`;
  await sql`insert into reshaped values (1)`;
  const read = () => group([prepared(sql, `select set_config('atrium.test', 'x', true)`), prepared(sql, 'select * from reshaped where n = $1', [1])]);
  t.same((await read())[1], [{ n: 1 }]);
  await sql`alter table reshaped add column m int`;
  const stale = await read().then(
    () => 'answered',
    (error: { routine?: string }) => error.routine,
  );
  t.equal(stale, 'RevalidateCachedQuery', 'the server refuses the old plan (the caller sends the group again)');
  t.same((await read())[1], [{ n: 1, m: null }], 'the next group prepares its statements anew');
});

t.test('a statement the server refuses as prepared, ahead of a group being described, is answered rightly and holds nothing up', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const group = groupOf(sql);
  await sql`create temporary table refused (n int)`;
  await sql`insert into refused values (1), (2), (3)`;
  for (const withParameter of [false, true]) {
    const read = () => (withParameter ? sql`select * from refused where n > ${0} order by n` : sql`select * from refused order by n`);
    await read();
    // Its plan no longer fits: the server refuses it, and the driver prepares it anew.
    await sql.unsafe(withParameter ? `alter table refused add column m${1} text default 'm'` : `alter table refused add column m${0} text default 'm'`);
    const refusedRead = read().then(
      (rows) => rows.map((row) => row.n),
      (error: { routine?: string }) => error.routine,
    );
    await null;
    await null;
    // Behind it on the one connection, a group whose statements are new to the connection.
    const tenant = `t${Number(withParameter)}`;
    const grouped = group([
      prepared(sql, `select set_config('atrium.test', $1, true) as value`, [tenant]),
      prepared(sql, `select current_setting('atrium.test') as seen, $1::int as k${Number(withParameter)}`, [7]),
    ]).then(
      (results) => (results as [unknown, Record<string, unknown>[]])[1][0],
      (error: { code?: string }) => error.code,
    );
    const [answered, groupAnswer] = await Promise.all([refusedRead, grouped]);
    t.ok(
      answered === 'RevalidateCachedQuery' || JSON.stringify(answered) === '[1,2,3]',
      `the refused statement answers its own rows or its refusal (${JSON.stringify(answered)})`,
    );
    t.same(groupAnswer, { seen: tenant, [`k${Number(withParameter)}`]: 7 }, 'the group answers its own rows');
    t.same(await sql`select 'after' as a`, [{ a: 'after' }], 'the connection goes on');
    t.same(
      ((await group([prepared(sql, `select set_config('atrium.test', $1, true) as value`, ['again'])])) as [{ value: string }[]])[0][0]?.value,
      'again',
      'and its prepared statements are whole',
    );
  }
});

t.test('statements written between a connection’s error and its close are answered, not left for the next connection', async (t) => {
  const { sql, reset } = await relayedConnection(t);
  const group = groupOf(sql);
  const settled = (promise: Promise<unknown>) =>
    Promise.race([
      promise.then(
        (value) => ({ value }),
        (error: { code?: string; message?: string }) => ({ error: error.code ?? error.message }),
      ),
      new Promise((resolve) => setTimeout(() => resolve('no answer within 5 s'), 5_000).unref()),
    ]);
  let afterError: Promise<unknown>[] = [];
  const cut = sql`select pg_sleep(5)`.catch(() => {
    // Right after the error event, before the close: the connection still takes statements.
    afterError = [
      sql`select 'stale' as one`,
      group([prepared(sql, `select set_config('atrium.test', $1, true)`, ['stale']), prepared(sql, 'select 2 as two')]),
    ];
  });
  await new Promise((resolve) => setTimeout(resolve, 100));
  reset();
  await cut;
  const [single, grouped] = (await Promise.all(afterError.map(settled))) as { value?: unknown; error?: string }[];
  const lost = /^(CONNECTION_CLOSED|ECONNRESET|EPIPE|CONNECTION_DESTROYED)$/;
  // Each is answered with its own rows (it waited for the next connection) or failed as lost (it was written to the dying one).
  t.ok(lost.test(single?.error ?? '') || JSON.stringify(single?.value) === '[{"one":"stale"}]', `the statement: ${JSON.stringify(single)}`);
  t.ok(lost.test(grouped?.error ?? '') || JSON.stringify(grouped?.value) === '[[{"set_config":"stale"}],[{"two":2}]]', `the group: ${JSON.stringify(grouped)}`);
  // The next connection answers its own statements.
  t.same(await settled(sql`select 'fresh' as one`), { value: [{ one: 'fresh' }] });
  t.same(await settled(sql`select 3 as three`), { value: [{ three: 3 }] });
});
