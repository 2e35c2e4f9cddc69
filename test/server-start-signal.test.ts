/**
 * A signal while the process starts, with DATABASE_URL (docs/operations.md#signals-and-shutdown):
 * a database that accepts connections but does not answer holds the start for a minute
 * (the reach timeout); the signal does not wait for it.
 */
import { spawn } from 'node:child_process';
import net, { type Socket } from 'node:net';
import path from 'node:path';
import t from 'tap';

t.setTimeout(120_000);

const root = path.resolve(import.meta.dirname, '..');

t.test('SIGTERM while the start waits for a database that does not answer ends the process at once, with one line', async (t) => {
  // Takes connections and never answers, as a host behind a firewall that drops the packets would not even do.
  const held = new Set<Socket>();
  const silent = net.createServer((socket) => held.add(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of held) socket.destroy();
    silent.close();
  });
  const { port } = silent.address() as net.AddressInfo;
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: `postgres://atrium:secret-password@127.0.0.1:${port}/atrium`, PORT: '0', LOG_LEVEL: 'info' };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stdout.resume();
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  // The start is under way: it has connected, and waits for an answer.
  while (held.size === 0) {
    if (child.exitCode !== null) throw new Error(`exited before connecting:\n${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const signalled = performance.now();
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([exited, new Promise<'still running'>((resolve) => (timer = setTimeout(() => resolve('still running'), 20_000)))]);
  clearTimeout(timer);
  t.not(outcome, 'still running', 'the process ends without waiting out the reach timeout');
  t.ok(performance.now() - signalled < 20_000);
  t.equal(outcome, 143, 'exit status 128 + SIGTERM');
  t.equal(stderr, 'atrium: SIGTERM before the start had finished: stopped\n', 'one line, no stack trace');
  t.notMatch(stderr, /secret-password/);
});
