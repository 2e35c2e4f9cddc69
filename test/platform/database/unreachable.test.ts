/**
 * Start-up against a URL that names something other than a PostgreSQL server: one that
 * accepts, answers HTTP and closes (a port mistaken for the database's) is given up after
 * the start-up deadline with one message naming the host and the setting, instead of being
 * tried again for ever without a word. A server that refuses fails at once, as before.
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
  const db = new Database(`postgres://atrium@127.0.0.1:${port}/atrium`);
  t.teardown(() => db.close());
  await t.rejects(db.migrate(), { message: new RegExp(`^no PostgreSQL server answered at 127\\.0\\.0\\.1:${port} within \\d+ s: check DATABASE_URL`) });
});
