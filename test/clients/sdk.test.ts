/**
 * The contract as a product: clients generated from generated/openapi.json by three
 * generators compile under strict TypeScript and run one scenario each against a live
 * server (sign in, create a department and a user with a picture, notify, read and mark
 * as the recipient). The generators: openapi-typescript + openapi-fetch (the repository's
 * client, clients/typescript), @hey-api/openapi-ts and orval.
 *
 * The repository's client is tried as consumers get it: packed (`npm pack`, which builds
 * it), installed from the tarball into an empty project outside the repository (its
 * dependencies from the registry), its scenario compiled there under strict tsc without
 * DOM types, and run as plain JavaScript by Node.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { DEMO_PASSWORD, startTestApi } from '../helpers/atrium.ts';

const run = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const spec = path.join(root, 'generated/openapi.json');
const out = path.join(here, '.generated');
const bin = (name: string) => path.join(root, 'node_modules/.bin', name);
const quiet = { cwd: root, env: { ...process.env, NO_COLOR: '1', REDOCLY_TELEMETRY: 'off' }, maxBuffer: 16 * 1024 * 1024 };

/** Runs a command; on failure the assertion carries its output. */
async function step(what: string, file: string, args: string[], env: Record<string, string> = {}, cwd = root): Promise<string> {
  try {
    const { stdout } = await run(file, args, { ...quiet, cwd, env: { ...quiet.env, ...env } });
    return stdout;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${what} failed:\n${failure.stdout ?? ''}\n${failure.stderr ?? failure.message}`, { cause: error });
  }
}

/**
 * npm as a consumer runs it: without the `npm_*` variables of the `npm test` that started
 * this file (the repository's prefix and settings, such as its legacy-peer-deps).
 */
function npm(what: string, args: string[], cwd: string): Promise<string> {
  const env = Object.fromEntries(Object.entries(quiet.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
  return run('npm', args, { cwd, env, maxBuffer: quiet.maxBuffer }).then(
    ({ stdout }) => stdout,
    (error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`${what} failed:\n${error.stdout ?? ''}\n${error.stderr ?? error.message}`, { cause: error });
    },
  );
}

interface PackedFile {
  path: string;
}

/**
 * Packs clients/typescript into `project` (an empty folder outside the repository), makes
 * it a consumer's project that installs the tarball and @types/node from the registry, and
 * copies the openapi-fetch scenario into it. Returns what `npm pack` reported.
 */
async function installPackedClient(project: string): Promise<{ name: string; version: string; files: PackedFile[] }> {
  const [packed] = JSON.parse(await npm('npm pack', ['pack', '--json', '--pack-destination', project], path.join(root, 'clients/typescript'))) as {
    name: string;
    version: string;
    filename: string;
    files: PackedFile[];
  }[];
  writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2022'],
        types: ['node'],
        strict: true,
        noUncheckedIndexedAccess: true,
        rewriteRelativeImportExtensions: true,
        rootDir: 'src',
        outDir: 'dist',
      },
      include: ['src'],
    }),
  );
  mkdirSync(path.join(project, 'src'));
  for (const file of ['openapi-fetch.ts', 'environment.ts']) copyFileSync(path.join(here, 'scenarios', file), path.join(project, 'src', file));
  const typesNode = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies[
    '@types/node'
  ];
  await npm(
    'npm install (the tarball)',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', path.join(project, packed!.filename), `@types/node@${typesNode}`],
    project,
  );
  return packed!;
}

// Three generators, a strict compile of three whole clients and three scenarios: a minute
// or more on a busy machine, beyond the suite's default per-file timeout.
t.setTimeout(300_000);

t.test('clients generated from the spec compile and run the scenario', async (t) => {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const consumer = mkdtempSync(path.join(tmpdir(), 'atrium-client-'));
  t.teardown(() => rmSync(consumer, { recursive: true, force: true }));

  const [packed] = await Promise.all([
    installPackedClient(consumer),
    step('@hey-api/openapi-ts', bin('openapi-ts'), [
      '--input',
      spec,
      '--output',
      path.join(out, 'hey-api'),
      '--client',
      '@hey-api/client-fetch',
      '--no-log-file',
      '--silent',
    ]),
    step('orval', bin('orval'), ['--config', path.join(here, 'orval.config.ts')]),
  ]);
  const version = (JSON.parse(readFileSync(spec, 'utf8')) as { info: { version: string } }).info.version;
  t.equal(packed.name, '@atrium/client');
  t.equal(packed.version, version, "the client's version is the contract's info.version");
  t.strictSame(
    packed.files.map((file) => file.path).sort(),
    ['LICENSE', 'README.md', 'dist/index.d.ts', 'dist/index.js', 'dist/schema.d.ts', 'dist/schema.js', 'package.json'],
    'the tarball holds the JavaScript, its declarations, the license and the README',
  );
  // Strict compiles: the two generated clients with their scenarios (test/clients/tsconfig.json),
  // and the consumer's project against the installed client.
  await Promise.all([
    step('tsc (strict) over the generated clients and scenarios', bin('tsc'), ['--project', path.join(here, 'tsconfig.json')]),
    step('tsc (strict) over the scenario against the installed client', bin('tsc'), ['--project', path.join(consumer, 'tsconfig.json')]),
  ]);
  t.pass('the three clients and their scenarios compile under strict tsc');

  const api = await startTestApi(t, { role: 'all' });
  const tenant = await api.createTenant('sdk');
  const address = await api.atrium.app!.listen({ host: '127.0.0.1', port: 0 });
  for (const generator of ['openapi-fetch', 'hey-api', 'orval']) {
    // The installed client runs as compiled JavaScript in its project, the others through tsx.
    const [program, cwd] =
      generator === 'openapi-fetch'
        ? [[path.join(consumer, 'dist/openapi-fetch.js')], consumer]
        : [['--import', 'tsx', path.join(here, 'scenarios', `${generator}.ts`)], root];
    const environment = { ATRIUM_URL: address, ATRIUM_TENANT: tenant.slug, ATRIUM_PASSWORD: DEMO_PASSWORD, ATRIUM_RUN: generator };
    const output = await step(`the ${generator} scenario`, process.execPath, program, environment, cwd);
    t.match(output, `${generator} scenario passed`, `the ${generator} client runs the scenario`);
  }
});
