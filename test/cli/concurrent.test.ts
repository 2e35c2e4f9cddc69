/**
 * Two commands at once on the embedded PostgreSQL: the one that started the server stops it
 * when its work is done, so another command, or a server, refuses to borrow it, with one
 * line saying so, rather than lose it half-way (docs/running.md).
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { startAtriumProcess, startNodeProcess, type AtriumProcess } from '../helpers/processes.ts';

t.setTimeout(300_000);

const root = path.resolve(import.meta.dirname, '../..');
const dataDir = path.join(os.tmpdir(), `atrium-cli-concurrent-${randomBytes(4).toString('hex')}`);
t.teardown(() => rm(dataDir, { recursive: true, force: true }));

type Command = AtriumProcess;

/** `atrium args…` on the test's data folder, on the embedded PostgreSQL. */
function atrium(t: Test, args: string[]): Command {
  const env: NodeJS.ProcessEnv = { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'debug' };
  delete env.DATABASE_URL;
  delete env.ATRIUM_APP_DATABASE_URL;
  return startNodeProcess(t, [path.join(root, 'bin/atrium.js'), ...args], env, { stop: 'SIGKILL', stdin: 'pipe' });
}

async function until(command: Command, text: string): Promise<void> {
  while (!command.output().includes(text)) {
    if (command.child.exitCode !== null) throw new Error(`the command exited:\n${command.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

t.test('a command or a server started while a command runs the embedded PostgreSQL refuses, and changes nothing; the first goes on', async (t) => {
  const migrate = atrium(t, ['migrate']);
  t.equal(await migrate.exited, 0, 'the data folder and the demo tenant are there');

  // It waits for the password on standard input once its database is open: a command in progress.
  const setPassword = ['user:set-password', '--tenant', 'demo', '--username', 'admin'];
  const first = atrium(t, setPassword);
  await until(first, 'database system is ready to accept connections');
  // A server started meanwhile would lose its database when the command ends: it refuses too.
  const server = startAtriumProcess(t, { config: {} }, { DATA_DIR: dataDir, PORT: '0' });
  t.not(await server.exited, 0, 'a server does not start on it');
  t.match(
    server.output(),
    new RegExp(`another command \\(pid ${first.child.pid}\\) runs the embedded PostgreSQL of .*: start once it has ended`),
    'saying why',
  );
  const second = atrium(t, setPassword);
  second.child.stdin!.end('second-new-password\n');
  t.not(await second.exited, 0, 'the second command fails');
  const lines = second
    .output()
    .split('\n')
    .filter((line) => line.startsWith('atrium:'));
  t.match(
    lines.join('\n'),
    new RegExp(`another command \\(pid ${first.child.pid}\\) runs the embedded PostgreSQL of .* run one command at a time`),
    'saying why',
  );
  t.notMatch(second.output(), /password of admin in tenant demo set/, 'having set nothing');

  first.child.stdin!.end('first-new-password\n');
  t.equal(await first.exited, 0, 'the first command is done, on the server it started');
  t.match(first.output(), /password of admin in tenant demo set/);
});
