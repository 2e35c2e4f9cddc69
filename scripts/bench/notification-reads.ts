/**
 * Benchmark: GET /api/notifications/count and GET /api/notifications?limit=50 for one
 * user with USER_ROWS notifications (default 100,000) in a table of TOTAL rows. The
 * target size is 5,000,000 rows (TOTAL=5000000); TOTAL defaults to 300,000 so the
 * script finishes in under a minute on a small machine. Prints the
 * count query's plan (it must use notifications_unread_idx) and p50/p99 of both routes.
 *   npx tsx scripts/bench/notification-reads.ts [seconds per route, default 5]
 */
import { sql } from 'drizzle-orm';
import { benchAtrium, measure, throwawayDatabase } from './support.ts';

const seconds = Number(process.argv[2] ?? 5);
const total = Number(process.env.TOTAL ?? 300_000);
const userRows = Number(process.env.USER_ROWS ?? 100_000);
const otherUsers = 1000;
const database = await throwawayDatabase();
const atrium = await benchAtrium(database.url);
const { db } = atrium.services;
const app = atrium.app!;

const login = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' } });
const token = login.json<{ access_token: string }>().access_token;
const [admin] = await db.owner.execute<{ tenant_id: number; id: number; role_id: number }>(
  sql`select tenant_id::int, id::int, role_id::int from users where username = 'admin'`,
);
const tenantId = admin!.tenant_id;
await db.owner.execute(sql`
  insert into users (tenant_id, username, role_id) select ${tenantId}, 'other' || g, ${admin!.role_id} from generate_series(1, ${otherUsers}) g`);

const loadStarted = performance.now();
// Every 10th of the user's notifications unread; others spread over 1000 users.
await db.owner.execute(sql`
  insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data, read_at, created_at)
  select ${tenantId}, gen_random_uuid(), 'customNotification', ${admin!.id}, '{"title":"t","body":"<p>b</p>","url":"/"}'::jsonb,
         case when g % 10 = 0 then null else now() end, now() - make_interval(secs => g)
  from generate_series(1, ${userRows}) g`);
await db.owner.execute(sql`
  insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data, read_at, created_at)
  select ${tenantId}, gen_random_uuid(), 'customNotification', u.id, '{"title":"t","body":"<p>b</p>","url":"/"}'::jsonb,
         case when g % 10 = 0 then null else now() end, now() - make_interval(secs => g)
  from generate_series(1, ${total - userRows}) g
  join (select id, row_number() over (order by id) - 1 as n from users where username like 'other%') u on u.n = g % ${otherUsers}`);
await db.owner.execute(sql`vacuum analyze notifications`);
console.log(`loaded ${total} notifications (${userRows} for the user) in ${((performance.now() - loadStarted) / 1000).toFixed(1)} s`);

const plan = await db.tenant(tenantId, (tx) =>
  tx.execute<{ 'QUERY PLAN': string }>(
    sql`explain analyze select count(*) from notifications where notifiable_type = 'user' and notifiable_id = ${admin!.id} and read_at is null`,
  ),
);
console.log('count plan (as the application role, under row-level security):');
for (const row of plan) console.log(`  ${row['QUERY PLAN']}`);
const listPlan = await db.tenant(tenantId, (tx) =>
  tx.execute<{ 'QUERY PLAN': string }>(
    sql`explain analyze select * from notifications where notifiable_type = 'user' and notifiable_id = ${admin!.id}
        order by created_at desc, id desc limit 50`,
  ),
);
console.log('list plan (limit 50):');
for (const row of listPlan) console.log(`  ${row['QUERY PLAN']}`);

const address = await app.listen({ host: '127.0.0.1', port: 0 });
const headers = { authorization: `Bearer ${token}` };
const check = await fetch(`${address}/api/notifications/count`, { headers });
console.log(`unread count answered: ${await check.text()}`);
for (const [name, path] of [
  ['GET /api/notifications/count', '/api/notifications/count'],
  ['GET /api/notifications?limit=50', '/api/notifications?limit=50'],
] as const) {
  const m = await measure(name, `${address}${path}`, headers, seconds, 4);
  console.log(`${name.padEnd(34)} ${m.requests.toFixed(0).padStart(6)} req/s   p50 ${m.p50} ms   p99 ${m.p99} ms   non-2xx ${m.non2xx}`);
}

await atrium.stop();
await database.drop();
