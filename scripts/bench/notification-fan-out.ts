/**
 * Benchmark: fan-out of POST /api/notifications to one department of MEMBERS users
 * (default 10,000) through the whole stack (HTTP request, dispatch, queued delivery job,
 * batched inserts): the time from sending the POST to the last member's notification stored
 * (the 202 on the way printed apart), as the baseline's time is its whole statement.
 * Baseline: the same rows stored by one hand-written `INSERT … SELECT` as the owner role
 * (the department's active, not deleted, not group-account members; no queue, no
 * batches, no dispatch record). The two alternate over ROUNDS rounds (default 3; odd
 * rounds Atrium first, even rounds the baseline first), each round with a title of its
 * own; after each Atrium round, once its dispatch is delivered, every member must hold
 * exactly one notification of that round and no one else any (the bench fails otherwise).
 * Prints each round's times and ratio, the medians, and the TARGET line (no target is set
 * for the fan-out's ratio: it is reported, and the bench fails on a lost or doubled row).
 *   npx tsx scripts/bench/notification-fan-out.ts [rounds, default 3 or ROUNDS]   (MEMBERS=… to change the size)
 *   npm run bench:fan-out [-- rounds]
 */
import { sql } from 'drizzle-orm';
import { benchAtrium, median, printTargets, target, throwawayDatabase } from './support.ts';

const members = Number(process.env.MEMBERS ?? 10_000);
const rounds = Number(process.argv[2] ?? process.env.ROUNDS ?? 3);
/** How long a round may take before the bench gives up on it. */
const ROUND_LIMIT_MS = 300_000;
const database = await throwawayDatabase();
// With its job workers: the delivery job stores the notifications.
const atrium = await benchAtrium(database.url, { role: 'all' });
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
const departmentId = department!.id;
await db.owner.execute(sql`
  insert into department_users (tenant_id, department_id, user_id)
  select ${tenantId}, ${departmentId}, id from users where tenant_id = ${tenantId} and username like 'member%'`);
await db.owner.execute(sql`analyze`);

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Atrium's fan-out of `title`: POST → 202 → the job → the last member's notification stored. */
async function atriumRound(title: string): Promise<{ acceptedMs: number; storedMs: number; wrong: string | null }> {
  const started = performance.now();
  const res = await app.inject({
    method: 'POST',
    url: '/api/notifications',
    headers: { authorization: `Bearer ${token}` },
    payload: { title, body: '<p>Fan-out</p>', url: '/bench', department_ids: [departmentId] },
  });
  const accepted = performance.now();
  if (res.statusCode !== 202) throw new Error(`POST answered ${res.statusCode}: ${res.body}`);
  const [dispatch] = await db.owner.execute<{ id: string }>(
    sql`select id::text from notification_dispatches where tenant_id = ${tenantId} and data->>'title' = ${title}`,
  );
  if (!dispatch) throw new Error(`no dispatch recorded for ${title}`);
  for (;;) {
    const [row] = await db.owner.execute<{ n: number }>(
      sql`select count(*)::int as n from notifications where tenant_id = ${tenantId} and dispatch_id = ${dispatch.id}`,
    );
    if (row!.n >= members) break;
    if (performance.now() - started > ROUND_LIMIT_MS) throw new Error(`${title}: only ${row!.n} of ${members} stored after ${ROUND_LIMIT_MS / 1000} s`);
    await pause(5);
  }
  const stored = performance.now();
  // The dispatch delivered (no job left to store more), then the check.
  for (;;) {
    const [row] = await db.owner.execute<{ delivered: boolean }>(
      sql`select delivered_at is not null as delivered from notification_dispatches where tenant_id = ${tenantId} and id = ${dispatch.id}`,
    );
    if (row!.delivered) break;
    if (performance.now() - started > ROUND_LIMIT_MS) throw new Error(`${title}: dispatch not delivered after ${ROUND_LIMIT_MS / 1000} s`);
    await pause(20);
  }
  return { acceptedMs: accepted - started, storedMs: stored - started, wrong: await eachMemberHoldsOne(title) };
}

/** What is wrong unless every member holds exactly one notification titled `title` and no one else any (null: nothing). */
async function eachMemberHoldsOne(title: string): Promise<string | null> {
  const [row] = await db.owner.execute<{ exactly_one: number; none: number; several: number; outsiders: number }>(sql`
    with held as (
      select du.user_id, (select count(*) from notifications n
                          where n.tenant_id = du.tenant_id and n.notifiable_type = 'user' and n.notifiable_id = du.user_id
                            and n.data->>'title' = ${title}) as n
      from department_users du where du.tenant_id = ${tenantId} and du.department_id = ${departmentId}
    )
    select count(*) filter (where n = 1)::int as exactly_one, count(*) filter (where n = 0)::int as none,
           count(*) filter (where n > 1)::int as several,
           (select count(*)::int from notifications n where n.tenant_id = ${tenantId} and n.data->>'title' = ${title}
              and n.notifiable_id not in (select user_id from department_users where tenant_id = ${tenantId} and department_id = ${departmentId})) as outsiders
    from held`);
  if (row!.exactly_one === members && row!.outsiders === 0) return null;
  return (
    `${title}: ${row!.exactly_one} of ${members} members hold exactly one notification, ${row!.none} none, ${row!.several} more than one; ` +
    `${row!.outsiders} stored for users outside the department`
  );
}

/** The baseline: the same rows in one statement, no queue, no batches, no dispatch record. */
async function baselineRound(title: string): Promise<number> {
  const started = performance.now();
  await db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
    select ${tenantId}, gen_random_uuid(), 'customNotification', du.user_id,
           jsonb_build_object('title', ${title}::text, 'body', '<p>Fan-out</p>', 'url', '/bench')
    from department_users du join users u on u.tenant_id = du.tenant_id and u.id = du.user_id
    where du.tenant_id = ${tenantId} and du.department_id = ${departmentId} and u.active and u.deleted_at is null and not u.group_account`);
  const ms = performance.now() - started;
  const [row] = await db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from notifications where tenant_id = ${tenantId} and data->>'title' = ${title}`,
  );
  if (row!.n !== members) throw new Error(`the baseline stored ${row!.n} rows for ${members} members`);
  return ms;
}

const timed: { atrium: number; accepted: number; baseline: number }[] = [];
let checked = 0;
try {
  console.log(`fan-out to one department of ${members} members, ${rounds} alternating rounds (odd rounds Atrium first)`);
  for (let round = 1; round <= rounds; round++) {
    const atriumTitle = `Benchmark round ${round}`;
    const baselineTitle = `Benchmark round ${round} (baseline)`;
    let a: Awaited<ReturnType<typeof atriumRound>>;
    let b: number;
    if (round % 2 === 1) {
      a = await atriumRound(atriumTitle);
      b = await baselineRound(baselineTitle);
    } else {
      b = await baselineRound(baselineTitle);
      a = await atriumRound(atriumTitle);
    }
    timed.push({ atrium: a.storedMs, accepted: a.acceptedMs, baseline: b });
    console.log(
      `round ${round}: Atrium POST → 202 ${a.acceptedMs.toFixed(1)} ms, POST → last stored ${a.storedMs.toFixed(1)} ms; ` +
        `baseline INSERT … SELECT ${b.toFixed(1)} ms; ratio (Atrium's time / baseline time) ${(a.storedMs / b).toFixed(2)}`,
    );
    if (a.wrong === null) {
      checked++;
      console.log(`  every member holds exactly one notification of round ${round}`);
    } else {
      console.log(`  FAILED: ${a.wrong}`);
      process.exitCode = 1;
    }
  }
} finally {
  await atrium.stop();
  await database.drop();
}

const ratios = timed.map((t) => t.atrium / t.baseline);
console.log(`\nmedian of ${rounds} rounds:`);
console.log(
  `Atrium: POST → 202 ${median(timed.map((t) => t.accepted)).toFixed(1)} ms; from the POST to the last record stored ${median(timed.map((t) => t.atrium)).toFixed(1)} ms`,
);
console.log(`baseline: one hand-written INSERT … SELECT ${median(timed.map((t) => t.baseline)).toFixed(1)} ms`);
console.log(
  `ratio (Atrium's time / baseline time): ${median(ratios).toFixed(2)} (median of the rounds); per round: ${ratios.map((r) => r.toFixed(2)).join(' ')}`,
);

target(`fan-out to ${members} members`, 'rounds_each_member_exactly_one', checked, '=', rounds, 0);
printTargets();
