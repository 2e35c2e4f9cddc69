import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { and, desc, eq, sql, type SQL } from 'drizzle-orm';
import { deliverPendingNotifications } from '../../../src/resources/notifications/deliver-pending.job.ts';
import { deliverDispatch } from '../../../src/resources/notifications/deliver.job.ts';
import { findDispatch, storeNotificationBatch } from '../../../src/resources/notifications/queries.ts';
import { notify } from '../../../src/resources/notifications/notify.ts';
import { notificationDispatches, notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { createDepartment, rowCount, storeNotification, waitForDispatches } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { role: 'all' });
const onCitus = Boolean(process.env[CITUS_ENV]);
/** On Citus, the shard of `table` that holds the tenant's rows. */
const shardOf = async (table: string, tenantId: number) =>
  (await api.db.owner.execute<{ shard: string }>(sql`select get_shard_id_for_distribution_column(${table}::regclass, ${tenantId}::bigint)::text as shard`))[0]!
    .shard;
const tenant = await api.createTenant('notifications');
const other = await api.createTenant('notifications-other');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const alice = await api.createUser(tenant.tenantId);
const bob = await api.createUser(tenant.tenantId);

const storedCount = (tenantId = tenant.tenantId) => rowCount(api.db, 'notifications', sql`tenant_id = ${tenantId}`);
const dispatchCount = () => rowCount(api.db, 'notification_dispatches', sql`tenant_id = ${tenant.tenantId}`);

const department = async (tenantId: number, name: string, memberIds: number[]) => (await createDepartment(api.db, tenantId, name, memberIds)).id;

/** A notification stored directly (for read-side tests), `minutesAgo` old. */
const stored = (userId: number, values: Partial<typeof notifications.$inferInsert> = {}, minutesAgo = 0, tenantId = tenant.tenantId) =>
  storeNotification(api.db, tenantId, userId, new Date(Math.floor(Date.now() / 1000) * 1000 - minutesAgo * 60_000), values);

async function waitForDelivery(t: Test) {
  const pending = await waitForDispatches(api.db, tenant.tenantId);
  t.equal(pending, 0, 'every dispatch is delivered');
}

const send = (t: Test, body: unknown, token = sender.token) => api.call(t, 'createNotification', { token, body });
const message = { title: 'Fire drill', body: '<p>At <b>10:00</b></p>', url: '/events/1' };

t.test('bad generic notification input is a 4xx problem and stores nothing', async (t) => {
  const foreignUser = await api.createUser(other.tenantId);
  const foreignDepartment = await department(other.tenantId, 'Foreign', [foreignUser.id]);
  const deleted = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  const cases: [unknown, string][] = [
    [{ ...message }, 'user_ids'],
    [{ ...message, user_ids: [], department_ids: [] }, 'user_ids'],
    [{ ...message, user_ids: [999999] }, 'user_ids.0'],
    [{ ...message, user_ids: [alice.id, foreignUser.id] }, 'user_ids.1'],
    [{ ...message, user_ids: [deleted.id] }, 'user_ids.0'],
    [{ ...message, department_ids: [foreignDepartment] }, 'department_ids.0'],
    [{ ...message, user_ids: [String(alice.id)] }, 'user_ids.0'],
    [{ ...message, user_ids: [0] }, 'user_ids.0'],
    [{ body: 'x', url: '/x', user_ids: [alice.id] }, 'title'],
    [{ ...message, url: 'javascript:alert(1)', user_ids: [alice.id] }, 'url'],
    [{ ...message, user_ids: [alice.id], extra: 1 }, 'extra'],
    [{ ...message, title: '', user_ids: [alice.id] }, 'title'],
  ];
  for (const [body, field] of cases) {
    const res = await send(t, body);
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[field], `errors name ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const huge = await send(t, { ...message, body: 'x'.repeat(2 * 1024 * 1024), user_ids: [alice.id] });
  t.equal(huge.status, 413);
  const malformed = await api.call(t, 'createNotification', { token: sender.token, payload: '{"title"', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  const denied = await send(t, { ...message, user_ids: [alice.id] }, alice.token);
  t.equal(denied.status, 403);
  t.equal(await dispatchCount(), 0, 'no dispatch recorded');
  t.equal(await storedCount(), 0, 'no notification stored');
});

t.test('url: protocol-relative and backslash paths (open redirects) and control characters are 422', async (t) => {
  for (const url of ['//evil.example/x', '/\\evil.example/x', '/\t/evil.example', 'https:evil.example', '']) {
    const res = await send(t, { ...message, url, user_ids: [alice.id] });
    t.equal(res.status, 422, JSON.stringify(url));
    t.ok(res.body.errors?.url, `errors name url for ${JSON.stringify(url)}`);
  }
  t.equal(await dispatchCount(), 0, 'no dispatch recorded');
});

t.test('url follows the navigation URL rule of menu links and default_route, for generic and typed notifications', async (t) => {
  const typed = (url: string) =>
    api.call(t, 'createTypedNotification', {
      token: sender.token,
      body: { ...message, url, type: 'manualEntryUpdated', targetable_id: 7, user_ids: [alice.id] },
    });
  const refused = [
    'https://',
    'https:///evil.example/x',
    'http:////evil.example',
    'https://evil.example/a b',
    'https://evil.example/\u00a0x',
    '/events/ 1',
    '/events\\1',
    'https://intranet.example@evil.example/',
    'https://@evil.example/',
  ];
  for (const url of refused) {
    for (const [kind, res] of [
      ['generic', await send(t, { ...message, url, user_ids: [alice.id] })],
      ['typed', await typed(url)],
    ] as const) {
      t.equal(res.status, 422, `${kind} ${JSON.stringify(url)}`);
      t.ok(res.body.errors?.url, `${kind}: errors name url for ${JSON.stringify(url)}`);
    }
  }
  t.equal(await dispatchCount(), 0, 'no dispatch recorded');
  for (const url of ['/events/1?tab=open#top', 'https://intranet.example/news/1', 'http://intranet.example:8080/x']) {
    t.equal((await send(t, { ...message, url, user_ids: [alice.id] })).status, 202, JSON.stringify(url));
    t.equal((await typed(url)).status, 202, `typed ${JSON.stringify(url)}`);
  }
  await waitForDelivery(t);
  await api.db.owner.execute(sql`delete from notifications where tenant_id = ${tenant.tenantId}`);
  await api.db.owner.execute(sql`delete from notification_dispatches where tenant_id = ${tenant.tenantId}`);
});

t.test('POST answers 202 and the job delivers one notification per recipient', async (t) => {
  const member1 = await api.createUser(tenant.tenantId);
  const member2 = await api.createUser(tenant.tenantId);
  const group = await api.createUser(tenant.tenantId, { values: { groupAccount: true } });
  const inactive = await api.createUser(tenant.tenantId, { values: { active: false } });
  const gone = await api.createUser(tenant.tenantId);
  const teamA = await department(tenant.tenantId, 'Team A', [member1.id, member2.id, group.id, inactive.id, gone.id]);
  const teamB = await department(tenant.tenantId, 'Team B', [member2.id, alice.id]);
  await api.db.owner.execute(sql`update users set deleted_at = now() where id = ${gone.id}`);
  const res = await send(t, {
    ...message,
    body: '<p onclick="steal()">Hi <script>alert(1)</script><a href="javascript:x()" onmouseover="y()">link</a></p>',
    department_ids: [teamA, teamB],
    user_ids: [alice.id, member1.id],
  });
  t.equal(res.status, 202);
  t.strictSame(res.body, { status: 'success', data: null });
  await waitForDelivery(t);
  const rows = await api.db.owner.select().from(notifications).where(eq(notifications.tenantId, tenant.tenantId));
  t.strictSame(
    rows.map((r) => r.notifiableId).sort((a, b) => a - b),
    [alice.id, member1.id, member2.id].sort((a, b) => a - b),
    'members ∪ users, once each; group, inactive and deleted accounts skipped',
  );
  const row = rows[0]!;
  t.match(row, { type: 'customNotification', notifiableType: 'user', targetableType: null, targetableId: null });
  t.equal(row.data.title, 'Fire drill');
  t.notMatch(row.data.body, /script|onclick|onmouseover|javascript/i, 'scripts and event handlers stripped');
  t.match(row.data.body, /<p>Hi <a>link<\/a><\/p>/, 'the rich text stays');
  const list = await api.call(t, 'listNotifications', { token: alice.token });
  t.equal(list.body.length, 1);
  t.match(list.body[0].created_at, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);
  await api.db.owner.delete(notifications).where(eq(notifications.tenantId, tenant.tenantId));
});

t.test('delivery is idempotent: a retried, duplicated or resumed job stores no second copy', async (t) => {
  const recipients = await Promise.all([1, 2, 3, 4, 5].map(() => api.createUser(tenant.tenantId)));
  const res = await send(t, { ...message, user_ids: recipients.map((r) => r.id) });
  t.equal(res.status, 202);
  await waitForDelivery(t);
  const [dispatch] = await api.db.owner
    .select()
    .from(notificationDispatches)
    .where(eq(notificationDispatches.tenantId, tenant.tenantId))
    .orderBy(desc(notificationDispatches.createdAt))
    .limit(1);
  const ref = { tenantId: tenant.tenantId, dispatchId: dispatch!.id };
  const count = async () =>
    (
      await api.db.owner
        .select()
        .from(notifications)
        .where(and(eq(notifications.tenantId, tenant.tenantId), eq(notifications.dispatchId, dispatch!.id)))
    ).length;
  t.equal(await count(), 5);
  const again = await Promise.all([deliverDispatch(api.atrium.services, ref, 2), deliverDispatch(api.atrium.services, ref, 3)]);
  t.strictSame(again, [0, 0], 'running the job again stores nothing');
  t.equal(await count(), 5);

  // A worker that died after its first batch: the retry completes the rest exactly once.
  await api.db.owner.delete(notifications).where(eq(notifications.dispatchId, dispatch!.id));
  const found = await api.db.tenant(tenant.tenantId, (tx) => findDispatch(tx, dispatch!.id));
  const first = await api.db.tenant(tenant.tenantId, (tx) => storeNotificationBatch(tx, found!, 0, 2));
  t.equal(first.stored, 2);
  t.equal(await deliverDispatch(api.atrium.services, ref, 2), 3, 'the retry stores only the missing ones');
  t.equal(await count(), 5);
  await api.db.owner.delete(notifications).where(eq(notifications.tenantId, tenant.tenantId));
});

t.test('list: only the caller’s, newest first, with selects, relations and every filter of NotificationFilter', async (t) => {
  const old = await stored(alice.id, { readAt: new Date(), seenAt: new Date() }, 60);
  const middle = await stored(alice.id, { type: 'infoboardPostCreated', targetableType: 'infoboardPost', targetableId: 7, seenAt: new Date() }, 30);
  const fresh = await stored(alice.id, { type: 'manualEntryUpdated', targetableType: 'manualEntry', targetableId: 3 }, 0);
  await stored(bob.id);
  const ids = async (query: Record<string, unknown>) => {
    const res = await api.call(t, 'listNotifications', { token: alice.token, query: { ...query, selects: 'id' } });
    t.equal(res.status, 200, JSON.stringify(query));
    return res.body.map((n: { id: string }) => n.id);
  };
  t.strictSame(await ids({}), [fresh.id, middle.id, old.id]);
  t.strictSame(await ids({ limit: 1 }), [fresh.id]);
  t.strictSame(await ids({ filter: { unread: true } }), [fresh.id, middle.id]);
  t.strictSame(await ids({ filter: { unread: false } }), [old.id]);
  t.strictSame(await ids({ filter: { unseen: true } }), [fresh.id]);
  t.strictSame(await ids({ filter: { type: 'infoboardPostCreated' } }), [middle.id]);
  t.strictSame(await ids({ filter: { targetable_type: 'manualEntry', targetable_id: 3 } }), [fresh.id]);
  const fmt = (d: Date) => d.toISOString().slice(0, 19).replace('T', ' ');
  t.strictSame(await ids({ filter: { created_from: fmt(middle.createdAt) } }), [fresh.id, middle.id]);
  t.strictSame(await ids({ filter: { created_to: fmt(middle.createdAt) } }), [middle.id, old.id], 'created_to is inclusive');

  const full = await api.call(t, 'listNotifications', { token: alice.token, query: { relations: 'notifiable|targetable', limit: 2 } });
  t.match(full.body[0], {
    id: fresh.id,
    type: 'manualEntryUpdated',
    notifiable_type: 'user',
    notifiable_id: alice.id,
    targetable: { type: 'manualEntry', id: 3 },
    notifiable: { id: alice.id, username: alice.username },
    seen_at: null,
    read_at: null,
    data: { title: 'Hello', body: '<p>Hi</p>', url: '/x' },
  });
  t.equal(full.body[1].seen_at.length, 19);

  for (const filter of [
    { created_from: '2026-01-01T10:00:00Z' },
    { created_from: '2026-02-30 10:00:00' },
    { created_to: 'yesterday' },
    { owner: 1 },
    { unread: 'maybe' },
  ]) {
    const bad = await api.call(t, 'listNotifications', { token: alice.token, query: { filter } });
    t.equal(bad.status, 422, JSON.stringify(filter));
    t.ok(
      Object.keys(bad.body.errors).some((key) => key.startsWith('filter')),
      JSON.stringify(bad.body.errors),
    );
  }
  t.equal((await api.call(t, 'listNotifications', { token: alice.token, query: { relations: 'author' } })).status, 422);
  t.equal((await api.call(t, 'listNotifications', {})).status, 401);
});

t.test('count is a bare integer of the caller’s unread notifications matching the filter, served by the partial index', async (t) => {
  const res = await api.call(t, 'countNotifications', { token: alice.token });
  t.equal(res.status, 200);
  t.equal(res.text, '2');
  t.equal((await api.call(t, 'countNotifications', { token: alice.token, query: { filter: { type: 'manualEntryUpdated' } } })).body, 1);
  t.equal((await api.call(t, 'countNotifications', { token: bob.token })).body, 1);
  t.equal((await api.call(t, 'countNotifications', { token: alice.token, query: { filter: { nope: 1 } } })).status, 422);

  // Many rows for one user: the planner must answer from notifications_unread_idx.
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data, read_at)
    select ${tenant.tenantId}, gen_random_uuid(), 'customNotification', case when g % 50 = 0 then ${bob.id}::bigint else ${alice.id}::bigint end,
           '{"title":"t","body":"b","url":"/"}', case when g % 10 = 0 then null else now() end
    from generate_series(1, 20000) g`);
  await api.db.owner.execute(sql`analyze notifications`);
  const plan = await api.db.tenant(tenant.tenantId, async (tx) => {
    // On Citus the count is one task per shard (it leaves its tenant to row-level security),
    // and EXPLAIN shows one task's plan unless asked for all of them.
    if (onCitus) await tx.execute(sql`set local citus.explain_all_tasks = on`);
    return await tx.execute<{ 'QUERY PLAN': string }>(
      sql`explain select count(*) from notifications where notifiable_type = 'user' and notifiable_id = ${bob.id} and read_at is null`,
    );
  });
  const text = plan.map((row) => row['QUERY PLAN']).join('\n');
  // On Citus, the plan that counts is the task on the shard holding the tenant's rows, whose
  // copy of the index carries the shard's id.
  const index = onCitus ? `notifications_unread_idx_${await shardOf('notifications', tenant.tenantId)}` : 'notifications_unread_idx';
  t.match(text, new RegExp(`\\b${index}\\b`), text);
  await api.db.owner.execute(sql`delete from notifications where tenant_id = ${tenant.tenantId} and data->>'title' = 't'`);
});

t.test('a list costs the same number of queries whatever its length', async (t) => {
  const measure = async (token: string) => {
    const before = api.db.queryCount;
    const res = await api.call(t, 'listNotifications', { token, query: { relations: 'notifiable|targetable' } });
    t.equal(res.status, 200);
    return { queries: api.db.queryCount - before, rows: res.body.length };
  };
  const few = await measure(bob.token);
  const many = await measure(alice.token);
  t.ok(many.rows > few.rows);
  t.equal(many.queries, few.queries);
});

t.test('a dispatch whose delivery job was lost is delivered by deliver-pending', async (t) => {
  const lost = await api.createUser(tenant.tenantId);
  // notify() without queueDelivery(): as if the process died right after the commit.
  const dispatch = await api.db.tenant(tenant.tenantId, (tx) =>
    notify(tx, { recipients: { userIds: [lost.id] }, type: 'customNotification', data: { title: 'Lost', body: 'b', url: '/' } }),
  );
  await api.db.owner.execute(sql`update notification_dispatches set created_at = now() - interval '5 minutes' where id = ${dispatch.dispatchId}`);
  await deliverPendingNotifications.handle({}, api.atrium.services, { retried: false });
  await waitForDelivery(t);
  const rows = await api.db.owner.select().from(notifications).where(eq(notifications.dispatchId, dispatch.dispatchId));
  t.strictSame(
    rows.map((r) => r.notifiableId),
    [lost.id],
  );
});

t.test('a delivery job that cannot be sent after the commit: 202 all the same, and deliver-pending delivers the dispatch', async (t) => {
  const late = await api.createUser(tenant.tenantId);
  // The job queue refuses the delivery job, as a database does for a moment in a failover.
  await api.db.owner.execute(sql`
    create function refuse_delivery_job() returns trigger language plpgsql as $$
    begin
      if new.name = 'notifications.deliver' then
        raise exception 'the server refuses writes now' using errcode = '25006';
      end if;
      return new;
    end $$`);
  // CREATE and DROP TRIGGER lock the job table's partitions, then the table; a worker's fetch locks them the
  // other way round, and PostgreSQL ended one of the two (a deadlock, in CI, five times in a row). The table
  // is locked first, as the worker does, which locks its partitions after it.
  const onJobTable = (statement: SQL) =>
    api.db.owner.transaction(async (tx) => {
      await tx.execute(sql`lock table pgboss.job in access exclusive mode`);
      await tx.execute(statement);
    });
  await onJobTable(sql`create trigger refuse_delivery_job before insert on pgboss.job for each row execute function refuse_delivery_job()`);
  let refused = true;
  const allow = async () => {
    if (!refused) return;
    await onJobTable(sql`drop trigger if exists refuse_delivery_job on pgboss.job`);
    refused = false;
    await api.db.owner.execute(sql`drop function refuse_delivery_job()`);
  };
  t.teardown(allow);
  const before = await dispatchCount();
  const answer = await send(t, { ...message, title: 'Sent late', user_ids: [late.id] });
  t.equal(answer.status, 202, 'the dispatch is committed: accepted, not a 503 a client would retry into a second fan-out');
  t.equal(await dispatchCount(), before + 1, 'one dispatch, committed');
  const [dispatch] = await api.db.owner
    .select({ id: notificationDispatches.id, deliveredAt: notificationDispatches.deliveredAt })
    .from(notificationDispatches)
    .where(and(eq(notificationDispatches.tenantId, tenant.tenantId), sql`${notificationDispatches.data}->>'title' = 'Sent late'`));
  t.equal(dispatch?.deliveredAt, null, 'not delivered: its job was never queued');

  await allow();
  await api.db.owner.execute(sql`update notification_dispatches set created_at = now() - interval '5 minutes' where id = ${dispatch!.id}`);
  await deliverPendingNotifications.handle({}, api.atrium.services, { retried: false });
  await waitForDelivery(t);
  const rows = await api.db.owner.select().from(notifications).where(eq(notifications.dispatchId, dispatch!.id));
  t.strictSame(
    rows.map((row) => row.notifiableId),
    [late.id],
    'delivered once, to its recipient',
  );
});

t.test("show answers the caller's notification; another user's or tenant's is a 404 like a missing one", async (t) => {
  const mine = await stored(alice.id);
  const bobs = await stored(bob.id);
  const foreignUser = await api.createUser(other.tenantId);
  const foreign = await stored(foreignUser.id, {}, 0, other.tenantId);
  const ok = await api.call(t, 'getNotification', { token: alice.token, params: { notification: mine.id }, query: { selects: 'id,type' } });
  t.strictSame(ok.body, { id: mine.id, type: 'customNotification' });
  const missing = await api.call(t, 'getNotification', { token: alice.token, params: { notification: randomUUID() } });
  t.equal(missing.status, 404);
  for (const id of [bobs.id, foreign.id]) {
    const res = await api.call(t, 'getNotification', { token: alice.token, params: { notification: id } });
    t.equal(res.status, 404);
    t.strictSame(res.body, missing.body);
  }
  t.equal((await api.call(t, 'getNotification', { token: alice.token, params: { notification: 'not-a-uuid' } })).status, 422);
});

t.test('a read time in any year the form allows is answered as stored (0001 to 0099 included)', async (t) => {
  for (const when of ['0001-06-15 10:20:30', '0049-06-15 10:20:30', '0050-12-31 23:59:59', '0099-01-02 03:04:05', '9999-12-31 23:59:59']) {
    const note = await stored(alice.id);
    const res = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: note.id }, body: { read_at: when } });
    t.equal(res.status, 200);
    t.equal(res.body.data.read_at, when, `${when} answered as sent`);
    const shown = await api.call(t, 'getNotification', { token: alice.token, params: { notification: note.id } });
    t.equal(shown.body.read_at ?? shown.body.data?.read_at, when, `${when} shown as stored`);
  }
});

t.test('PUT one: read_at without seen_at sets both; seen_at alone sets seen; stored times are kept', async (t) => {
  const unseen = await stored(alice.id);
  const put = (id: string, body: unknown, token = alice.token) => api.call(t, 'updateNotification', { token, params: { notification: id }, body });
  for (const body of [
    {},
    { seen_at: '2026-01-01T10:00:00Z' },
    { read_at: '2026-02-30 10:00:00' },
    { read_at: '2026-01-01 24:00:00' },
    { read_at: null },
    { read_at: '2026-01-01 10:00:00', x: 1 },
  ]) {
    const res = await put(unseen.id, body);
    t.equal(res.status, 422, JSON.stringify(body));
  }
  const [untouched] = await api.db.owner.select().from(notifications).where(eq(notifications.id, unseen.id));
  t.equal(untouched!.seenAt, null, 'refused updates changed nothing');
  const bobs = await stored(bob.id);
  const hidden = await put(bobs.id, { read_at: '2026-01-01 10:00:00' });
  t.equal(hidden.status, 404, "another user's notification");
  const [bobRow] = await api.db.owner.select().from(notifications).where(eq(notifications.id, bobs.id));
  t.equal(bobRow!.readAt, null);

  const read = await put(unseen.id, { read_at: '2026-01-01 10:00:00' });
  t.equal(read.status, 200);
  t.match(read.body, { status: 'success', data: { id: unseen.id, read_at: '2026-01-01 10:00:00', seen_at: '2026-01-01 10:00:00' } });
  const reread = await put(unseen.id, { read_at: '2026-03-01 10:00:00' });
  t.match(reread.body.data, { read_at: '2026-01-01 10:00:00' }, 'first read wins');

  const other = await stored(alice.id);
  const seen = await put(other.id, { seen_at: '2026-01-02 08:00:00' });
  t.match(seen.body.data, { seen_at: '2026-01-02 08:00:00', read_at: null });
  const both = await put(other.id, { seen_at: '2026-01-03 08:00:00', read_at: '2026-01-04 08:00:00' });
  t.match(both.body.data, { seen_at: '2026-01-02 08:00:00', read_at: '2026-01-04 08:00:00' });
});

/** What a read-state body without either time is told, on each of the two keys. */
const ONE_OF_SEEN_OR_READ = { seen_at: ['one of seen_at or read_at is required'], read_at: ['one of seen_at or read_at is required'] };
/** What a notification datetime in another form is told: the one form accepted. */
const DATETIME_FORM = 'must be a valid datetime in the form YYYY-MM-DD HH:MM:SS (UTC), such as 2026-01-31 14:05:00';

t.test('a read-state body with neither seen_at nor read_at is told that one of the two is required', async (t) => {
  const mine = await stored(alice.id);
  const calls = [
    { operation: 'updateNotification', params: { notification: mine.id }, body: {} },
    { operation: 'updateNotifications', params: {}, body: {} },
    { operation: 'updateNotifications', params: {}, body: { filter: { unread: true } } },
    { operation: 'updateNotificationsByType', params: { targetableType: 'infoboardPost' }, body: {} },
    { operation: 'updateNotificationsByTarget', params: { targetableType: 'infoboardPost', targetableId: 1 }, body: {} },
  ] as const;
  for (const { operation, params, body } of calls) {
    const res = await api.call(t, operation, { token: alice.token, params, body });
    t.equal(res.status, 422, `${operation} ${JSON.stringify(body)}`);
    t.strictSame(res.body.errors, ONE_OF_SEEN_OR_READ, `${operation} ${JSON.stringify(body)}`);
  }
  const [row] = await api.db.owner.select().from(notifications).where(eq(notifications.id, mine.id));
  t.strictSame([row!.seenAt, row!.readAt], [null, null], 'nothing was marked');
});

t.test('an ISO 8601 timestamp is a 422 whose message names the accepted form YYYY-MM-DD HH:MM:SS', async (t) => {
  const mine = await stored(alice.id);
  const iso = ['2026-11-28T10:00:00Z', '2026-11-28T10:00:00', '2026-11-28T10:00:00.000Z', '2026-11-28 10:00:00+01:00', '2026-11-28'];
  for (const value of [...iso, '2026-02-30 10:00:00', 'tomorrow']) {
    for (const key of ['read_at', 'seen_at']) {
      const one = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: mine.id }, body: { [key]: value } });
      t.equal(one.status, 422, `${key}: ${value}`);
      t.strictSame(one.body.errors, { [key]: [DATETIME_FORM] }, `updateNotification ${key}: ${value}`);
    }
    const bulk = await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: value } });
    t.strictSame([bulk.status, bulk.body.errors], [422, { read_at: [DATETIME_FORM] }], `updateNotifications read_at: ${value}`);
    const list = await api.call(t, 'listNotifications', { token: alice.token, query: { filter: { created_from: value } } });
    t.strictSame([list.status, list.body.errors], [422, { 'filter.created_from': [DATETIME_FORM] }], `listNotifications created_from: ${value}`);
    const count = await api.call(t, 'countNotifications', { token: alice.token, query: { filter: { created_to: value } } });
    t.strictSame([count.status, count.body.errors], [422, { 'filter.created_to': [DATETIME_FORM] }], `countNotifications created_to: ${value}`);
  }
  const wrongType = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: mine.id }, body: { read_at: 1764324000 } });
  t.strictSame([wrongType.status, wrongType.body.errors], [422, { read_at: [DATETIME_FORM] }], 'a number is told the form too');
  const [row] = await api.db.owner.select().from(notifications).where(eq(notifications.id, mine.id));
  t.strictSame([row!.seenAt, row!.readAt], [null, null], 'nothing was marked');
  const accepted = await api.call(t, 'updateNotification', { token: alice.token, params: { notification: mine.id }, body: { read_at: '2026-11-28 10:00:00' } });
  t.match(accepted.body, { data: { read_at: '2026-11-28 10:00:00' } }, 'the form the message names is accepted');
});

t.test('bulk PUTs change only the caller’s unread notifications, narrowed, and return the count', async (t) => {
  await api.db.owner.delete(notifications).where(eq(notifications.tenantId, tenant.tenantId));
  const a1 = await stored(alice.id, { type: 'infoboardPostCreated', targetableType: 'infoboardPost', targetableId: 1 });
  const a2 = await stored(alice.id, { type: 'infoboardPostUpdated', targetableType: 'infoboardPost', targetableId: 2 });
  await stored(alice.id, { type: 'manualEntryUpdated', targetableType: 'manualEntry', targetableId: 1 });
  await stored(alice.id, { readAt: new Date('2025-01-01T00:00:00Z'), seenAt: new Date('2025-01-01T00:00:00Z') });
  await stored(bob.id, { type: 'infoboardPostCreated', targetableType: 'infoboardPost', targetableId: 1 });

  const bad = await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: '2026-01-01 10:00:00', filter: { color: 'red' } } });
  t.equal(bad.status, 422);
  t.ok(bad.body.errors['filter.color']);
  const missing = await api.call(t, 'updateNotifications', { token: alice.token, body: { filter: {} } });
  t.equal(missing.status, 422);
  t.ok(missing.body.errors.seen_at && missing.body.errors.read_at);

  const target = await api.call(t, 'updateNotificationsByTarget', {
    token: alice.token,
    params: { targetableType: 'infoboardPost', targetableId: 1 },
    body: { seen_at: '2026-01-01 10:00:00' },
  });
  t.strictSame(target.body, { status: 'success', data: 1 });
  const targetList = await api.call(t, 'listNotificationsByTarget', { token: alice.token, params: { targetableType: 'infoboardPost', targetableId: 1 } });
  t.strictSame(
    targetList.body.map((n: { id: string }) => n.id),
    [a1.id],
  );
  t.equal(targetList.body[0].seen_at, '2026-01-01 10:00:00');

  const byType = await api.call(t, 'updateNotificationsByType', {
    token: alice.token,
    params: { targetableType: 'infoboardPost' },
    body: { read_at: '2026-01-02 10:00:00' },
  });
  t.strictSame(byType.body, { status: 'success', data: 2 });
  const typeList = await api.call(t, 'listNotificationsByType', {
    token: alice.token,
    params: { targetableType: 'infoboardPost' },
    query: { selects: 'id,seen_at,read_at' },
  });
  t.same(
    typeList.body.sort((x: { id: string }, y: { id: string }) => x.id.localeCompare(y.id)),
    [
      { id: a1.id, seen_at: '2026-01-01 10:00:00', read_at: '2026-01-02 10:00:00' },
      { id: a2.id, seen_at: '2026-01-02 10:00:00', read_at: '2026-01-02 10:00:00' },
    ].sort((x, y) => x.id.localeCompare(y.id)),
  );

  const filtered = await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: '2026-01-03 10:00:00', filter: { type: 'nothing' } } });
  t.strictSame(filtered.body, { status: 'success', data: 0 });
  const rest = await api.call(t, 'updateNotifications', { token: alice.token, body: { read_at: '2026-01-03 10:00:00' } });
  t.strictSame(rest.body, { status: 'success', data: 1 }, 'only the one still unread');
  t.equal((await api.call(t, 'countNotifications', { token: alice.token })).body, 0);
  t.equal((await api.call(t, 'countNotifications', { token: bob.token })).body, 1, "bob's stay unread");
  const badType = await api.call(t, 'listNotificationsByType', { token: alice.token, params: { targetableType: 'no such/type' } });
  t.equal(badType.status, 422);
});

t.test('typed producers create notifications with a target that the type routes filter', async (t) => {
  const members = await Promise.all([1, 2].map(() => api.createUser(tenant.tenantId)));
  const team = await department(
    tenant.tenantId,
    'Readers',
    members.map((m) => m.id),
  );
  // Members receive a typed notification through a department that has its setting (typed-settings.test.ts).
  await api.db.owner.execute(sql`
    insert into department_notification_settings (tenant_id, department_id, notification_setting_id)
    select tenant_id, ${team}, id from notification_settings
    where tenant_id = ${tenant.tenantId} and key = 'infoboard_post_reading_confirmation_required'`);
  const bad = await api.call(t, 'createTypedNotification', {
    token: sender.token,
    body: { ...message, type: 'somethingElse', targetable_id: 5, department_ids: [team] },
  });
  t.equal(bad.status, 422);
  const denied = await api.call(t, 'createTypedNotification', {
    token: members[0]!.token,
    body: { ...message, type: 'infoboardPostCreated', targetable_id: 5, department_ids: [team] },
  });
  t.equal(denied.status, 403);
  const res = await api.call(t, 'createTypedNotification', {
    token: sender.token,
    body: { ...message, type: 'infoboardPostReadingConfirmationRequired', targetable_id: 42, department_ids: [team] },
  });
  t.equal(res.status, 202);
  t.strictSame(res.body, { status: 'success', data: null });
  await waitForDelivery(t);
  const list = await api.call(t, 'listNotificationsByTarget', {
    token: members[1]!.token,
    params: { targetableType: 'infoboardPost', targetableId: 42 },
    query: { selects: 'type,targetable_type,targetable_id' },
  });
  t.strictSame(list.body, [{ type: 'infoboardPostReadingConfirmationRequired', targetable_type: 'infoboardPost', targetable_id: 42 }]);
  const none = await api.call(t, 'listNotificationsByType', { token: members[1]!.token, params: { targetableType: 'manualEntry' } });
  t.strictSame(none.body, []);
});

t.test('reset needs notifications.administer and deletes every notification of the tenant only', async (t) => {
  const foreignUser = await api.createUser(other.tenantId);
  await stored(foreignUser.id, {}, 0, other.tenantId);
  await stored(alice.id);
  const foreignBefore = await storedCount(other.tenantId);
  const settingsBefore = await api.call(t, 'listNotificationSettings', { token: alice.token });
  const denied = await api.call(t, 'resetNotifications', { token: sender.token });
  t.equal(denied.status, 403);
  t.ok((await storedCount()) > 0);
  const res = await api.call(t, 'resetNotifications', { token: tenant.adminToken });
  t.equal(res.status, 200);
  t.strictSame(res.body, { status: 'success', data: null });
  t.equal(await storedCount(), 0);
  t.equal(await dispatchCount(), 0);
  t.equal(await storedCount(other.tenantId), foreignBefore, "another tenant's notifications stay");
  t.strictSame((await api.call(t, 'listNotificationSettings', { token: alice.token })).body, settingsBefore.body, 'settings unchanged');
});
