/**
 * Lost database connections (docs/fault-tolerance.md#lost-database-connections): after the
 * server drops every connection, requests run on fresh ones or answer 503 with
 * Retry-After, never 500, and readiness tells the truth.
 */
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import t from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { readinessOnceReady } from '../../helpers/eventually.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('outage');
const app = api.atrium.app!;
const [database] = await api.db.owner.execute<{ name: string }>(sql`select current_database() as name`);

// An owner connection of its own, to another database, so it survives what it does to this one.
const controlUrl = new URL(api.config.databaseUrl!);
controlUrl.pathname = '/postgres';
const control = postgres(controlUrl.toString(), { max: 1, onnotice: () => {} });
t.teardown(() => control.end({ timeout: 1 }));

/** Ends every backend of the test database except the control's: what a restart or failover does to the pools. */
const terminateBackends = async () =>
  (
    await control<{ n: number }[]>`
      select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
      where datname = ${database!.name} and pid <> pg_backend_pid() and backend_type = 'client backend'`
  )[0]!.n;

/** The status readiness answers, asked until it is 200 (up to 15 s). */
const readyAgain = () => readinessOnceReady(async () => (await app.inject({ method: 'GET', url: '/health/ready' })).statusCode);

const requests = () => {
  const auth = { authorization: `Bearer ${tenant.adminToken}` };
  return [
    { method: 'GET' as const, url: '/api/users/current', headers: auth },
    { method: 'GET' as const, url: '/api/users?limit=5', headers: auth },
    { method: 'GET' as const, url: '/api/departments', headers: auth },
    { method: 'PUT' as const, url: `/api/users/${tenant.adminUserId}`, headers: auth, payload: { first_name: 'Ada' } },
    { method: 'POST' as const, url: '/api/auth/login', payload: { tenant: 'outage', username: 'nobody', password: 'wrong-password' } },
    { method: 'GET' as const, url: '/health/ready' },
  ];
};

t.test('after the server drops every connection, requests are served on fresh ones: no 500', async (t) => {
  for (let round = 0; round < 3; round++) {
    // Fill the pools with open connections, then drop them all, then send the load at once.
    await Promise.all(Array.from({ length: 12 }, () => app.inject(requests()[1]!)));
    t.ok((await terminateBackends()) > 0, `round ${round}: backends terminated`);
    const answers = await Promise.all(Array.from({ length: 2 }, () => requests().map((request) => app.inject(request))).flat());
    for (const answer of answers) {
      if (answer.statusCode === 503 && answer.headers['content-type']?.toString().startsWith('application/problem+json')) {
        t.ok(answer.headers['retry-after'], 'a 503 says when to try again');
        continue;
      }
      t.ok(answer.statusCode < 500, `${answer.statusCode} ${answer.body.slice(0, 200)}`);
    }
    t.equal(answers.filter((answer) => answer.statusCode === 500).length, 0, `round ${round}: no 500`);
    const ready = answers.filter((_answer, index) => index % requests().length === requests().length - 1);
    t.strictSame(
      ready.map((answer) => answer.statusCode),
      ready.map(() => 200),
      'readiness: the database is up, so ready',
    );
  }
});

t.test('one request at a time after the server drops every connection: each is served, on a fresh connection where its own was lost', async (t) => {
  const [current, list, , update] = requests();
  for (let round = 0; round < 5; round++) {
    await Promise.all(Array.from({ length: 12 }, () => app.inject(list!)));
    await terminateBackends();
    // Sent at once: the pooled connections may not have learnt yet that they are closed.
    const answers = [await app.inject(current!), await app.inject(list!), await app.inject(update!)];
    t.strictSame(
      answers.map((answer) => answer.statusCode),
      [200, 200, 200],
      `round ${round}: no 503 (${answers.map((answer) => answer.body.slice(0, 80)).join(' | ')})`,
    );
  }
});

t.test('readiness is 503 while the application cannot connect, and 200 again once it can', async (t) => {
  await control.unsafe(`alter database "${database!.name}" with allow_connections false`);
  await terminateBackends();
  const down = await app.inject({ method: 'GET', url: '/health/ready' });
  t.equal(down.statusCode, 503);
  t.equal(down.json().database, false);
  const refused = await app.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${tenant.adminToken}` } });
  t.equal(refused.statusCode, 503, 'a request is a 503, not a 500');
  t.equal(refused.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.equal(refused.headers['retry-after'], '1');
  t.equal(refused.json().status, 503);

  await control.unsafe(`alter database "${database!.name}" with allow_connections true`);
  t.equal(await readyAgain(), 200);
  t.equal((await app.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${tenant.adminToken}` } })).statusCode, 200);
});

t.test('a write a read-only server refuses answers 503 and drops its connection; readiness is 503 meanwhile', async (t) => {
  // Sessions of this database start read-only, as on a primary being demoted: the pools' connections are replaced by such sessions.
  await control.unsafe(`alter database "${database!.name}" set default_transaction_read_only = on`);
  t.teardown(() => control.unsafe(`alter database "${database!.name}" reset default_transaction_read_only`));
  await terminateBackends();
  const auth = { authorization: `Bearer ${tenant.adminToken}` };
  const rename = (name: string) => app.inject({ method: 'PUT', url: `/api/users/${tenant.adminUserId}`, headers: auth, payload: { first_name: name } });
  // Several at once, so that several of the pool's connections start read-only.
  const refused = await Promise.all(Array.from({ length: 4 }, (_, i) => rename(`Read only ${i}`)));
  t.strictSame(
    refused.map((answer) => [answer.statusCode, answer.headers['retry-after'], answer.json().code]),
    refused.map(() => [503, '1', 'database_unavailable']),
    'each write refused by the read-only server: 503 with Retry-After, never 500 or 4xx',
  );
  t.equal((await app.inject({ method: 'GET', url: '/health/ready' })).statusCode, 503, 'not ready while no server accepts writes');
  await control.unsafe(`alter database "${database!.name}" reset default_transaction_read_only`);
  // A session keeps the read-only default it started with: only a connection that was dropped becomes writable.
  const after = [];
  for (let i = 0; i < 12; i++) after.push((await rename(`Writable ${i}`)).statusCode);
  t.strictSame(after.slice(-8), Array(8).fill(200), `writes succeed again once the read-only connections are gone (${after.join(' ')})`);
  t.equal(await readyAgain(), 200, 'ready again');
});

t.test('probes of readiness that arrive while a check runs share it: a flood opens no connection per probe', async (t) => {
  // The migrations' table held, so that the check waits on its pools and then on connections of its own.
  const holder = postgres(api.config.databaseUrl!, { max: 1, onnotice: () => {} });
  t.teardown(() => holder.end({ timeout: 1 }));
  const held = await holder.reserve();
  await held`begin`;
  await held`lock table drizzle.__drizzle_migrations in access exclusive mode`;
  const waiting = async () =>
    (
      await control<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where datname = ${database!.name} and wait_event_type = 'Lock' and query like '%__drizzle_migrations%'`
    )[0]!.n;
  let most = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      most = Math.max(most, await waiting());
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  const answers = await Promise.all(Array.from({ length: 30 }, () => app.inject({ method: 'GET', url: '/health/ready' })));
  sampling = false;
  await sampler;
  await held`rollback`;
  held.release();
  t.strictSame(
    answers.map((answer) => answer.statusCode),
    answers.map(() => 503),
    'not ready while the check cannot read',
  );
  t.ok(most >= 1, `the check waited on the table (${most} statements at most)`);
  t.ok(most <= 2, `one check for all 30 probes: at most its two statements waited at once, not ${most}`);
  t.equal(await readyAgain(), 200, 'ready again once the table is free');
});
