/**
 * Benchmark: authenticated GET /api/users/current through the whole stack (spec-bound
 * route, security-definer token lookup, tenant transaction under row-level security,
 * result controls, schema serialization) beside a bare Fastify route that answers the
 * SAME JSON body (checked byte for byte before timing) from one raw query as the owner.
 * The two run in alternating slices (a pair), at 10 and at 64 connections; it prints each
 * side's throughput, the ratio, and the median over the slices of p50 and p99.
 *   npm run bench [-- seconds per side and connection count, default 10]
 *   BENCH_COMPILED=1: Atrium from the compiled output (dist/, `npm run build` first), as `npm start` runs it.
 */
import { isDeepStrictEqual } from 'node:util';
import Fastify from 'fastify';
import pino from 'pino';
import postgres from 'postgres';
import { loadConfig } from '../../src/config.ts';
import type { createAtrium as createAtriumFromSource } from '../../src/server.ts';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { measure, throwawayDatabase, type Measured } from './support.ts';

const seconds = Number(process.argv[2] ?? 10);
const SLICE_SECONDS = 2;
const database = await throwawayDatabase();
const { createAtrium } = (
  process.env.BENCH_COMPILED ? await import(new URL('../../dist/src/server.js', import.meta.url).href) : await import('../../src/server.ts')
) as { createAtrium: typeof createAtriumFromSource };
const atrium = await createAtrium(
  {
    ...loadConfig({}),
    databaseUrl: database.url,
    logLevel: 'silent',
    adminPassword: 'benchmark-password',
    role: 'api',
    // The general rate limit stays in the path, at a height one client cannot reach.
    rateLimitPerToken: 2 ** 31 - 1,
    rateLimitPerAddress: 2 ** 31 - 1,
  },
  { logger: pino({ level: 'silent' }) },
);
const login = await atrium.app!.inject({
  method: 'POST',
  url: '/api/auth/login',
  payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' },
});
const token = login.json<{ access_token: string }>().access_token;
const atriumAddress = await atrium.app!.listen({ host: '127.0.0.1', port: 0 });

// Statistics, so neither side's plans change when autovacuum gets to the tables.
const sql = postgres(database.url, { max: 10, onnotice: () => {} });
await sql`analyze`;

// Baseline: the simplest thing that answers the same body. One query (token, user, role,
// language), the fields written out in the order Atrium presents them.
const iso = (value: Date | null) => (value ? value.toISOString() : null);
type Nullable<K extends string> = Record<K, string | null>;
type UserRow = Nullable<'username' | 'first_name' | 'last_name' | 'lang_id' | 'email' | 'phone' | 'street' | 'zipcode' | 'city' | 'birthdate' | 'gender'> &
  Nullable<'staff_number' | 'entering_date' | 'leaving_date' | 'default_route' | 'language_name'> &
  Record<'id' | 'role_id', string> &
  Record<'group_account' | 'active' | 'request_password_change' | 'prevent_logout' | 'wants_email_notifications' | 'role_active', boolean> &
  Record<'last_login_at' | 'created_at' | 'updated_at' | 'deleted_at', Date | null> & { role_name: string; role_permissions: string[] };
const bare = Fastify();
bare.get('/current', async (request, reply) => {
  const presented = (request.headers.authorization ?? '').replace(/^Bearer /, '');
  const [u] = await sql<UserRow[]>`
    select u.*, r.name as role_name, r.active as role_active, r.permissions as role_permissions, l.name as language_name
    from access_tokens t
    join users u on u.tenant_id = t.tenant_id and u.id = t.user_id
    join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
    left join languages l on l.tenant_id = u.tenant_id and l.id = u.lang_id
    where t.token_hash = ${hashToken(presented)} and t.revoked_at is null and t.expires_at > now()
      and u.active and u.deleted_at is null and (u.logout_marked_at is null or t.created_at > u.logout_marked_at)`;
  if (!u) return reply.code(401).send({ status: 401 });
  return {
    id: Number(u.id),
    username: u.username,
    first_name: u.first_name,
    last_name: u.last_name,
    full_name: [u.first_name, u.last_name].filter((part) => part !== null && part !== '').join(' '),
    lang_id: u.lang_id,
    group_account: u.group_account,
    profile_picture_url: null,
    email: u.email,
    phone: u.phone,
    street: u.street,
    zipcode: u.zipcode,
    city: u.city,
    birthdate: u.birthdate,
    gender: u.gender,
    staff_number: u.staff_number,
    entering_date: u.entering_date,
    leaving_date: u.leaving_date,
    active: u.active,
    role_id: Number(u.role_id),
    request_password_change: u.request_password_change,
    prevent_logout: u.prevent_logout,
    wants_email_notifications: u.wants_email_notifications,
    default_route: u.default_route,
    last_login_at: iso(u.last_login_at),
    created_at: iso(u.created_at),
    updated_at: iso(u.updated_at),
    deleted_at: iso(u.deleted_at),
    role: { id: Number(u.role_id), name: u.role_name, active: u.role_active, permissions: u.role_permissions },
    language: u.lang_id === null ? null : { id: u.lang_id, name: u.language_name },
  };
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

const headers = { authorization: `Bearer ${token}` };
const atriumUrl = `${atriumAddress}/api/users/current`;
const bareUrl = `${bareAddress}/current`;
const [atriumCheck, bareCheck] = await Promise.all([fetch(atriumUrl, { headers }), fetch(bareUrl, { headers })]);
if (atriumCheck.status !== 200 || bareCheck.status !== 200) throw new Error(`Atrium answered ${atriumCheck.status}, the baseline ${bareCheck.status}`);
const [atriumBody, bareBody] = await Promise.all([atriumCheck.text(), bareCheck.text()]);
if (atriumBody !== bareBody) {
  const parsed = [JSON.parse(atriumBody) as unknown, JSON.parse(bareBody) as unknown];
  const why = isDeepStrictEqual(parsed[0], parsed[1]) ? 'same values, different bytes (key order)' : 'different values';
  throw new Error(`The baseline's body differs from Atrium's (${why}):\n${atriumBody}\n${bareBody}`);
}
console.log(`same body on both sides (${atriumBody.length} bytes)`);

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** `seconds` per side in alternating slices: load on the machine drifts over both alike. */
async function pair(connections: number): Promise<[Measured, Measured]> {
  const sides = [
    { name: 'Atrium: GET /api/users/current', url: atriumUrl, slices: [] as Measured[] },
    { name: 'baseline: bare Fastify, same body', url: bareUrl, slices: [] as Measured[] },
  ];
  // Warm-up: connections opened, statements prepared, code optimised.
  for (const side of sides) await measure(side.name, side.url, headers, 1, connections);
  for (let slice = 0; slice < Math.max(1, Math.round(seconds / SLICE_SECONDS)); slice++) {
    for (const side of slice % 2 ? [...sides].reverse() : sides) side.slices.push(await measure(side.name, side.url, headers, SLICE_SECONDS, connections));
  }
  const [subject, baseline] = sides.map(({ name, slices }): Measured => ({
    name,
    requests: slices.reduce((sum, m) => sum + m.requests, 0) / slices.length,
    p50: median(slices.map((m) => m.p50)),
    p99: median(slices.map((m) => m.p99)),
    non2xx: slices.reduce((sum, m) => sum + m.non2xx, 0),
  }));
  return [subject!, baseline!];
}

const row = (m: Measured) =>
  `  ${m.name.padEnd(36)} ${m.requests.toFixed(0).padStart(7)} req/s   p50 ${m.p50.toFixed(1).padStart(5)} ms   p99 ${m.p99.toFixed(1).padStart(5)} ms   non-2xx ${m.non2xx}`;
console.log(
  `GET /api/users/current vs a bare route with the same body; ${seconds}s per side in ${SLICE_SECONDS}s alternating slices${process.env.BENCH_COMPILED ? ', compiled' : ''}`,
);
for (const connections of [10, 64]) {
  const [subject, baseline] = await pair(connections);
  console.log(`${connections} connections`);
  console.log(row(subject));
  console.log(row(baseline));
  console.log(
    `  ratio (Atrium / baseline throughput): ${(subject.requests / baseline.requests).toFixed(2)}; Atrium p99/p50 ${(subject.p99 / subject.p50).toFixed(1)}`,
  );
}

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
