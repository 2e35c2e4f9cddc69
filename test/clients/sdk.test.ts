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
 *
 * orval is no dependency of the repository: it declares Node 22.18 or later (`engines`),
 * and the repository installs without an engine warning on every Node it supports, 20
 * included (docs/testing.md#nodejs-versions). This file installs one exact orval into
 * another folder outside the repository and runs it from there; on an older Node only
 * orval's client is skipped, and CI's run on Node 24 generates and runs it.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import ts from 'typescript';
import { DEMO_PASSWORD, startTestApi } from '../helpers/atrium.ts';
import { ORVAL } from './orval.config.ts';

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

/** Whether the running Node is `minimum` (MAJOR.MINOR.PATCH) or later. */
function nodeIsAtLeast(minimum: string): boolean {
  const running = process.versions.node.split('.').map(Number);
  const wanted = minimum.split('.').map(Number);
  const differs = wanted.findIndex((part, index) => running[index] !== part);
  return differs === -1 || running[differs]! > wanted[differs]!;
}

/**
 * Installs ORVAL.version from the registry into `project` (an empty folder outside the
 * repository), as the packed client is installed. Returns the engines it declares and its
 * executable.
 */
async function installOrval(project: string): Promise<{ engines: string | undefined; bin: string }> {
  writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'orval-runner', private: true }));
  await npm('npm install (orval)', ['install', '--no-audit', '--no-fund', '--prefer-offline', `orval@${ORVAL.version}`], project);
  const manifest = JSON.parse(readFileSync(path.join(project, 'node_modules/orval/package.json'), 'utf8')) as { engines?: { node?: string } };
  return { engines: manifest.engines?.node, bin: path.join(project, 'node_modules/.bin/orval') };
}

interface PackedFile {
  path: string;
}

/** The TypeScript example of the client's README (its first `ts` block). */
function readmeExample(): string {
  const readme = readFileSync(path.join(root, 'clients/typescript/README.md'), 'utf8');
  const example = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  if (!example) throw new Error('clients/typescript/README.md has no ts example');
  return example;
}

/**
 * Non-null assertions (`x!`) and casts (`x as T`, `<T>x`) in a program: what a client whose
 * types tell what an answer holds leaves its users no need for.
 */
function assertionsIn(name: string, text: string): string[] {
  const source = ts.createSourceFile(name, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isNonNullExpression(node) || ts.isAsExpression(node) || ts.isTypeAssertionExpression(node)) {
      found.push(`${name}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.getText()}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
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
  // The README's example compiles there too (it is not run: it names a server of its own).
  writeFileSync(path.join(project, 'src', 'readme-example.ts'), readmeExample());
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

// Three generators (one installed first), a strict compile of three whole clients and
// three scenarios: a minute or more on a busy machine, beyond the suite's default per-file
// timeout.
t.setTimeout(300_000);

/** Whether orval runs here: its engines admit the running Node. */
const withOrval = nodeIsAtLeast(ORVAL.node);

t.test('the README example and the scenario programs need no non-null assertion or cast', async (t) => {
  // orval-fetch.ts is no program but the transport orval's functions call: orval's contract
  // has it answer whichever type the generated function names (`<T>(url, init) => Promise<T>`).
  const programs = ['environment.ts', 'hey-api.ts', 'openapi-fetch.ts', 'orval.ts'];
  t.strictSame(assertionsIn('bad.ts', 'const a = b!.c as number;'), ['bad.ts:1: b!.c as number', 'bad.ts:1: b!'], 'the check finds both');
  const found = [
    ...assertionsIn('clients/typescript/README.md', readmeExample()),
    ...programs.flatMap((file) => assertionsIn(file, readFileSync(path.join(here, 'scenarios', file), 'utf8'))),
  ];
  t.strictSame(found, []);
});

t.test('clients generated from the spec compile and run the scenario', async (t) => {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const consumer = mkdtempSync(path.join(tmpdir(), 'atrium-client-'));
  t.teardown(() => rmSync(consumer, { recursive: true, force: true }));
  if (!withOrval) {
    t.pass("orval's client compiles and runs the scenario", {
      skip: `orval ${ORVAL.version} needs Node ${ORVAL.node} or later (its engines), this is ${process.version}`,
    });
  }

  const [packed, , orval] = await Promise.all([
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
    withOrval ? runOrval(t) : undefined,
  ]);
  if (orval) t.equal(orval.engines, `>=${ORVAL.node}`, `orval ${ORVAL.version} declares the engines this file checks`);
  const version = (JSON.parse(readFileSync(spec, 'utf8')) as { info: { version: string } }).info.version;
  t.equal(packed.name, '@atrium/client');
  t.equal(packed.version, version, "the client's version is the contract's info.version");
  t.strictSame(
    packed.files.map((file) => file.path).sort(),
    ['LICENSE', 'README.md', 'dist/index.d.ts', 'dist/index.js', 'dist/schema.d.ts', 'dist/schema.js', 'package.json'],
    'the tarball holds the JavaScript, its declarations, the license and the README',
  );
  // Strict compiles: the generated clients with their scenarios (test/clients/tsconfig.json),
  // and the consumer's project against the installed client.
  await Promise.all([
    step('tsc (strict) over the generated clients and scenarios', bin('tsc'), ['--project', generatedClientsConfig()]),
    step('tsc (strict) over the scenario against the installed client', bin('tsc'), ['--project', path.join(consumer, 'tsconfig.json')]),
  ]);
  const generators = ['openapi-fetch', 'hey-api', ...(withOrval ? ['orval'] : [])];
  t.pass(`the clients of ${generators.slice(0, -1).join(', ')} and ${generators.at(-1)} compile with their scenarios under strict tsc`);

  const api = await startTestApi(t, { role: 'all' });
  const tenant = await api.createTenant('sdk');
  const address = await api.atrium.app!.listen({ host: '127.0.0.1', port: 0 });
  for (const generator of generators) {
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

/** Installs orval in a folder of its own outside the repository and runs it from there (its client goes to .generated/). */
async function runOrval(t: Test): Promise<{ engines: string | undefined }> {
  const project = mkdtempSync(path.join(tmpdir(), 'atrium-orval-'));
  t.teardown(() => rmSync(project, { recursive: true, force: true }));
  const orval = await installOrval(project);
  await step('orval', orval.bin, ['--config', path.join(here, 'orval.config.ts')]);
  return orval;
}

/**
 * test/clients/tsconfig.json, which compiles every scenario; without orval's client, the
 * same options over the others (a config written beside the generated clients).
 */
function generatedClientsConfig(): string {
  if (withOrval) return path.join(here, 'tsconfig.json');
  const config = path.join(out, 'tsconfig.json');
  writeFileSync(
    config,
    JSON.stringify({
      extends: '../tsconfig.json',
      include: ['../scenarios', 'hey-api'],
      exclude: ['../scenarios/openapi-fetch.ts', '../scenarios/orval.ts', '../scenarios/orval-fetch.ts'],
    }),
  );
  return config;
}
