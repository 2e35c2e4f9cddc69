/**
 * Credentials and their limits: sign-in attempts are counted before they are checked
 * (bursts included), `old_password` counts like a sign-in, a password change ends the
 * other sessions, a user who must change their password can do nothing else, and the
 * client address is taken only from trusted proxies.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../../src/config.ts';
import { newLoginTokenValue } from '../../../src/resources/login-tokens/token-value.ts';
import { verifyPassword } from '../../../src/platform/auth/passwords.ts';
import { clientOf } from '../../../src/platform/http/client-address.ts';
import { accountLimitKey } from '../../../src/resources/auth/rules.ts';
import { ownerUser, startTestApi } from '../../helpers/atrium.ts';

// One proxy hop in front: the client address is the last X-Forwarded-For entry, so every
// test can sign in from an address of its own.
const api = await startTestApi(t, { loginMaxFailures: 10, trustProxy: 1 });
const tenant = await api.createTenant('credentials');

type Tt = Parameters<typeof api.call>[0];
const from = (address: string) => ({ 'x-forwarded-for': address });
const login = (tt: Tt, username: string, password: string, address: string) =>
  api.call(tt, 'login', { body: { tenant: 'credentials', username, password }, headers: from(address) });
/** The key of the per-account count under `username` in this file's tenant. */
const accountKey = (username: string) => accountLimitKey(loadConfig({}), 'credentials', username).key;
const failures = async (key: string) =>
  (await api.db.owner.execute<{ failures: number }>(sql`select failures from login_failures where key = ${key}`))[0]?.failures ?? 0;

function tally(statuses: number[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const status of statuses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

t.test('a burst of wrong passwords for one account gets no more checks than the limit', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const answers = await Promise.all(Array.from({ length: 30 }, () => login(t, user.username, 'wrong password!', '198.51.100.10')));
  const counts = tally(answers.map((a) => a.status));
  t.ok((counts[401] ?? 0) <= 10, `at most 10 passwords were checked (401), got ${counts[401]}`);
  t.equal((counts[401] ?? 0) + (counts[429] ?? 0), 30, 'every other attempt is refused with 429');
  for (const answer of answers.filter((a) => a.status === 429)) t.ok(Number(answer.headers['retry-after']) > 0, 'Retry-After in seconds');
  const right = await login(t, user.username, user.password, '198.51.100.11');
  t.equal(right.status, 429, 'the right password is refused within the window, from any address');
  t.ok(Number(right.headers['retry-after']) > 0);
  t.equal(await failures(accountKey(user.username)), 10, 'refused attempts are not counted as guesses');
});

t.test('a burst of wrong login tokens from one address gets no more checks than the address limit', async (t) => {
  const address = '198.51.100.20';
  const values = Array.from({ length: 80 }, () => newLoginTokenValue(api.atrium.services.secrets));
  const answers = await Promise.all(values.map((token) => api.call(t, 'loginWithToken', { body: { token }, headers: from(address) })));
  const counts = tally(answers.map((a) => a.status));
  t.ok((counts[401] ?? 0) <= 50, `at most 50 (5 × 10) tokens were checked, got ${counts[401]}`);
  t.equal((counts[401] ?? 0) + (counts[429] ?? 0), 80);
  for (const answer of answers.filter((a) => a.status === 429)) t.ok(Number(answer.headers['retry-after']) > 0);
  const created = await api.call(t, 'createUserLoginToken', { token: tenant.adminToken, body: { expires_in: 600 } });
  const limited = await api.call(t, 'loginWithToken', { body: { token: created.body.token }, headers: from(address) });
  t.equal(limited.status, 429, 'a genuine token is refused from that address too');
  const elsewhere = await api.call(t, 'loginWithToken', { body: { token: created.body.token }, headers: from('198.51.100.21') });
  t.equal(elsewhere.status, 200, 'and was not consumed by the refusal');
});

t.test('successful sign-ins do not count against the client address; a failure does', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const address = '198.51.100.30';
  for (let i = 0; i < 3; i++) t.equal((await login(t, user.username, user.password, address)).status, 200);
  t.equal(await failures(`ip:${address}`), 0);
  t.equal((await login(t, user.username, 'wrong password!', address)).status, 401);
  t.equal(await failures(`ip:${address}`), 1);
  t.equal(await failures(accountKey(user.username)), 1);
  t.equal((await login(t, user.username, user.password, address)).status, 200);
  t.equal(await failures(accountKey(user.username)), 0, 'a sign-in clears the account count');
});

t.test('wrong old_password attempts count towards the account limit; beyond it the update is 429', async (t) => {
  const user = await api.createUser(tenant.tenantId, { password: 'the first password' });
  const params = { user: user.id };
  const change = (old: string) => api.call(t, 'updateUser', { token: user.token, params, body: { password: 'the second password', old_password: old } });
  for (let i = 0; i < 10; i++) t.equal((await change('a wrong guess')).status, 422, `guess ${i + 1}`);
  const limited = await change('the first password');
  t.equal(limited.status, 429, 'even the right old password is not checked beyond the limit');
  t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After in seconds');
  t.ok(await verifyPassword((await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash, 'the first password', 0), 'unchanged');
  t.equal((await login(t, user.username, 'the first password', '198.51.100.40')).status, 429, 'sign-in shares the count');
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 200, 'the session itself is untouched');
  // The window over (under the name and the user id): the right old password works and is not counted.
  await api.db.owner.execute(
    sql`update login_failures set window_started_at = now() - interval '1 day' where key in (${accountKey(user.username)}, ${`user:${tenant.tenantId}/${user.id}`})`,
  );
  t.equal((await change('the first password')).status, 200);
  t.equal(await failures(accountKey(user.username)), 0);
});

t.test('a burst of wrong old_password attempts gets no more checks than the limit', async (t) => {
  const user = await api.createUser(tenant.tenantId, { password: 'the first password' });
  const answers = await Promise.all(
    Array.from({ length: 30 }, () =>
      api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { password: 'the second password', old_password: 'a wrong guess' } }),
    ),
  );
  const counts = tally(answers.map((a) => a.status));
  t.ok((counts[422] ?? 0) <= 10, `at most 10 guesses were checked, got ${counts[422]}`);
  t.equal((counts[422] ?? 0) + (counts[429] ?? 0), 30);
});

t.test('changing one’s own password ends every other session of the user, not the one used', async (t) => {
  const user = await api.createUser(tenant.tenantId, { password: 'the first password' });
  const other = (await login(t, user.username, 'the first password', '198.51.100.50')).body.access_token;
  const bystander = await api.createUser(tenant.tenantId);
  const res = await api.call(t, 'updateUser', {
    token: user.token,
    params: { user: user.id },
    body: { password: 'the second password', old_password: 'the first password' },
  });
  t.equal(res.status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 200, 'the token used for the change keeps working');
  t.equal((await api.call(t, 'getCurrentUser', { token: other })).status, 401, 'the other session ended');
  t.equal((await api.call(t, 'getCurrentUser', { token: bystander.token })).status, 200, 'other users keep theirs');
  t.equal((await login(t, user.username, 'the second password', '198.51.100.50')).status, 200, 'the new password signs in');
});

t.test('a password set with a combining accent signs in typed with the accented letter, and the other way round', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const change = (password: string, old: string) =>
    api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { password, old_password: old } });
  t.equal((await change('mot de passe re\u0301sume\u0301', user.password)).status, 200, 'set with combining accents');
  t.equal((await login(t, user.username, 'mot de passe r\u00e9sum\u00e9', '198.51.100.55')).status, 200, 'typed with accented letters');
  t.equal((await login(t, user.username, 'mot de passe resume', '198.51.100.55')).status, 401, 'without the accents it is another password');
  t.equal((await change('un autre mot de passe', 'mot de passe r\u00e9sum\u00e9')).status, 200, 'old_password is compared the same way');
  t.equal((await login(t, user.username, 'un autre mot de passe', '198.51.100.55')).status, 200);
});

t.test('an administrator’s reset of another user’s password ends every session of that user', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const second = (await login(t, user.username, user.password, '198.51.100.60')).body.access_token;
  const admin = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  const adminOther = await api.tokenFor(tenant.tenantId, admin.id);
  const res = await api.call(t, 'updateUser', { token: admin.token, params: { user: user.id }, body: { password: 'a reset password' } });
  t.equal(res.status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401);
  t.equal((await api.call(t, 'getCurrentUser', { token: second })).status, 401);
  t.equal((await api.call(t, 'getCurrentUser', { token: admin.token })).status, 200, 'the administrator keeps their sessions');
  t.equal((await api.call(t, 'getCurrentUser', { token: adminOther })).status, 200);
  // An update without a password ends nothing.
  const fresh = (await login(t, user.username, 'a reset password', '198.51.100.60')).body.access_token;
  t.equal((await api.call(t, 'updateUser', { token: admin.token, params: { user: user.id }, body: { first_name: 'Elsewhere' } })).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: fresh })).status, 200);
});

t.test('a session whose password must be changed may only change it, read itself and sign out', async (t) => {
  const user = await api.createUser(tenant.tenantId, {
    permissions: ['users.view', 'login-tokens.administer'],
    password: 'a temporary password',
    values: { requestPasswordChange: true },
  });
  const colleague = await api.createUser(tenant.tenantId);
  const signedIn = await login(t, user.username, 'a temporary password', '198.51.100.70');
  t.equal(signedIn.body.password_change_required, true);
  const token = signedIn.body.access_token;

  const refused = [
    await api.call(t, 'listUsers', { token }),
    await api.call(t, 'getUser', { token, params: { user: colleague.id } }),
    await api.call(t, 'updateUser', { token, params: { user: colleague.id }, body: { city: 'X' } }),
    await api.call(t, 'markUserForLogout', { token, params: { user: user.id } }),
    await api.call(t, 'createUserLoginToken', { token, body: { expires_in: 60 } }),
    await api.call(t, 'listRoles', { token }),
  ];
  for (const res of refused) {
    t.equal(res.status, 403);
    t.match(res.body.detail, /password must be changed/);
  }
  t.equal((await api.call(t, 'getCurrentUser', { token })).status, 200, 'reads itself');
  t.equal((await api.call(t, 'getUser', { token, params: { user: user.id } })).status, 200, 'reads itself by id');
  // The path's id is read as its number, as validation reads it for every other session.
  t.equal((await api.call(t, 'getUser', { token, params: { user: `0${user.id}` } })).status, 200, 'reads itself by an id spelled 0…');
  t.equal((await api.call(t, 'getUser', { token, params: { user: `0${colleague.id}` } })).status, 403, 'but no one else');

  const changed = await api.call(t, 'updateUser', {
    token,
    params: { user: user.id },
    body: { password: 'a password of my own', old_password: 'a temporary password' },
  });
  t.equal(changed.status, 200);
  t.equal(changed.body.request_password_change, false, 'the change clears the flag');
  t.equal((await api.call(t, 'listUsers', { token })).status, 200, 'the same session may do everything again');

  const flagged = await api.createUser(tenant.tenantId, { values: { requestPasswordChange: true } });
  t.equal((await api.call(t, 'logout', { token: flagged.token })).status, 204, 'signing out is allowed');
  t.equal((await api.call(t, 'getCurrentUser', { token: flagged.token })).status, 401);
});

t.test('the client address is the entry the trusted proxy added: rotating the others changes nothing', async (t) => {
  const proxied = (left: string) => `${left}, 203.0.113.7`;
  for (const left of ['10.9.8.7', '192.0.2.1', '2001:db8::1']) {
    t.equal((await login(t, `nobody-${left}`, 'whatever password', proxied(left))).status, 401);
  }
  t.equal(await failures('ip:203.0.113.7'), 3, 'all counted on the address the proxy saw');
  await api.db.owner.execute(sql`update login_failures set failures = 50 where key = 'ip:203.0.113.7'`);
  const limited = await login(t, 'nobody-else', 'whatever password', proxied('192.0.2.99'));
  t.equal(limited.status, 429, 'a forged first entry does not escape the per-address limit');
  const neighbour = await login(t, 'nobody-else', 'whatever password', '203.0.113.8');
  t.equal(neighbour.status, 401, 'another client behind the proxy has its own count');
});

t.test('TRUST_PROXY takes a hop count or proxy addresses; "true" and the like stop start-up', async (t) => {
  t.equal(loadConfig({}).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: '' }).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: '0' }).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy, 2);
  t.strictSame(loadConfig({ TRUST_PROXY: '10.0.0.1, 10.1.0.0/16,::1' }).trustProxy, ['10.0.0.1', '10.1.0.0/16', '::1']);
  for (const value of ['true', 'TRUE', 'yes', '1.5', '-1', '10.0.0.0/33', 'proxy.internal', '10.0.0.1,loopback', '101']) {
    t.throws(() => loadConfig({ TRUST_PROXY: value }), /TRUST_PROXY/, value);
  }
});

t.test('an IPv6 client is counted by its /64: rotating addresses inside it does not escape the limit', async (t) => {
  t.equal(clientOf('2001:db8:aa:bb:1:2:3:4'), '2001:db8:aa:bb::/64');
  t.equal(clientOf('::ffff:192.0.2.5'), '192.0.2.5', 'IPv4-mapped addresses are IPv4 clients');
  t.equal(clientOf('192.0.2.5'), '192.0.2.5');
  for (let i = 1; i <= 3; i++) {
    t.equal((await login(t, `nobody-v6-${i}`, 'whatever password', `2001:db8:aa:bb::${i}`)).status, 401);
  }
  t.equal(await failures('ip:2001:db8:aa:bb::/64'), 3, 'three addresses, one count');
  await api.db.owner.execute(sql`update login_failures set failures = 50 where key = 'ip:2001:db8:aa:bb::/64'`);
  t.equal((await login(t, 'nobody-v6', 'whatever password', '2001:db8:aa:bb:ffff::9')).status, 429, 'another address of the /64 is limited too');
  t.equal((await login(t, 'nobody-v6', 'whatever password', '2001:db8:aa:bc::1')).status, 401, 'the next /64 has its own count');
});

t.test('a restricted session cannot lift request_password_change, nor change anything, without changing the password', async (t) => {
  const user = await api.createUser(tenant.tenantId, { password: 'a temporary password', values: { requestPasswordChange: true } });
  const params = { user: user.id };
  const before = await ownerUser(api.db, tenant.tenantId, user.id);
  const bodies: [Record<string, unknown>, string[]][] = [
    [{ request_password_change: false, username: 'renamed-without-password' }, ['password', 'request_password_change', 'username']],
    [{ request_password_change: false }, ['password', 'request_password_change']],
    [{ first_name: 'Changed' }, ['first_name', 'password']],
    [{ password: 'a password of my own', old_password: 'a temporary password', request_password_change: false }, ['request_password_change']],
    [{ password: 'a password of my own', old_password: 'a temporary password', city: 'Bonn' }, ['city']],
  ];
  for (const [body, keys] of bodies) {
    const res = await api.call(t, 'updateUser', { token: user.token, params, body });
    t.equal(res.status, 422, JSON.stringify(body));
    t.strictSame(Object.keys(res.body.errors).sort(), keys);
  }
  t.strictSame(await ownerUser(api.db, tenant.tenantId, user.id), before, 'nothing changed, the flag included');
  t.equal((await api.call(t, 'listRoles', { token: user.token })).status, 403, 'the session is still restricted');
  t.equal(await failures(accountKey(user.username)), 0, 'refused before any old_password was checked');
  const changed = await api.call(t, 'updateUser', {
    token: user.token,
    params,
    body: { password: 'a password of my own', old_password: 'a temporary password' },
  });
  t.equal(changed.status, 200, 'changing the password is the way out');
  t.equal(changed.body.request_password_change, false);
  t.equal((await api.call(t, 'listRoles', { token: user.token })).status, 200);
});

t.test('a restricted administrator must change the password too; it cannot clear its own flag', async (t) => {
  const user = await api.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'], values: { requestPasswordChange: true } });
  const params = { user: user.id };
  const cleared = await api.call(t, 'updateUser', { token: user.token, params, body: { request_password_change: false } });
  t.equal(cleared.status, 422);
  t.equal((await ownerUser(api.db, tenant.tenantId, user.id))!.requestPasswordChange, true);
  const changed = await api.call(t, 'updateUser', { token: user.token, params, body: { password: 'a password of my own' } });
  t.equal(changed.status, 200);
  t.equal(changed.body.request_password_change, false);
});

t.test('without users.administer, one’s own request_password_change is ignored outside a restricted session too', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const res = await api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { request_password_change: true, city: 'Köln' } });
  t.equal(res.status, 200);
  t.equal(res.body.request_password_change, false, 'ignored');
  t.equal(res.body.city, 'Köln');
});

t.test('renaming oneself does not reset the old_password limit: it is counted per user id as well', async (t) => {
  const user = await api.createUser(tenant.tenantId, { permissions: ['users.view'], password: 'the first password' });
  const params = { user: user.id };
  const change = (old: string) => api.call(t, 'updateUser', { token: user.token, params, body: { password: 'the second password', old_password: old } });
  for (let i = 0; i < 10; i++) t.equal((await change('a wrong guess')).status, 422, `guess ${i + 1}`);
  t.equal((await change('another wrong guess')).status, 429);
  const renamed = await api.call(t, 'updateUser', { token: user.token, params, body: { username: `${user.username}-renamed` } });
  t.equal(renamed.status, 200, 'the rename itself is allowed');
  t.equal((await change('a wrong guess after the rename')).status, 429, 'the count follows the user, not the name');
  t.equal((await login(t, `${user.username}-renamed`, 'the first password', '198.51.100.80')).status, 429, 'sign-in under the new name too');
  t.equal(await failures(`user:${tenant.tenantId}/${user.id}`), 10);
  t.ok(await verifyPassword((await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash, 'the first password', 0), 'unchanged');
});

t.test('renaming oneself does not reset the sign-in limit: a known user is counted per user id as well', async (t) => {
  const user = await api.createUser(tenant.tenantId, { permissions: ['users.view'], password: 'the first password' });
  for (let i = 0; i < 10; i++) t.equal((await login(t, user.username, `wrong guess ${i}`, '198.51.100.81')).status, 401);
  t.equal((await login(t, user.username, 'wrong guess 11', '198.51.100.81')).status, 429);
  const renamed = await api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { username: `${user.username}-moved` } });
  t.equal(renamed.status, 200);
  t.equal((await login(t, `${user.username}-moved`, 'wrong guess 12', '198.51.100.82')).status, 429, 'the new name inherits the count');
  // The window over, a right password clears both counts.
  await api.db.owner.execute(
    sql`update login_failures set window_started_at = now() - interval '1 day' where key in (${accountKey(user.username)}, ${`user:${tenant.tenantId}/${user.id}`})`,
  );
  t.equal((await login(t, `${user.username}-moved`, 'the first password', '198.51.100.82')).status, 200);
  t.equal(await failures(`user:${tenant.tenantId}/${user.id}`), 0);
});

t.test('blackout forgets the per-user count as well as the one under the username', async (t) => {
  const user = await api.createUser(tenant.tenantId, { password: 'the first password' });
  t.equal((await login(t, user.username, 'a wrong guess', '198.51.100.83')).status, 401);
  t.equal(await failures(`user:${tenant.tenantId}/${user.id}`), 1);
  t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: user.id } })).status, 204);
  const left = await api.db.owner.execute(
    sql`select key from login_failures where key in (${accountKey(user.username)}, ${`user:${tenant.tenantId}/${user.id}`})`,
  );
  t.strictSame([...left], []);
});

t.test('the per-account count keeps no name as typed: a password typed as the name is not stored', async (t) => {
  const typed = 'Correct Horse Battery Staple 42';
  t.equal((await login(t, typed, 'a wrong guess', '198.51.100.90')).status, 401);
  t.equal(await failures(accountKey(typed)), 1, 'counted under the name');
  t.equal(await failures(accountKey(typed.toUpperCase())), 1, 'in any case');
  const keys = await api.db.owner.execute<{ key: string }>(sql`select key from login_failures`);
  t.ok(keys.length > 0);
  for (const { key } of keys) t.notMatch(key.toLowerCase(), /horse|credentials\//, `${key} holds neither the name nor the tenant`);
});
