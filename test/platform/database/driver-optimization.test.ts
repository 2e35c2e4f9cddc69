/**
 * The driver's `Result` and `Query` classes (postgres.js 3.4.9) declare `Symbol.species` as
 * a static getter. V8 then never keeps an optimized constructor of either: under a steady
 * stream of statements it compiles them again and again (TurboFan on Node 20 and 22, Maglev
 * on Node 24), and throws each compilation away because a hidden class (a V8 "map") it
 * relied on changed ("Bailed out due to dependency change"). The functions that build them
 * (`ReadyForQuery`, `sql`, `unsafe`) stay unoptimized too, and a statement costs about half
 * as much CPU again (patches/README.md). The patch defines the same species as a data
 * property, with the getter's attributes but for being a value.
 *
 * A child process runs statements on one connection under `--trace-opt`; V8 reports each
 * abandoned compilation on its standard output, and the test counts those of the two
 * constructors. It also checks that each of the driver's three builds defines the species
 * so, and that they did not change: a result's `map` gives a plain array and a statement's
 * `then` a plain promise.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { createTestDatabase } from '../../helpers/database.ts';

const root = path.resolve(import.meta.dirname, '../../..');
const database = await createTestDatabase();
t.teardown(() => database.drop());

const STATEMENTS = 20_000;

/** Runs STATEMENTS statements through the driver, tagged and unsafe in turn, on one connection; prints "done N". */
const script = `
import postgres from 'postgres';
const sql = postgres(process.env.URL, { max: 1, onnotice: () => {} });
let sum = 0;
for (let i = 0; i < ${STATEMENTS}; i++) {
  const [row] = i % 2 ? await sql\`select \${i}::int as n\` : await sql.unsafe('select $1::int as n', [i]);
  sum += row.n;
}
await sql.end();
console.log('done', sum);
`;

t.test(`${STATEMENTS} statements: V8 does not keep abandoning compilations of the driver's Result and Query`, async (t) => {
  const child = spawn(process.execPath, ['--trace-opt', '--input-type=module', '-e', script], {
    cwd: root,
    env: { ...process.env, URL: database.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let errors = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (errors += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  t.equal(code, 0, errors);
  t.match(output, `done ${(STATEMENTS * (STATEMENTS - 1)) / 2}`, 'every statement answered');
  const abandoned = output.split('\n').filter((line) => /^\[aborted (optimizing|compiling) .*<JSFunction (Result|Query) /.test(line));
  // Warming up may abandon one or two; the defect abandons dozens a second, for as long as statements run.
  t.ok(abandoned.length <= 3, `compilations of Result or Query abandoned: ${abandoned.length}\n${abandoned.slice(0, 3).join('\n')}`);
});

t.test("each of the driver's builds defines the species as a value, not enumerable, not writable, configurable", async (t) => {
  const driver = path.join(root, 'node_modules/postgres');
  const require = createRequire(import.meta.url);
  for (const build of ['src', 'cjs/src', 'cf/src']) {
    const load = async (file: string) =>
      build === 'cjs/src'
        ? (require(path.join(driver, build, file)) as Record<string, unknown>)
        : ((await import(path.join(driver, build, file))) as Record<string, unknown>);
    const Result = (build === 'cjs/src' ? await load('result.js') : (await load('result.js')).default) as object;
    const { Query } = (await load('query.js')) as { Query: object };
    for (const [name, of, species] of [
      ['Result', Result, Array],
      ['Query', Query, Promise],
    ] as const) {
      t.strictSame(
        Object.getOwnPropertyDescriptor(of, Symbol.species),
        { value: species, writable: false, enumerable: false, configurable: true },
        `${build}: ${name}`,
      );
    }
  }
});

t.test('the species are those the driver declares: a result maps to a plain array, a statement chains to a plain promise', async (t) => {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 1 }));
  const statement = sql<{ n: number }[]>`select 1::int as n`;
  const chained = statement.then((rows) => rows);
  t.equal(Object.getPrototypeOf(chained), Promise.prototype);
  const rows = await chained;
  t.equal(rows.count, 1);
  t.equal(rows.command, 'SELECT');
  const mapped = rows.map((row) => row.n);
  t.equal(Object.getPrototypeOf(mapped), Array.prototype);
  t.same(mapped, [1]);
});
