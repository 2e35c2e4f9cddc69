import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import { readFileSync } from 'node:fs';
import { AUDIT_ACTIONS } from '../../../src/platform/audit/actions.ts';
import { eraseAuditTrail, recordErasure } from '../../../src/platform/audit/audit.ts';
import { eraseAuditTrailJob, erasePendingAuditTrailsJob, sendPendingErasures } from '../../../src/platform/audit/erase.job.ts';
import { purgeExpiredAuditEvents } from '../../../src/platform/audit/purge-expired.job.ts';
import { storedFieldsOf } from '../../../src/resources/users/fields.ts';
import { blackOut } from '../../../src/resources/users/queries.ts';
import { blackoutValues } from '../../../src/resources/users/rules.ts';
import { startTestApi, startTestWorker, TEST_REQUEST_ID } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const api = await startTestApi(t);
// The blackout's erasure of the trail is a job, run by a worker process beside the API.
await startTestWorker(t, api);
const tenant = await api.createTenant('audit');
const other = await api.createTenant('audit-other');
const auditor = await api.createUser(tenant.tenantId, { permissions: ['audit.view', 'users.view'] });
const fullAuditor = await api.createUser(tenant.tenantId, {
  permissions: ['audit.view', 'users.view', 'users.view-personal', 'users.view-administrative'],
});
const employee = await api.createUser(tenant.tenantId);
// A second server on a database of its own, whose first start creates the first tenant.
const firstStart = await startTestApi(t, { bootstrapTenant: { slug: 'first-start', name: 'First Start Inc.' } });
const admin = tenant.adminToken;
const roleIds = Object.fromEntries(
  (await api.db.owner.execute<{ name: string; id: number }>(sql`select name, id::int as id from roles where tenant_id = ${tenant.tenantId}`)).map((r) => [
    r.name,
    r.id,
  ]),
);
const employeeRole = roleIds.Employee!;
const adminRole = roleIds.Administrator!;

interface AuditEvent {
  id: string;
  occurred_at: string;
  action: string;
  actor: { type: string; id: number | null; label: string | null };
  target: { type: string; id: string | null; label: string | null };
  changes: Record<string, unknown>;
  details: Record<string, unknown> | null;
  origin: Record<string, string | null>;
}

/** The tenant's events about one record, newest first, as a full auditor sees them. */
async function eventsAbout(t: Test, type: string, id: number | string, token = fullAuditor.token): Promise<AuditEvent[]> {
  const res = await api.call(t, 'listAuditEvents', { token, query: { filter: { target_type: type, target_id: String(id) } } });
  t.equal(res.status, 200);
  return res.body;
}

const eventCount = async (tenantId = tenant.tenantId) => {
  const [row] = await api.db.owner.execute<{ count: number }>(sql`select count(*)::int as count from audit_events where tenant_id = ${tenantId}`);
  return row!.count;
};

let userSeq = 0;
async function createUserViaApi(t: Test, values: Record<string, unknown> = {}) {
  const res = await api.call(t, 'createUser', {
    token: admin,
    headers: { 'user-agent': 'audit-test/1.0' },
    body: { username: `audited${++userSeq}`, password: 'a long enough password', first_name: 'Grace', last_name: 'Murray', role_id: employeeRole, ...values },
  });
  t.equal(res.status, 201, JSON.stringify(res.body));
  return res.body as { id: number; username: string };
}

// ---- bad input first ----

t.test('bad filters are 422 problem documents naming the filter', async (t) => {
  const cases: [Record<string, unknown>, string][] = [
    [{ target_id: '7' }, 'filter.target_id'],
    [{ actor_id: '7' }, 'filter.actor_id'],
    [{ from: '2026-02-01T00:00:00Z', to: '2026-01-01T00:00:00Z' }, 'filter.from'],
    [{ action: 'user' }, 'filter.action'],
    [{ action: 'USER.created' }, 'filter.action'],
    [{ actor_type: 'robot' }, 'filter.actor_type'],
    [{ actor_id: 'x' }, 'filter.actor_id'],
    [{ from: 'yesterday' }, 'filter.from'],
    [{ from: '0000-01-01T00:00:00Z' }, 'filter.from'],
    [{ nope: '1' }, 'filter'],
  ];
  for (const [filter, path] of cases) {
    for (const operationId of ['listAuditEvents', 'exportAuditEvents'] as const) {
      const res = await api.call(t, operationId, { token: auditor.token, query: { filter } });
      t.equal(res.status, 422, `${operationId} ${JSON.stringify(filter)}`);
      t.match(res.headers['content-type'], /application\/problem\+json/);
      t.ok(
        Object.keys(res.body.errors ?? {}).some((key) => key.startsWith(path)),
        `${JSON.stringify(filter)} names ${path}: ${JSON.stringify(res.body.errors)}`,
      );
    }
  }
  // RFC 3339 §5.6, the spec's date-time, writes an offset as `Z` or `+hh:mm` / `-hh:mm`: one without its minutes
  // or its colon is no date-time, and is told so as any other value that is none, not that it lies outside the years.
  const notADateTime = await api.call(t, 'listAuditEvents', { token: auditor.token, query: { filter: { from: 'yesterday' } } });
  t.strictSame(notADateTime.body.errors, { 'filter.from': ['must match format "date-time"'] }, 'the wording of any value that is no date-time');
  for (const operationId of ['listAuditEvents', 'exportAuditEvents'] as const) {
    for (const from of ['2026-01-01T00:00:00+14', '2026-01-01T00:00:00.5-05', '2026-01-01 00:00:00+14', '2026-01-01T00:00:00+1400']) {
      const res = await api.call(t, operationId, { token: auditor.token, query: { filter: { from } } });
      t.equal(res.status, 422, `${operationId} ${from}`);
      t.strictSame([res.body.errors, res.body.error_codes], [notADateTime.body.errors, notADateTime.body.error_codes], `${from}: told the format`);
    }
    // With its minutes, the furthest offset is read as its instant.
    const east = await api.call(t, operationId, { token: auditor.token, query: { filter: { from: '2026-01-01T00:00:00+14:00', to: '2025-12-31T10:00:00Z' } } });
    t.equal(east.status, 200, `${operationId}: +14:00 is ten hours before 10:00 UTC`);
    const after = await api.call(t, operationId, {
      token: auditor.token,
      query: { filter: { from: '2026-01-01T00:00:00+14:00', to: '2025-12-31T09:59:59Z' } },
    });
    t.strictSame(after.body.errors, { 'filter.from': ['must not be after filter[to]'] }, `${operationId}: and not after it`);
  }
  // A leap second is a date-time (RFC 3339): read as the start of the next second, as PostgreSQL reads it.
  for (const operationId of ['listAuditEvents', 'exportAuditEvents'] as const) {
    const leap = await api.call(t, operationId, { token: auditor.token, query: { filter: { from: '2016-12-31T23:59:60Z', to: '2017-01-01T00:00:00Z' } } });
    t.equal(leap.status, 200, `${operationId}: a leap second is read`);
  }
  const inverted = await api.call(t, 'listAuditEvents', {
    token: auditor.token,
    query: { filter: { from: '2016-12-31T23:59:60.5Z', to: '2017-01-01T00:00:00Z' } },
  });
  t.equal(inverted.status, 422, 'the leap second comes after the second before midnight, not after midnight');
  // The last instant of the year 9999, finer than a microsecond: within the years the filters take, though the next
  // microsecond, which it is compared as, is in the year 10000 (PostgreSQL reads it so too).
  for (const operationId of ['listAuditEvents', 'exportAuditEvents'] as const) {
    for (const key of ['from', 'to'] as const) {
      const last = await api.call(t, operationId, { token: auditor.token, query: { filter: { [key]: '9999-12-31T23:59:59.9999995Z' } } });
      t.equal(last.status, 200, `${operationId}: filter[${key}] in the last microsecond of 9999`);
    }
  }
  const lastWindow = await api.call(t, 'listAuditEvents', {
    token: auditor.token,
    query: { filter: { from: '9999-12-31T23:59:59.999999Z', to: '9999-12-31T23:59:59.9999995Z' } },
  });
  t.strictSame(lastWindow.body, [], 'from before to, in the last microsecond: nothing lies there');
  const cursor = await api.call(t, 'listAuditEvents', { token: auditor.token, query: { limit: 1, before_id: '00000000-0000-4000-8000-000000000000' } });
  t.equal(cursor.status, 422);
  t.ok(cursor.body.errors.before_id);
  const badId = await api.call(t, 'getAuditEvent', { token: auditor.token, params: { auditEvent: 'not-a-uuid' } });
  t.equal(badId.status, 422);
});

t.test('reading the trail needs audit.view, which the seeded Administrator role holds', async (t) => {
  for (const operationId of ['listAuditEvents', 'exportAuditEvents'] as const) {
    const res = await api.call(t, operationId, { token: employee.token });
    t.equal(res.status, 403);
    t.match(res.body.detail, /audit\.view/);
  }
  const res = await api.call(t, 'listAuditEvents', { token: admin });
  t.equal(res.status, 200);
});

t.test('the spec lists exactly the actions Atrium records', async (t) => {
  const spec = JSON.parse(readFileSync(new URL('../../../generated/openapi.json', import.meta.url), 'utf8'));
  t.strictSame(spec.components.schemas.AuditAction.enum, [...AUDIT_ACTIONS]);
});

// ---- one test per action ----

t.test('user.created: the actor, the target, the changes and the origin, without the password', async (t) => {
  const user = await createUserViaApi(t, { email: 'grace@example.com', department_ids: [] });
  const [event] = await eventsAbout(t, 'user', user.id);
  t.match(event, {
    action: 'user.created',
    actor: { type: 'user', id: tenant.adminUserId, label: 'Atrium Administrator' },
    target: { type: 'user', id: String(user.id), label: 'Grace Murray' },
    origin: { operation_id: 'createUser', client_request_id: TEST_REQUEST_ID, user_agent: 'audit-test/1.0', command: null, job: null },
  });
  t.match(event!.origin.request_id, UUID, 'the request id is the server’s, not the one the client sent');
  t.ok(event!.origin.client_address, 'the client address is recorded');
  t.match(event!.occurred_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  t.strictSame(event!.changes.username, { from: null, to: user.username });
  t.strictSame(event!.changes.email, { from: null, to: 'grace@example.com' });
  t.strictSame(event!.changes.password, { changed: true });
  t.notOk(JSON.stringify(event).includes('a long enough password'));
  const shown = await api.call(t, 'getAuditEvent', { token: auditor.token, params: { auditEvent: event!.id } });
  t.equal(shown.status, 200);
  t.equal(shown.body.action, 'user.created');
});

t.test('an event names its actor as they were named when they acted, never as they are named later', async (t) => {
  const actor = await api.createUser(tenant.tenantId, {
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'],
    values: { firstName: ' Ada ', lastName: 'Lovelace' },
  });
  const rename = (firstName: string | null, lastName: string | null) =>
    api.db.owner.execute(sql`update users set first_name = ${firstName}, last_name = ${lastName} where id = ${actor.id}`);
  const cityBy = async (city: string) => {
    const res = await api.call(t, 'updateUser', { token: actor.token, params: { user: employee.id }, body: { city } });
    t.equal(res.status, 200, JSON.stringify(res.body));
    const [event] = await eventsAbout(t, 'user', employee.id);
    t.match(event, { action: 'user.updated', changes: { city: { to: city } } });
    return event!;
  };
  const first = await cityBy('Ada One');
  await rename('Augusta', 'King');
  const second = await cityBy('Ada Two');
  await rename('  ', null);
  const third = await cityBy('Ada Three');
  t.strictSame(
    [first, second, third].map((event) => [event.actor.id, event.actor.label]),
    [
      [actor.id, 'Ada Lovelace'],
      [actor.id, 'Augusta King'],
      [actor.id, actor.username],
    ],
    'each event keeps the name of its time; a blank name falls back to the username',
  );
  const again = await eventsAbout(t, 'user', employee.id);
  t.equal(again.find((event) => event.id === first.id)?.actor.label, 'Ada Lovelace', 'the first event did not follow the renames');
});

t.test('user.updated records only what changed, from and to; a no-op writes nothing', async (t) => {
  const user = await createUserViaApi(t);
  const res = await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { last_name: 'Hopper', city: 'Arlington', active: true } });
  t.equal(res.status, 200);
  const [event] = await eventsAbout(t, 'user', user.id);
  t.equal(event!.action, 'user.updated');
  t.equal(event!.target.label, 'Grace Hopper');
  t.strictSame(event!.changes, { last_name: { from: 'Murray', to: 'Hopper' }, city: { from: null, to: 'Arlington' } });
  t.equal(event!.origin.operation_id, 'updateUser');
  const before = await eventCount();
  const same = await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { last_name: 'Hopper' } });
  t.equal(same.status, 200);
  t.equal(await eventCount(), before, 'nothing changed, nothing recorded');
});

t.test('user.password_changed says only that the password changed; no hash is ever stored', async (t) => {
  const user = await createUserViaApi(t);
  const res = await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { password: 'another long password' } });
  t.equal(res.status, 200);
  const [event] = await eventsAbout(t, 'user', user.id);
  t.equal(event!.action, 'user.password_changed');
  t.strictSame(event!.changes, { password: { changed: true } });
  const leaked = await api.db.owner.execute(
    sql`select 1 from audit_events where changes::text like '%argon2%' or changes::text like '%another long password%'`,
  );
  t.equal(leaked.length, 0);
});

t.test('user.deleted, user.restored, user.marked_for_logout', async (t) => {
  const user = await createUserViaApi(t);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: user.id } })).status, 204);
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: user.id } })).status, 204);
  const restored = await api.call(t, 'restoreUser', { token: admin, params: { user: user.id }, body: { role_id: adminRole } });
  t.equal(restored.status, 200);
  const events = await eventsAbout(t, 'user', user.id);
  t.strictSame(
    events.map((e) => e.action),
    ['user.restored', 'user.deleted', 'user.marked_for_logout', 'user.created'],
  );
  t.strictSame(events[0]!.changes, { role_id: { from: employeeRole, to: adminRole } });
  t.strictSame(events[1]!.origin.operation_id, 'deleteUser');
  t.strictSame(events[2]!.origin.operation_id, 'markUserForLogout');
});

t.test('user_settings.updated records the required profile keys before and after', async (t) => {
  const res = await api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: ['email'] } });
  t.equal(res.status, 200);
  const [event] = await eventsAbout(t, 'tenant', tenant.tenantId);
  t.equal(event!.action, 'user_settings.updated');
  t.strictSame(event!.changes, { required_profile_keys: { from: [], to: ['email'] } });
  await api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: [] } });
});

t.test('a refused write leaves no event', async (t) => {
  const user = await createUserViaApi(t);
  const before = await eventCount();
  const refused = await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { last_name: 'X', role_id: 999_999 } });
  t.equal(refused.status, 422);
  const forbidden = await api.call(t, 'deleteUser', { token: employee.token, params: { user: user.id } });
  t.equal(forbidden.status, 403);
  const duplicate = await api.call(t, 'createUser', {
    token: admin,
    body: { username: user.username, password: 'a long enough password', first_name: 'A', last_name: 'B', role_id: employeeRole },
  });
  t.equal(duplicate.status, 422);
  t.equal(await eventCount(), before);
});

t.test('personal and administrative fields in changes need the users resource’s permissions', async (t) => {
  const user = await createUserViaApi(t);
  await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { phone: '+1 555 0100', staff_number: 'S-1', first_name: 'Ada' } });
  const [seen] = await eventsAbout(t, 'user', user.id, auditor.token);
  t.strictSame(seen!.changes, { phone: { changed: true }, staff_number: { changed: true }, first_name: { from: 'Grace', to: 'Ada' } });
  t.notOk(JSON.stringify(seen).includes('+1 555 0100'));
  const [full] = await eventsAbout(t, 'user', user.id);
  t.strictSame(full!.changes.phone, { from: null, to: '+1 555 0100' });
  const exported = await api.call(t, 'exportAuditEvents', { token: auditor.token, query: { filter: { target_type: 'user', target_id: String(user.id) } } });
  t.notOk(exported.text.includes('+1 555 0100'), 'the export hides them too');
});

t.test('the first tenant a server creates at its first start begins its trail with tenant.created, by the system', async (t) => {
  const events = await firstStart.db.owner.execute<{
    action: string;
    actor_type: string;
    target_type: string;
    target_label: string;
    command: string | null;
    job: string | null;
  }>(sql`select action, actor_type, target_type, target_label, command, job from audit_events`);
  t.strictSame(
    [...events],
    [{ action: 'tenant.created', actor_type: 'system', target_type: 'tenant', target_label: 'First Start Inc.', command: null, job: null }],
  );
});

t.test('a client’s X-Request-Id cannot make its events part of another request', async (t) => {
  // The victim's request, without an id of its own: the server's UUID is echoed.
  const victim = await api.call(t, 'updateUserSettings', { token: admin, headers: { 'x-request-id': '' }, body: { required_profile_keys: ['city'] } });
  t.equal(victim.status, 200);
  const victimId = victim.headers['x-request-id'] as string;
  t.match(victimId, UUID);
  const [victimEvent] = (await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { limit: 1 } })).body as AuditEvent[];
  t.match(victimEvent, { action: 'user_settings.updated', origin: { request_id: victimId, client_request_id: null } });
  // Another caller sends that id as theirs: the echo is theirs as before, the trail keeps them apart.
  const spoofer = await api.createUser(tenant.tenantId, { permissions: ['users.administer', 'users.view'] });
  const spoofed = await api.call(t, 'updateUserSettings', {
    token: spoofer.token,
    headers: { 'x-request-id': victimId },
    body: { required_profile_keys: [] },
  });
  t.equal(spoofed.status, 200);
  t.equal(spoofed.headers['x-request-id'], victimId, 'X-Request-Id echoes what the client sent');
  const byRequest = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { request_id: victimId } } });
  t.strictSame(
    byRequest.body.map((e: AuditEvent) => e.id),
    [victimEvent!.id],
    'the request id names the victim’s request alone',
  );
  const byClaim = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { client_request_id: victimId } } });
  t.equal(byClaim.body.length, 1);
  t.match(byClaim.body[0], { actor: { id: spoofer.id }, origin: { client_request_id: victimId } });
  t.match(byClaim.body[0].origin.request_id, UUID);
  t.not(byClaim.body[0].origin.request_id, victimId);
});

t.test('the trail is append-only for the application role: a request may not change or remove an event', async (t) => {
  await createUserViaApi(t);
  const [event] = await api.db.owner.execute<{ id: string; actor_label: string }>(
    sql`select id, actor_label from audit_events where tenant_id = ${tenant.tenantId} order by occurred_at desc limit 1`,
  );
  const sqlState = (error: { cause?: { code?: string }; code?: string }) => error.cause?.code ?? error.code;
  const statements = {
    'an update of one event': sql`update audit_events set actor_label = 'Someone else' where id = ${event!.id}`,
    'a delete of one event': sql`delete from audit_events where id = ${event!.id}`,
    'a delete of all': sql`delete from audit_events`,
    'a truncate': sql`truncate audit_events`,
  };
  for (const [what, statement] of Object.entries(statements)) {
    const refused = await api.db.tenant(tenant.tenantId, (tx) => tx.execute(statement)).then(() => 'allowed', sqlState);
    t.equal(refused, '42501', `${what} is refused (permission denied)`);
  }
  // The one rewrite it may ask for is erasure, and only of someone a blackout has cleared, in its own tenant.
  const notBlackedOut = await api.db
    .tenant(tenant.tenantId, (tx) => tx.execute(sql`select atrium_anonymize_audit_trail(${employee.id})`))
    .then(() => 'allowed', sqlState);
  t.equal(notBlackedOut, '42501', 'a user who is not blacked out cannot be anonymized');
  const noTenant = await api.db.transaction((tx) => tx.execute(sql`select atrium_anonymize_audit_trail(${employee.id})`)).then(() => 'allowed', sqlState);
  t.equal(noTenant, '42501', 'not without a tenant');
  const [after] = await api.db.owner.execute<{ id: string; actor_label: string }>(sql`select id, actor_label from audit_events where id = ${event!.id}`);
  t.strictSame(after, event, 'the event is as it was');
  // Writing and reading stay: the request role records events and lists its tenant's.
  const before = await eventCount();
  await createUserViaApi(t);
  t.equal(await eventCount(), before + 1);
});

/** The events about or by user `userId`, as stored, in a stable order: what erasure rewrites. */
const trailOf = (userId: number) =>
  api.db.owner.execute<{ id: string; actor_label: string | null; target_label: string | null; changes: unknown }>(sql`
    select id, actor_label, target_label, changes from audit_events
     where tenant_id = ${tenant.tenantId} and ((target_type = 'user' and target_id = ${String(userId)}) or (actor_type = 'user' and actor_id = ${userId}))
     order by id`);

/** Whether the erasure of `userId`'s trail is still recorded, awaiting its job. */
const erasurePending = async (userId: number) =>
  (await api.db.owner.execute(sql`select 1 from audit_erasures where tenant_id = ${tenant.tenantId} and user_id = ${userId}`)).length > 0;

/** Waits (for the erasure's job) until `text` is nowhere in the events about or by `userId`; answers whether it went. */
async function leavesTrail(userId: number, text: string): Promise<boolean> {
  const trail = await eventually(
    async () => JSON.stringify(await trailOf(userId)),
    (json) => !json.includes(text),
  );
  return !trail.includes(text);
}

/**
 * A blackout's transaction without the job's send that follows its commit: as if the
 * process died in between. The erasure stays recorded.
 */
async function blackoutWithoutJob(user: { id: number; username: string }): Promise<void> {
  await api.db.tenant(tenant.tenantId, async (tx) => {
    const values = blackoutValues(user.id);
    await blackOut(tx, api.config, user, values);
    await recordErasure(tx, user.id, storedFieldsOf(values));
  });
}

const sqlStateOf = (error: { cause?: { code?: string }; code?: string }) => error.cause?.code ?? error.code;

t.test('a blackout rewrites the person’s past events right after it commits, and is recorded with who did it', async (t) => {
  const user = await createUserViaApi(t, { email: 'erase@example.com' });
  await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { city: 'Springfield', last_name: 'Secret' } });
  // An event the person made themselves.
  const own = await api.tokenFor(tenant.tenantId, user.id);
  await api.call(t, 'updateUser', { token: own, params: { user: user.id }, body: { phone: '+1 555 0199' } });
  const before = await eventsAbout(t, 'user', user.id);
  const res = await api.call(t, 'blackoutUser', { token: admin, params: { user: user.id } });
  t.equal(res.status, 204);
  // The erasure's job runs in a transaction of its own once the blackout committed.
  t.ok(await leavesTrail(user.id, user.username), 'the job erased the trail');
  t.notOk(await erasurePending(user.id), 'and its record with it');
  const after = await eventsAbout(t, 'user', user.id);
  t.equal(after.length, before.length + 1);
  t.match(after[0], {
    action: 'user.blacked_out',
    actor: { id: tenant.adminUserId, label: 'Atrium Administrator' },
    target: { label: `deleted-user-${user.id}` },
  });
  const text = JSON.stringify(after);
  for (const personal of ['erase@example.com', 'Springfield', 'Secret', 'Grace', '+1 555 0199', user.username])
    t.notOk(text.includes(personal), `${personal} is gone`);
  // Ids, actions and times stay.
  t.strictSame(
    after.slice(1).map((e) => [e.id, e.action, e.occurred_at, e.actor.id]),
    before.map((e) => [e.id, e.action, e.occurred_at, e.actor.id]),
  );
  const created = after.find((e) => e.action === 'user.created')!;
  t.strictSame(created.changes.email, { from: null, to: null });
  t.strictSame(created.changes.username, { from: `deleted-user-${user.id}`, to: `deleted-user-${user.id}` });
  const byThem = after.find((e) => e.actor.id === user.id)!;
  t.equal(byThem.actor.label, `deleted-user-${user.id}`);
  // The rewrite runs for the application role, which may not update the trail itself; with
  // no erasure left to do, it rewrites nothing.
  const again = await api.db.tenant(tenant.tenantId, (tx) =>
    tx.execute<{ rewritten: number }>(sql`select atrium_anonymize_audit_trail(${user.id}) as rewritten`),
  );
  t.equal(again[0]!.rewritten, 0, 'done already: nothing to rewrite');
  const elsewhere = await api.db
    .tenant(other.tenantId, (tx) => tx.execute(sql`select atrium_anonymize_audit_trail(${user.id})`))
    .then(() => 'allowed', sqlStateOf);
  t.equal(elsewhere, '42501', 'another tenant cannot name them');
  // The application role may record an erasure (the blackout does), never remove one.
  const removed = await api.db
    .tenant(tenant.tenantId, (tx) => tx.execute(sql`delete from audit_erasures where user_id = ${user.id}`))
    .then(() => 'allowed', sqlStateOf);
  t.equal(removed, '42501', 'a request cannot cancel an erasure');
});

t.test("an erasure writes the blackout's values whatever its record holds: a request cannot choose a history", async (t) => {
  const user = await createUserViaApi(t, { email: 'forged@example.com', city: 'Ogdenville' });
  await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { first_name: 'Forged', role_id: adminRole } });
  // An event naming every field a blackout clears, each with another value than the blackout's.
  const erased = storedFieldsOf(blackoutValues(user.id));
  const other = (value: unknown) => (typeof value === 'boolean' ? !value : 'kept?');
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, action, actor_type, actor_id, actor_label, target_type, target_id, target_label, changes)
    values (${tenant.tenantId}, 'user.updated', 'user', ${tenant.adminUserId}, 'Atrium Administrator', 'user', ${String(user.id)}, 'Grace Forged',
      ${JSON.stringify(Object.fromEntries(Object.entries(erased).map(([key, value]) => [key, { from: other(value), to: other(value) }])))}::jsonb)`);
  await blackoutWithoutJob(user);
  // A request able to run SQL replaces the recorded erasure with one of its choosing: values of its own, or none (the owner removes the genuine one first).
  await api.db.owner.execute(sql`delete from audit_erasures where tenant_id = ${tenant.tenantId} and user_id = ${user.id}`);
  await api.db.tenant(tenant.tenantId, (tx) => recordErasure(tx, user.id, { first_name: 'Someone Else', role_id: 1, username: 'chosen-name' }));
  await eraseAuditTrailJob.handle({ tenantId: tenant.tenantId, userId: user.id }, api.atrium.services, { retried: false });
  const trail = await trailOf(user.id);
  const text = JSON.stringify(trail);
  for (const kept of ['Ogdenville', 'forged@example.com', 'Someone Else', 'chosen-name', 'kept?']) t.notOk(text.includes(kept), `${kept} is not in the trail`);
  const every = trail.find((event) => Object.keys(event.changes as object).length === Object.keys(erased).length)!;
  t.strictSame(
    every.changes,
    Object.fromEntries(Object.entries(erased).map(([key, value]) => [key, { from: value, to: value }])),
    "every field a blackout clears takes the blackout's value",
  );
  const roleChanges = trail
    .map((event) => (event.changes as { role_id?: { from: number | null; to: number } }).role_id)
    .filter((change) => change !== undefined)
    .sort((a, b) => (a.from ?? 0) - (b.from ?? 0));
  t.strictSame(
    roleChanges,
    [
      { from: null, to: employeeRole },
      { from: employeeRole, to: adminRole },
    ],
    'what a blackout keeps stays',
  );
  t.ok(
    trail.every((event) => event.target_label === null || event.target_label === `deleted-user-${user.id}` || !event.target_label.includes('Grace')),
    'labels are the anonymized username',
  );
});

t.test('an erasure recorded for someone not blacked out erases nothing and is not sent again every minute', async (t) => {
  const user = await createUserViaApi(t, { email: 'not-yet@example.com' });
  await api.db.tenant(tenant.tenantId, (tx) => recordErasure(tx, user.id, {}));
  await api.db.owner.execute(
    sql`update audit_erasures set requested_at = now() - interval '2 minutes' where tenant_id = ${tenant.tenantId} and user_id = ${user.id}`,
  );
  const refused = await api.db
    .tenant(tenant.tenantId, (tx) => tx.execute(sql`select atrium_anonymize_audit_trail(${user.id})`))
    .then(() => 'allowed', sqlStateOf);
  t.equal(refused, '42501', 'the function refuses');
  t.ok(JSON.stringify(await trailOf(user.id)).includes('not-yet@example.com'), 'the trail is as it was');
  t.equal(await sendPendingErasures(api.atrium.services), 0, 'the sweep sends no job for it');
  await api.db.owner.execute(sql`delete from audit_erasures where tenant_id = ${tenant.tenantId} and user_id = ${user.id}`);
});

t.test('an erasure whose job was never sent is done by audit.erase-pending', async (t) => {
  const user = await createUserViaApi(t, { email: 'lost-job@example.com', city: 'Shelbyville' });
  await blackoutWithoutJob(user);
  t.ok(await erasurePending(user.id), 'the blackout committed with its erasure recorded');
  t.ok(JSON.stringify(await trailOf(user.id)).includes('Shelbyville'), 'and nothing erased yet');
  // The sweep sends again what is recorded a minute after the blackout, not younger.
  t.equal(await sendPendingErasures(api.atrium.services), 0, 'a young record is left to its own job');
  await api.db.owner.execute(
    sql`update audit_erasures set requested_at = now() - interval '2 minutes' where tenant_id = ${tenant.tenantId} and user_id = ${user.id}`,
  );
  t.equal(erasePendingAuditTrailsJob.name, 'audit.erase-pending');
  await erasePendingAuditTrailsJob.handle({}, api.atrium.services, { retried: false });
  t.ok(await leavesTrail(user.id, 'Shelbyville'), 'the worker ran the job the sweep sent');
  for (const personal of ['lost-job@example.com', user.username]) t.notOk(JSON.stringify(await trailOf(user.id)).includes(personal), `${personal} is gone`);
  t.notOk(await erasurePending(user.id), 'the record went with the erasure');
  t.equal(await sendPendingErasures(api.atrium.services), 0, 'nothing left to send');
});

t.test('an erasure that failed is retried, and running it again changes nothing', async (t) => {
  const user = await createUserViaApi(t, { email: 'retried@example.com', city: 'Capital City' });
  await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { phone: '+1 555 0123' } });
  await blackoutWithoutJob(user);
  const unerased = await trailOf(user.id);
  // An attempt that fails after the rewrite, before its commit (its process lost): nothing of it stays.
  const failed = await api.db
    .tenant(tenant.tenantId, async (tx) => {
      await tx.execute(sql`select atrium_anonymize_audit_trail(${user.id})`);
      throw new Error('the attempt failed before its commit');
    })
    .then(
      () => 'committed',
      (error: Error) => error.message,
    );
  t.equal(failed, 'the attempt failed before its commit');
  t.strictSame(await trailOf(user.id), unerased, 'a failed attempt leaves the trail as it was');
  t.ok(await erasurePending(user.id), 'and the erasure recorded');
  // Its retry erases.
  await eraseAuditTrailJob.handle({ tenantId: tenant.tenantId, userId: user.id }, api.atrium.services, { retried: true });
  const erased = await trailOf(user.id);
  t.equal(erased.length, unerased.length);
  t.notOk(JSON.stringify(erased).includes('Capital City'));
  t.notOk(await erasurePending(user.id));
  // A job run again (a duplicate, or a retry after a lost completion) finds nothing to do.
  await eraseAuditTrailJob.handle({ tenantId: tenant.tenantId, userId: user.id }, api.atrium.services, { retried: true });
  t.strictSame(await trailOf(user.id), erased, 'a second run gives the same trail');
  // A second blackout records the erasure again: erasing an erased trail gives the same trail.
  await blackoutWithoutJob({ id: user.id, username: `deleted-user-${user.id}` });
  t.equal(await eraseAuditTrail(api.db, tenant.tenantId, user.id), erased.length, 'every event about or by them, and no other');
  t.strictSame(await trailOf(user.id), erased, 'erasing twice gives the same trail');
  // Two runs at once: the first to remove the record erases, the other waits for it and finds nothing left.
  await blackoutWithoutJob({ id: user.id, username: `deleted-user-${user.id}` });
  const both = await Promise.all([eraseAuditTrail(api.db, tenant.tenantId, user.id), eraseAuditTrail(api.db, tenant.tenantId, user.id)]);
  t.strictSame(
    both.sort((a, b) => a - b),
    [0, erased.length],
    'one of two concurrent runs rewrites',
  );
  t.strictSame(await trailOf(user.id), erased);
});

t.test('another tenant’s events are invisible (row-level security)', async (t) => {
  await api.call(t, 'updateUserSettings', { token: other.adminToken, body: { required_profile_keys: ['city'] } });
  const [theirs] = await api.db.owner.execute<{ id: string }>(sql`select id from audit_events where tenant_id = ${other.tenantId} limit 1`);
  t.ok(theirs);
  const shown = await api.call(t, 'getAuditEvent', { token: admin, params: { auditEvent: theirs!.id } });
  t.equal(shown.status, 404);
  const listed = await api.call(t, 'listAuditEvents', { token: admin });
  t.notOk(listed.body.some((e: AuditEvent) => e.id === theirs!.id));
  const visible = await api.db.tenant(tenant.tenantId, (tx) =>
    tx.execute(sql`select count(*)::int as count from audit_events where tenant_id = ${other.tenantId}`),
  );
  t.equal((visible[0] as { count: number }).count, 0);
});

t.test('paging by cursor and filters by action prefix, actor, request id and time', async (t) => {
  const all = await api.call(t, 'listAuditEvents', { token: fullAuditor.token });
  const first = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { limit: 2 } });
  t.strictSame(
    first.body.map((e: AuditEvent) => e.id),
    all.body.slice(0, 2).map((e: AuditEvent) => e.id),
  );
  t.match(first.headers.link, /before_id=/);
  const next = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { limit: 2, before_id: first.body[1].id } });
  t.strictSame(
    next.body.map((e: AuditEvent) => e.id),
    all.body.slice(2, 4).map((e: AuditEvent) => e.id),
  );
  const users = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { action: 'user.' } } });
  t.ok(users.body.length > 0 && users.body.every((e: AuditEvent) => e.action.startsWith('user.')));
  t.notOk(
    users.body.some((e: AuditEvent) => e.action.startsWith('user_settings')),
    'the prefix is literal: user_ is not user.',
  );
  const exact = await api.call(t, 'listAuditEvents', {
    token: fullAuditor.token,
    query: { filter: { action: 'user.deleted', actor_type: 'user', actor_id: tenant.adminUserId } },
  });
  t.ok(exact.body.length > 0 && exact.body.every((e: AuditEvent) => e.action === 'user.deleted'));
  const sentByClient = async () =>
    (await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { limit: 1000, filter: { client_request_id: TEST_REQUEST_ID } } }))
      .body as AuditEvent[];
  const sentBefore = await sentByClient();
  await createUserViaApi(t);
  const byClientId = await sentByClient();
  t.equal(byClientId.length, sentBefore.length + 1);
  t.ok(
    byClientId.every((e) => e.origin.client_request_id === TEST_REQUEST_ID),
    'the filter selects what the client sent',
  );
  const newest = byClientId[0]!;
  const byRequest = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { request_id: newest.origin.request_id! } } });
  t.strictSame(
    byRequest.body.map((e: AuditEvent) => e.id),
    [newest.id],
  );
  // A window around the event's own time finds it; a window beside it does not.
  const ids = async (filter: Record<string, unknown>) =>
    ((await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter } })).body as AuditEvent[]).map((e) => e.id);
  const occurred = Date.parse(newest.occurred_at);
  const at = (ms: number) => new Date(ms).toISOString();
  const ofRequest = { request_id: newest.origin.request_id! };
  t.strictSame(await ids({ ...ofRequest, from: at(occurred - 1000), to: at(occurred + 1000) }), [newest.id], 'a window around it');
  t.strictSame(await ids({ ...ofRequest, from: at(occurred + 1000) }), [], 'from after it');
  t.strictSame(await ids({ ...ofRequest, to: at(occurred - 1000) }), [], 'to before it');
  // The bounds, on an event stored at a whole second: from is inclusive, to exclusive (the spec's "at or after", "before").
  const second = Math.floor(Date.now() / 1000) * 1000 - 3_600_000;
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, target_type, target_id)
    values (${tenant.tenantId}, ${at(second)}::timestamptz, 'role.updated', 'system', 'role', 'window-probe')`);
  const probe = { target_type: 'role', target_id: 'window-probe' };
  const [probeId] = await ids(probe);
  t.ok(probeId, 'the probe is listed');
  t.strictSame(await ids({ ...probe, from: at(second) }), [probeId], 'from at its instant');
  t.strictSame(await ids({ ...probe, from: at(second + 1) }), [], 'from a millisecond after it');
  t.strictSame(await ids({ ...probe, to: at(second) }), [], 'to at its instant');
  t.strictSame(await ids({ ...probe, to: at(second + 1) }), [probeId], 'to a millisecond after it');
  t.strictSame(await ids({ ...probe, from: at(second), to: at(second + 1) }), [probeId], 'the one-millisecond window');
  const withOffset = new Date(second + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
  t.strictSame(await ids({ ...probe, from: withOffset, to: at(second + 1) }), [probeId], 'from at its instant, with an offset');
  // Events are stored to the microsecond, and the bounds are read to it (or finer): an event 200 µs into a
  // millisecond is after a bound 100 µs into it and before one 500 µs into it.
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, target_type, target_id)
    values (${tenant.tenantId}, ${at(second)}::timestamptz + interval '200 microseconds', 'role.updated', 'system', 'role', 'micro-probe')`);
  const micro = { target_type: 'role', target_id: 'micro-probe' };
  const [microId] = await ids(micro);
  const into = (fraction: string) => at(second).replace('.000Z', `.${fraction}Z`);
  for (const [bounds, listed, what] of [
    [{ from: into('000100') }, true, 'from before it'],
    [{ from: into('000200') }, true, 'from at its instant'],
    [{ from: into('000500') }, false, 'from after it, within its millisecond'],
    [{ from: into('0001999') }, true, 'from a tenth of a microsecond before it'],
    [{ from: into('0002001') }, false, 'from a tenth of a microsecond after it'],
    [{ to: into('000500') }, true, 'to after it, within its millisecond'],
    [{ to: into('000200') }, false, 'to at its instant'],
    [{ to: into('000201') }, true, 'to a microsecond after it'],
    [{ to: into('0002001') }, true, 'to a tenth of a microsecond after it'],
    [{ from: into('000100'), to: into('000300') }, true, 'a window of 200 µs around it'],
    [{ from: new Date(second + 2 * 3_600_000).toISOString().replace('.000Z', '.000500+02:00') }, false, 'from after it, with an offset'],
    [{ from: new Date(second + 2 * 3_600_000).toISOString().replace('.000Z', '.000100+02:00') }, true, 'from before it, with an offset'],
  ] as const) {
    t.strictSame(await ids({ ...micro, ...bounds }), listed ? [microId] : [], what);
  }
  const reversed = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { from: into('000500'), to: into('000200') } } });
  t.equal(reversed.status, 422, 'from after to, within one millisecond');
  t.ok(reversed.body.errors?.['filter.from']);
  // RFC 3339 §5.6 lets a space stand for the `T`, and the spec's date-time admits it: the same instants, to the microsecond.
  const spaced = (text: string) => text.replace('T', ' ');
  for (const [bounds, listed, what] of [
    [{ from: spaced(into('000100')), to: spaced(into('000300')) }, true, 'a window of 200 µs around it, spaced'],
    [{ from: spaced(into('000500')) }, false, 'from after it, spaced'],
    [{ to: spaced(into('000200')) }, false, 'to at its instant, spaced'],
  ] as const) {
    t.strictSame(await ids({ ...micro, ...bounds }), listed ? [microId] : [], what);
  }
  const spacedReversed = await api.call(t, 'listAuditEvents', {
    token: fullAuditor.token,
    query: { filter: { from: spaced(into('000500')), to: spaced(into('000200')) } },
  });
  t.strictSame(spacedReversed.body.errors, { 'filter.from': ['must not be after filter[to]'] }, 'told the order, not the years');
  const future = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { from: '2999-01-01T00:00:00Z' } } });
  t.strictSame(future.body, []);
  const past = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { to: '2000-01-01T00:00:00Z' } } });
  t.strictSame(past.body, []);
  // Any RFC 3339 offset is read, even one PostgreSQL would refuse to parse itself.
  const farOffset = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { to: '2000-01-01T00:00:00+23:59' } } });
  t.strictSame(farOffset.body, []);
});

t.test('the export streams the selection as NDJSON, newest first, across batches', async (t) => {
  // More events than one batch of the export.
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, target_type, target_id, target_label)
    select ${tenant.tenantId}, now() - make_interval(secs => n), 'menu_item.created', 'system', 'menu_item', n::text, 'Item ' || n
    from generate_series(1, 2500) n`);
  const res = await api.call(t, 'exportAuditEvents', { token: fullAuditor.token, query: { filter: { target_type: 'menu_item' } } });
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /application\/x-ndjson/);
  const lines = res.text.split('\n');
  t.equal(lines.pop(), '', 'every line ends in a newline');
  t.equal(lines.length, 2500);
  const events = lines.map((line) => JSON.parse(line) as AuditEvent);
  t.strictSame(
    events.slice(0, 3).map((e) => e.target.id),
    ['1', '2', '3'],
  );
  t.equal(new Set(events.map((e) => e.id)).size, 2500, 'none twice');
  const listed = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { filter: { target_type: 'menu_item' }, limit: 5 } });
  t.strictSame(listed.body, events.slice(0, 5));
  const head = await api.atrium.app!.inject({
    method: 'HEAD',
    url: '/api/administration/audit-events/export',
    headers: { authorization: `Bearer ${fullAuditor.token}` },
  });
  t.equal(head.statusCode, 200);
  t.match(head.headers['content-type'], /application\/x-ndjson/);
  t.equal(head.body, '', 'HEAD reads nothing');
});

t.test('a page costs the same number of statements whatever its size', async (t) => {
  const statements = async (limit: number) => {
    const before = api.db.queryCount;
    const res = await api.call(t, 'listAuditEvents', { token: fullAuditor.token, query: { limit, filter: { action: 'menu_item.' } } });
    t.equal(res.body.length, limit);
    return api.db.queryCount - before;
  };
  t.equal(await statements(1000), await statements(2));
});

t.test('retention purges events older than AUDIT_RETENTION_DAYS, in every tenant', async (t) => {
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, target_type)
    values (${tenant.tenantId}, now() - interval '401 days', 'role.updated', 'system', 'role'),
           (${other.tenantId}, now() - interval '500 days', 'role.updated', 'system', 'role'),
           (${tenant.tenantId}, now() - interval '399 days', 'role.created', 'system', 'role')`);
  const services = api.atrium.services;
  t.equal(services.config.auditRetentionDays, 400);
  const purged = await purgeExpiredAuditEvents(services);
  t.equal(purged, 2);
  const [left] = await api.db.owner.execute<{ count: number }>(
    sql`select count(*)::int as count from audit_events where occurred_at < now() - interval '398 days'`,
  );
  t.equal(left!.count, 1);
  t.equal(await purgeExpiredAuditEvents({ ...services, config: { ...services.config, auditRetentionDays: 0 } }), 0, '0 keeps them');
});
