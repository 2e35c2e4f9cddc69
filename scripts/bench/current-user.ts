/**
 * Benchmark: authenticated GET /api/users/current through the whole stack (spec-bound
 * route, security-definer token lookup, tenant transaction under row-level security,
 * result controls, schema serialization) beside a bare Fastify route that answers the
 * SAME JSON body (checked before timing) from one raw query as the owner. The two run in
 * alternating rounds (ROUNDS, default 3) at 10 and at 64 connections; it prints each
 * side's throughput, the ratio, and the median over the rounds of p50 and p99.
 *   npm run bench [-- seconds per round, default 3]
 *   BENCH_COMPILED=1: Atrium from the compiled output (dist/, `npm run build` first), as `npm start` runs it.
 */
import Fastify from 'fastify';
import postgres from 'postgres';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { assertSameBody, benchAtrium, comparePair, presentBaselineUser, throwawayDatabase, type BaselineUserRow } from './support.ts';

const seconds = Number(process.argv[2] ?? 3);
const rounds = Number(process.env.ROUNDS ?? 3);
const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
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
const bare = Fastify();
bare.get('/current', async (request, reply) => {
  const presented = (request.headers.authorization ?? '').replace(/^Bearer /, '');
  const [u] = await sql<BaselineUserRow[]>`
    select u.*, r.name as role_name, r.active as role_active, r.permissions as role_permissions, l.name as language_name
    from access_tokens t
    join users u on u.tenant_id = t.tenant_id and u.id = t.user_id
    join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
    left join languages l on l.tenant_id = u.tenant_id and l.id = u.lang_id
    where t.token_hash = ${hashToken(presented)} and t.revoked_at is null and t.expires_at > now()
      and u.active and u.deleted_at is null and (u.logout_marked_at is null or t.created_at > u.logout_marked_at)`;
  if (!u) return reply.code(401).send({ status: 401 });
  return presentBaselineUser(u);
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

const headers = { authorization: `Bearer ${token}` };
const atriumUrl = `${atriumAddress}/api/users/current`;
const bareUrl = `${bareAddress}/current`;
const bytes = await assertSameBody(atriumUrl, bareUrl, headers);
console.log(`same body on both sides (${bytes} bytes)${process.env.BENCH_COMPILED ? '; Atrium compiled' : ''}`);
await comparePair('GET /api/users/current', { url: atriumUrl, headers }, { url: bareUrl, headers }, { seconds, rounds, connections: [10, 64] });

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
