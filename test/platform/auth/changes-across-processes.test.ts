/**
 * Two Atrium processes on one database. Every request looks its token up, so a change
 * made through A is in force at B on the very next request, with nothing to wait for: a
 * revocation, a logout mark, a role change (fewer or more permissions), a required
 * password change, a blackout, a deletion.
 */
import pino from 'pino';
import t, { type Test } from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { createAtrium } from '../../../src/server.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t, { role: 'api' });
const second = await createAtrium({ ...api.config, role: 'api' }, { logger: pino({ level: 'silent' }) });
t.teardown(() => second.stop());
const tenant = await api.createTenant('two-processes');

/** A GET through B, the second process. */
async function atB(path: string, token: string) {
  const response = await second.app!.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${token}` } });
  return { status: response.statusCode, body: response.json<Record<string, unknown>>() };
}

/** A user whose token B has just answered. */
async function answeredUser(t: Test, permissions: Permission[] = ['users.view']) {
  const user = await api.createUser(tenant.tenantId, { permissions });
  t.equal((await atB('/api/users/current', user.token)).status, 200);
  t.equal((await atB('/api/users', user.token)).status, permissions.includes('users.view') ? 200 : 403);
  return user;
}

t.test('a token revoked through A (logout) is refused by B at once', async (t) => {
  const user = await answeredUser(t);
  t.equal((await api.call(t, 'logout', { token: user.token })).status, 204);
  t.equal((await atB('/api/users/current', user.token)).status, 401);
  t.equal((await atB('/api/users', user.token)).status, 401);
});

t.test('a user marked for logout through A is refused by B at once', async (t) => {
  const user = await answeredUser(t);
  t.equal((await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: user.id } })).status, 204);
  t.equal((await atB('/api/users/current', user.token)).status, 401);
});

t.test('a permission taken from the role through A is refused by B at once; one given is granted at once', async (t) => {
  const user = await answeredUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  const taken = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: [] } });
  t.equal(taken.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403, 'the list needs users.view');
  const current = await atB('/api/users/current', user.token);
  t.equal(current.status, 200);
  t.strictSame((current.body.role as { permissions: string[] }).permissions, [], 'the answer shows the role as it is now');

  const given = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: ['users.view'] } });
  t.equal(given.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 200, 'and a permission given is granted at once');
});

t.test('a role deactivated through A grants nothing at B at once', async (t) => {
  const user = await answeredUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  t.equal((await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { active: false } })).status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403);
});

t.test('a password change required through A restricts the session at B at once', async (t) => {
  const user = await answeredUser(t);
  const required = await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: user.id }, body: { request_password_change: true } });
  t.equal(required.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403, 'only the password change, reading oneself and signing out remain');
  t.equal((await atB('/api/users/current', user.token)).status, 200);
});

t.test('a user blacked out or deleted through A is refused by B at once', async (t) => {
  const blackedOut = await answeredUser(t);
  t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: blackedOut.id } })).status, 204);
  t.equal((await atB('/api/users/current', blackedOut.token)).status, 401);

  const deleted = await answeredUser(t);
  t.equal((await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: deleted.id } })).status, 204);
  t.equal((await atB('/api/users/current', deleted.token)).status, 401);
});
