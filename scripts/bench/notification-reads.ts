/**
 * Benchmark: GET /api/notifications/count and GET /api/notifications?limit=50 for one
 * user with USER_ROWS notifications (default 100,000) in a table of TOTAL rows, through the
 * whole stack, each beside its baseline: a bare Fastify route that answers the same body
 * from ONE statement as the owner role (no row-level security), on a pool as large as
 * Atrium's request pool. In each statement the token lookup is a CTE (`caller`) joined with
 * the read: the token not revoked, not expired, its user active, not deleted and not marked
 * for logout since (the checks of atrium_authenticate), and no password change pending
 * (which Atrium answers 403 here). No row: 401.
 *   - The count's baseline reads the same kept counter as Atrium (the unread count the
 *     triggers keep in notification_unread_counts; no row is 0).
 *   - The list's baseline reads the caller's 50 newest notifications (a lateral subquery
 *     on the caller, so the index on recipient and time gives them in order).
 * Separately, labelled a design gain and never an overhead ratio: Atrium's count beside a
 * bare route that counts the unread rows with count(*) in one statement the same way (what
 * keeping the counter saves, not what the stack costs).
 * TOTAL defaults to the targets' size, 5,000,000 rows (loading them takes a few minutes on
 * a two-core machine); TOTAL=300000 is a quicker check, whose figures are not the
 * targets'. Statistics are gathered after loading; the plans of the bare statements are
 * printed; the bodies are compared before anything is timed; then both sides run in
 * alternating rounds (the order alternating too) at 1, 10 and 64 connections (the count)
 * and 10 and 64 (the list); prints both medians, the median of the rounds' ratios, each
 * round's ratio, p50 and p99, and the TARGET lines.
 *   npx tsx scripts/bench/notification-reads.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 *   npm run bench:notification-reads [-- seconds rounds]
 */
import { sql } from 'drizzle-orm';
import Fastify from 'fastify';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { assertSameBody, baselineSql, benchAtrium, comparePair, endpointTargets, printTargets, slices, throwawayDatabase } from './support.ts';

const { seconds, rounds } = slices();
const total = Number(process.env.TOTAL ?? 5_000_000);
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

const address = await app.listen({ host: '127.0.0.1', port: 0 });

// Baselines: the simplest things that answer the same bodies, each one statement.
const raw = baselineSql(database.url);
const presentedHash = (authorization: string | undefined) => hashToken((authorization ?? '').replace(/^Bearer /, ''));
/** The caller of token hash `hash`, as a CTE the read joins (a fragment of the one statement). */
const caller = (hash: Buffer) => raw`
  with caller as (
    select t.tenant_id, t.user_id from access_tokens t
    join users cu on cu.tenant_id = t.tenant_id and cu.id = t.user_id
    where t.token_hash = ${hash} and t.revoked_at is null and t.expires_at > now()
      and cu.active and cu.deleted_at is null and (cu.logout_marked_at is null or t.created_at > cu.logout_marked_at)
      and not cu.request_password_change
  )`;
const keptCount = (hash: Buffer) => raw<{ n: number | null }[]>`
  ${caller(hash)}
  select k.unread::int as n from caller c
  left join notification_unread_counts k on k.tenant_id = c.tenant_id and k.user_id = c.user_id`;
const countedCount = (hash: Buffer) => raw<{ n: number }[]>`
  ${caller(hash)}
  select (select count(*)::int from notifications n
          where n.tenant_id = c.tenant_id and n.notifiable_type = 'user' and n.notifiable_id = c.user_id and n.read_at is null) as n
  from caller c`;
interface NotificationRow {
  id: string | null;
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
}
const newest = (hash: Buffer, limit: number) => raw<NotificationRow[]>`
  ${caller(hash)}
  select n.* from caller c
  left join lateral (
    select id, type, notifiable_type, notifiable_id, targetable_type, targetable_id, data, seen_at, read_at, created_at, updated_at
    from notifications
    where tenant_id = c.tenant_id and notifiable_type = 'user' and notifiable_id = c.user_id
    order by created_at desc, id desc
    limit ${limit}
  ) n on true`;
/** `YYYY-MM-DD HH:MM:SS` in UTC, to the second, as the API writes a notification's datetimes. */
const datetime = (value: Date | null) => (value ? value.toISOString().slice(0, 19).replace('T', ' ') : null);

const bare = Fastify();
bare.get('/kept-count', async (request, reply) => {
  const [row] = await keptCount(presentedHash(request.headers.authorization));
  if (!row) return reply.code(401).send({ status: 401 });
  return row.n ?? 0;
});
bare.get('/counted-count', async (request, reply) => {
  const [row] = await countedCount(presentedHash(request.headers.authorization));
  if (!row) return reply.code(401).send({ status: 401 });
  return row.n;
});
bare.get<{ Querystring: { limit?: string } }>('/list', async (request, reply) => {
  const rows = await newest(presentedHash(request.headers.authorization), Number(request.query.limit ?? 100));
  if (rows.length === 0) return reply.code(401).send({ status: 401 });
  // One row without a notification: the caller has none.
  return rows
    .filter((n) => n.id !== null)
    .map((n) => ({
      id: n.id,
      type: n.type,
      notifiable_type: n.notifiable_type,
      notifiable_id: Number(n.notifiable_id),
      targetable_type: n.targetable_type,
      targetable_id: n.targetable_id === null ? null : Number(n.targetable_id),
      data: n.data,
      seen_at: datetime(n.seen_at),
      read_at: datetime(n.read_at),
      created_at: datetime(n.created_at),
      updated_at: datetime(n.updated_at),
    }));
});
const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

// The plans of the bare statements (as the owner; Atrium's own are its business).
const hash = hashToken(token);
for (const [name, statement] of [
  ['kept count', keptCount(hash)],
  ['count(*)', countedCount(hash)],
  ['list (limit 50)', newest(hash, 50)],
] as const) {
  console.log(`plan of the bare ${name}:`);
  for (const row of await raw<{ 'QUERY PLAN': string }[]>`explain analyze ${statement}`) console.log(`  ${row['QUERY PLAN']}`);
}

const headers = { authorization: `Bearer ${token}` };
const count = { url: `${address}/api/notifications/count`, headers };
const keptBare = { url: `${bareAddress}/kept-count`, headers };
const countedBare = { url: `${bareAddress}/counted-count`, headers };
const list = { url: `${address}/api/notifications?limit=50`, headers };
const listBare = { url: `${bareAddress}/list?limit=50`, headers };
for (const [name, subject, baseline] of [
  ['GET /api/notifications/count (bare: the kept counter)', count, keptBare],
  ['GET /api/notifications/count (bare: count(*))', count, countedBare],
  ['GET /api/notifications?limit=50', list, listBare],
] as const) {
  const bytes = await assertSameBody(subject.url, baseline.url, headers);
  console.log(`${name}: bodies equal (${bytes} bytes)`);
}

// Overhead: Atrium beside the bare route that does the same work. The count also with one
// connection: its latency when nothing queues before it.
const countCompared = await comparePair('GET /api/notifications/count', count, keptBare, { seconds, rounds, connections: [1, 10, 64] });
const listCompared = await comparePair('GET /api/notifications?limit=50', list, listBare, { seconds, rounds, connections: [10, 64] });
// Design gain, not overhead: Atrium's kept count beside a bare route that counts the rows.
const [gain] = await comparePair('GET /api/notifications/count', count, countedBare, {
  seconds,
  rounds,
  connections: [10],
  label: 'DESIGN GAIN (Atrium reading the kept count / bare count(*) throughput; not an overhead ratio)',
  baselineName: 'count(*)',
});

endpointTargets(countCompared, 0.5);
endpointTargets(listCompared, 0.6);
printTargets();
console.log(
  `DESIGN GAIN GET /api/notifications/count @10 Atrium (kept count) / bare count(*) = ${gain!.ratio.toFixed(2)}x over ${userRows} notifications of the user (not an overhead ratio)`,
);

await bare.close();
await raw.end();
await atrium.stop();
await database.drop();
