/**
 * Benchmark: another tenant's sign-ins while one tenant sets passwords without pause
 * (docs/tenancy-and-security.md#password-hashing). Tenant `demo`'s administrator sets the
 * passwords of FLOOD users (default 16) at once, each connection one user's, again and
 * again; meanwhile a user of tenant `other` signs in twenty times in a row. Prints the
 * sign-ins' median and slowest time, quiet and under the writes, and the writes' rate.
 * Hashing at the standard cost: the cost of a hash is what the benchmark is about.
 *   npx tsx scripts/bench/password-hashing.ts
 * For an A/B of two builds: a second checkout of the build before (with its node_modules),
 * `npm run build` in both, then this script with BENCH_COMPILED=1 in each in turn, three
 * runs each (docs/performance.md#password-hashing-between-tenants).
 */
import type * as CreateTenant from '../../src/resources/tenants/create-tenant.ts';
import { benchAtrium, throwawayDatabase } from './support.ts';

const SIGN_INS = 20;
const flood = Number(process.env.FLOOD ?? 16);

const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
const { createTenant } = (await import(
  process.env.BENCH_COMPILED
    ? new URL('../../dist/src/resources/tenants/create-tenant.js', import.meta.url).href
    : '../../src/resources/tenants/create-tenant.ts'
)) as typeof CreateTenant;
await createTenant(atrium.services.db, { slug: 'other', name: 'Other', adminUsername: 'boss', adminPassword: 'the other password' });
const base = await atrium.app!.listen({ host: '127.0.0.1', port: 0 });

/** Sends `body` as JSON; answers the status and the parsed answer. */
async function send(method: string, path: string, body: unknown, token?: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const answer = await fetch(base + path, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: answer.status, json: (await answer.json()) as Record<string, unknown> };
}
function expect(answer: { status: number; json: unknown }, status: number): Record<string, unknown> {
  if (answer.status !== status) throw new Error(`answered ${answer.status}, not ${status}: ${JSON.stringify(answer.json).slice(0, 300)}`);
  return answer.json as Record<string, unknown>;
}

const token = expect(await send('POST', '/api/auth/login', { tenant: 'demo', username: 'admin', password: 'benchmark-password' }), 200).access_token as string;
const roles = (await (await fetch(`${base}/api/roles`, { headers: { authorization: `Bearer ${token}` } })).json()) as { id: number; name: string }[];
const employee = roles.find((role) => role.name === 'Employee')!.id;
const users: number[] = [];
for (let i = 0; i < flood; i++) {
  const body = { username: `writer${i}`, password: 'a first password', first_name: 'W', last_name: `No ${i}`, email: `w${i}@example.com`, role_id: employee };
  users.push(expect(await send('POST', '/api/users', body, token), 201).id as number);
}

/** The sign-ins' median and slowest time in ms. */
async function signIns(): Promise<{ p50: number; max: number }> {
  const times: number[] = [];
  for (let i = 0; i < SIGN_INS; i++) {
    const started = performance.now();
    expect(await send('POST', '/api/auth/login', { tenant: 'other', username: 'boss', password: 'the other password' }), 200);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return { p50: times[SIGN_INS / 2]!, max: times[SIGN_INS - 1]! };
}

const quiet = await signIns();
let writing = true;
let writes = 0;
const writers = users.map(async (id, i) => {
  while (writing) {
    expect(await send('PUT', `/api/users/${id}`, { password: `password ${i} ${writes}` }, token), 200);
    writes++;
  }
});
// Under way first: every writer hashing or waiting to.
await new Promise((resolve) => setTimeout(resolve, 500));
const [writesBefore, startedAt] = [writes, performance.now()];
const loaded = await signIns();
const rate = (writes - writesBefore) / ((performance.now() - startedAt) / 1000);
writing = false;
await Promise.all(writers);

console.log(`sign-ins of tenant other, quiet: median ${quiet.p50.toFixed(0)} ms, slowest ${quiet.max.toFixed(0)} ms`);
console.log(`while demo sets ${flood} passwords at a time: median ${loaded.p50.toFixed(0)} ms, slowest ${loaded.max.toFixed(0)} ms`);
console.log(`demo's password writes: ${rate.toFixed(1)} a second`);
await atrium.stop();
await database.drop();
