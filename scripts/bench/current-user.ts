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
 *
 * One token asked thousands of times a second is always one Atrium looked up within the
 * last second, so its principal is remembered (docs/tenancy-and-security.md#access-tokens).
 * The same comparison then runs with MANY_USERS users (default 10,000), each request with
 * the next user's token, so that a token comes round again only after more than a second:
 * every look-up is made, as for a directory whose users each ask less than once a second.
 * Printed beside the target, not as it (the target's bench is the one-token one).
 *   npx tsx scripts/bench/current-user.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 *   npm run bench [-- seconds rounds]
 *   BENCH_COMPILED=1: Atrium from the compiled output (dist/, `npm run build` first), as `npm start` runs it.
 */
import { rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Fastify from 'fastify';
import { hashToken, newAccessToken } from '../../src/platform/auth/tokens.ts';
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

// Many users, a token each, every look-up made: the same two routes.
const manyUsers = Number(process.env.MANY_USERS ?? 10_000);
const [demo] = await sql<{ tenant_id: number; role_id: number }[]>`select tenant_id::int, role_id::int from users where username = 'admin'`;
const readers = await sql<{ id: number }[]>`
  insert into users (tenant_id, username, role_id, first_name, last_name, email)
  select ${demo!.tenant_id}, 'reader' || g, ${demo!.role_id}, 'Reader', 'No ' || g, 'reader' || g || '@example.com' from generate_series(1, ${manyUsers}) g
  returning id::int`;
const tokens = readers.map(() => newAccessToken());
await sql`insert into access_tokens ${sql(
  readers.map((reader, index) => ({
    tenant_id: demo!.tenant_id,
    user_id: reader.id,
    token_hash: hashToken(tokens[index]!),
    expires_at: new Date(Date.now() + 86_400_000),
  })),
)}`;
await sql`analyze`;
const tokensFile = path.join(os.tmpdir(), `atrium-bench-tokens-${process.pid}`);
writeFileSync(tokensFile, tokens.join('\n'));
for (const sample of [tokens[0]!, tokens[manyUsers - 1]!]) await assertSameBody(atriumUrl, bareUrl, { authorization: `Bearer ${sample}` });
const firstHeaders = { authorization: `Bearer ${tokens[0]}` };
await comparePair(
  `GET /api/users/current, ${manyUsers} tokens in turn`,
  { url: atriumUrl, headers: firstHeaders, tokensFile },
  { url: bareUrl, headers: firstHeaders, tokensFile },
  { seconds, rounds, connections: [10, 64] },
);
printTargets();

rmSync(tokensFile, { force: true });
await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
