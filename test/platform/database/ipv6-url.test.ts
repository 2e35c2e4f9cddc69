/**
 * A database URL whose host is an IPv6 address (`postgres://…@[::1]:5432/…`), which the
 * configuration accepts: every pool reaches it (src/platform/database/connection-url.ts,
 * `driverHosts`), though the driver would read the URL's host as `[`. The server is the
 * run's PostgreSQL behind a TCP relay listening on IPv6 loopback only.
 */
import net from 'node:net';
import t from 'tap';
import { sql } from 'drizzle-orm';
import { Database } from '../../../src/platform/database/database.ts';
import { driverHosts } from '../../../src/platform/database/connection-url.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

t.test('driverHosts: the hosts as options only when one is an IPv6 address', async (t) => {
  t.strictSame(driverHosts('postgres://u:p@db:5432/atrium'), {});
  t.strictSame(driverHosts('postgres://u:p@db1,db2:5433/atrium'), {});
  t.strictSame(driverHosts('postgres://u:p@[::1]:6543/atrium'), { host: ['::1'], port: [6543] });
  t.strictSame(driverHosts('postgres://u:p@[2001:db8::7]/atrium'), { host: ['2001:db8::7'], port: [5432] }, "libpq's port when none is given");
});

t.test('the owner pool, the request pool and the readiness check reach a server named by its IPv6 address', async (t) => {
  const { db: reference, appUrl, createTenant } = await startTestDatabase(t);
  const tenant = await createTenant('ipv6');
  const target = new URL(reference.url);
  const relay = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, '::1', resolve));
  t.teardown(() => void relay.close());
  const port = (relay.address() as net.AddressInfo).port;
  const viaIpv6 = (value: string) => {
    const url = new URL(value);
    return `${url.protocol}//${url.username}${url.password ? `:${url.password}` : ''}@[::1]:${port}${url.pathname}`;
  };
  const db = new Database(viaIpv6(reference.url), appUrl ? { appUrl: viaIpv6(appUrl) } : {});
  t.teardown(() => db.close());
  t.strictSame(await db.migrate(), [], 'migrations reach it (nothing left to apply)');
  const [owner] = await db.owner.execute<{ port: number }>(sql`select inet_server_port() as port`);
  t.equal(owner?.port, Number(target.port || 5432), 'the owner pool answers, from the server behind the relay');
  const rows = await db.tenant(tenant.tenantId, (tx) => tx.execute<{ n: number }>(sql`select count(*)::int as n from users`));
  t.equal(rows[0]!.n, 1, "the request pool reads the tenant's rows");
  t.equal(await db.isReady(), true, 'readiness reaches it');
});
