/**
 * Benchmark: GET /api/users?limit=50 (USERS users, default 200, answered with the default
 * relations `role` and `language`) through the whole stack, beside a bare Fastify route
 * that answers the same body the simplest way: the token lookup and one joined query as
 * the owner role, rows mapped to records in JavaScript. The bodies are compared before
 * anything is timed. Prints both, their ratio, p50 and p99 at 10 and 64 connections.
 *   npx tsx scripts/bench/user-list.ts [seconds per slice, default 3] [rounds, default 3]
 */
import { sql as drizzleSql } from 'drizzle-orm';
import Fastify from 'fastify';
import postgres from 'postgres';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { assertSameBody, benchAtrium, comparePair, presentBaselineUser, throwawayDatabase, type BaselineUserRow } from './support.ts';

const seconds = Number(process.argv[2] ?? 3);
const rounds = Number(process.argv[3] ?? 3);
const userCount = Number(process.env.USERS ?? 200);
const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
const { db } = atrium.services;
const app = atrium.app!;

const login = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' } });
const token = login.json<{ access_token: string }>().access_token;
const [admin] = await db.owner.execute<{ tenant_id: number; role_id: number }>(
  drizzleSql`select tenant_id::int, role_id::int from users where username = 'admin'`,
);
const tenantId = admin!.tenant_id;
const [role] = await db.owner.execute<{ id: number }>(
  drizzleSql`select id::int from roles where tenant_id = ${tenantId} and id <> ${admin!.role_id} order by id limit 1`,
);
const [language] = await db.owner.execute<{ id: string }>(drizzleSql`select id from languages where tenant_id = ${tenantId} order by id limit 1`);
await db.owner.execute(drizzleSql`
  insert into users (tenant_id, username, role_id, lang_id, first_name, last_name, email, phone, city, staff_number, birthdate, last_login_at)
  select ${tenantId}, 'user' || g, ${role?.id ?? admin!.role_id}, case when g % 3 = 0 then null else ${language?.id ?? null} end,
         'First ' || g, 'Last ' || (g % 37), 'user' || g || '@example.org', '+49 30 ' || g, 'Berlin', 'S-' || g,
         date '1980-01-01' + g, case when g % 2 = 0 then now() - make_interval(hours => g) end
  from generate_series(1, ${userCount - 1}) g`);
await db.owner.execute(drizzleSql`analyze`);

const atriumAddress = await app.listen({ host: '127.0.0.1', port: 0 });

// Baseline: the simplest thing that answers the same body.
const sql = postgres(database.url, { max: 10 });
type Row = BaselineUserRow & { file_name: string | null };
const bare = Fastify();
bare.get<{ Querystring: { limit?: string } }>('/users', async (request, reply) => {
  const presented = (request.headers.authorization ?? '').replace(/^Bearer /, '');
  const [caller] = await sql<{ tenant_id: string }[]>`
    select t.tenant_id from access_tokens t join users u on u.id = t.user_id and u.tenant_id = t.tenant_id
    where t.token_hash = ${hashToken(presented)} and t.revoked_at is null and t.expires_at > now()`;
  if (!caller) return reply.code(401).send({ status: 401 });
  const rows = await sql<Row[]>`
    select u.*, u.birthdate::text, u.entering_date::text, u.leaving_date::text, r.name as role_name, r.active as role_active, r.permissions as role_permissions, l.name as language_name, p.file_name
    from users u
    join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
    left join languages l on l.tenant_id = u.tenant_id and l.id = u.lang_id
    left join user_profile_pictures p on p.tenant_id = u.tenant_id and p.user_id = u.id
    where u.tenant_id = ${caller.tenant_id} and u.deleted_at is null
    order by u.last_name, u.first_name, u.id
    limit ${Number(request.query.limit ?? 100)}`;
  return rows.map((u) => {
    if (u.file_name) throw new Error('the baseline does not sign picture URLs; the benchmark data has no pictures');
    return presentBaselineUser(u);
  });
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

const headers = { authorization: `Bearer ${token}` };
const subject = { url: `${atriumAddress}/api/users?limit=50`, headers };
const baseline = { url: `${bareAddress}/users?limit=50`, headers };
const bytes = await assertSameBody(subject.url, baseline.url, headers);
console.log(`GET /api/users?limit=50 over ${userCount} users: bodies equal (${bytes} bytes)`);
await comparePair('GET /api/users?limit=50', subject, baseline, { seconds, rounds, connections: [10, 64] });

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
