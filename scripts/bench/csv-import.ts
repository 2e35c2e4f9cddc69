/**
 * Benchmark: the CSV import preview (POST /api/users/csv) of 50,000 new users, through
 * the whole stack (multipart upload, streamed csv-parse, per-row validation, comparison
 * with the tenant's users), beside the baseline of parsing the same file with plain
 * csv-parse. Prints both times, the ratio and the process's peak memory.
 *   npx tsx scripts/bench/csv-import.ts [rows]
 */
import { parse } from 'csv-parse/sync';
import { benchAtrium, throwawayDatabase } from './support.ts';

const rows = Number(process.argv[2] ?? 50_000);
const header = 'username,password,first_name,last_name,role_id,email,city,birthdate,active';

const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
try {
  const app = atrium.app!;
  const login = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' } });
  const token = login.json<{ access_token: string }>().access_token;
  const current = await app.inject({ method: 'GET', url: '/api/users/current', headers: { authorization: `Bearer ${token}` } });
  const roleId = current.json<{ role_id: number }>().role_id;

  const lines = [header];
  for (let i = 0; i < rows; i++)
    lines.push(
      `user${i},password-${i}-long,First${i},Last${i},${roleId},user${i}@example.com,City ${i % 100},1990-01-${String((i % 28) + 1).padStart(2, '0')},true`,
    );
  const csv = Buffer.from(lines.join('\n') + '\n');

  let started = performance.now();
  const parsed = parse(csv, { bom: true });
  const baselineMs = performance.now() - started;

  const form = new FormData();
  form.append('user_data_csv', new Blob([new Uint8Array(csv)], { type: 'text/csv' }), 'users.csv');
  const request = new Response(form);
  const payload = Buffer.from(await request.arrayBuffer());
  started = performance.now();
  const response = await app.inject({
    method: 'POST',
    url: '/api/users/csv',
    headers: { authorization: `Bearer ${token}`, 'content-type': request.headers.get('content-type')! },
    payload,
  });
  const atriumMs = performance.now() - started;
  const body = response.json<{ new_users: unknown[]; invalid_rows: unknown[] }>();
  if (response.statusCode !== 200 || body.new_users.length !== rows)
    throw new Error(`unexpected answer ${response.statusCode}: ${response.body.slice(0, 300)}`);

  console.log(`CSV: ${rows} rows, ${(csv.length / 1024 / 1024).toFixed(1)} MiB (baseline parsed ${parsed.length - 1} rows)`);
  console.log(
    `POST /api/users/csv (whole stack)     ${atriumMs.toFixed(0).padStart(7)} ms   new_users ${body.new_users.length}, invalid ${body.invalid_rows.length}`,
  );
  console.log(`plain csv-parse of the same file      ${baselineMs.toFixed(0).padStart(7)} ms`);
  console.log(`ratio (Atrium / baseline time): ${(atriumMs / baselineMs).toFixed(2)}`);
  console.log(`peak resident memory: ${(process.resourceUsage().maxRSS / 1024).toFixed(0)} MiB (default heap limit applies)`);
} finally {
  await atrium.stop();
  await database.drop();
}
