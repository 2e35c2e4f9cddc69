/**
 * Benchmark: the CSV import preview (POST /api/users/csv) of new users, through the whole
 * stack (an HTTP upload to a running Atrium, multipart, csv-parse, per-row validation,
 * comparison with the tenant's users, the JSON answer), beside the baseline of parsing the
 * same file with plain csv-parse. Each side runs in a child process of its own, so its
 * peak resident memory (`process.resourceUsage().maxRSS`) is its own. The server child
 * runs the compiled build (`npm run build` first, as production runs it), so the figure
 * holds no TypeScript loader. Each side first does its work once untimed (a server answers
 * many requests; its first one also loads and compiles the code of the operation, as the
 * baseline's first parse compiles csv-parse's; both are printed), then ROUNDS times
 * (default 3), the two sides alternating so that both meet the same load from the rest of
 * a shared machine; the medians are compared. The upload is sent and its answer read
 * with node:http (the file streamed from disk, the answer's bytes taken as they come), so
 * the client costs as little as it can. Prints, for each size, both medians, the ratio, each round's ratio and both peaks
 * (the server's over all of its previews).
 *   npm run bench:csv -- [rows …]      (default: 50000 200000; builds first; ROUNDS=n)
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

async function main(sizes: number[]): Promise<void> {
  const dir = await promisify(mkdtemp)(path.join(os.tmpdir(), 'atrium-bench-csv-'));
  // Loaded here, not at the top: the baseline child runs this file too, and its peak must hold csv-parse alone.
  const { benchAtrium, median, throwawayDatabase } = await import('./support.ts');
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

    for (const rows of sizes) {
      const file = path.join(dir, `users-${rows}.csv`);
      const lines = [header];
      for (let i = 0; i < rows; i++) {
        lines.push(
          `user${i},password-${i}-long,First${i},Last${i},${roleId},user${i}@example.com,City ${i % 100},1990-01-${String((i % 28) + 1).padStart(2, '0')},true`,
        );
      }
      const csv = lines.join('\n') + '\n';
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
        const parsed = JSON.parse(answer.body.toString('utf8')) as { new_users?: unknown[]; invalid_rows?: unknown[] };
        if (answer.status !== 200 || parsed.new_users?.length !== rows || parsed.invalid_rows?.length !== 0) {
          throw new Error(`unexpected answer ${answer.status}: ${answer.body.toString('utf8', 0, 300)}`);
        }
        return { ms: answer.ms, bytes: answer.body.length };
      };
      const [coldParse, coldPreview] = [await parseOnce(), await previewOnce()];
      const timed: { atrium: number; baseline: number }[] = [];
      for (let round = 0; round < rounds; round++) timed.push({ baseline: (await parseOnce()).ms, atrium: (await previewOnce()).ms });
      plain.stdin.end();
      const { peakMib: basePeakMib } = await plain.next<{ peakMib: number }>();
      await plain.exited;
      server.stdin.end('stop\n');
      const { peakMib } = await server.next<{ peakMib: number }>();
      await server.exited;
      const atriumMs = median(timed.map((round) => round.atrium));
      const baseMs = median(timed.map((round) => round.baseline));

      console.log(`CSV: ${rows} rows, ${mib(size)} MiB (baseline parsed ${coldParse.records - 1} rows); answer ${mib(coldPreview.bytes)} MiB`);
      console.log(`  POST /api/users/csv (whole stack, HTTP)  ${atriumMs.toFixed(0).padStart(7)} ms   (median of ${rounds}; every row a new user)`);
      console.log(`  plain csv-parse of the same file         ${baseMs.toFixed(0).padStart(7)} ms`);
      console.log(`  ratio (Atrium / baseline time): ${(atriumMs / baseMs).toFixed(2)}`);
      console.log(`  ratios per round: ${timed.map((round) => (round.atrium / round.baseline).toFixed(2)).join(' ')}`);
      console.log(`  first runs (cold): Atrium ${coldPreview.ms.toFixed(0)} ms, csv-parse ${coldParse.ms.toFixed(0)} ms`);
      console.log(
        `  peak RSS: Atrium ${peakMib.toFixed(0)} MiB over ${rounds + 1} previews (${startedPeakMib.toFixed(0)} MiB once started, before the upload); ` +
          `csv-parse alone ${basePeakMib.toFixed(0)} MiB`,
      );
    }
  } finally {
    await database.drop();
    await promisify(rm)(dir, { recursive: true, force: true });
  }
}

const [mode, argument] = process.argv.slice(2);
if (mode === '--baseline') await baseline(argument!);
else await main(process.argv.length > 2 ? process.argv.slice(2).map(Number) : [50_000, 200_000]);
