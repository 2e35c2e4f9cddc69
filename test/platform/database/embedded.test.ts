/**
 * The embedded PostgreSQL (src/platform/database/embedded.ts) starts on another port when
 * the port it chose was taken before the server bound it: a free port is only free until
 * another process (a parallel test, any outgoing connection) takes it.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { freePort, startEmbeddedPostgres } from '../../../src/platform/database/embedded.ts';

t.test('a port taken between its choice and the start: the server starts on the next one chosen, with the settings asked for', async (t) => {
  // A folder of its own that startEmbeddedPostgres creates (it makes it traversable for the postgres user).
  const dataDir = path.join(os.tmpdir(), `atrium-embedded-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // A real listener on the first port offered.
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const taken = (holder.address() as net.AddressInfo).port;

  const offered: number[] = [];
  const lines: string[] = [];
  const server = await startEmbeddedPostgres(dataDir, {
    log: (line) => lines.push(line),
    choosePort: async () => {
      const port = offered.length === 0 ? taken : await freePort();
      offered.push(port);
      return port;
    },
    settings: { fsync: 'off', synchronous_commit: 'off' },
  });
  t.teardown(() => server.stop());

  t.equal(offered.length, 2, 'a second port was chosen');
  t.equal(new URL(server.url).port, String(offered[1]), 'the server listens on the second');
  t.ok(
    lines.some((line) => line.includes(`port ${taken} was taken`)),
    'the retry is logged',
  );
  const sql = postgres(server.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end());
  const [row] = await sql<{ answer: number }[]>`select 42 as answer`;
  t.equal(row!.answer, 42, 'and answers');
  const [durability] = await sql<{ fsync: string; commit: string }[]>`
    select current_setting('fsync') as fsync, current_setting('synchronous_commit') as commit`;
  t.strictSame({ ...durability }, { fsync: 'off', commit: 'off' }, 'the settings asked for are in force');
});
