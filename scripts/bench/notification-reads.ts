/**
 * Benchmark: GET /api/notifications/count and GET /api/notifications?limit=50 for one
 * user with USER_ROWS notifications (default 100,000) in a table of TOTAL rows, each
 * beside a bare Fastify route that answers the same body the simplest way (the token
 * lookup and one query as the owner role). The target size is 5,000,000 rows
 * (TOTAL=5000000); TOTAL defaults to 300,000 so the script finishes in about two minutes
 * on a small machine. Statistics are gathered after loading; the plans of both reads are
 * printed (the count must use notifications_unread_idx); the bodies are compared before
 * anything is timed; then both sides, their ratio, p50 and p99 at 10 and 64 connections
 * (the count also at one connection: its latency when no request queues before it). The
 * count is also measured beside a bare route that reads the count the triggers keep (not
 * the baseline: the least a request with one round trip to the database costs here), whose
 * p99 at 10 connections is the floor of Atrium's on this machine.
 *   npx tsx scripts/bench/notification-reads.ts [seconds per slice, default 3] [rounds, default 3]
 */
import { sql } from 'drizzle-orm';
import Fastify from 'fastify';
import postgres from 'postgres';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { notificationDatetime } from '../../src/platform/http/datetime.ts';
import { assertSameBody, benchAtrium, comparePair, throwawayDatabase } from './support.ts';

const seconds = Number(process.argv[2] ?? 3);
const rounds = Number(process.argv[3] ?? 3);
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
// Statistics for every other table too (users grew): without them plans depend on when autovacuum runs.
await db.owner.execute(sql`analyze`);
// The load's dirty pages written now, not by a checkpoint during the timed rounds (needs a superuser or pg_checkpoint).
await db.owner.execute(sql`checkpoint`).catch((error: unknown) => console.log(`no checkpoint after the load: ${String(error)}`));
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

// Baselines: the simplest things that answer the same bodies.
const raw = postgres(database.url, { max: 10 });
const callerOf = async (authorization: string | undefined) => {
  const [caller] = await raw<{ tenant_id: string; user_id: string }[]>`
    select t.tenant_id, t.user_id from access_tokens t join users u on u.id = t.user_id and u.tenant_id = t.tenant_id
    where t.token_hash = ${hashToken((authorization ?? '').replace(/^Bearer /, ''))} and t.revoked_at is null and t.expires_at > now()`;
  return caller;
};
const bare = Fastify();
bare.get('/count', async (request, reply) => {
  const caller = await callerOf(request.headers.authorization);
  if (!caller) return reply.code(401).send({ status: 401 });
  const [row] = await raw<{ n: number }[]>`
    select count(*)::int as n from notifications
    where tenant_id = ${caller.tenant_id} and notifiable_type = 'user' and notifiable_id = ${caller.user_id} and read_at is null`;
  return row!.n;
});
// Not the baseline of the ratio: the same answer read from the count the triggers keep, the
// least a request with a database round trip can cost here; its p99 is the floor of Atrium's.
bare.get('/kept-count', async (request, reply) => {
  const caller = await callerOf(request.headers.authorization);
  if (!caller) return reply.code(401).send({ status: 401 });
  const [row] = await raw<{ n: number }[]>`
    select unread as n from notification_unread_counts where tenant_id = ${caller.tenant_id} and user_id = ${caller.user_id}`;
  return row?.n ?? 0;
});
bare.get<{ Querystring: { limit?: string } }>('/list', async (request, reply) => {
  const caller = await callerOf(request.headers.authorization);
  if (!caller) return reply.code(401).send({ status: 401 });
  const rows = await raw<
    {
      id: string;
      type: string;
      notifiable_type: string;
      notifiable_id: string;
      targetable_type: string | null;
      targetable_id: string | null;
      data: unknown;
      seen_at: Date | null;
      read_at: Date | null;
      created_at: Date;
      updated_at: Date;
    }[]
  >`
    select id, type, notifiable_type, notifiable_id, targetable_type, targetable_id, data, seen_at, read_at, created_at, updated_at
    from notifications
    where tenant_id = ${caller.tenant_id} and notifiable_type = 'user' and notifiable_id = ${caller.user_id}
    order by created_at desc, id desc
    limit ${Number(request.query.limit ?? 100)}`;
  return rows.map((n) => ({
    id: n.id,
    type: n.type,
    notifiable_type: n.notifiable_type,
    notifiable_id: Number(n.notifiable_id),
    targetable_type: n.targetable_type,
    targetable_id: n.targetable_id === null ? null : Number(n.targetable_id),
    data: n.data,
    seen_at: notificationDatetime(n.seen_at),
    read_at: notificationDatetime(n.read_at),
    created_at: notificationDatetime(n.created_at),
    updated_at: notificationDatetime(n.updated_at),
  }));
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

const headers = { authorization: `Bearer ${token}` };
// The count also with one connection: its latency when nothing queues before it.
const pairs = [
  ['GET /api/notifications/count', '/api/notifications/count', '/count', [1, 10, 64]],
  ['GET /api/notifications/count (beside the kept count read bare)', '/api/notifications/count', '/kept-count', [1, 10]],
  ['GET /api/notifications?limit=50', '/api/notifications?limit=50', '/list?limit=50', [10, 64]],
] as const;
for (const [name, path, barePath] of pairs) {
  const bytes = await assertSameBody(`${address}${path}`, `${bareAddress}${barePath}`, headers);
  console.log(`${name}: bodies equal (${bytes} bytes)`);
}
for (const [name, path, barePath, connections] of pairs) {
  await comparePair(
    name,
    { url: `${address}${path}`, headers },
    { url: `${bareAddress}${barePath}`, headers },
    { seconds, rounds, connections: [...connections] },
  );
}

await bare.close();
await raw.end();
await atrium.stop();
await database.drop();
