/**
 * Benchmark: authenticated GET /api/users/current through the whole stack (spec-bound
 * route, token lookup, tenant transaction under row-level security, result controls,
 * schema serialization) beside the baseline: a bare Fastify route that answers the SAME
 * JSON body (compared before anything is timed) from ONE statement as the owner role (no
 * row-level security), the token lookup joined with the read of the user, its role and its
 * language, on a pool as large as Atrium's request pool. The token is valid as Atrium's
 * lookup (atrium_authenticate) has it: not revoked, not expired, its user active, not
 * deleted and not marked for logout since. The two run in alternating rounds (the order
 * alternating too) at 10 and 64 connections; prints each side's median throughput, p50 and
 * p99, the median of the rounds' ratios, each round's ratio, and the TARGET lines.
 *   npx tsx scripts/bench/current-user.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 *   npm run bench [-- seconds rounds]
 *   BENCH_COMPILED=1: Atrium from the compiled output (dist/, `npm run build` first), as `npm start` runs it.
 */
import Fastify from 'fastify';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import {
  assertSameBody,
  baselineSql,
  benchAtrium,
  comparePair,
  endpointTargets,
  presentBaselineUser,
  printTargets,
  slices,
  throwawayDatabase,
  type BaselineUserRow,
} from './support.ts';

const { seconds, rounds } = slices();
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
const sql = baselineSql(database.url);
await sql`analyze`;

// Baseline: the simplest thing that answers the same body. One statement (token, user, role,
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
const compared = await comparePair(
  'GET /api/users/current',
  { url: atriumUrl, headers },
  { url: bareUrl, headers },
  { seconds, rounds, connections: [10, 64] },
);
endpointTargets(compared, 0.5);
printTargets();

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
