/**
 * Two Atrium processes on one database. A safe request may take its principal from the
 * look-ups of the last second in its process (src/platform/auth/recent-principals.ts), so a
 * change made through A is in force at B within one second: a revocation, a logout mark, a
 * role change (fewer or more permissions), a required password change, a blackout, a
 * deletion; and for a SCIM token (`/scim/v2`), its revocation or a permission taken from
 * the administrator who minted it. At A itself, which made the change, it is in force at once.
 */
import pino from 'pino';
import t, { type Test } from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { createAtrium } from '../../../src/server.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

const api = await startTestApi(t, { role: 'api' });
const second = await createAtrium({ ...api.config, role: 'api' }, { logger: pino({ level: 'silent' }) });
t.teardown(() => second.stop());
const tenant = await api.createTenant('two-processes');

/** A GET through B, the second process. */
async function atB(path: string, token: string) {
  const response = await second.app!.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${token}` } });
  return { status: response.statusCode, body: response.json<Record<string, unknown>>() };
}

/**
 * Asks B for `path` until it answers `status`; every answer B gave otherwise must have been
 * asked for within one second of `since` (when the change was answered). Answers the wait.
 */
async function atBWithinASecond(t: Test, path: string, token: string, status: number, since: number) {
  let staleAskedAt: number | undefined;
  const answer = await eventually(
    async () => {
      const askedAt = Date.now();
      const { status: got } = await atB(path, token);
      if (got !== status) staleAskedAt = askedAt;
      return got;
    },
    (got) => got === status,
    5_000,
  );
  t.equal(answer, status, `B answers ${path} with ${status}`);
  if (staleAskedAt !== undefined)
    t.ok(staleAskedAt - since < 1_000, `B answered as before only within the second after the change (${staleAskedAt - since} ms)`);
}

/** A user whose token B has just answered. */
async function answeredUser(t: Test, permissions: Permission[] = ['users.view']) {
  const user = await api.createUser(tenant.tenantId, { permissions });
  t.equal((await atB('/api/users/current', user.token)).status, 200);
  t.equal((await atB('/api/users', user.token)).status, permissions.includes('users.view') ? 200 : 403);
  return user;
}

/** A GET through A, the process that made the change. */
async function atA(path: string, token: string) {
  return (await api.atrium.app!.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${token}` } })).statusCode;
}

t.test('a token revoked through A (logout) is refused by A at once and by B within a second', async (t) => {
  const user = await answeredUser(t);
  t.equal(await atA('/api/users/current', user.token), 200, 'A has just looked the token up');
  t.equal((await api.call(t, 'logout', { token: user.token })).status, 204);
  const changed = Date.now();
  t.equal(await atA('/api/users/current', user.token), 401, 'A refuses it at once');
  await atBWithinASecond(t, '/api/users/current', user.token, 401, changed);
  await atBWithinASecond(t, '/api/users', user.token, 401, changed);
});

t.test('a user marked for logout through A is refused by B within a second', async (t) => {
  const user = await answeredUser(t);
  t.equal((await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: user.id } })).status, 204);
  await atBWithinASecond(t, '/api/users/current', user.token, 401, Date.now());
});

t.test('a permission taken from the role through A is refused by B within a second; one given is granted within a second', async (t) => {
  const user = await answeredUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  const taken = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: [] } });
  t.equal(taken.status, 200);
  await atBWithinASecond(t, '/api/users', user.token, 403, Date.now());
  const current = await atB('/api/users/current', user.token);
  t.equal(current.status, 200);
  t.strictSame((current.body.role as { permissions: string[] }).permissions, [], 'the answer shows the role as it is now');

  const given = await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions: ['users.view'] } });
  t.equal(given.status, 200);
  await atBWithinASecond(t, '/api/users', user.token, 200, Date.now());
});

t.test('a role deactivated through A grants nothing at B within a second', async (t) => {
  const user = await answeredUser(t);
  const roleId = (await atB('/api/users/current', user.token)).body.role_id as number;
  t.equal((await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { active: false } })).status, 200);
  await atBWithinASecond(t, '/api/users', user.token, 403, Date.now());
});

t.test('a password change required through A restricts the session at B within a second', async (t) => {
  const user = await answeredUser(t);
  const required = await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: user.id }, body: { request_password_change: true } });
  t.equal(required.status, 200);
  await atBWithinASecond(t, '/api/users', user.token, 403, Date.now());
  t.equal((await atB('/api/users/current', user.token)).status, 200);
});

t.test('a user blacked out or deleted through A is refused by B within a second', async (t) => {
  const blackedOut = await answeredUser(t);
  t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: blackedOut.id } })).status, 204);
  await atBWithinASecond(t, '/api/users/current', blackedOut.token, 401, Date.now());

  const deleted = await answeredUser(t);
  t.equal((await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: deleted.id } })).status, 204);
  await atBWithinASecond(t, '/api/users/current', deleted.token, 401, Date.now());
});

/** What a SCIM token's minter holds (docs/scim.md). */
const MINTER: Permission[] = ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'];

/** A SCIM token minted through A by `minter`, which B and A have just answered. */
async function answeredScimToken(t: Test, minter: string) {
  const minted = await api.call(t, 'createScimToken', { token: minter, body: { name: 'two processes' } });
  t.equal(minted.status, 201);
  const token = minted.body.token as string;
  t.equal((await atB('/scim/v2/Users', token)).status, 200, 'B has just looked the SCIM token up');
  t.equal(await atA('/scim/v2/Users', token), 200, 'A has just looked the SCIM token up');
  return { id: minted.body.id as number, token };
}

t.test('a SCIM token revoked through A is refused by A at once and by B within a second', async (t) => {
  const { id, token } = await answeredScimToken(t, tenant.adminToken);
  t.equal((await api.call(t, 'deleteScimToken', { token: tenant.adminToken, params: { scimTokenId: id } })).status, 204);
  const changed = Date.now();
  t.equal(await atA('/scim/v2/Users', token), 401, 'A refuses it at once');
  await atBWithinASecond(t, '/scim/v2/Users', token, 401, changed);
});

t.test("a permission taken from a SCIM token's minter through A is refused by A at once and by B within a second", async (t) => {
  const minter = await api.createUser(tenant.tenantId, { permissions: MINTER });
  const { token } = await answeredScimToken(t, minter.token);
  const roleId = (await atB('/api/users/current', minter.token)).body.role_id as number;
  const permissions = MINTER.filter((permission) => permission !== 'users.administer');
  t.equal((await api.call(t, 'updateRole', { token: tenant.adminToken, params: { role: roleId }, body: { permissions } })).status, 200);
  const changed = Date.now();
  t.equal(await atA('/scim/v2/Users', token), 401, 'A refuses it at once');
  await atBWithinASecond(t, '/scim/v2/Users', token, 401, changed);
});
