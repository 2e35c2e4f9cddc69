/**
 * Defects of the database driver (postgres.js 3.4.9) that patches/postgres+3.4.9.patch
 * mends (applied on install); each test here fails with the driver as published:
 * - it counted the rows of the statement it was reading and reset that count only when a
 *   statement completed, so a statement cut off after its first rows (an error, a lost
 *   connection) left the next one's rows after as many holes (porsager/postgres#1119, #1181);
 * - it kept a statement its lost connection cut off as the connection's current one, so
 *   the server's refusal of the next login was taken for that statement's error and the
 *   statement waiting for the connection was never answered while the refusals lasted
 *   (porsager/postgres#1130, #1142);
 * - statements written to a connection after its socket error, before its close, stayed
 *   queued for the next socket and were never answered, nor was the next statement;
 * - a statement whose prepared plan the server refused was written again at once, between
 *   the messages of a statement ahead of it that was still being described, or itself in
 *   two writes with other statements between them (answers went to the wrong statements);
 * - a reserved connection (`sql.reserve()`, how every request's transaction runs) that
 *   closed was still written to by its handle (an uncaught TypeError) and given back to the
 *   pool by its release (the next statement hung), statements waiting in its queue never
 *   settled, and a reserve waiting for a connection that closed was dropped;
 * - with several hosts in its URL, it never counted the hosts it had tried, so a statement
 *   waiting for a connection when no host would do (all down, or none writable as
 *   `target_session_attrs=read-write` asks, as in the seconds of a failover) was never
 *   answered while the connection went round the hosts for ever (porsager/postgres#1174);
 * - a server that accepted and then closed during startup (a proxy in front of a server that
 *   is down) left the statement waiting for ever, and the driver connected again at once, for
 *   ever (porsager/postgres#1193);
 * - with several hosts, the statement a connection was opened for was never answered when
 *   the connection was lost while it ran (a loss then was taken for a failed attempt);
 * - a transaction (`sql.begin()`) whose connection was lost while its function awaited
 *   something else failed, but the function's later statements, and its COMMIT, went to the
 *   connection reconnected for other callers (porsager/postgres#1216);
 * - a reserve whose connection attempt failed stayed queued, so the connection made later
 *   was handed to it, already refused, and never given back: the pool lost it for good;
 * - a reserve after the pool had ended opened a new connection, which nothing would end
 *   (a statement is refused there), so the process could not exit on its own;
 * - a write for a connection whose socket had closed (a transaction's own ROLLBACK after its
 *   connection was lost) threw from the immediate that flushes it, and ended the process
 *   (porsager/postgres#1208, #1154);
 * - a close left a write still pending for its socket marked as scheduled, so the next
 *   connection's startup message waited behind it for ever (porsager/postgres#1133, #1215).
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
 * A loopback relay in front of the server, which records the client's writes while
 * `writes` is an array, and resets the clients' connections (TCP RST) on `reset`, or a
 * client's connection instead of passing on a write `resetOn` picks: the driver sees an
 * error event, then the close.
 */
async function relay(t: Test, resetOn?: (write: string) => boolean) {
  const server = new URL(database.url);
  const recording: { writes: string[] | null } = { writes: null };
  const clients = new Set<net.Socket>();
  const relayServer = net.createServer((client) => {
    clients.add(client);
    client.on('close', () => clients.delete(client));
    const upstream = net.connect(Number(server.port), server.hostname);
    client.on('data', (data: Buffer) => {
      recording.writes?.push(data.toString('latin1'));
      if (resetOn?.(data.toString('latin1'))) {
        upstream.destroy();
        client.resetAndDestroy();
        return;
      }
      upstream.write(data);
    });
    upstream.pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  relayServer.listen(0, '127.0.0.1');
  await new Promise((resolve) => relayServer.once('listening', resolve));
  t.teardown(() => new Promise((resolve) => relayServer.close(resolve)));
  const reset = () => {
    for (const client of clients) client.resetAndDestroy();
  };
  return { host: `127.0.0.1:${(relayServer.address() as net.AddressInfo).port}`, recording, reset };
}

/**
 * A pool of one connection through a relay (above): the client writes only after the
 * answer to its previous write, so each recorded write is a round trip.
 */
async function relayedConnection(t: Test) {
  const { host, recording, reset } = await relay(t);
  const relayed = new URL(database.url);
  relayed.host = host;
  const sql = postgres(relayed.toString(), { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  await sql`select 1`;
  return { sql, recording, reset };
}

/** `promise`'s value, its error's code or message, or 'no answer within 5 s'. */
const settled = (promise: Promise<unknown>) =>
  Promise.race([
    promise.then(
      (value) => ({ value }),
      (error: { code?: string; message?: string }) => ({ error: error.code ?? error.message }),
    ),
    new Promise((resolve) => setTimeout(() => resolve('no answer within 5 s'), 5_000).unref()),
  ]);

t.test('a statement the server refuses as prepared, ahead of a statement being described, is answered rightly and holds nothing up', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  await sql`create temporary table refused (n int)`;
  await sql`insert into refused values (1), (2), (3)`;
  for (const withParameter of [false, true]) {
    const read = () => (withParameter ? sql`select * from refused where n > ${0} order by n` : sql`select * from refused order by n`);
    await read();
    // Its plan no longer fits: the server refuses it, and the driver prepares it anew.
    await sql.unsafe(`alter table refused add column m${Number(withParameter)} text default 'm'`);
    const refusedRead = read().then((rows) => rows.map((row) => row.n));
    await null;
    await null;
    // Behind it on the one connection, a statement new to the connection, with a parameter:
    // the driver writes its Parse and Describe, and its Bind and Execute once described.
    const k = `k${Number(withParameter)}`;
    const behind = sql.unsafe<Record<string, unknown>[]>(`select $1::int as ${k}, 'behind' as tag`, [7]);
    const [answered, behindAnswer] = (await Promise.all([settled(refusedRead), settled(behind)])) as { value?: unknown; error?: string }[];
    t.ok(
      answered?.error === '0A000' || JSON.stringify(answered?.value) === '[1,2,3]',
      `the refused statement answers its own rows or its refusal (${JSON.stringify(answered)})`,
    );
    t.same(behindAnswer, { value: [{ [k]: 7, tag: 'behind' }] }, 'the statement behind it answers its own row');
    t.same(await settled(sql`select 'after' as a`), { value: [{ a: 'after' }] }, 'the connection goes on');
    t.same(await settled(read().then((rows) => rows.map((row) => row.n))), { value: [1, 2, 3] }, 'and the refused statement, asked again, answers its rows');
  }
});

t.test(
  'a statement with parameters the server refuses as prepared is prepared anew in one write: statements written meanwhile answer their own rows',
  async (t) => {
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    t.teardown(() => sql.end({ timeout: 1 }));
    await sql`create temporary table rewritten (n int)`;
    await sql`insert into rewritten values (1), (2), (3)`;
    const read = () => sql`select * from rewritten where n > ${0} order by n`;
    await read();
    await sql`alter table rewritten add column m text default 'm'`;
    // While the refused statement is prepared anew, statements keep coming (each one prepared already).
    const others: Promise<unknown>[] = [];
    let coming = true;
    const keepComing = async () => {
      for (let i = 0; coming && i < 200; i++) {
        others.push(settled(sql`select ${i}::int as i`.then((rows) => rows[0]?.i === i || rows)));
        await new Promise((resolve) => setImmediate(resolve));
      }
    };
    await sql`select ${-1}::int as i`; // prepares it
    const refused = settled(read().then((rows) => rows.map((row) => row.n)));
    const [answered] = (await Promise.all([refused.finally(() => (coming = false)), keepComing()])) as unknown as [{ value?: unknown; error?: string }];
    t.same(answered, { value: [1, 2, 3] }, 'the refused statement answers its own rows');
    const wrong = (await Promise.all(others)).filter((other) => JSON.stringify(other) !== '{"value":true}');
    t.same(wrong, [], `each of the ${others.length} statements answers its own row`);
  },
);

t.test('statements written between a connection’s error and its close are answered, not left for the next connection', async (t) => {
  const { sql, reset } = await relayedConnection(t);
  let afterError: Promise<unknown>[] = [];
  const cut = sql`select pg_sleep(5)`.catch(() => {
    // Right after the error event, before the close: the connection still takes statements.
    afterError = [sql`select 'stale' as one`, sql`select 2 as two`];
  });
  await new Promise((resolve) => setTimeout(resolve, 100));
  reset();
  await cut;
  const [first, second] = (await Promise.all(afterError.map(settled))) as { value?: unknown; error?: string }[];
  const lost = /^(CONNECTION_CLOSED|ECONNRESET|EPIPE|CONNECTION_DESTROYED)$/;
  // Each is answered with its own rows (it waited for the next connection) or failed as lost (it was written to the dying one).
  t.ok(lost.test(first?.error ?? '') || JSON.stringify(first?.value) === '[{"one":"stale"}]', `the first: ${JSON.stringify(first)}`);
  t.ok(lost.test(second?.error ?? '') || JSON.stringify(second?.value) === '[{"two":2}]', `the second: ${JSON.stringify(second)}`);
  // The next connection answers its own statements.
  t.same(await settled(sql`select 'fresh' as one`), { value: [{ one: 'fresh' }] });
  t.same(await settled(sql`select 3 as three`), { value: [{ three: 3 }] });
});

t.test('a statement written in the turn of its connection’s error, after the flush, leaves the next connection able to start', async (t) => {
  const { sql, reset } = await relayedConnection(t);
  let issue!: (late: { statement: Promise<unknown> }) => void;
  const issued = new Promise<{ statement: Promise<unknown> }>((resolve) => (issue = resolve));
  void sql`select pg_sleep(5)`.catch(() => {
    // Later in the same turn of the event loop, after the driver's flush of small writes and
    // before the close: a statement issued by a timer or by another socket's close lands here.
    setImmediate(() => issue({ statement: sql`select 'late' as one` }));
  });
  await new Promise((resolve) => setTimeout(resolve, 100));
  reset();
  const answer = (await settled((await issued).statement)) as { value?: unknown; error?: string };
  t.ok(
    /^(CONNECTION_CLOSED|ECONNRESET|EPIPE)$/.test(answer.error ?? '') || JSON.stringify(answer.value) === '[{"one":"late"}]',
    `the late one: ${JSON.stringify(answer)}`,
  );
  // Published, the close cancels that statement's pending flush but keeps its bytes as pending:
  // the next connection's startup message is queued behind them and never sent (each attempt
  // then ends in CONNECT_TIMEOUT, for as long as the process runs).
  t.same(await settled(sql`select 'fresh' as one`), { value: [{ one: 'fresh' }] });
  t.same(await settled(sql`select 3 as three`), { value: [{ three: 3 }] });
});

/** Ends the backends of `application_name` from a connection of its own; answers how many. */
async function terminate(name: string): Promise<number> {
  const control = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    const [row] = await control<{ n: number }[]>`select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where application_name = ${name}`;
    return row!.n;
  } finally {
    await control.end({ timeout: 1 });
  }
}

/** `promise`'s value, its error's code, or 'no answer' after `ms`. */
const outcome = <T>(promise: Promise<T>, ms = 5_000) =>
  Promise.race([
    promise.then(
      (value) => ({ value }),
      (error: { code?: string }) => ({ error: error.code }),
    ),
    new Promise<string>((resolve) => setTimeout(() => resolve('no answer'), ms).unref()),
  ]);

t.test(
  'a reserved connection whose backend ended: its next statement fails, its release is harmless, the pool goes on (porsager/postgres#1208, #1199)',
  async (t) => {
    const name = 'atrium-reserved-lost';
    const sql = postgres(database.url, { max: 1, onnotice: () => {}, backoff: () => 0.01, connection: { application_name: name } });
    t.teardown(() => sql.end({ timeout: 1 }));
    const reserved = await sql.reserve();
    await reserved`select 1`;
    t.equal(await terminate(name), 1, 'the reserved backend is terminated while idle');
    await eventually(
      async () => outcome(reserved`select 1`, 1_000),
      (result) => typeof result === 'object' && 'error' in result,
    );
    t.match(
      await outcome(reserved`select 2 as two`),
      { error: 'CONNECTION_CLOSED' },
      'a statement after the loss fails at once (published: written to the closed socket, an uncaught TypeError)',
    );
    reserved.release();
    t.match(
      await outcome(sql<{ three: number }[]>`select 3 as three`),
      { value: [{ three: 3 }] },
      'the pool answers on a fresh connection (published: the released dead connection is handed out and the statement hangs)',
    );
    const again = await sql.reserve();
    t.match(await outcome(again<{ four: number }[]>`select 4 as four`), { value: [{ four: 4 }] }, 'and reserves again');
    again.release();
  },
);

t.test('a reserve waiting for the only connection is served when that connection is terminated (porsager/postgres#1195)', async (t) => {
  const name = 'atrium-reserve-waiting';
  const sql = postgres(database.url, { max: 1, onnotice: () => {}, backoff: () => 0.01, connection: { application_name: name } });
  t.teardown(() => sql.end({ timeout: 1 }));
  const holder = await sql.reserve();
  const sleeping = holder`select pg_sleep(30)`.catch((error: { code?: string }) => error.code);
  const waiting = sql.reserve();
  const control = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => control.end({ timeout: 1 }));
  await eventually(
    async () => (await control<{ n: number }[]>`select count(*)::int as n from pg_stat_activity where application_name = ${name} and state = 'active'`)[0]!.n,
    (n) => n === 1,
  );
  t.equal(await terminate(name), 1);
  t.ok(['57P01', 'CONNECTION_CLOSED'].includes(String(await sleeping)), 'the holder’s statement is lost');
  const next = await outcome(
    waiting.then(async (reserved) => {
      const [row] = await reserved<{ five: number }[]>`select 5 as five`;
      reserved.release();
      return row!.five;
    }),
  );
  t.strictSame(next, { value: 5 }, 'the waiting reserve gets the reconnected connection (published: it never settles)');
});

t.test('statements queued on a reserved connection fail when it closes (porsager/postgres#1186)', async (t) => {
  const name = 'atrium-reserved-queue';
  const sql = postgres(database.url, { max: 1, onnotice: () => {}, backoff: () => 0.01, connection: { application_name: name } });
  t.teardown(() => sql.end({ timeout: 1 }));
  const reserved = await sql.reserve();
  // A statement with parameters not yet prepared is described first: meanwhile the
  // connection takes nothing more, and the next statement waits in the reservation's queue.
  const running = reserved`select pg_sleep(${30}::float8)`.catch((error: { code?: string }) => error.code);
  const queued = outcome(reserved`select ${6}::int as six`);
  await eventually(
    async () => (await terminate(name)) > 0,
    (ended) => ended,
  );
  // Lost as the server's notice of the termination says (57P01), as the closed socket says, or,
  // when the queued statement's messages meet the closing socket, as the socket's error says.
  const lost = String(await running);
  t.ok(['57P01', 'CONNECTION_CLOSED', 'ECONNRESET', 'EPIPE'].includes(lost), `the running statement is lost: ${lost}`);
  t.match(await queued, { error: String }, 'the queued one fails with it (published: it never settles)');
  reserved.release();
});

t.test('with several hosts, a statement fails once every host has refused, and the next one goes round again (porsager/postgres#1174)', async (t) => {
  const url = new URL(database.url);
  const closed = async () => {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as net.AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    return port;
  };
  const [first, second] = [await closed(), await closed()];
  const settled = (statement: Promise<unknown>) =>
    Promise.race([
      statement.then(
        () => 'answered',
        (error: { code?: string }) => error.code,
      ),
      new Promise((resolve) => setTimeout(() => resolve('never settled'), 5_000)),
    ]);
  const down = postgres(`postgres://${url.username}:${url.password}@127.0.0.1:${first},127.0.0.1:${second}${url.pathname}`, { max: 1, onnotice: () => {} });
  t.teardown(() => down.end({ timeout: 0 }));
  t.equal(await settled(down`select 1`), 'ECONNREFUSED', 'both hosts down: refused, not left waiting');
  t.equal(await settled(down`select 1`), 'ECONNREFUSED', 'and again');
  // Two hosts that both accept writes, where a read-only session is asked for: neither will do.
  const here = `${url.hostname}:${url.port}`;
  const writable = postgres(`postgres://${url.username}:${url.password}@${here},${here}${url.pathname}?target_session_attrs=read-only`, {
    max: 1,
    onnotice: () => {},
  });
  t.teardown(() => writable.end({ timeout: 0 }));
  t.equal(await settled(writable`select 1`), 'CONNECTION_DESTROYED', 'no host has the session asked for: refused');
  const mixed = postgres(`postgres://${url.username}:${url.password}@127.0.0.1:${first},${here}${url.pathname}`, { max: 1, onnotice: () => {} });
  t.teardown(() => mixed.end({ timeout: 0 }));
  t.equal(await settled(mixed`select 1`), 'answered', 'the first host down, the second serves');
  t.equal(await settled(mixed`select 1`), 'answered');
});

t.test('with several hosts, the first statement of a connection is answered when the connection is lost while it runs', async (t) => {
  const { host, reset } = await relay(t);
  const url = new URL(database.url);
  // The relay first, then a host that refuses: a second host is left to try.
  const refusing = net.createServer();
  await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
  const { port } = refusing.address() as net.AddressInfo;
  await new Promise((resolve) => refusing.close(resolve));
  const sql = postgres(`postgres://${url.username}:${url.password}@${host},127.0.0.1:${port}${url.pathname}`, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 0 }));
  // The connection is opened for this statement; it counts as connecting until the statement is answered.
  const first = settled(sql`select pg_sleep(5)`);
  await new Promise((resolve) => setTimeout(resolve, 300));
  reset();
  const answer = (await first) as { error?: string };
  t.ok(
    /^(CONNECTION_CLOSED|ECONNRESET)$/.test(answer.error ?? ''),
    `it fails as lost (published: it is never answered, since another host is left): ${JSON.stringify(answer)}`,
  );
  t.same(await settled(sql`select 'next' as one`), { value: [{ one: 'next' }] }, 'and the pool answers the next statement');
});

t.test('with several hosts, a connection lost during the driver’s own type query goes on to the next host, and its reserve is served', async (t) => {
  // The relay first, the server second; the relay cuts the first connection when the driver
  // asks for the server's array types, which it does before handing a reserve its connection.
  let cut = false;
  const { host } = await relay(t, (write) => !cut && write.includes('typarray') && (cut = true));
  const url = new URL(database.url);
  const sql = postgres(`postgres://${url.username}:${url.password}@${host},${url.host}${url.pathname}`, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 0 }));
  const served = settled(
    sql.reserve().then(async (reserved) => {
      const [row] = await reserved<{ one: number }[]>`select 1 as one`;
      reserved.release();
      return row!.one;
    }),
  );
  t.strictSame(await served, { value: 1 }, 'the reserve is served by the second host');
  t.ok(cut, 'the first connection was cut during the type query');
  // The driver's type query is its own: failed there, nothing would handle its rejection (tap fails the test on one).
  await new Promise((resolve) => setTimeout(resolve, 100));
});

t.test('a server that accepts and closes at once fails the statement waiting, and is not asked again until a statement waits', async (t) => {
  // As a proxy in front of a server that is down does: Docker's published port while the container is stopped.
  let accepted = 0;
  const closing = net.createServer((client) => {
    accepted++;
    client.resume().end();
  });
  await new Promise<void>((resolve) => closing.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => closing.close(resolve)));
  const url = new URL(database.url);
  url.host = `127.0.0.1:${(closing.address() as net.AddressInfo).port}`;
  const sql = postgres(url.toString(), { max: 1, onnotice: () => {}, connect_timeout: 2 });
  t.teardown(() => sql.end({ timeout: 0 }));
  t.strictSame(await settled(sql`select 1`), { error: 'CONNECTION_CLOSED' }, 'the statement fails (published: never answered)');
  const attempts = accepted;
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.equal(accepted, attempts, `no attempt once nothing waits (published: it connects again at once, for ever; ${accepted} attempts)`);
  t.strictSame(await settled(sql`select 2`), { error: 'CONNECTION_CLOSED' }, 'the next statement tries again, and fails too');
  const server = new URL(database.url);
  const both = `postgres://${server.username}:${server.password}@${url.host},${server.host}${server.pathname}`;
  const then = postgres(both, { max: 1, onnotice: () => {}, connect_timeout: 2 });
  t.teardown(() => then.end({ timeout: 0 }));
  t.strictSame(await settled(then<{ three: number }[]>`select 3 as three`.then(([row]) => row!.three)), { value: 3 }, 'with a host after it, that host serves');
});

t.test('a reserve refused while the server is down does not take the connection made once it is back', async (t) => {
  const url = new URL(database.url);
  // A port that refuses, then forwards to the server.
  const free = net.createServer();
  await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve));
  const { port } = free.address() as net.AddressInfo;
  await new Promise((resolve) => free.close(resolve));
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(url.port), url.hostname);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  t.teardown(() => new Promise((resolve) => proxy.close(resolve)));
  const sql = postgres(`postgres://${url.username}:${url.password}@127.0.0.1:${port}${url.pathname}`, {
    max: 1,
    onnotice: () => {},
    backoff: () => 0.05,
  });
  t.teardown(() => sql.end({ timeout: 0 }));
  const refused = await sql.reserve().then(
    (reserved) => (reserved.release(), 'reserved'),
    (error: { code?: string }) => error.code,
  );
  t.equal(refused, 'ECONNREFUSED', 'the server is down: the reserve fails');
  await new Promise<void>((resolve) => proxy.listen(port, '127.0.0.1', resolve));
  const answer = await Promise.race([
    sql`select 1 as one`.then(([row]) => row?.one),
    new Promise((resolve) => setTimeout(() => resolve('never answered'), 5_000)),
  ]);
  t.equal(answer, 1, 'once it is back, the pool serves the next statement (published: the connection went to the failed reserve)');
});

t.test('a reserve after the pool has ended is refused, as a statement is, and opens no connection', async (t) => {
  const name = 'atrium-reserve-after-end';
  const sql = postgres(database.url, { max: 2, onnotice: () => {}, connection: { application_name: name } });
  const control = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(async () => {
    await terminate(name);
    await control.end({ timeout: 1 });
  });
  const connections = async () => (await control<{ n: number }[]>`select count(*)::int as n from pg_stat_activity where application_name = ${name}`)[0]!.n;
  await sql`select 1`;
  await sql.end();
  t.equal(await connections(), 0, 'the ended pool holds no connection');
  t.strictSame(await outcome(sql`select 1`), { error: 'CONNECTION_ENDED' }, 'a statement is refused');
  const reserve = outcome(sql.reserve().then((reserved) => (reserved.release(), 'reserved')));
  t.strictSame(await reserve, { error: 'CONNECTION_ENDED' }, 'so is a reserve (published: it connects, and the process cannot exit)');
  t.equal(await connections(), 0, 'and no connection was opened for it');
});

t.test('a transaction whose connection was lost between its statements sends nothing more, to that connection or its successor', async (t) => {
  const name = 'atrium-lost-between-statements';
  const sql = postgres(database.url, { max: 1, onnotice: () => {}, backoff: () => 0.01, connection: { application_name: name } });
  t.teardown(() => sql.end({ timeout: 1 }));
  await sql`create table lost_between (n int)`;
  t.teardown(() => postgres(database.url, { max: 1, onnotice: () => {} }).begin((control) => control`drop table lost_between`));
  let opened!: () => void;
  const open = new Promise<void>((resolve) => (opened = resolve));
  let proceed!: () => void;
  const gate = new Promise<void>((resolve) => (proceed = resolve));
  let sentLate!: (answer: Promise<unknown>) => void;
  const late = new Promise<unknown>((resolve) => (sentLate = resolve));
  const transaction = sql
    .begin(async (tx) => {
      await tx`select 1`;
      opened();
      // The transaction waits on something else (another connection, a hash): meanwhile its own is lost.
      await gate;
      const answer = outcome(tx`insert into lost_between values (1)`);
      sentLate(answer);
      await answer;
    })
    .then(
      () => 'committed',
      (error: { code?: string }) => error.code,
    );
  await open;
  t.equal(await terminate(name), 1, 'the transaction’s backend is terminated while idle in it');
  t.equal(await transaction, 'CONNECTION_CLOSED', 'the transaction fails');
  // The pool connects again for another caller: the same connection object, a new session.
  t.strictSame(await outcome(sql`select 2 as two`.then(([row]) => row!.two)), { value: 2 }, 'the pool serves the next statement');
  proceed();
  t.strictSame(await late, { error: 'CONNECTION_CLOSED' }, 'a statement the lost transaction sends later fails');
  t.strictSame(
    await outcome(sql`select count(*)::int as n from lost_between`.then(([row]) => row!.n)),
    { value: 0 },
    'and ran nowhere (published: it ran on the new session, outside any transaction, and was kept)',
  );
});

t.test('a transaction whose connection is lost mid-statement fails, and its own rollback does not end the process (porsager/postgres#1208)', async (t) => {
  const name = 'atrium-lost-transaction';
  const sql = postgres(database.url, { max: 2, onnotice: () => {}, connection: { application_name: name } });
  t.teardown(() => sql.end({ timeout: 1 }));
  let began!: () => void;
  const running = new Promise<void>((resolve) => (began = resolve));
  const transaction = sql
    .begin(async (tx) => {
      began();
      await tx`select pg_sleep(30)`;
    })
    .then(
      () => 'committed',
      (error: { code?: string }) => error.code,
    );
  await running;
  await eventually(
    async () => (await terminate(name)) > 0,
    (ended) => ended,
  );
  // The driver then writes the transaction's ROLLBACK to the closed connection; published, that write
  // throws from a timer, where nothing can catch it (here, tap's uncaughtException fails the test).
  t.ok(['57P01', 'CONNECTION_CLOSED', 'ECONNRESET'].includes(String(await transaction)), 'the transaction fails');
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.strictSame(await outcome(sql`select 7 as seven`.then(([row]) => row!.seven)), { value: 7 }, 'and the pool serves the next statement');
});
