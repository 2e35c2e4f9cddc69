/**
 * Start-up against a URL that names something other than a PostgreSQL server: one that
 * accepts, answers HTTP and closes (a port mistaken for the database's) fails at once with
 * one message naming the host and the setting, instead of being tried again for ever
 * without a word; one that accepts and stays silent is given up after the start-up
 * deadline. A server that refuses fails at once, as before.
 */
import net from 'node:net';
import t from 'tap';
import { Database } from '../../../src/platform/database/database.ts';

t.test('migrations against a server that is not PostgreSQL fail, naming the host and DATABASE_URL', async (t) => {
  const server = net.createServer((socket) => socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  // Closed without waiting for its last connection, which the driver may still be opening.
  t.teardown(() => void server.close());
  const port = (server.address() as net.AddressInfo).port;
  const db = new Database(`postgres://atrium@127.0.0.1:${port}/atrium`, { reachTimeoutMs: 3_000 });
  t.teardown(() => db.close());
  await t.rejects(db.migrate(), {
    message: new RegExp(`^the database at 127\\.0\\.0\\.1:${port} closed the connection without answering as PostgreSQL: check DATABASE_URL`),
  });
});

t.test('migrations against a server that accepts and stays silent fail after the deadline, naming the host and DATABASE_URL', async (t) => {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  const port = (server.address() as net.AddressInfo).port;
  const db = new Database(`postgres://atrium@127.0.0.1:${port}/atrium`, { reachTimeoutMs: 1_000 });
  t.teardown(() => db.close());
  await t.rejects(db.migrate(), {
    message: new RegExp(`^the database at 127\\.0\\.0\\.1:${port} did not answer as PostgreSQL within 1 s: check DATABASE_URL`),
  });
});

t.test('a refused connection fails at once, naming the host and DATABASE_URL', async (t) => {
  // A port just freed: nothing listens there.
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  const db = new Database(`postgres://atrium@127.0.0.1:${port}/atrium`);
  t.teardown(() => db.close());
  await t.rejects(db.migrate(), { message: new RegExp(`^the database at 127\\.0\\.0\\.1:${port}: connect ECONNREFUSED .*: check DATABASE_URL`) });
});
