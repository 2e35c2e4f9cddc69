/**
 * Typed notifications and the departments' notification settings: who receives a typed
 * notification, and who is skipped (docs/notifications.md#notification-settings).
 */
import t, { type Test } from 'tap';
import { eq, sql } from 'drizzle-orm';
import { notificationSettingKey } from '../../../src/resources/notifications/rules.ts';
import { notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, rowCount, waitForDispatches } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { role: 'all' });
const tenant = await api.createTenant('typed-settings');
const other = await api.createTenant('typed-settings-other');
// A delegated producer: notifications.send and nothing else.
const producer = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const manager = await api.createUser(tenant.tenantId, { permissions: ['departments.manage'] });

const message = { title: 'News', body: '<p>Read me</p>', url: '/infoboard/1' };

async function settingId(tenantId: number, key: string): Promise<number> {
  const [row] = await api.db.owner.execute<{ id: number }>(sql`select id::int from notification_settings where tenant_id = ${tenantId} and key = ${key}`);
  if (!row) throw new Error(`tenant ${tenantId} has no notification setting ${key}`);
  return row.id;
}

/** A department with `memberIds`, its settings assigned through the API as a manager does. */
async function department(t: Test, tenantId: number, name: string, memberIds: number[], settingKeys: string[], token = manager.token) {
  const { id } = await createDepartment(api.db, tenantId, name, memberIds);
  const notificationSettingIds = await Promise.all(settingKeys.map((key) => settingId(tenantId, key)));
  const res = await api.call(t, 'updateDepartment', { token, params: { department: id }, body: { name, notification_setting_ids: notificationSettingIds } });
  t.equal(res.status, 200, `settings of ${name} assigned`);
  return id;
}

/** Sends through the typed producer endpoint, waits for delivery, and answers who received it. */
async function recipientsOf(t: Test, body: Record<string, unknown>, tenantId = tenant.tenantId, token = producer.token): Promise<number[]> {
  await api.db.owner.delete(notifications).where(eq(notifications.tenantId, tenantId));
  const res = await api.call(t, 'createTypedNotification', { token, body: { ...message, targetable_id: 1, ...body } });
  t.equal(res.status, 202);
  t.equal(await waitForDispatches(api.db, tenantId), 0, 'delivered');
  const rows = await api.db.owner.select({ id: notifications.notifiableId }).from(notifications).where(eq(notifications.tenantId, tenantId));
  return rows.map((r) => r.id).sort((a, b) => a - b);
}

const ids = (...users: { id: number }[]) => users.map((u) => u.id).sort((a, b) => a - b);

t.test('each typed notification is decided by the setting named after its type; the generic one by none', async (t) => {
  t.equal(notificationSettingKey('infoboardPostCreated'), 'infoboard_post_created');
  t.equal(notificationSettingKey('manualEntryUpdated'), 'manual_entry_updated');
  t.equal(notificationSettingKey('infoboardPostReadingConfirmationRequired'), 'infoboard_post_reading_confirmation_required');
  t.equal(notificationSettingKey('customNotification'), null);
  t.equal(notificationSettingKey('constructor'), null, 'only the typed notifications');
});

t.test('members receive a typed notification when one of their departments has its setting; the others are skipped', async (t) => {
  const [subscribed, declined, both, outsider, namedDeclined, group] = await Promise.all([
    api.createUser(tenant.tenantId),
    api.createUser(tenant.tenantId),
    api.createUser(tenant.tenantId),
    api.createUser(tenant.tenantId),
    api.createUser(tenant.tenantId),
    api.createUser(tenant.tenantId, { values: { groupAccount: true } }),
  ]);
  const news = await department(t, tenant.tenantId, 'News readers', [subscribed.id, both.id, group.id], ['infoboard_post_created']);
  const manuals = await department(t, tenant.tenantId, 'Manual readers', [declined.id, both.id, namedDeclined.id], ['manual_entry_updated']);
  const everyone = { department_ids: [news, manuals], user_ids: [outsider.id, namedDeclined.id] };

  t.strictSame(
    await recipientsOf(t, { ...everyone, type: 'infoboardPostCreated' }),
    ids(subscribed, both, outsider),
    'members of a department with infoboard_post_created, and the user outside every department; named or not, members whose departments lack it are skipped',
  );
  t.strictSame(
    await recipientsOf(t, { ...everyone, type: 'manualEntryUpdated' }),
    ids(declined, both, outsider, namedDeclined),
    'manual_entry_updated: the other department',
  );
  t.strictSame(
    await recipientsOf(t, { ...everyone, type: 'infoboardPostUpdated' }),
    ids(outsider),
    'a seeded setting no department has: only the user outside every department',
  );

  const generic = await api.call(t, 'createNotification', { token: producer.token, body: { ...message, ...everyone } });
  t.equal(generic.status, 202);
  t.equal(await waitForDispatches(api.db, tenant.tenantId), 0);
  const genericRecipients = await api.db.owner
    .select({ id: notifications.notifiableId })
    .from(notifications)
    .where(sql`${notifications.tenantId} = ${tenant.tenantId} and ${notifications.type} = 'customNotification'`);
  t.strictSame(
    genericRecipients.map((r) => r.id).sort((a, b) => a - b),
    ids(subscribed, declined, both, outsider, namedDeclined),
    'the generic notification is not filtered by settings (group accounts never receive)',
  );

  const byTarget = (token: string) =>
    api.call(t, 'listNotificationsByTarget', { token, params: { targetableType: 'infoboardPost', targetableId: 1 }, query: { selects: 'type' } });
  t.strictSame((await byTarget(outsider.token)).body, [{ type: 'infoboardPostUpdated' }], 'the outsider reads the one sent to them');
  t.strictSame((await byTarget(both.token)).body, [], 'a skipped member has nothing to read');
});

t.test('settings are judged when the notification is delivered: a change applies to the next one', async (t) => {
  const member = await api.createUser(tenant.tenantId);
  const team = await department(t, tenant.tenantId, 'Changing', [member.id], ['infoboard_post_created']);
  t.strictSame(await recipientsOf(t, { type: 'infoboardPostCreated', department_ids: [team] }), ids(member));
  const dropped = await api.call(t, 'updateDepartment', {
    token: manager.token,
    params: { department: team },
    body: { name: 'Changing', notification_setting_ids: [] },
  });
  t.strictSame(dropped.body.notification_setting_ids, []);
  t.strictSame(await recipientsOf(t, { type: 'infoboardPostCreated', department_ids: [team] }), [], 'now skipped');
  t.strictSame(await recipientsOf(t, { type: 'infoboardPostCreated', user_ids: [member.id] }), [], 'also when named directly');
});

t.test("where the tenant has no setting for the type, nobody is skipped; another tenant's settings do not count", async (t) => {
  const isolated = await api.createTenant('typed-settings-none');
  const isolatedProducer = await api.createUser(isolated.tenantId, { permissions: ['notifications.send'] });
  const member = await api.createUser(isolated.tenantId);
  const team = (await createDepartment(api.db, isolated.tenantId, 'Plain', [member.id])).id;
  t.strictSame(
    await recipientsOf(t, { type: 'manualEntryUpdated', department_ids: [team] }, isolated.tenantId, isolatedProducer.token),
    [],
    'the seeded setting exists: skipped',
  );
  await api.db.owner.execute(sql`delete from notification_settings where tenant_id = ${isolated.tenantId} and key = 'manual_entry_updated'`);
  t.ok(
    (await rowCount(api.db, 'notification_settings', sql`tenant_id = ${other.tenantId} and key = 'manual_entry_updated'`)) === 1,
    'the other tenant still has it',
  );
  t.strictSame(
    await recipientsOf(t, { type: 'manualEntryUpdated', department_ids: [team] }, isolated.tenantId, isolatedProducer.token),
    ids(member),
    'no such setting in this tenant: delivered',
  );
});

t.test('bad typed input is a 4xx problem and stores nothing; only notifications.send may produce', async (t) => {
  const member = await api.createUser(tenant.tenantId);
  const team = await department(t, tenant.tenantId, 'Checked', [member.id], ['infoboard_post_created']);
  const foreignUser = await api.createUser(other.tenantId);
  const foreignTeam = (await createDepartment(api.db, other.tenantId, 'Foreign', [foreignUser.id])).id;
  const dispatches = () => rowCount(api.db, 'notification_dispatches', sql`tenant_id in (${tenant.tenantId}, ${other.tenantId})`);
  await api.db.owner.execute(sql`delete from notification_dispatches where tenant_id = ${tenant.tenantId}`);
  const valid = { ...message, type: 'infoboardPostCreated', targetable_id: 3, department_ids: [team] };
  const cases: [unknown, string][] = [
    [{ ...valid, type: 'infoboard_post_created' }, 'type'],
    [{ ...valid, type: 'customNotification' }, 'type'],
    [{ ...valid, targetable_id: undefined }, 'targetable_id'],
    [{ ...valid, targetable_id: 0 }, 'targetable_id'],
    [{ ...valid, targetable_id: '3' }, 'targetable_id'],
    [{ ...valid, department_ids: [foreignTeam] }, 'department_ids.0'],
    [{ ...valid, department_ids: undefined, user_ids: [foreignUser.id] }, 'user_ids.0'],
    [{ ...valid, department_ids: [] }, 'department_ids'],
    [{ ...valid, setting: 'infoboard_post_created' }, 'setting'],
  ];
  for (const [body, field] of cases) {
    const res = await api.call(t, 'createTypedNotification', { token: producer.token, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.ok(res.body.errors?.[field], `errors name ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const malformed = await api.call(t, 'createTypedNotification', { token: producer.token, payload: '{"type"', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  for (const [who, token] of [
    ['an employee', member.token],
    ['a department manager', manager.token],
  ] as const) {
    t.equal((await api.call(t, 'createTypedNotification', { token, body: valid })).status, 403, who);
  }
  const foreign = await api.call(t, 'createTypedNotification', { token: other.adminToken, body: valid });
  t.equal(foreign.status, 422, "another tenant's administrator cannot name this tenant's department");
  t.ok(foreign.body.errors?.['department_ids.0']);
  t.equal(await dispatches(), 0, 'no dispatch recorded');
  t.equal(await rowCount(api.db, 'notifications', sql`notifiable_id = ${member.id}`), 0, 'nothing stored');
});
