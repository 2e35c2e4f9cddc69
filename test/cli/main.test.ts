import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';
import { startTestApi } from '../helpers/atrium.ts';

const run = promisify(execFile);
const api = await startTestApi(t);
const env = { ...process.env, DATABASE_URL: api.db.url, LOG_LEVEL: 'silent' };

async function atrium(...args: string[]) {
  try {
    const { stdout, stderr } = await run(process.execPath, ['bin/atrium.js', ...args], { env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

t.test('tenant:create, then token:create prints only a working access token', async (t) => {
  const created = await atrium('tenant:create', 'cli-co', '--name', 'CLI Co', '--admin-username', 'root', '--admin-password', 'long-enough-password');
  t.equal(created.code, 0, created.stderr);
  t.match(created.stdout, /tenant cli-co created/);
  const issued = await atrium('token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '600');
  t.equal(issued.code, 0, issued.stderr);
  t.match(issued.stdout, /^atr_[A-Za-z0-9_-]{43}\n$/, 'stdout is the token alone');
  const me = await api.call(t, 'getCurrentUser', { token: issued.stdout.trim() });
  t.equal(me.status, 200);
  t.equal(me.body.username, 'root');
});

t.test('migrate is idempotent', async (t) => {
  t.equal((await atrium('migrate')).code, 0);
  t.equal((await atrium('migrate')).code, 0);
});

t.test('usage errors exit 2 with a message, and change nothing', async (t) => {
  const cases = [
    ['frobnicate'],
    ['tenant:create'],
    ['tenant:create', 'x', '--name', 'X', '--admin-username', 'a', '--admin-password', 'short'],
    ['tenant:create', 'Bad Slug', '--name', 'X', '--admin-username', 'a', '--admin-password', 'long-enough-password'],
    ['token:create', '--tenant', 'cli-co'],
    ['token:create', '--tenant', 'no-such', '--username', 'root'],
    ['token:create', '--tenant', 'cli-co', '--username', 'root', '--expires-in', '0'],
  ];
  for (const args of cases) {
    const result = await atrium(...args);
    t.not(result.code, 0, args.join(' '));
    t.equal(result.stdout, '', 'nothing on stdout');
    t.match(result.stderr, /^atrium: /);
  }
  const again = await atrium('tenant:create', 'cli-co', '--name', 'Dup', '--admin-username', 'root', '--admin-password', 'long-enough-password');
  t.equal(again.code, 1);
  t.match(again.stderr, /exists already/);
});

t.test('tenant:create counts the password as the API does: in characters (code points), not UTF-16 units', async (t) => {
  // Six emoji are twelve UTF-16 units but six characters: shorter than the minimum of ten.
  const result = await atrium('tenant:create', 'cli-emoji', '--name', 'Emoji', '--admin-username', 'root', '--admin-password', '😀'.repeat(6));
  t.equal(result.code, 2, result.stderr);
  t.match(result.stderr, /--admin-password must have at least/);
  t.equal((await atrium('token:create', '--tenant', 'cli-emoji', '--username', 'root')).code, 2, 'no such tenant was created');
});
