/**
 * compose.yaml as an operator first meets it (docs/operations.md#first-deployment): with only
 * `.env.example` copied to `.env`, `docker-compose config` accepts it; every secret it
 * passes to a container comes from that file (none is written into compose.yaml); and a
 * secret missing from it stops compose with a line that names it. Debian's `docker-compose`
 * renders the file without a container engine (CI installs it, as it installs PgBouncer).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '..');
const folder = mkdtempSync(path.join(os.tmpdir(), 'atrium-compose-'));
t.teardown(() => rmSync(folder, { recursive: true, force: true }));

/** `docker-compose config` of the repository's compose.yaml with `env` as its `.env`. */
function config(env: string): Promise<{ code: number; stdout: string; stderr: string }> {
  const envFile = path.join(folder, `${randomBytes(4).toString('hex')}.env`);
  writeFileSync(envFile, env);
  return new Promise((resolve) => {
    execFile('docker-compose', ['--project-directory', root, '-f', path.join(root, 'compose.yaml'), '--env-file', envFile, 'config'], (error, stdout, stderr) =>
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const example = readFileSync(path.join(root, '.env.example'), 'utf8');
/** The secrets .env.example asks for: the settings whose value is a `replace-with-…` placeholder. */
const secrets = [...example.matchAll(/^([A-Z_]+)=replace-with-/gm)].map((match) => match[1]!);

t.test('.env.example copied to .env is all compose needs', async (t) => {
  const rendered = await config(example);
  t.equal(rendered.code, 0, rendered.stderr);
  t.match(rendered.stdout, /services:/);
  t.same(secrets.sort(), ['ATRIUM_APP_PASSWORD', 'ATRIUM_OWNER_PASSWORD', 'ATRIUM_SECRET_KEY', 'POSTGRES_PASSWORD']);
});

t.test('every secret a container gets comes from .env', async (t) => {
  // Each secret a value of its own: where it lands shows where compose took it from.
  const values = Object.fromEntries(secrets.map((name) => [name, `v${randomBytes(8).toString('hex')}`]));
  const env = example.replace(/^([A-Z_]+)=replace-with-.*$/gm, (_line, name: string) => `${name}=${values[name]}`);
  const rendered = await config(env);
  t.equal(rendered.code, 0, rendered.stderr);
  for (const [name, value] of Object.entries(values)) t.ok(rendered.stdout.includes(value), `${name} is used`);
  // Every password in a connection URL is one of them: none is written into compose.yaml.
  const urlPasswords = [...rendered.stdout.matchAll(/postgres:\/\/[^:/\s]+:([^@\s]+)@/g)].map((match) => match[1]!);
  t.ok(urlPasswords.length >= 2, 'connection URLs with passwords');
  for (const password of urlPasswords) t.ok(Object.values(values).includes(password), `a URL's password comes from .env`);
  t.notMatch(rendered.stdout, /: replace-with-|:replace-with-[^@\s]*@/, 'no placeholder left in a setting or a URL');
});

t.test('a secret missing from .env stops compose with a line that names it', async (t) => {
  for (const name of secrets) {
    const env = example.replace(new RegExp(`^${name}=.*$`, 'm'), '');
    const rendered = await config(env);
    t.not(rendered.code, 0, `without ${name}`);
    t.match(rendered.stderr, new RegExp(`set ${name} in \\.env`), `the message names ${name}`);
  }
});
