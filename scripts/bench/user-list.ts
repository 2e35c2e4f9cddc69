/**
 * Benchmark: GET /api/users?limit=50 (USERS users, default 200, answered with the default
 * relations `role` and `language`) through the whole stack, beside the baseline: a bare
 * Fastify route that answers the same body from ONE statement as the owner role (no
 * row-level security) on a pool as large as Atrium's request pool. In that statement the
 * token lookup is a CTE (`caller`) joined with the list: the token not revoked, not
 * expired, its user active, not deleted and not marked for logout since (the checks of
 * atrium_authenticate), its role active and listing `users.view`, and no password change
 * pending (which Atrium answers 403 here); the caller's tenant's users that are not
 * deleted, with role, language and picture joined, rows mapped to records in JavaScript.
 * No row: 401 (a valid caller always sees at least themselves). The bodies are compared
 * before anything is timed. The two run in alternating rounds (the order alternating too)
 * at 10 and 64 connections; prints both medians, the median of the rounds' ratios, each
 * round's ratio, p50 and p99, and the TARGET lines.
 *   npx tsx scripts/bench/user-list.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 *   npm run bench:users [-- seconds rounds]
 */
import { sql as drizzleSql } from 'drizzle-orm';
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

// Baseline: the simplest thing that answers the same body, in one statement.
const sql = baselineSql(database.url);
type Row = BaselineUserRow & { file_name: string | null };
const bare = Fastify();
bare.get<{ Querystring: { limit?: string } }>('/users', async (request, reply) => {
  const presented = (request.headers.authorization ?? '').replace(/^Bearer /, '');
  const rows = await sql<Row[]>`
    with caller as (
      select t.tenant_id from access_tokens t
      join users cu on cu.tenant_id = t.tenant_id and cu.id = t.user_id
      join roles cr on cr.tenant_id = cu.tenant_id and cr.id = cu.role_id
      where t.token_hash = ${hashToken(presented)} and t.revoked_at is null and t.expires_at > now()
        and cu.active and cu.deleted_at is null and (cu.logout_marked_at is null or t.created_at > cu.logout_marked_at)
        and cr.active and 'users.view' = any (cr.permissions) and not cu.request_password_change
    )
    select u.*, u.birthdate::text, u.entering_date::text, u.leaving_date::text, r.name as role_name, r.active as role_active, r.permissions as role_permissions, l.name as language_name, p.file_name
    from caller c
    join users u on u.tenant_id = c.tenant_id
    join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
    left join languages l on l.tenant_id = u.tenant_id and l.id = u.lang_id
    left join user_profile_pictures p on p.tenant_id = u.tenant_id and p.user_id = u.id
    where u.deleted_at is null
    order by u.last_name, u.first_name, u.id
    limit ${Number(request.query.limit ?? 100)}`;
  if (rows.length === 0) return reply.code(401).send({ status: 401 });
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
const compared = await comparePair('GET /api/users?limit=50', subject, baseline, { seconds, rounds, connections: [10, 64] });
endpointTargets(compared, 0.6);
printTargets();

await bare.close();
await sql.end();
await atrium.stop();
await database.drop();
