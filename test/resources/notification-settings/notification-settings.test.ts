import t from 'tap';
import { sql } from 'drizzle-orm';
import { DEFAULT_NOTIFICATION_SETTINGS } from '../../../src/resources/tenants/create-tenant.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('settings');
const other = await api.createTenant('settings-other');
const employee = await api.createUser(tenant.tenantId);
const token = employee.token;

t.test('every signed-in user lists the seeded settings in sort order', async (t) => {
  const res = await api.call(t, 'listNotificationSettings', { token });
  t.equal(res.status, 200);
  t.strictSame(
    res.body.map((s: { key: string }) => s.key),
    DEFAULT_NOTIFICATION_SETTINGS,
  );
  t.ok(res.body.includes ? res.body.every((s: object) => Object.keys(s).sort().join() === 'id,key,sort_number') : false);
  t.ok(res.body.some((s: { key: string }) => s.key === 'infoboard_post_created'));
  t.ok(res.body.some((s: { key: string }) => s.key === 'manual_entry_updated'));
});

t.test('selects returns exactly the named fields; limit caps the count', async (t) => {
  const res = await api.call(t, 'listNotificationSettings', { token, query: { selects: 'key, sort_number', limit: 2 } });
  t.equal(res.status, 200);
  t.strictSame(res.body, [
    { key: DEFAULT_NOTIFICATION_SETTINGS[0], sort_number: 1 },
    { key: DEFAULT_NOTIFICATION_SETTINGS[1], sort_number: 2 },
  ]);
});

t.test('unknown selects, relations or filters are 422 naming what is allowed', async (t) => {
  const selects = await api.call(t, 'listNotificationSettings', { token, query: { selects: 'key,secret' } });
  t.equal(selects.status, 422);
  t.match(selects.body.errors.selects[0], /secret.*allowed: id, key, sort_number/);
  const relations = await api.call(t, 'listNotificationSettings', { token, query: { relations: 'departments' } });
  t.equal(relations.status, 422);
  t.match(relations.body.errors.relations[0], /departments/);
  const filter = await api.call(t, 'listNotificationSettings', { token, query: { filter: { text: 'x' } } });
  t.equal(filter.status, 422);
  t.ok(filter.body.errors['filter.text']);
  const limit = await api.call(t, 'listNotificationSettings', { token, query: { limit: 0 } });
  t.equal(limit.status, 422);
  t.ok(limit.body.errors.limit);
  const text = await api.call(t, 'listNotificationSettings', { token, query: { limit: 'ten' } });
  t.equal(text.status, 422);
  const twice = await api.call(t, 'listNotificationSettings', { token, query: { selects: ['key', 'id'] } });
  t.equal(twice.status, 422, 'selects given twice is not one comma list');
});

t.test('show answers one setting, honours selects, and hides other tenants', async (t) => {
  const [own] = await api.db.owner.execute<{ id: number }>(
    sql`select id::int from notification_settings where tenant_id = ${tenant.tenantId} order by sort_number limit 1`,
  );
  const res = await api.call(t, 'getNotificationSetting', { token, params: { notificationSetting: own!.id }, query: { selects: 'key' } });
  t.equal(res.status, 200);
  t.strictSame(res.body, { key: DEFAULT_NOTIFICATION_SETTINGS[0] });

  const [foreign] = await api.db.owner.execute<{ id: number }>(sql`select id::int from notification_settings where tenant_id = ${other.tenantId} limit 1`);
  const hidden = await api.call(t, 'getNotificationSetting', { token, params: { notificationSetting: foreign!.id } });
  const missing = await api.call(t, 'getNotificationSetting', { token, params: { notificationSetting: 999999 } });
  t.equal(hidden.status, 404);
  t.strictSame(hidden.body, { ...missing.body }, "another tenant's record is answered exactly like a missing one");
  for (const bad of ['abc', '0', '-1', '1.5', '99999999999999999999']) {
    const res = await api.call(t, 'getNotificationSetting', { token, params: { notificationSetting: bad } });
    t.equal(res.status, 422, `id ${bad}`);
  }
});
