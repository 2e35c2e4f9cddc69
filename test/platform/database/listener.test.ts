import t, { type Test } from 'tap';
import postgres from 'postgres';
import { ChannelListener } from '../../../src/platform/database/listener.ts';
import { eventually } from '../../helpers/eventually.ts';
import { createTestDatabase } from '../../helpers/database.ts';

// A real server: the listener's connection is terminated by PostgreSQL itself.
const database = await createTestDatabase();
t.teardown(() => database.drop());
const admin = postgres(database.url, { max: 1, onnotice: () => {} });
t.teardown(() => admin.end({ timeout: 5 }));

/** A listener on a pool of its own, recording what it is told. */
function listenerOn(t: Test, url: string, channel: string) {
  const pool = postgres(url, { max: 2, onnotice: () => {} });
  const heard = { notices: [] as string[], reconnects: 0 };
  const listener = new ChannelListener(pool, channel, {
    onNotice: (payload) => heard.notices.push(payload),
    onReconnect: () => heard.reconnects++,
  });
  t.teardown(async () => {
    await listener.stop();
    await pool.end({ timeout: 5 });
  });
  return { listener, heard };
}

/** The server processes holding a LISTEN on `channel` (what each last ran). */
const listeningBackends = async (channel: string) =>
  (await admin<{ pid: number }[]>`select pid from pg_stat_activity where datname = current_database() and query = ${`listen "${channel}"`}`).map(
    (row) => row.pid,
  );

const notify = (sql: postgres.Sql, channel: string, payload: string) => sql`select pg_notify(${channel}, ${payload})`;

t.test('notices arrive as sent, once each; starting again does not listen twice', async (t) => {
  const { listener, heard } = listenerOn(t, database.url, 'plain');
  await Promise.all([listener.start(), listener.start()]);
  await listener.start();
  t.equal((await listeningBackends('plain')).length, 1, 'one LISTEN');
  await notify(admin, 'plain', 'one');
  await notify(admin, 'plain', '{"two":2}');
  await eventually(
    async () => heard.notices.length,
    (n) => n >= 2,
    15_000,
  );
  t.strictSame(heard.notices, ['one', '{"two":2}']);
  t.equal(heard.reconnects, 0, 'the first LISTEN is no reconnect');
});

t.test('when its backend is terminated it listens again on a new one, says so once, and hears later notices', async (t) => {
  const { listener, heard } = listenerOn(t, database.url, 'dropped');
  await listener.start();
  const [before] = await listeningBackends('dropped');
  t.ok(before, 'listening');
  // The pid as int: Citus adds a pg_terminate_backend(bigint, …) beside PostgreSQL's own.
  await admin`select pg_terminate_backend(${before!}::int)`;
  await eventually(
    async () => heard.reconnects,
    (n) => n > 0,
    15_000,
  );
  t.equal(heard.reconnects, 1, 'onReconnect once');
  const after = await listeningBackends('dropped');
  t.equal(after.length, 1);
  t.not(after[0], before, 'on a new backend');
  await notify(admin, 'dropped', 'later');
  await eventually(
    async () => heard.notices.length,
    (n) => n >= 1,
    15_000,
  );
  t.strictSame(heard.notices, ['later']);
});

t.test('stop: nothing more is heard', async (t) => {
  const { listener, heard } = listenerOn(t, database.url, 'stopped');
  const witness = listenerOn(t, database.url, 'stopped');
  await listener.start();
  await witness.listener.start();
  await listener.stop();
  await listener.stop();
  await notify(admin, 'stopped', 'after stop');
  await eventually(
    async () => witness.heard.notices.length,
    (n) => n >= 1,
    15_000,
  );
  t.strictSame(witness.heard.notices, ['after stop'], 'a listener still listening heard the notice');
  t.strictSame(heard.notices, [], 'the stopped listener heard nothing');
});

t.test('a failed start is forgotten: the next one listens, and each notice is handled once', async (t) => {
  const name = `${new URL(database.url).pathname.slice(1)}_later`;
  const later = new URL(database.url);
  later.pathname = `/${name}`;
  t.teardown(() => admin.unsafe(`drop database if exists "${name}" with (force)`));
  const { listener, heard } = listenerOn(t, later.toString(), 'late');
  await t.rejects(listener.start(), /does not exist/, 'no database yet');
  await admin.unsafe(`create database "${name}"`);
  // The driver keeps connecting for the failed LISTEN; an attempt it began before the database
  // existed can still fail the next start with "does not exist". Each failed start is
  // forgotten, so starting again until one holds is what a caller does.
  const started = await eventually(
    () =>
      listener.start().then(
        () => true,
        () => false,
      ),
    (ok) => ok,
    10_000,
  );
  t.ok(started, 'a later start listens');
  const sender = postgres(later.toString(), { max: 1, onnotice: () => {} });
  t.teardown(() => sender.end({ timeout: 5 }));
  await notify(sender, 'late', 'x');
  await notify(sender, 'late', 'y');
  await eventually(
    async () => heard.notices.filter((notice) => notice === 'y').length,
    (n) => n >= 1,
    15_000,
  );
  t.strictSame(heard.notices, ['x', 'y']);
  t.equal(heard.reconnects, 0, 'listening at last is no reconnect');
});
