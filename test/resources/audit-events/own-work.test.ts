/**
 * The audit trail of what users do for themselves rather than as administrators: signing
 * in with a password and signing out (`access_token.*`), task executions and form
 * submissions, and notifications' read states. One event per change, in its transaction;
 * a refused request, or one that changes nothing, leaves none.
 */
import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi, startTestWorker, TEST_REQUEST_ID } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { roleNamed, storeNotification } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
// The blackout's erasure of the trail is a job, run by a worker process beside the API.
await startTestWorker(t, api);
const tenant = await api.createTenant('own-work');
const admin = tenant.adminToken;
const auditor = await api.createUser(tenant.tenantId, { permissions: ['audit.view'] });
const employee = await api.createUser(tenant.tenantId);
const colleague = await api.createUser(tenant.tenantId);

interface AuditEvent {
  action: string;
  actor: { type: string; id: number | null; label: string | null };
  target: { type: string; id: string | null; label: string | null };
  changes: Record<string, unknown>;
  details: Record<string, unknown> | null;
  origin: Record<string, string | null>;
}

/** The tenant's events about one record, newest first. */
async function eventsAbout(t: Test, type: string, id: number | string): Promise<AuditEvent[]> {
  const res = await api.call(t, 'listAuditEvents', { token: auditor.token, query: { filter: { target_type: type, target_id: String(id) } } });
  t.equal(res.status, 200);
  return res.body;
}

/** The tenant's events of one action, newest first. */
async function eventsOf(t: Test, action: string): Promise<AuditEvent[]> {
  const res = await api.call(t, 'listAuditEvents', { token: auditor.token, query: { filter: { action } } });
  t.equal(res.status, 200);
  return res.body;
}

const eventCount = async () => {
  const [row] = await api.db.owner.execute<{ count: number }>(sql`select count(*)::int as count from audit_events where tenant_id = ${tenant.tenantId}`);
  return row!.count;
};

/** Whether `text` appears anywhere in the tenant's trail (changes, details, labels). */
const inTrail = async (text: string) => {
  const rows = await api.db.owner.execute(sql`
    select 1 from audit_events where tenant_id = ${tenant.tenantId}
      and concat_ws(' ', changes::text, details::text, actor_label, target_label) like ${`%${text}%`}`);
  return rows.length > 0;
};

const label = (user: { username: string }) => `Test ${user.username}`;
const byAdmin = { type: 'user', id: tenant.adminUserId, label: 'Atrium Administrator' };
const byEmployee = { type: 'user', id: employee.id, label: label(employee) };

// ---- refusals first ----

t.test('refused sign-ins and sign-outs leave no event', async (t) => {
  const inactive = await api.createUser(tenant.tenantId, { values: { active: false } });
  const before = await eventCount();
  const attempts = [
    { tenant: 'own-work', username: employee.username, password: 'not the password' },
    { tenant: 'own-work', username: 'nobody', password: employee.password },
    { tenant: 'own-work', username: inactive.username, password: inactive.password },
  ];
  for (const [i, body] of attempts.entries()) {
    t.equal((await api.call(t, 'login', { body, headers: { 'x-forwarded-for': `10.1.0.${i}` } })).status, 401, JSON.stringify(body));
  }
  t.equal((await api.call(t, 'login', { body: { tenant: 'own-work', username: employee.username } })).status, 422);
  t.equal((await api.call(t, 'logout', { token: 'not-a-token-of-anyone-at-all' })).status, 401);
  t.equal(await eventCount(), before, 'failed sign-ins are counted, not recorded');
});

t.test('refused task work leaves no event', async (t) => {
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Refusals', fields: [{ name: 'Done', field_type: 'boolean' }] } });
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: { title: 'Refusals', form_type: 'survey', fields: [{ name: 'Size', field_type: 'number' }] },
  });
  const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: employee.id } });
  const submission = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { form_id: form.body.id, values: { [form.body.fields[0].id]: 42 } },
  });
  t.equal(submission.status, 201);
  const before = await eventCount();
  const refused = [
    await api.call(t, 'createTaskExecution', { token: employee.token, body: { task_template_id: template.body.id, user_id: employee.id } }),
    await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: 999999 } }),
    await api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution: execution.body.id }, body: { user_id: 999999 } }),
    await api.call(t, 'deleteTaskExecution', { token: employee.token, params: { taskExecution: execution.body.id } }),
    await api.call(t, 'createSubmission', { token: employee.token, body: { form_id: form.body.id, values: { [form.body.fields[0].id]: 'not a number' } } }),
    await api.call(t, 'updateSubmission', { token: employee.token, params: { formSubmission: submission.body.id }, body: { values: { 999999: 1 } } }),
    await api.call(t, 'updateSubmission', { token: colleague.token, params: { formSubmission: submission.body.id }, body: { values: {} } }),
    await api.call(t, 'deleteSubmission', { token: colleague.token, params: { formSubmission: submission.body.id } }),
  ];
  // A template the caller does not administer is, to them, no template (422).
  t.strictSame(
    refused.map((res) => res.status),
    [422, 422, 422, 403, 422, 422, 404, 404],
  );
  t.equal(await eventCount(), before);
});

t.test('refused read states leave no event', async (t) => {
  const mine = await storeNotification(api.db, tenant.tenantId, employee.id, new Date());
  const theirs = await storeNotification(api.db, tenant.tenantId, colleague.id, new Date());
  const before = await eventCount();
  const put = (id: string, body: unknown) => api.call(t, 'updateNotification', { token: employee.token, params: { notification: id }, body });
  t.equal((await put(mine.id, {})).status, 422);
  t.equal((await put(mine.id, { read_at: '2026-02-30 10:00:00' })).status, 422);
  t.equal((await put(theirs.id, { read_at: '2026-01-01 10:00:00' })).status, 404, "another user's notification");
  t.equal((await api.call(t, 'updateNotifications', { token: employee.token, body: { read_at: 'yesterday' } })).status, 422);
  t.equal(await eventCount(), before);
});

// ---- one test per action ----

t.test('access_token.created: a password sign-in, by the user signing in, without the token', async (t) => {
  const signedIn = await api.call(t, 'login', {
    body: { tenant: 'own-work', username: employee.username, password: employee.password },
    headers: { 'user-agent': 'browser/7' },
  });
  t.equal(signedIn.status, 200);
  const [event] = await eventsAbout(t, 'user', employee.id);
  t.match(event, {
    action: 'access_token.created',
    actor: byEmployee,
    target: { type: 'user', id: String(employee.id), label: label(employee) },
    details: { expires_in: api.config.accessTokenTtlSeconds },
    origin: { operation_id: 'login', client_request_id: TEST_REQUEST_ID, user_agent: 'browser/7', command: null, job: null },
  });
  t.strictSame(event!.changes, {});
  t.notOk(await inTrail(signedIn.body.access_token), 'the token value is nowhere in the trail');
  t.notOk(await inTrail(employee.password), 'nor the password');
});

t.test('access_token.revoked: a sign-out, once', async (t) => {
  const session = await api.tokenFor(tenant.tenantId, colleague.id);
  const before = await eventCount();
  t.equal((await api.call(t, 'logout', { token: session, headers: { 'user-agent': 'browser/8' } })).status, 204);
  t.equal(await eventCount(), before + 1, 'one event');
  const [event] = await eventsAbout(t, 'user', colleague.id);
  t.match(event, {
    action: 'access_token.revoked',
    actor: { type: 'user', id: colleague.id, label: label(colleague) },
    target: { type: 'user', id: String(colleague.id) },
    origin: { operation_id: 'logout', user_agent: 'browser/8' },
  });
  t.strictSame(event!.changes, {});
  t.notOk(await inTrail(session));
  t.equal((await api.call(t, 'logout', { token: session })).status, 401, 'the session is over');
  t.equal(await eventCount(), before + 1, 'a second sign-out is refused and leaves no event');
});

t.test('task_execution.created, .updated and .deleted; a reassignment to the same user records nothing', async (t) => {
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Induction' } });
  t.equal(template.status, 201);
  const created = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: employee.id } });
  t.equal(created.status, 201);
  const id = created.body.id;
  t.equal((await api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution: id }, body: { user_id: colleague.id } })).status, 200);
  const before = await eventCount();
  t.equal((await api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution: id }, body: { user_id: colleague.id } })).status, 200);
  t.equal(await eventCount(), before, 'an update that changes nothing records no event');
  t.equal((await api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution: id } })).status, 204);
  const [deleted, updated, made] = await eventsAbout(t, 'task_execution', id);
  t.match(made, {
    action: 'task_execution.created',
    actor: byAdmin,
    target: { type: 'task_execution', id: String(id), label: null },
    origin: { operation_id: 'createTaskExecution', client_request_id: TEST_REQUEST_ID },
  });
  t.strictSame(made!.changes, {
    id: { from: null, to: id },
    task_template_id: { from: null, to: template.body.id },
    user_id: { from: null, to: employee.id },
  });
  t.match(updated, { action: 'task_execution.updated', actor: byAdmin, origin: { operation_id: 'updateTaskExecution' } });
  t.strictSame(updated!.changes, { user_id: { from: employee.id, to: colleague.id } });
  t.match(deleted, { action: 'task_execution.deleted', actor: byAdmin, origin: { operation_id: 'deleteTaskExecution' } });
  t.strictSame(deleted!.changes.user_id, { from: colleague.id, to: null });
});

t.test('form_submission.created, .updated and .deleted: which fields, never the values', async (t) => {
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Health',
      form_type: 'survey',
      fields: [
        { name: 'Allergies', field_type: 'text' },
        { name: 'Height', field_type: 'number' },
      ],
    },
  });
  t.equal(form.status, 201);
  const [allergies, height] = form.body.fields.map((field: { id: number }) => String(field.id));
  const created = await api.call(t, 'createSubmission', {
    token: employee.token,
    body: { form_id: form.body.id, values: { [allergies]: 'hazelnut-pollen-7', [height]: 182 } },
  });
  t.equal(created.status, 201);
  const id = created.body.id;
  const before = await eventCount();
  const same = await api.call(t, 'updateSubmission', {
    token: employee.token,
    params: { formSubmission: id },
    body: { values: { [allergies]: 'hazelnut-pollen-7', [height]: 182 } },
  });
  t.equal(same.status, 200);
  t.equal(await eventCount(), before, 'a resubmission of the same values records no event');
  const changed = await api.call(t, 'updateSubmission', {
    token: employee.token,
    params: { formSubmission: id },
    body: { values: { [allergies]: 'birch-pollen-9', [height]: 182 } },
  });
  t.equal(changed.status, 200);
  t.equal((await api.call(t, 'deleteSubmission', { token: employee.token, params: { formSubmission: id } })).status, 204);
  const [deleted, updated, made] = await eventsAbout(t, 'form_submission', id);
  t.match(made, {
    action: 'form_submission.created',
    actor: byEmployee,
    target: { type: 'form_submission', id: String(id), label: null },
    origin: { operation_id: 'createSubmission', client_request_id: TEST_REQUEST_ID },
  });
  t.strictSame(made!.changes, {
    form_id: { from: null, to: form.body.id },
    user_id: { from: null, to: employee.id },
    values: { changed: true },
  });
  t.strictSame(made!.details, { field_ids: [allergies, height].sort((a, b) => Number(a) - Number(b)) });
  t.match(updated, { action: 'form_submission.updated', actor: byEmployee, origin: { operation_id: 'updateSubmission' } });
  t.strictSame(updated!.changes, { values: { changed: true } });
  t.strictSame(updated!.details, { field_ids: [allergies] }, 'only the field whose value changed');
  t.match(deleted, { action: 'form_submission.deleted', actor: byEmployee, origin: { operation_id: 'deleteSubmission' } });
  t.strictSame(deleted!.changes.values, { changed: true });
  for (const value of ['hazelnut-pollen-7', 'birch-pollen-9']) t.notOk(await inTrail(value), `${value} is nowhere in the trail`);
});

t.test('notification.seen and notification.read: the time set; a record already read records nothing', async (t) => {
  const notification = await storeNotification(api.db, tenant.tenantId, employee.id, new Date(), {
    data: { title: 'Fire drill', body: '<p>At ten</p>', url: '/events/1' },
  });
  const put = (body: unknown) => api.call(t, 'updateNotification', { token: employee.token, params: { notification: notification.id }, body });
  t.equal((await put({ seen_at: '2026-01-02 08:00:00' })).status, 200);
  t.equal((await put({ read_at: '2026-01-03 09:00:00' })).status, 200);
  const before = await eventCount();
  t.equal((await put({ read_at: '2026-01-04 09:00:00' })).status, 200);
  t.equal((await put({ seen_at: '2026-01-04 09:00:00' })).status, 200);
  t.equal(await eventCount(), before, 'first sight and first read win: nothing changed, no event');
  const [read, seen] = await eventsAbout(t, 'notification', notification.id);
  t.match(seen, {
    action: 'notification.seen',
    actor: byEmployee,
    target: { type: 'notification', id: notification.id, label: 'Fire drill' },
    origin: { operation_id: 'updateNotification', client_request_id: TEST_REQUEST_ID },
  });
  t.strictSame(seen!.changes, { seen_at: { from: null, to: '2026-01-02 08:00:00' } });
  t.match(read, { action: 'notification.read', actor: byEmployee, target: { label: 'Fire drill' } });
  t.strictSame(read!.changes, { read_at: { from: null, to: '2026-01-03 09:00:00' } });
});

t.test('notifications.read and notifications.seen: one event per request with the count, none when nothing changed', async (t) => {
  const reader = await api.createUser(tenant.tenantId);
  for (let i = 0; i < 3; i++) await storeNotification(api.db, tenant.tenantId, reader.id, new Date());
  await storeNotification(api.db, tenant.tenantId, reader.id, new Date(), { type: 'infoboardPostCreated', targetableType: 'infoboardPost', targetableId: 5 });
  await storeNotification(api.db, tenant.tenantId, reader.id, new Date(), { type: 'infoboardPostCreated', targetableType: 'infoboardPost', targetableId: 6 });
  const bulk = (operationId: 'updateNotifications' | 'updateNotificationsByType' | 'updateNotificationsByTarget', body: unknown, params = {}) =>
    api.call(t, operationId, { token: reader.token, params, body });

  const seenByTarget = await bulk('updateNotificationsByTarget', { seen_at: '2026-01-05 07:00:00' }, { targetableType: 'infoboardPost', targetableId: 5 });
  t.match(seenByTarget.body, { data: 1 });
  const readByType = await bulk('updateNotificationsByType', { read_at: '2026-01-06 07:00:00' }, { targetableType: 'infoboardPost' });
  t.match(readByType.body, { data: 2 });
  const readAll = await bulk('updateNotifications', { read_at: '2026-01-07 07:00:00', filter: { unread: true } });
  t.match(readAll.body, { data: 3 });
  const before = await eventCount();
  t.match((await bulk('updateNotifications', { read_at: '2026-01-08 07:00:00' })).body, { data: 0 });
  t.equal(await eventCount(), before, 'nothing left unread: no event');

  const [all, byType, byTarget] = await eventsAbout(t, 'user', reader.id);
  const byReader = { type: 'user', id: reader.id, label: label(reader) };
  t.match(byTarget, { action: 'notifications.seen', actor: byReader, target: { type: 'user', id: String(reader.id) } });
  t.strictSame(byTarget!.details, { count: 1, targetable_type: 'infoboardPost', targetable_id: 5 });
  t.strictSame(byTarget!.changes, { seen_at: { from: null, to: '2026-01-05 07:00:00' } });
  t.match(byType, { action: 'notifications.read', actor: byReader, origin: { operation_id: 'updateNotificationsByType' } });
  t.strictSame(byType!.details, { count: 2, targetable_type: 'infoboardPost' });
  t.match(all, { action: 'notifications.read', origin: { operation_id: 'updateNotifications' } });
  t.strictSame(all!.details, { count: 3, filter: { unread: true } });
  t.strictSame(all!.changes, { read_at: { from: null, to: '2026-01-07 07:00:00' } });
  t.equal((await eventsOf(t, 'notifications.read')).length, 2, 'one event per request, not one per notification');
});

t.test(
  "a blackout leaves none of the person's names, addresses or user agents in the events of their creation, sign-ins, sign-outs and task work",
  async (t) => {
    // Created through the API: the event of the creation holds the username too, which the labels do not.
    const password = "the person's own password";
    const employeeRole = await roleNamed(api.db, tenant.tenantId, 'Employee');
    const created = await api.call(t, 'createUser', {
      token: admin,
      body: { username: 'erased-person', password, first_name: 'Ada', last_name: 'Byron', role_id: employeeRole.id },
    });
    t.equal(created.status, 201);
    const person = { id: created.body.id as number, username: 'erased-person' };
    const signedIn = await api.call(t, 'login', {
      body: { tenant: 'own-work', username: person.username, password },
      headers: { 'x-request-id': 'the-persons-own-request-id' },
    });
    t.equal(signedIn.status, 200);
    const form = await api.call(t, 'createForm', {
      token: admin,
      body: { title: 'Erasure', form_type: 'survey', fields: [{ name: 'Note', field_type: 'text' }] },
    });
    const submitted = await api.call(t, 'createSubmission', {
      token: signedIn.body.access_token,
      body: { form_id: form.body.id, values: { [form.body.fields[0].id]: 'private note' } },
    });
    t.equal(submitted.status, 201);
    t.equal((await api.call(t, 'logout', { token: signedIn.body.access_token })).status, 204);
    // Before the blackout the names are in the trail (labels, the creation's changes); a submission's values never are.
    for (const personal of ['Ada', 'Byron', 'erased-person']) t.ok(await inTrail(personal), `${personal} is in the trail before the blackout`);
    t.notOk(await inTrail('private note'), 'the submitted value is not in the trail');
    // The person's requests carried their address and user agent, as everyone's do.
    const origins = () =>
      api.db.owner.execute<{ mine: boolean; address: string | null; agent: string | null; clientId: string | null }>(sql`
      select actor_id = ${person.id} as mine, client_address as address, user_agent as agent, client_request_id as "clientId" from audit_events
      where tenant_id = ${tenant.tenantId} and (actor_id = ${person.id} or (target_type = 'user' and target_id = ${String(person.id)}))`);
    t.ok(
      (await origins()).every((row) => row.address !== null && row.agent !== null),
      'every event of theirs and about them has an address and a user agent before',
    );
    t.ok(
      (await origins()).some((row) => row.clientId === 'the-persons-own-request-id'),
      'and their sign-in the request id their client sent',
    );
    t.equal((await api.call(t, 'blackoutUser', { token: admin, params: { user: person.id } })).status, 204);
    const rows = await api.db.owner.execute<{ action: string }>(sql`
    select action from audit_events where tenant_id = ${tenant.tenantId} and (actor_id = ${person.id} or (target_type = 'user' and target_id = ${String(person.id)}))`);
    t.ok(
      ['user.created', 'access_token.created', 'form_submission.created', 'access_token.revoked'].every((action) => rows.some((row) => row.action === action)),
    );
    // Erased by the job that follows the blackout's commit.
    for (const personal of ['Ada', 'Byron', 'erased-person'])
      t.notOk(
        await eventually(
          () => inTrail(personal),
          (found) => !found,
        ),
        `${personal} is gone`,
      );
    const after = await origins();
    t.ok(after.some((row) => row.mine) && after.some((row) => !row.mine));
    t.ok(
      after.filter((row) => row.mine).every((row) => row.address === null && row.agent === null && row.clientId === null),
      'the events they made keep neither their address, their user agent nor their client request id',
    );
    t.ok(
      after.filter((row) => !row.mine).every((row) => row.address !== null && row.agent !== null),
      "the events others made about them keep those others' origin",
    );
  },
);
