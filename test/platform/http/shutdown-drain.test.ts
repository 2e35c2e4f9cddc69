/**
 * A graceful stop (the signals' path: `Atrium.stop`) finishes the answers in flight: a large
 * answer still being written to a slow client arrives whole, though its handler ended it
 * before the stop began (docs/operations.md#signals-and-shutdown).
 */
import net from 'node:net';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import t from 'tap';
import { startTestApi, type TestApi } from '../../helpers/atrium.ts';
import { sleep } from '../../helpers/fixtures.ts';

/**
 * A tenant of `api` with enough users for a list of several megabytes: more than the kernel's
 * socket buffers hold, so part of the answer waits in the process.
 */
async function tenantWithManyUsers(api: TestApi, slug: string) {
  const tenant = await api.createTenant(slug);
  await api.db.owner.execute(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${tenant.tenantId}, ${slug} || '-' || g, (select min(id) from roles where tenant_id = ${tenant.tenantId}), 'Given', 'Family'
    from generate_series(1, 20000) g`);
  return tenant;
}

const api = await startTestApi(t);
const tenant = await tenantWithManyUsers(api, 'drain');
const address = await api.atrium.app!.listen({ port: 0, host: '127.0.0.1' });
const port = Number(new URL(address).port);

t.test('an answer still being written when the stop begins arrives whole', async (t) => {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const chunks: Buffer[] = [];
  // A slow client, as over a slow link (5 MB a second): most of the answer waits in the server.
  const began = Date.now();
  let received = 0;
  const allowed = () => ((Date.now() - began) / 1000) * 5_000_000;
  socket.on('data', (chunk: Buffer) => {
    chunks.push(chunk);
    received += chunk.length;
    if (received > allowed()) socket.pause();
  });
  const slowly = setInterval(() => {
    if (received <= allowed()) socket.resume();
  }, 10);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(`GET /api/users HTTP/1.1\r\nHost: atrium\r\nAuthorization: Bearer ${tenant.adminToken}\r\n\r\n`);
  while (!Buffer.concat(chunks).includes('\r\n\r\n')) await sleep(20);
  // The handler has ended the answer; the server is still writing it when the stop begins.
  await sleep(500);
  await Promise.all([closed, api.atrium.stop()]);
  clearInterval(slowly);
  const answer = Buffer.concat(chunks);
  const split = answer.indexOf('\r\n\r\n');
  const head = answer.subarray(0, split).toString('latin1');
  t.match(head, /^HTTP\/1\.1 200 /);
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
  t.ok(length > 8_000_000, `an answer of ${length} bytes`);
  t.equal(answer.length - split - 4, length, 'every byte of it arrived');
  const users = JSON.parse(answer.subarray(split + 4).toString('utf8')) as unknown[];
  t.ok(users.length > 20_000, 'and it is the whole list');
});

t.test('work still under way after the stop (an export’s next batch, say) is refused, and opens no connection that would keep the process alive', async (t) => {
  // `api` stopped in the test above: its pools are ended.
  const control = postgres(api.config.databaseUrl!, { max: 1, onnotice: () => {} });
  t.teardown(() => control.end({ timeout: 1 }));
  const atriumConnections = async () =>
    (
      await control<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name like 'atrium%'`
    )[0]!.n;
  t.equal(await atriumConnections(), 0, 'the stopped Atrium holds no connection');
  const late = await api.atrium.services.db
    .tenant(tenant.tenantId, (tx) => tx.execute(sql`select 1`))
    .then(
      () => 'ran',
      (error: { code?: string }) => error.code,
    );
  t.equal(late, 'CONNECTION_ENDED', 'a transaction begun after the stop is refused');
  t.equal(await atriumConnections(), 0, 'and no connection was opened for it');
});

t.test('a client that stops reading does not hold the stop: its connection is closed at the drain deadline', async (t) => {
  // An Atrium of its own: this one stops. Its drain deadline is half of SHUTDOWN_TIMEOUT_MS.
  const stalled = await startTestApi(t, { shutdownTimeoutMs: 2_000 });
  const stalledTenant = await tenantWithManyUsers(stalled, 'stalled');
  const stalledAddress = await stalled.atrium.app!.listen({ port: 0, host: '127.0.0.1' });
  const socket = net.connect(Number(new URL(stalledAddress).port), '127.0.0.1');
  let head = '';
  const readHead = (chunk: Buffer) => {
    head += chunk.toString('latin1');
    // It reads the answer's head, then nothing more.
    if (head.includes('\r\n\r\n')) {
      socket.pause();
      socket.off('data', readHead);
    }
  };
  socket.on('data', readHead);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(`GET /api/users HTTP/1.1\r\nHost: atrium\r\nAuthorization: Bearer ${stalledTenant.adminToken}\r\n\r\n`);
  while (!head.includes('\r\n\r\n')) await sleep(20);
  const began = Date.now();
  // Far beyond the deadline: only a stop that hangs on the connection would take it.
  const outcome = await Promise.race([stalled.atrium.stop().then(() => 'stopped'), sleep(15_000).then(() => 'still waiting')]);
  t.equal(outcome, 'stopped', `the stop ends (after ${Date.now() - began} ms)`);
  socket.resume();
  await closed;
  t.pass('the connection was closed');
});

t.test('a drain longer than Fastify’s 10 s for a plugin ends in a stop, not in its timeout error', async (t) => {
  // SHUTDOWN_TIMEOUT_MS of 24 s: a drain deadline of 12 s, past the 10 s Fastify allows a close hook by default.
  const patient = await startTestApi(t, { shutdownTimeoutMs: 24_000 });
  const patientAddress = await patient.atrium.app!.listen({ port: 0, host: '127.0.0.1' });
  const socket = net.connect(Number(new URL(patientAddress).port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  // A body announced but never sent: the request is under way until the deadline closes its connection.
  socket.write('POST /api/auth/login HTTP/1.1\r\nHost: atrium\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"tenant":');
  await sleep(300);
  const began = Date.now();
  const outcome = await patient.atrium.stop().then(
    () => 'stopped',
    (error: unknown) => `failed: ${String(error)}`,
  );
  t.equal(outcome, 'stopped', `the stop ends without an error (after ${Date.now() - began} ms)`);
  t.ok(Date.now() - began >= 11_000, 'having waited for the drain deadline');
  await closed;
});
