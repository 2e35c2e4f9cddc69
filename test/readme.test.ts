/**
 * The README's walkthrough ("Five minutes with the API" and "The same with the typed
 * client"), run as a newcomer runs it: every fenced block marked `walkthrough`, in order,
 * in one bash session in the checkout, against a fresh Atrium in a process of its own
 * that seeded the `demo` tenant and printed its administrator's password.
 *
 * What the test changes in the README's text, and nothing else: the address
 * (`http://127.0.0.1:3000` becomes the server's free port) and the password placeholder
 * (becomes the password the server printed). A `ts walkthrough <file>` block is saved
 * under that name in the session's current folder, as the README says. Between two blocks
 * the test waits until no notification dispatch is pending, as the seconds a reader takes
 * would; nothing else. The README's `npm install` of the client runs as written, with npm
 * preferring its cache (`npm_config_prefer_offline`), so a machine that ran `npm ci` needs
 * no network.
 */
import { spawn, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import postgres from 'postgres';
import t from 'tap';
import { createTestDatabase } from './helpers/database.ts';
import { eventually } from './helpers/eventually.ts';
import { serverPort } from './helpers/processes.ts';

// A server start, an npm install from the cache, two programs and a strict compile.
t.setTimeout(400_000);

const root = path.resolve(import.meta.dirname, '..');
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
const README_ADDRESS = 'http://127.0.0.1:3000';
const PASSWORD_PLACEHOLDER = '<the password npm start printed>';

interface Block {
  language: string;
  /** For a file to save (`ts walkthrough hello-atrium.mts`): its name. */
  file?: string;
  text: string;
  /** The README line the block starts on, for messages. */
  line: number;
}

/** The fenced blocks of `markdown` whose info string is `<language> walkthrough [file]`, in order. */
export function walkthroughBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  for (const match of markdown.matchAll(/^```(\w+) walkthrough(?: (\S+))?\n([\s\S]*?)^```$/gm)) {
    blocks.push({ language: match[1]!, file: match[2], text: match[3]!, line: markdown.slice(0, match.index).split('\n').length });
  }
  return blocks;
}

const blocks = walkthroughBlocks(readme);

t.test('the README marks its walkthrough, and names no bare `atrium` command', async (t) => {
  t.ok(blocks.filter((block) => block.language === 'sh').length >= 5, 'shell blocks');
  t.ok(
    blocks.some((block) => block.language === 'ts' && block.file),
    'a typed-client program to save',
  );
  t.ok(
    blocks.some((block) => block.text.includes(PASSWORD_PLACEHOLDER)),
    'the password npm start printed is where the README says to put it',
  );
  // `atrium` is the package's own command, not on PATH: in a checkout it is `npx atrium`.
  const bare = [...readme.matchAll(/^```(?:sh|bash)[^\n]*\n([\s\S]*?)^```$/gm)]
    .flatMap((match) => match[1]!.split('\n'))
    .filter((line) => /(^|[;&|(]\s*)atrium\s/.test(line.trim()));
  t.strictSame(bare, [], 'every atrium command is run through npx');
  t.notMatch(readme, /(^|[\s(])`atrium (user|token|tenant|migrate)/m, 'nor written as bare `atrium …` in the prose');
});

/** Atrium as `npm start` runs it, on a database of the suite's own: migrations, the demo seed, the API and the workers. */
async function startServer() {
  const database = await createTestDatabase();
  const port = await serverPort();
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: database.url, HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info' };
  // The embedded server's first tenant, which a DATABASE_URL gets only when asked for.
  Object.assign(env, { ATRIUM_BOOTSTRAP_TENANT: 'demo', ATRIUM_BOOTSTRAP_TENANT_NAME: 'Demo' });
  delete env.ATRIUM_ADMIN_PASSWORD; // generated and printed, as on a newcomer's first start
  if (database.appUrl) env.ATRIUM_APP_DATABASE_URL = database.appUrl;
  else delete env.ATRIUM_APP_DATABASE_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
    await database.drop();
  });
  const started = await eventually(
    async () => (output.includes('Server listening') ? 'listening' : child.exitCode !== null ? 'exited' : undefined),
    (state) => state !== undefined,
    90_000,
  );
  if (started !== 'listening') throw new Error(`the server did not start:\n${output}`);
  const password = /Sign in with tenant "demo", username "admin", password "([^"]+)"/.exec(output)?.[1];
  if (!password) throw new Error(`the server printed no password:\n${output}`);
  return { origin: `http://127.0.0.1:${port}`, password, databaseUrl: database.url, output: () => output };
}

/** A bash session in the checkout that runs blocks one after another, as pasted into a terminal; `set -euo pipefail` ends it at the first failing command. */
function startShell(tempDir: string) {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    LANG: process.env.LANG ?? 'C.UTF-8',
    TMPDIR: tempDir, // `mktemp -d` makes the scratch project here, removed with it
    npm_config_prefer_offline: 'true',
    npm_config_update_notifier: 'false',
  };
  const shell = spawn('bash', ['--noprofile', '--norc'], { cwd: root, env, stdio: ['pipe', 'pipe', 'pipe'] });
  let transcript = '';
  shell.stdout.on('data', (chunk) => (transcript += chunk));
  shell.stderr.on('data', (chunk) => (transcript += chunk));
  const exited = new Promise<number | null>((resolve) => shell.on('exit', (code) => resolve(code)));
  t.teardown(async () => {
    if (shell.exitCode === null && shell.signalCode === null) {
      shell.stdin.end();
      shell.kill('SIGTERM');
      await exited;
    }
  });
  shell.stdin.write('set -euo pipefail\n');
  return {
    transcript: () => transcript,
    /** Runs `script`; resolves once it has finished, or rejects with what the session printed when it ended instead. */
    run(script: string): Promise<void> {
      const marker = `walkthrough-step-done-${randomBytes(6).toString('hex')}`;
      return new Promise<void>((resolve, reject) => {
        const stop = () => {
          shell.stdout.off('data', check);
          shell.off('exit', ended);
          clearTimeout(timer);
        };
        const check = () => {
          if (!transcript.includes(`${marker}\n`)) return;
          stop();
          transcript = transcript.replace(`${marker}\n`, '');
          resolve();
        };
        const ended = (code: number | null) => {
          stop();
          reject(new Error(`the walkthrough stopped (bash exited with status ${code}):\n${transcript}`));
        };
        const timer = setTimeout(() => {
          stop();
          reject(new Error(`the walkthrough took too long:\n${transcript}`));
        }, 150_000);
        shell.stdout.on('data', check);
        shell.on('exit', ended);
        shell.stdin.write(`${script}\necho ${marker}\n`);
      });
    },
  };
}

t.test("the README's walkthrough runs as written against a fresh server", async (t) => {
  const server = await startServer();
  const tempDir = mkdtempSync(path.join(os.tmpdir(), 'atrium-readme-'));
  t.teardown(() => rmSync(tempDir, { recursive: true, force: true }));
  const sql = postgres(server.databaseUrl, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const shell = startShell(tempDir);
  const localized = (text: string) => text.replaceAll(README_ADDRESS, server.origin).replaceAll(PASSWORD_PLACEHOLDER, server.password);

  for (const block of blocks) {
    const text = localized(block.text);
    const script = block.language === 'sh' ? text : block.file ? `cat > '${block.file}' <<'ATRIUM_README_FILE'\n${text}ATRIUM_README_FILE` : undefined;
    if (script === undefined) {
      t.fail(`README line ${block.line}: a ${block.language} walkthrough block needs a file name to be saved as`);
      continue;
    }
    await shell.run(script);
    t.pass(`README line ${block.line} (${block.file ?? block.language}) ran`);
    await eventually(
      async () => (await sql<{ n: number }[]>`select count(*)::int as n from notification_dispatches where delivered_at is null`)[0]!.n,
      (pending) => pending === 0,
    );
  }

  const transcript = shell.transcript();
  t.notMatch(transcript, /"type":"\/problems\//, 'no answer on the way was a problem document');
  t.match(transcript, /"read_at":"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"/, 'the curl walk marked a notification read');
  t.match(transcript, /"Welcome" read by sam at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/, 'the typed client did the same');
  const [state] = await sql<{ recipients: number; unread: number }[]>`
    select count(distinct notifiable_id)::int as recipients, count(*) filter (where read_at is null)::int as unread from notifications`;
  t.strictSame(state, { recipients: 2, unread: 0 }, 'two users got a notification each and read it');

  // The program the README has a reader save compiles under strict TypeScript too.
  const program = readdirSync(tempDir, { recursive: true, encoding: 'utf8' }).find(
    (name) => name.endsWith('hello-atrium.mts') && !name.includes('node_modules'),
  );
  t.ok(program, 'the typed-client program was saved');
  if (program) {
    const tsc = path.join(root, 'node_modules/.bin/tsc');
    const args = [
      '--noEmit',
      '--strict',
      '--target',
      'ES2022',
      '--module',
      'NodeNext',
      '--moduleResolution',
      'NodeNext',
      '--allowImportingTsExtensions',
      '--skipLibCheck',
      '--types',
      'node',
      '--typeRoots',
      path.join(root, 'node_modules/@types'),
      path.join(tempDir, program),
    ];
    const compiled = await promisify(execFile)(tsc, args, { cwd: path.dirname(path.join(tempDir, program)) }).then(
      () => '',
      (error: { stdout?: string; message: string }) => error.stdout || error.message,
    );
    t.equal(compiled, '', 'hello-atrium.mts type-checks (strict)');
  }
});
