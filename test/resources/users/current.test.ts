import t from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('current');
const employee = await api.createUser(tenant.tenantId, {
  username: 'emp',
  values: { email: 'emp@example.com', staffNumber: 'S-1', langId: 'de-DE', gender: 'diverse', birthdate: '1990-02-03' },
});

t.test('a user without any permission reads every field of their own record', async (t) => {
  const res = await api.call(t, 'getCurrentUser', { token: employee.token });
  t.equal(res.status, 200);
  t.match(res.body, {
    id: employee.id,
    username: 'emp',
    full_name: 'Test emp',
    email: 'emp@example.com',
    staff_number: 'S-1',
    gender: 'diverse',
    birthdate: '1990-02-03',
    active: true,
    prevent_logout: false,
    lang_id: 'de-DE',
    language: { id: 'de-DE', name: 'Deutsch' },
    role: { name: 'role-emp', active: true },
  });
  t.strictSame(res.body.role.permissions, [], 'a role with no permission');
  t.match(res.body.last_login_at, /^\d{4}-\d\d-\d\dT/);
  t.notOk(
    Object.keys(res.body).some((key) => /^password/.test(key)),
    'no password field',
  );
});

t.test('the administrator sees the seeded role with every permission', async (t) => {
  const res = await api.call(t, 'getCurrentUser', { token: tenant.adminToken });
  t.equal(res.status, 200);
  t.equal(res.body.role.name, 'Administrator');
  t.equal(res.body.role.permissions.length, 12);
});
