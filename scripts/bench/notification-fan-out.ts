/**
 * Benchmark: fan-out of POST /api/notifications to one department of MEMBERS users
 * (default 10,000): time from the 202 to the last notification stored, beside one
 * hand-written `INSERT … SELECT` of the same rows. Prints both and the ratio.
 *   npx tsx scripts/bench/notification-fan-out.ts        (MEMBERS=… to change the size)
 */
import { sql } from 'drizzle-orm';
import pino from 'pino';
import { loadConfig } from '../../src/config.ts';
import { createAtrium } from '../../src/server.ts';
import { throwawayDatabase } from './support.ts';

const members = Number(process.env.MEMBERS ?? 10_000);
const database = await throwawayDatabase();
const atrium = await createAtrium(
  { ...loadConfig({}), databaseUrl: database.url, logLevel: 'silent', adminPassword: 'benchmark-password', role: 'all' },
  { logger: pino({ level: 'silent' }) },
);
const { db } = atrium.services;
const app = atrium.app!;

const login = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' } });
const token = login.json<{ access_token: string }>().access_token;
const [tenant] = await db.owner.execute<{ id: number; role_id: number }>(
  sql`select t.id::int, r.id::int as role_id from tenants t join roles r on r.tenant_id = t.id and r.name = 'Employee' where t.slug = 'demo'`,
);
const tenantId = tenant!.id;
await db.owner.execute(sql`
  insert into users (tenant_id, username, role_id, first_name, last_name)
  select ${tenantId}, 'member' || g, ${tenant!.role_id}, 'Member', 'No ' || g from generate_series(1, ${members}) g`);
const [department] = await db.owner.execute<{ id: number }>(sql`insert into departments (tenant_id, name) values (${tenantId}, 'Everyone') returning id::int`);
await db.owner.execute(sql`
  insert into department_users (tenant_id, department_id, user_id)
  select ${tenantId}, ${department!.id}, id from users where tenant_id = ${tenantId} and username like 'member%'`);
await db.owner.execute(sql`analyze`);

const stored = async (type: string) =>
  (await db.owner.execute<{ n: number }>(sql`select count(*)::int as n from notifications where tenant_id = ${tenantId} and type = ${type}`))[0]!.n;

// Atrium: POST → 202 → job → last record stored.
const started = performance.now();
const res = await app.inject({
  method: 'POST',
  url: '/api/notifications',
  headers: { authorization: `Bearer ${token}` },
  payload: { title: 'Benchmark', body: '<p>Fan-out</p>', url: '/bench', department_ids: [department!.id] },
});
const accepted = performance.now();
if (res.statusCode !== 202) throw new Error(`POST answered ${res.statusCode}: ${res.body}`);
while ((await stored('customNotification')) < members) await new Promise((r) => setTimeout(r, 5));
const atriumMs = performance.now() - started;

// Baseline: the same rows in one statement, no queue, no batches, no dedup key work.
const baselineStarted = performance.now();
await db.owner.execute(sql`
  insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
  select ${tenantId}, gen_random_uuid(), 'baseline', du.user_id, '{"title":"Benchmark","body":"<p>Fan-out</p>","url":"/bench"}'::jsonb
  from department_users du join users u on u.tenant_id = du.tenant_id and u.id = du.user_id
  where du.tenant_id = ${tenantId} and du.department_id = ${department!.id} and u.active and u.deleted_at is null and not u.group_account`);
const baselineMs = performance.now() - baselineStarted;
if ((await stored('baseline')) !== members) throw new Error('baseline stored a different number of rows');

console.log(`fan-out to one department of ${members} members`);
console.log(
  `Atrium: POST → 202 in ${(accepted - started).toFixed(1)} ms; from the 202 to the last record stored ${(atriumMs - (accepted - started)).toFixed(1)} ms (${atriumMs.toFixed(1)} ms in all)`,
);
console.log(`baseline: one hand-written INSERT … SELECT         ${baselineMs.toFixed(1)} ms`);
console.log(`ratio (Atrium from the 202 / baseline time): ${((atriumMs - (accepted - started)) / baselineMs).toFixed(2)}`);

await atrium.stop();
await database.drop();
