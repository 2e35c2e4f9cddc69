/**
 * Benchmark: the CSV import preview (POST /api/users/csv) of new users, through the whole
 * stack (an HTTP upload to a running Atrium, multipart, the file's records, per-row
 * validation, comparison with the tenant's users, the JSON answer), beside the baseline:
 * the same file parsed with plain csv-parse (read whole, parsed whole, as the simplest
 * program would). Two kinds of file: plain (no quotes: Atrium splits it at line ends and
 * delimiters) and quoted (every field in double quotes, some holding commas, doubled
 * quotes and line breaks: Atrium reads it with csv-parse). Each side runs in a child
 * process of its own, so its peak resident memory (`process.resourceUsage().maxRSS`) is
 * its own; a new server child for each file. The server child runs the compiled build
 * (`npm run build` first, as production runs it), so the figure holds no TypeScript
 * loader. Each side first does its work once untimed (a server answers many requests; its
 * first one also loads and compiles the code of the operation, as the baseline's first
 * parse compiles csv-parse's; both are printed), then ROUNDS times (default 3), the two
 * sides alternating, and the order too (odd rounds Atrium first), so that both meet the
 * same load from the rest of a shared machine; the medians are compared. The upload is
 * sent and its answer read with node:http (the file streamed from disk, the answer's bytes
 * taken as they come), so the client costs as little as it can. Prints, for each file, both
 * medians, the ratio, each round's ratio and both peaks (the server's over all of its
 * previews), then the TARGET lines.
 *   npm run bench:csv -- [file …]      (a file is ROWS or quoted:ROWS; default: 50000 200000 quoted:50000; builds first; ROUNDS=n)
 *   npx tsx scripts/bench/csv-import.ts [file …]   (after `npm run build`)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { createReadStream, mkdtemp, readFileSync, rm, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { parse } from 'csv-parse/sync';

const header = 'username,password,first_name,last_name,role_id,email,city,birthdate,active';
const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
const peakMib = () => process.resourceUsage().maxRSS / 1024;

/** A child's one line of JSON on stdout. */
function send(message: object): void {
  process.stdout.write(JSON.stringify(message) + '\n');
}

const rounds = Number(process.env.ROUNDS ?? 3);

/**
 * Child: plain csv-parse of the file, as the simplest program would (read it, parse it),
 * once for each line on stdin; reports its peak memory when stdin ends.
 */
async function baseline(file: string): Promise<void> {
  for await (const _line of createInterface({ input: process.stdin })) {
    const started = performance.now();
    const records = (parse(readFileSync(file), { bom: true }) as unknown[]).length;
    send({ ms: performance.now() - started, records });
  }
  send({ peakMib: peakMib() });
}

/**
 * `file` sent to the preview as multipart/form-data with node:http, streamed from disk;
 * answers the status, the answer's bytes and the time from the first byte sent to the last
 * byte received.
 */
function preview(port: number, token: string, file: string): Promise<{ status: number; body: Buffer; ms: number }> {
  const boundary = `atrium-bench-${randomBytes(8).toString('hex')}`;
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="user_data_csv"; filename="users.csv"\r\nContent-Type: text/csv\r\n\r\n`);
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const length = head.length + statSync(file).size + tail.length;
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/api/users/csv',
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': length },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const ms = performance.now() - started;
          resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks), ms });
        });
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.write(head);
    const content = createReadStream(file);
    content.on('error', reject);
    content.on('end', () => request.end(tail));
    content.pipe(request, { end: false });
  });
}

/**
 * The server child: a started Atrium (the compiled build, plain JavaScript) on the
 * database URL in argv, listening; reports its port, then its peak memory when its stdin
 * says stop.
 */
const SERVE = `
import { createInterface } from 'node:readline';
import pino from 'pino';
import { loadConfig } from './dist/src/config.js';
import { createAtrium } from './dist/src/server.js';
const peakMib = () => process.resourceUsage().maxRSS / 1024;
const send = (message) => process.stdout.write(JSON.stringify(message) + '\\n');
const atrium = await createAtrium(
  { ...loadConfig({}), databaseUrl: process.argv[1], logLevel: 'silent', adminPassword: 'benchmark-password', role: 'api' },
  { logger: pino({ level: 'silent' }) },
);
await atrium.app.listen({ host: '127.0.0.1', port: 0 });
send({ port: atrium.app.server.address().port, startedPeakMib: peakMib() });
for await (const _line of createInterface({ input: process.stdin })) break;
const peak = peakMib();
await atrium.stop();
send({ peakMib: peak });
`;

/** Starts this script as a child in `mode`; yields its JSON lines. */
function child(mode: 'baseline' | 'serve', argument: string) {
  // The server child needs no TypeScript loader: it runs the compiled build from the checkout's root.
  const args = mode === 'serve' ? ['--input-type=module', '--eval', SERVE, argument] : [...process.execArgv, import.meta.filename, '--baseline', argument];
  const process_ = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'], cwd: path.resolve(import.meta.dirname, '../..') });
  const lines = createInterface({ input: process_.stdout })[Symbol.asyncIterator]();
  return {
    next: async <T>(): Promise<T> => {
      const line = await lines.next();
      if (line.done) throw new Error(`the ${mode} child ended early`);
      return JSON.parse(line.value) as T;
    },
    stdin: process_.stdin,
    exited: once(process_, 'exit'),
  };
}

/** A file of the bench: its rows, quoted or not. */
interface FileSpec {
  rows: number;
  quoted: boolean;
}

/** A CSV cell in double quotes, its quotes doubled. */
const quote = (value: string) => `"${value.replace(/"/g, '""')}"`;

/** The file's rows of new users: plain, or every field quoted with some commas, quotes and line breaks inside. */
function csvOf({ rows, quoted }: FileSpec, roleId: number): string {
  const lines = [quoted ? header.split(',').map(quote).join(',') : header];
  for (let i = 0; i < rows; i++) {
    const date = `1990-01-${String((i % 28) + 1).padStart(2, '0')}`;
    if (!quoted) {
      lines.push(`user${i},password-${i}-long,First${i},Last${i},${roleId},user${i}@example.com,City ${i % 100},${date},true`);
      continue;
    }
    const first = i % 5 === 0 ? `First "${i}"` : `First${i}`;
    const last = i % 3 === 0 ? `Last, ${i}` : `Last${i}`;
    const city = i % 4 === 0 ? `City ${i % 100}\nDistrict ${i % 7}` : `City ${i % 100}`;
    lines.push([`user${i}`, `password-${i}-long`, first, last, String(roleId), `user${i}@example.com`, city, date, 'true'].map(quote).join(','));
  }
  return lines.join('\n') + '\n';
}

interface NewUser {
  line: number;
  user: Record<string, unknown>;
}

/** Fails unless the preview's new users hold the text cells csv-parse reads from `file`, row by row. */
function assertSameCells(file: string, newUsers: NewUser[]): void {
  const records = parse<Record<string, string>>(readFileSync(file), { bom: true, columns: true });
  records.forEach((record, index) => {
    for (const key of ['username', 'first_name', 'last_name', 'email', 'city', 'birthdate']) {
      const read = newUsers[index]?.user[key];
      if (read !== record[key]) throw new Error(`row ${index + 2}: Atrium read ${key} ${JSON.stringify(read)}, csv-parse ${JSON.stringify(record[key])}`);
    }
  });
}

const describe = (spec: FileSpec) => `${spec.quoted ? 'quoted' : 'plain'} ${spec.rows} rows`;

async function main(specs: FileSpec[]): Promise<void> {
  const dir = await promisify(mkdtemp)(path.join(os.tmpdir(), 'atrium-bench-csv-'));
  // Loaded here, not at the top: the baseline child runs this file too, and its peak must hold csv-parse alone.
  const { benchAtrium, median, printTargets, target, throwawayDatabase } = await import('./support.ts');
  const peaks = new Map<string, number>();
  const database = await throwawayDatabase();
  try {
    // The admin's role, for the rows: read once from a short-lived Atrium.
    const setup = await benchAtrium(database.url);
    const login = await setup.app!.inject({
      method: 'POST',
      url: '/api/auth/login',
      payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' },
    });
    const token = login.json<{ access_token: string }>().access_token;
    const current = await setup.app!.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${token}` } });
    const roleId = current.json<{ role_id: number }>().role_id;
    await setup.stop();

    for (const spec of specs) {
      const { rows } = spec;
      const file = path.join(dir, `users-${spec.quoted ? 'quoted-' : ''}${rows}.csv`);
      const csv = csvOf(spec, roleId);
      writeFileSync(file, csv);
      const size = Buffer.byteLength(csv);

      const plain = child('baseline', file);
      const server = child('serve', database.url);
      const { port, startedPeakMib } = await server.next<{ port: number; startedPeakMib: number }>();
      const parseOnce = async () => {
        plain.stdin.write('parse\n');
        return plain.next<{ ms: number; records: number }>();
      };
      const previewOnce = async () => {
        const answer = await preview(port, token, file);
        const parsed = JSON.parse(answer.body.toString('utf8')) as { new_users?: NewUser[]; invalid_rows?: unknown[] };
        if (answer.status !== 200 || parsed.new_users?.length !== rows || parsed.invalid_rows?.length !== 0) {
          throw new Error(`unexpected answer ${answer.status}: ${answer.body.toString('utf8', 0, 300)}`);
        }
        return { ms: answer.ms, bytes: answer.body.length, newUsers: parsed.new_users };
      };
      const [coldParse, coldPreview] = [await parseOnce(), await previewOnce()];
      // Both sides read the same file alike before either is timed: as many records, and Atrium's cells csv-parse's.
      if (coldParse.records !== rows + 1) throw new Error(`csv-parse read ${coldParse.records} records of ${rows} rows and a header`);
      assertSameCells(file, coldPreview.newUsers);
      const timed: { atrium: number; baseline: number }[] = [];
      for (let round = 0; round < rounds; round++) {
        if (round % 2 === 0) {
          const atrium = (await previewOnce()).ms;
          timed.push({ atrium, baseline: (await parseOnce()).ms });
        } else {
          const baseline = (await parseOnce()).ms;
          timed.push({ baseline, atrium: (await previewOnce()).ms });
        }
      }
      plain.stdin.end();
      const { peakMib: basePeakMib } = await plain.next<{ peakMib: number }>();
      await plain.exited;
      server.stdin.end('stop\n');
      const { peakMib } = await server.next<{ peakMib: number }>();
      await server.exited;
      const atriumMs = median(timed.map((round) => round.atrium));
      const baseMs = median(timed.map((round) => round.baseline));

      console.log(`CSV: ${describe(spec)}, ${mib(size)} MiB (baseline parsed ${coldParse.records - 1} rows); answer ${mib(coldPreview.bytes)} MiB`);
      console.log(`  POST /api/users/csv (whole stack, HTTP)  ${atriumMs.toFixed(0).padStart(7)} ms   (median of ${rounds}; every row a new user)`);
      console.log(`  plain csv-parse of the same file         ${baseMs.toFixed(0).padStart(7)} ms`);
      const ratios = timed.map((round) => round.atrium / round.baseline);
      console.log(`  ratio (Atrium / baseline time): ${median(ratios).toFixed(2)} (median of the rounds; odd rounds Atrium first)`);
      console.log(`  ratios per round: ${ratios.map((ratio) => ratio.toFixed(2)).join(' ')}`);
      console.log(`  first runs (cold): Atrium ${coldPreview.ms.toFixed(0)} ms, csv-parse ${coldParse.ms.toFixed(0)} ms`);
      console.log(
        `  peak RSS: Atrium ${peakMib.toFixed(0)} MiB over ${rounds + 1} previews (${startedPeakMib.toFixed(0)} MiB once started, before the upload); ` +
          `csv-parse alone ${basePeakMib.toFixed(0)} MiB`,
      );
      peaks.set(describe(spec), peakMib);
      if (rows === 50_000) {
        target(`CSV preview ${describe(spec)}`, 'time_vs_csv-parse', median(ratios), '<=', 2);
        target(`CSV preview ${describe(spec)}`, 'peak_rss_mib', peakMib, '<', 200, 0);
      }
    }
    const small = peaks.get('plain 50000 rows');
    const large = peaks.get('plain 200000 rows');
    if (small !== undefined && large !== undefined) target('CSV preview plain 200000 rows', 'peak_rss_vs_50000_rows', large / small, '<', 4);
    printTargets();
  } finally {
    await database.drop();
    await promisify(rm)(dir, { recursive: true, force: true });
  }
}

const [mode, argument] = process.argv.slice(2);
if (mode === '--baseline') await baseline(argument!);
else {
  const specs = (process.argv.length > 2 ? process.argv.slice(2) : ['50000', '200000', 'quoted:50000']).map((argument) => ({
    rows: Number(argument.replace(/^quoted:/, '')),
    quoted: argument.startsWith('quoted:'),
  }));
  await main(specs);
}
