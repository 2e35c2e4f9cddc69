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
import { assertSameBody, benchAtrium, comparePair, throwawayDatabase } from './support.ts';

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
const iso = (value: Date | null) => (value ? value.toISOString() : null);
type Text = string | null;
interface Row {
  id: string;
  username: string;
  first_name: Text;
  last_name: Text;
  lang_id: Text;
  group_account: boolean;
  email: Text;
  phone: Text;
  street: Text;
  zipcode: Text;
  city: Text;
  birthdate: Text;
  gender: Text;
  staff_number: Text;
  entering_date: Text;
  leaving_date: Text;
  active: boolean;
  role_id: string;
  request_password_change: boolean;
  prevent_logout: boolean;
  wants_email_notifications: boolean;
  default_route: Text;
  last_login_at: Date | null;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  role_name: string;
  role_active: boolean;
  role_permissions: string[];
  language_name: Text;
  file_name: Text;
}
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
      language: u.lang_id ? { id: u.lang_id, name: u.language_name } : null,
    };
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
