/**
 * Benchmark: authenticated GET /api/users/current through the whole stack (spec-bound
 * route, security-definer token lookup, tenant transaction under RLS, result controls,
 * schema serialization) beside a bare Fastify route doing the same token lookup and
 * user read with one raw query. Prints both and the throughput ratio.
 *   npm run bench [-- seconds]
 */
import Fastify from 'fastify';
import postgres from 'postgres';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { benchAtrium, measure, report, throwawayDatabase } from './support.ts';

const seconds = Number(process.argv[2] ?? 10);
const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
const login = await atrium.app!.inject({
  method: 'POST',
  url: '/api/auth/login',
  payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' },
});
const token = login.json<{ access_token: string }>().access_token;
const atriumAddress = await atrium.app!.listen({ host: '127.0.0.1', port: 0 });

// Baseline: the simplest thing that answers the same question.
const sql = postgres(database.url, { max: 10 });
const bare = Fastify();
bare.get('/current', async (request, reply) => {
  const presented = (request.headers.authorization ?? '').replace(/^Bearer /, '');
  const [user] = await sql`
    select u.* from access_tokens t join users u on u.id = t.user_id and u.tenant_id = t.tenant_id
    where t.token_hash = ${hashToken(presented)} and t.revoked_at is null and t.expires_at > now()`;
  if (!user) return reply.code(401).send({ status: 401 });
  delete user.password_hash;
  return user;
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

const headers = { authorization: `Bearer ${token}` };
const check = await fetch(`${atriumAddress}/api/users/current`, { headers });
if (check.status !== 200) throw new Error(`Atrium answered ${check.status}`);

console.log(`GET /api/users/current, ${seconds}s each, 10 connections`);
const baseline = await measure('baseline: bare Fastify + one raw query', `${bareAddress}/current`, headers, seconds);
const subject = await measure('Atrium: GET /api/users/current', `${atriumAddress}/api/users/current`, headers, seconds);
report(subject, baseline);

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
