/**
 * The contract as a product: clients generated from generated/openapi.json by three
 * generators compile under strict TypeScript and run one scenario each against a live
 * server (sign in, create a department and a user with a picture, notify, read and mark
 * as the recipient). The generators: openapi-typescript + openapi-fetch (the repository's
 * client, clients/typescript), @hey-api/openapi-ts and orval.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
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
async function step(what: string, file: string, args: string[], env: Record<string, string> = {}): Promise<string> {
  try {
    const { stdout } = await run(file, args, { ...quiet, env: { ...quiet.env, ...env } });
    return stdout;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${what} failed:\n${failure.stdout ?? ''}\n${failure.stderr ?? failure.message}`, { cause: error });
  }
}

// Three generators, a strict compile of three whole clients and three scenarios: a minute
// or more on a busy machine, beyond the suite's default per-file timeout.
t.setTimeout(300_000);

t.test('clients generated from the spec compile and run the scenario', async (t) => {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });

  await Promise.all([
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
  // One strict compile of the three clients and the scenario programs (test/clients/tsconfig.json).
  await step('tsc (strict) over the generated clients and scenarios', bin('tsc'), ['--project', path.join(here, 'tsconfig.json')]);
  t.pass('the three clients and their scenarios compile under strict tsc');

  const api = await startTestApi(t, { role: 'all' });
  const tenant = await api.createTenant('sdk');
  const address = await api.atrium.app!.listen({ host: '127.0.0.1', port: 0 });
  for (const generator of ['openapi-fetch', 'hey-api', 'orval']) {
    const output = await step(`the ${generator} scenario`, process.execPath, ['--import', 'tsx', path.join(here, 'scenarios', `${generator}.ts`)], {
      ATRIUM_URL: address,
      ATRIUM_TENANT: tenant.slug,
      ATRIUM_PASSWORD: DEMO_PASSWORD,
      ATRIUM_RUN: generator,
    });
    t.match(output, `${generator} scenario passed`, `the ${generator} client runs the scenario`);
  }
});
