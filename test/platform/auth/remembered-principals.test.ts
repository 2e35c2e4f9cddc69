/**
 * Two Atrium processes on one database. B remembers the principal of every token it has
 * seen (src/platform/auth/principal-cache.ts); a change made through A is in force at B
 * on the very next request, with nothing to wait for: a revocation, a logout mark, a role
 * change (fewer or more permissions), a required password change, a blackout, a deletion.
 */
import pino from 'pino';
import t, { type Test } from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { PrincipalCache, samePrincipal, type Principal } from '../../../src/platform/auth/principal-cache.ts';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { createAtrium } from '../../../src/server.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t, { role: 'api' });
const second = await createAtrium({ ...api.config, role: 'api' }, { logger: pino({ level: 'silent' }) });
t.teardown(() => second.stop());
const tenant = await api.createTenant('remembered');

/** A GET through B, the process that remembers. */
async function atB(path: string, token: string) {
  const response = await second.app!.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${token}` } });
  return { status: response.statusCode, body: response.json<Record<string, unknown>>() };
}

/** A user whose principal B has just remembered (B answered a request with the token). */
async function rememberedUser(t: Test, permissions: Permission[] = ['users.view']) {
  const user = await api.createUser(tenant.tenantId, { permissions });
  t.equal((await atB('/api/users/current', user.token)).status, 200);
  t.ok(second.services.principals.get(hashToken(user.token)), 'B remembers the principal');
  t.equal((await atB('/api/users', user.token)).status, permissions.includes('users.view') ? 200 : 403);
  return user;
}

t.test('a token revoked through A (logout) is refused by B at once', async (t) => {
  const user = await rememberedUser(t);
  t.equal((await api.call(t, 'logout', { token: user.token })).status, 204);
  t.equal((await atB('/api/users/current', user.token)).status, 401);
  t.equal((await atB('/api/users', user.token)).status, 401);
  t.notOk(second.services.principals.get(hashToken(user.token)), 'B forgot it');
});

t.test('a user marked for logout through A is refused by B at once', async (t) => {
  const user = await rememberedUser(t);
  t.equal((await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: user.id } })).status, 204);
  t.equal((await atB('/api/users/current', user.token)).status, 401);
});

t.test('a permission taken from the role through A is refused by B at once; one given is granted at once', async (t) => {
  const user = await rememberedUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  const taken = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: [] } });
  t.equal(taken.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403, 'the list needs users.view');
  const current = await atB('/api/users/current', user.token);
  t.equal(current.status, 200);
  t.strictSame((current.body.role as { permissions: string[] }).permissions, [], 'the answer shows the role as it is now');

  const given = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: ['users.view'] } });
  t.equal(given.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 200, 'a refusal is never given on a remembered principal');
});

t.test('a role deactivated through A grants nothing at B at once', async (t) => {
  const user = await rememberedUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  t.equal((await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { active: false } })).status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403);
});

t.test('a password change required through A restricts the session at B at once', async (t) => {
  const user = await rememberedUser(t);
  const required = await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: user.id }, body: { request_password_change: true } });
  t.equal(required.status, 200);
  t.equal((await atB('/api/users', user.token)).status, 403, 'only the password change, reading oneself and signing out remain');
  t.equal((await atB('/api/users/current', user.token)).status, 200);
});

t.test('a user blacked out or deleted through A is refused by B at once', async (t) => {
  const blackedOut = await rememberedUser(t);
  t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: blackedOut.id } })).status, 204);
  t.equal((await atB('/api/users/current', blackedOut.token)).status, 401);

  const deleted = await rememberedUser(t);
  t.equal((await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: deleted.id } })).status, 204);
  t.equal((await atB('/api/users/current', deleted.token)).status, 401);
});

t.test('a remembered principal that does not hold is never answered from, even where no transaction confirms it', async (t) => {
  const user = await rememberedUser(t);
  // B is made to remember a principal the token does not yield: more permissions.
  const hash = hashToken(user.token);
  const remembered = second.services.principals.get(hash)!;
  second.services.principals.set(hash, { ...remembered, permissions: [...remembered.permissions, 'users.administer'] });
  t.equal((await atB('/api/users/import-template', user.token)).status, 403, 'users.administer is not the role’s');
  t.strictSame(second.services.principals.get(hash)!.permissions, remembered.permissions, 'B remembers what the token yields');
});

t.test('PrincipalCache: entries expire, and the oldest give way when it is full', async (t) => {
  const cache = new PrincipalCache();
  const principal: Principal = { tenantId: 1, userId: 2, tokenId: 3, permissions: ['users.view'], passwordChangeRequired: false };
  const key = Buffer.from('a');
  cache.set(key, principal, 0);
  t.ok(cache.get(key, 59_999));
  t.notOk(cache.get(key, 60_000), 'gone after a minute');
  for (let i = 0; i <= 10_000; i++) cache.set(Buffer.from(String(i)), principal, 0);
  t.equal(cache.size, 10_000);
  t.notOk(cache.get(Buffer.from('0'), 1), 'the oldest gave way');
  t.ok(cache.get(Buffer.from('10000'), 1));
  t.ok(samePrincipal(principal, { ...principal }));
  t.notOk(samePrincipal(principal, { ...principal, permissions: [] }));
  t.notOk(samePrincipal(principal, { ...principal, passwordChangeRequired: true }));
});
