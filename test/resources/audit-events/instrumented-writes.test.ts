import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi, TEST_REQUEST_ID } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('audited-writes');
const admin = tenant.adminToken;
const auditor = await api.createUser(tenant.tenantId, { permissions: ['audit.view'] });

interface AuditEvent {
  id: string;
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

const eventCount = async () => {
  const [row] = await api.db.owner.execute<{ count: number }>(sql`select count(*)::int as count from audit_events where tenant_id = ${tenant.tenantId}`);
  return row!.count;
};

const byAdmin = { type: 'user', id: tenant.adminUserId, label: 'Atrium Administrator' };

t.test('role.created and role.updated: the permissions before and after', async (t) => {
  const created = await api.call(t, 'createRole', { token: admin, body: { name: 'Editors', permissions: ['users.view'] } });
  t.equal(created.status, 201);
  const updated = await api.call(t, 'updateRole', {
    token: admin,
    params: { role: created.body.id },
    body: { permissions: ['users.view', 'departments.manage'] },
  });
  t.equal(updated.status, 200);
  const [update, create] = await eventsAbout(t, 'role', created.body.id);
  t.match(create, {
    action: 'role.created',
    actor: byAdmin,
    target: { label: 'Editors' },
    origin: { operation_id: 'createRole', client_request_id: TEST_REQUEST_ID },
  });
  t.strictSame(create!.changes.permissions, { from: null, to: ['users.view'] });
  t.match(update, { action: 'role.updated', origin: { operation_id: 'updateRole' } });
  t.strictSame(update!.changes, { permissions: { from: ['users.view'], to: ['users.view', 'departments.manage'] } });
  const before = await eventCount();
  const refused = await api.call(t, 'updateRole', { token: admin, params: { role: created.body.id }, body: { name: '' } });
  t.equal(refused.status, 422);
  t.equal(await eventCount(), before, 'a refused write leaves no event');
});

t.test('login_token.created, login_token.consumed (by the user it signs in) and login_token.deleted; never the value', async (t) => {
  const created = await api.call(t, 'createUserLoginToken', { token: admin, body: { expires_in: 600 } });
  t.equal(created.status, 201);
  const signedIn = await api.call(t, 'loginWithToken', { body: { token: created.body.token }, headers: { 'user-agent': 'kiosk/2' } });
  t.equal(signedIn.status, 200);
  const [consumed, made] = await eventsAbout(t, 'login_token', created.body.uuid);
  t.match(made, { action: 'login_token.created', actor: byAdmin, origin: { operation_id: 'createUserLoginToken' } });
  t.strictSame((made!.changes.login_user_id as { to: number }).to, tenant.adminUserId);
  t.match(consumed, { action: 'login_token.consumed', actor: byAdmin, origin: { operation_id: 'loginWithToken', user_agent: 'kiosk/2' } });
  const rows = await api.db.owner.execute(sql`select 1 from audit_events where changes::text || coalesce(details::text, '') like ${`%${created.body.token}%`}`);
  t.equal(rows.length, 0, 'the token value is nowhere in the trail');
  const before = await eventCount();
  t.equal((await api.call(t, 'loginWithToken', { body: { token: created.body.token } })).status, 401);
  t.equal(await eventCount(), before, 'a refused sign-in is no change');
  const another = await api.call(t, 'createUserLoginToken', { token: admin, body: { expires_in: 600 } });
  t.equal((await api.call(t, 'deleteUserLoginToken', { token: admin, params: { userLoginToken: another.body.uuid } })).status, 204);
  const [deleted] = await eventsAbout(t, 'login_token', another.body.uuid);
  t.equal(deleted!.action, 'login_token.deleted');
});

t.test('department.created, department.updated and department.deleted', async (t) => {
  const created = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Sales' } });
  t.equal(created.status, 201);
  const id = created.body.id;
  t.equal((await api.call(t, 'updateDepartment', { token: admin, params: { department: id }, body: { name: 'Field sales' } })).status, 200);
  t.equal((await api.call(t, 'deleteDepartment', { token: admin, params: { department: id } })).status, 204);
  const [deleted, updated, made] = await eventsAbout(t, 'department', id);
  t.match(made, { action: 'department.created', actor: byAdmin, target: { label: 'Sales' } });
  t.strictSame(made!.changes.name, { from: null, to: 'Sales' });
  t.match(updated, { action: 'department.updated', target: { label: 'Field sales' } });
  t.strictSame(updated!.changes, { name: { from: 'Sales', to: 'Field sales' } });
  t.match(deleted, { action: 'department.deleted', origin: { operation_id: 'deleteDepartment' } });
  t.strictSame(deleted!.changes, {}, 'a delete changes no field (docs/audit.md): its label names what went');
  t.equal(deleted!.target.label, 'Field sales');
});

t.test('menu_item.created, menu_item.updated and menu_item.deleted', async (t) => {
  const base = { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Wiki', link: 'https://wiki.example.com/' };
  const created = await api.call(t, 'createMenuItem', { token: admin, body: base });
  t.equal(created.status, 201);
  const id = created.body.id;
  t.equal((await api.call(t, 'updateMenuItem', { token: admin, params: { menuItem: id }, body: { title: 'Handbook' } })).status, 200);
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem: id } })).status, 204);
  const [deleted, updated, made] = await eventsAbout(t, 'menu_item', id);
  t.match(made, { action: 'menu_item.created', actor: byAdmin, target: { label: 'Wiki' } });
  t.strictSame(made!.changes.link, { from: null, to: 'https://wiki.example.com/' });
  t.match(updated, { action: 'menu_item.updated', target: { label: 'Handbook' } });
  t.strictSame(updated!.changes.title, { from: 'Wiki', to: 'Handbook' });
  t.match(deleted, { action: 'menu_item.deleted', target: { label: 'Handbook' } });
});

t.test('notification.sent is one event per fan-out with the recipient count; notifications.reset', async (t) => {
  const members = await Promise.all([1, 2, 3].map(() => api.createUser(tenant.tenantId)));
  const department = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Everyone' } });
  await api.db.owner.execute(sql`
    insert into department_users (tenant_id, department_id, user_id)
    select ${tenant.tenantId}, ${department.body.id}, unnest(${`{${members.map((m) => m.id).join(',')}}`}::bigint[])`);
  const sent = await api.call(t, 'createNotification', {
    token: admin,
    body: { title: 'Fire drill', body: 'At ten', url: '/events/1', user_ids: [members[0]!.id, tenant.adminUserId], department_ids: [department.body.id] },
  });
  t.equal(sent.status, 202);
  const res = await api.call(t, 'listAuditEvents', { token: auditor.token, query: { filter: { action: 'notification.sent' } } });
  t.equal(res.body.length, 1, 'one event, not one per recipient');
  t.match(res.body[0], { actor: byAdmin, target: { type: 'notification_dispatch', label: 'Fire drill' }, details: { recipient_count: 4 } });
  t.equal((await api.call(t, 'resetNotifications', { token: admin })).status, 200);
  const [reset] = await eventsAbout(t, 'tenant', tenant.tenantId);
  t.match(reset, { action: 'notifications.reset', actor: byAdmin, origin: { operation_id: 'resetNotifications' } });
});

t.test('attribute_set.*, automation.*, form.*, form_field.*: one event per write, secrets masked', async (t) => {
  const set = await api.call(t, 'createAttributeSet', { token: admin, body: { name: 'Budget', fields: [{ key: 'budget', type: 'number' }] } });
  t.equal(set.status, 201);
  t.equal(
    (
      await api.call(t, 'updateAttributeSet', {
        token: admin,
        params: { attributeSet: set.body.id },
        body: { name: 'Budgets', fields: [{ key: 'budget', type: 'number' }] },
      })
    ).status,
    200,
  );
  t.equal((await api.call(t, 'deleteAttributeSet', { token: admin, params: { attributeSet: set.body.id } })).status, 204);
  t.strictSame(
    (await eventsAbout(t, 'attribute_set', set.body.id)).map((e) => [e.action, e.target.label]),
    [
      ['attribute_set.deleted', 'Budget'.concat('s')],
      ['attribute_set.updated', 'Budgets'],
      ['attribute_set.created', 'Budget'],
    ],
  );

  const secret = 's3cret-header-value';
  const automation = await api.call(t, 'createAutomation', {
    token: admin,
    body: { name: 'hook', config: { url: 'http://93.184.215.14/hook', headers: {}, auth: { type: 'basic', basic: { username: 'u', password: secret } } } },
  });
  t.equal(automation.status, 201, automation.text);
  const rows = await api.db.owner.execute(sql`select 1 from audit_events where changes::text like ${`%${secret}%`}`);
  t.equal(rows.length, 0, 'a webhook secret is never in the trail');
  const changed = await api.call(t, 'updateAutomation', {
    token: admin,
    params: { automation: automation.body.id },
    body: { config: { url: 'http://93.184.215.14/hook', headers: {}, auth: { type: 'basic', basic: { username: 'u', password: 'another-secret' } } } },
  });
  t.equal(changed.status, 200, changed.text);
  const [update] = await eventsAbout(t, 'automation', automation.body.id);
  t.match(update, { action: 'automation.updated', changes: { config: { changed: true } } }, 'a changed secret shows as changed only');
  t.notOk(JSON.stringify(update).includes('another-secret'));
  // The configuration as the API shows it (the secret masked), sent back unchanged, with its keys in another order: no change, no event.
  const shown = (await api.call(t, 'getAutomation', { token: admin, params: { automation: automation.body.id } })).body.config;
  const reordered = Object.fromEntries(Object.entries(shown).reverse());
  const unchanged = await api.call(t, 'updateAutomation', { token: admin, params: { automation: automation.body.id }, body: { config: reordered } });
  t.equal(unchanged.status, 200, unchanged.text);
  t.equal((await eventsAbout(t, 'automation', automation.body.id)).length, 2, 'an update that keeps the configuration records nothing');
  t.equal((await api.call(t, 'deleteAutomation', { token: admin, params: { automation: automation.body.id } })).status, 204);
  t.strictSame(
    (await eventsAbout(t, 'automation', automation.body.id)).map((e) => e.action),
    ['automation.deleted', 'automation.updated', 'automation.created'],
  );

  const form = await api.call(t, 'createForm', { token: admin, body: { title: 'Onboarding', form_type: 's' } });
  t.equal(form.status, 201, form.text);
  t.equal((await api.call(t, 'updateForm', { token: admin, params: { form: form.body.id }, body: { title: 'Offboarding' } })).status, 200);
  const field = await api.call(t, 'createFormField', { token: admin, body: { form_id: form.body.id, name: 'Laptop', field_type: 'text' } });
  t.equal(field.status, 201, field.text);
  const [updatedForm, createdForm] = await eventsAbout(t, 'form', form.body.id);
  t.match(createdForm, { action: 'form.created', target: { label: 'Onboarding' } });
  t.match(updatedForm, { action: 'form.updated', changes: { title: { from: 'Onboarding', to: 'Offboarding' } } });
  const [createdField] = await eventsAbout(t, 'form_field', field.body.id);
  t.match(createdField, { action: 'form_field.created', target: { label: 'Laptop' } });
  const otherField = await api.call(t, 'createFormField', { token: admin, body: { form_id: form.body.id, name: 'Phone', field_type: 'text' } });
  t.equal((await api.call(t, 'deleteFormField', { token: admin, params: { formField: otherField.body.id } })).status, 204);
  const [deletedField] = await eventsAbout(t, 'form_field', otherField.body.id);
  t.match(deletedField, { action: 'form_field.deleted', target: { label: 'Phone' } });
  t.strictSame(deletedField!.changes, {});
  t.equal((await api.call(t, 'deleteForm', { token: admin, params: { form: form.body.id } })).status, 204);
  const [deletedForm] = await eventsAbout(t, 'form', form.body.id);
  t.match(deletedForm, { action: 'form.deleted', target: { label: 'Offboarding' } });
  t.strictSame(deletedForm!.changes, {}, 'a delete changes no field: no internal column names either');
});
