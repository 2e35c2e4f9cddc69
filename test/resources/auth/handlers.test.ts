import t from 'tap';
import { and, eq, sql } from 'drizzle-orm';
import { Algorithm, Version, hash, verify } from '@node-rs/argon2';
import { needsRehash, verifyPassword } from '../../../src/platform/auth/passwords.ts';
import { users } from '../../../src/resources/users/table.ts';
import { DEMO_PASSWORD, ownerUser, startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { holdRows, lockWaiters, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { loginMaxFailures: 3 });

const login = (tt: Parameters<typeof api.call>[0], body: unknown, headers: Record<string, string> = {}) => api.call(tt, 'login', { body, headers });

t.test('the demo administrator signs in and the token authenticates', async (t) => {
  const res = await login(t, { tenant: 'demo', username: 'admin', password: DEMO_PASSWORD });
  t.equal(res.status, 200);
  t.equal(res.body.token_type, 'Bearer');
  t.match(res.body.access_token, /^atr_[A-Za-z0-9_-]{43}$/);
  t.ok(Date.parse(res.body.expires_at) > Date.now() + 11 * 3600_000, 'expires after about ACCESS_TOKEN_TTL');
  t.equal(res.body.password_change_required, false);
  const me = await api.call(t, 'getCurrentUser', { token: res.body.access_token });
  t.equal(me.status, 200);
  t.equal(me.body.username, 'admin');
  t.notOk('password_hash' in me.body || 'password' in me.body, 'no password in the answer');
});

t.test('the token is stored only as a hash', async (t) => {
  const res = await login(t, { tenant: 'demo', username: 'admin', password: DEMO_PASSWORD });
  t.equal(await rowCount(api.db, 'access_tokens', sql`encode(token_hash, 'escape') like ${'%' + res.body.access_token + '%'}`), 0);
});

t.test('wrong password, unknown user, unknown tenant, inactive and deleted users get one and the same 401', async (t) => {
  const tenant = await api.createTenant('same-answer');
  const inactive = await api.createUser(tenant.tenantId, { values: { active: false } });
  const deleted = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  const attempts = [
    { tenant: 'same-answer', username: 'admin', password: 'wrong password' },
    { tenant: 'same-answer', username: 'nobody', password: DEMO_PASSWORD },
    { tenant: 'no-such-tenant', username: 'admin', password: DEMO_PASSWORD },
    { tenant: 'same-answer', username: inactive.username, password: inactive.password },
    { tenant: 'same-answer', username: deleted.username, password: deleted.password },
  ];
  const bodies = [];
  for (const [i, attempt] of attempts.entries()) {
    const res = await login(t, attempt, { 'x-forwarded-for': `10.0.0.${i}` });
    t.equal(res.status, 401, JSON.stringify(attempt));
    bodies.push(res.text);
  }
  t.equal(new Set(bodies).size, 1, 'identical bodies');
});

t.test('a username no user can have (a NUL character) gets the same 401 whether the tenant exists or not', async (t) => {
  await api.createTenant('nul-name');
  const answers = [];
  for (const [i, tenant] of ['nul-name', 'no-such-tenant'].entries()) {
    const res = await login(t, { tenant, username: 'ad\u0000min', password: DEMO_PASSWORD }, { 'x-forwarded-for': `10.0.1.${i}` });
    t.equal(res.status, 401, tenant);
    t.equal(res.body.code, 'credentials_invalid', tenant);
    answers.push(res.text);
  }
  t.equal(answers[0], answers[1], 'identical bodies: the answer does not tell that the tenant exists');
});

t.test('a user of another tenant cannot sign in through this tenant', async (t) => {
  const a = await api.createTenant('tenant-a');
  const b = await api.createTenant('tenant-b');
  const user = await api.createUser(a.tenantId);
  t.equal((await login(t, { tenant: 'tenant-b', username: user.username, password: user.password })).status, 401);
  t.equal((await login(t, { tenant: 'tenant-a', username: user.username, password: user.password })).status, 200);
  t.ok(b.tenantId);
});

t.test('repeated failures for one account are rate limited with Retry-After, even with the right password', async (t) => {
  const tenant = await api.createTenant('limited');
  const user = await api.createUser(tenant.tenantId);
  for (let i = 0; i < 3; i++) {
    t.equal((await login(t, { tenant: 'limited', username: user.username, password: 'nope nope nope' })).status, 401);
  }
  const limited = await login(t, { tenant: 'limited', username: user.username, password: user.password });
  t.equal(limited.status, 429);
  t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After in seconds');
  t.equal(limited.headers['content-type'], 'application/problem+json; charset=utf-8');
  // The window over: the right password works again and clears the count.
  await api.db.owner.execute(sql`update login_failures set window_started_at = now() - interval '1 day'`);
  t.equal((await login(t, { tenant: 'limited', username: user.username, password: user.password })).status, 200);
});

t.test('logout revokes the presented token only', async (t) => {
  const first = (await login(t, { tenant: 'demo', username: 'admin', password: DEMO_PASSWORD })).body.access_token;
  const second = (await login(t, { tenant: 'demo', username: 'admin', password: DEMO_PASSWORD })).body.access_token;
  t.equal((await api.call(t, 'logout', { token: first })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: first })).status, 401);
  t.equal((await api.call(t, 'logout', { token: first })).status, 401, 'a revoked token cannot log out again');
  t.equal((await api.call(t, 'getCurrentUser', { token: second })).status, 200);
});

t.test('expired tokens, tokens of deactivated or deleted users and tokens issued before a logout mark are refused', async (t) => {
  const tenant = await api.createTenant('refusals');
  const expired = await api.createUser(tenant.tenantId);
  await api.db.owner.execute(sql`update access_tokens set expires_at = now() - interval '1 second' where user_id = ${expired.id}`);
  t.equal((await api.call(t, 'getCurrentUser', { token: expired.token })).status, 401, 'expired');

  const deactivated = await api.createUser(tenant.tenantId);
  await api.db.owner.execute(sql`update users set active = false where id = ${deactivated.id}`);
  t.equal((await api.call(t, 'getCurrentUser', { token: deactivated.token })).status, 401, 'inactive');

  const deleted = await api.createUser(tenant.tenantId);
  await api.db.owner.execute(sql`update users set deleted_at = now() where id = ${deleted.id}`);
  t.equal((await api.call(t, 'getCurrentUser', { token: deleted.token })).status, 401, 'deleted');

  const marked = await api.createUser(tenant.tenantId);
  await api.db.owner.execute(sql`update users set logout_marked_at = (select clock_timestamp()) where id = ${marked.id}`);
  t.equal((await api.call(t, 'getCurrentUser', { token: marked.token })).status, 401, 'issued before the logout mark');
  const fresh = await api.tokenFor(tenant.tenantId, marked.id);
  t.equal((await api.call(t, 'getCurrentUser', { token: fresh })).status, 200, 'issued after the mark');
});

t.test('missing, malformed and forged tokens get 401 with WWW-Authenticate-free problem bodies', async (t) => {
  for (const token of [null, 'x', 'atr_' + 'A'.repeat(43), 'a b c']) {
    const res = await api.call(t, 'getCurrentUser', { token });
    t.equal(res.status, 401, String(token));
    t.equal(res.body.status, 401);
  }
  const res = await api.call(t, 'getCurrentUser', { headers: { authorization: 'Basic YWRtaW46YWRtaW4=' } });
  t.equal(res.status, 401);
});

t.test('bad login input is a 4xx problem and changes nothing', async (t) => {
  const before = await rowCount(api.db, 'access_tokens');
  const cases: [unknown, number, string[]][] = [
    [{}, 422, ['tenant', 'username', 'password']],
    [{ tenant: 'demo', username: 'admin' }, 422, ['password']],
    [{ tenant: 'demo', username: 'admin', password: 1 }, 422, ['password']],
    [{ tenant: 'demo', username: 'admin', password: 'x', extra: true }, 422, ['extra']],
    [{ tenant: '', username: 'admin', password: 'x' }, 422, ['tenant']],
    [[], 422, []],
  ];
  for (const [body, status, fields] of cases) {
    const res = await login(t, body);
    t.equal(res.status, status, JSON.stringify(body));
    for (const field of fields) t.ok(res.body.errors?.[field], `errors names ${field}`);
  }
  const malformed = await api.call(t, 'login', { payload: '{"tenant":', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  const wrongType = await api.call(t, 'login', { payload: 'tenant=demo', contentType: 'application/x-www-form-urlencoded' });
  t.equal(wrongType.status, 415);
  const tooLarge = await api.call(t, 'login', {
    payload: JSON.stringify({ tenant: 'demo', username: 'admin', password: 'x'.repeat(2 * 1024 * 1024) }),
    contentType: 'application/json',
  });
  t.equal(tooLarge.status, 413);
  t.equal(await rowCount(api.db, 'access_tokens'), before, 'no token issued');
});

t.test('a secured route answers 401 before it validates the request', async (t) => {
  const res = await api.call(t, 'listNotificationSettings', { query: { limit: 'not-a-number' } });
  t.equal(res.status, 401);
});

/** A hash of `password` exactly as given (not normalized), at a cost of its own: cheap, and not the suite's. */
const hashAsOf = (password: string, options: { memoryCost?: number; timeCost?: number; parallelism?: number; version?: Version } = {}) =>
  hash(password, { algorithm: Algorithm.Argon2id, memoryCost: 512, timeCost: 2, parallelism: 1, ...options });

t.test('a sign-in renews a hash made with other Argon2id parameters, in place and unreturned', async (t) => {
  const tenant = await api.createTenant('renew-cost');
  const password = 'an older password hash';
  for (const [i, options] of [
    {},
    { memoryCost: 256, timeCost: 1, parallelism: 2 },
    { memoryCost: 256, timeCost: 1, parallelism: 1, version: Version.V0x10 },
  ].entries()) {
    const old = await hashAsOf(password, options);
    t.ok(needsRehash(old), `${old.split('$', 4).join('$')} is not what the suite's cost makes`);
    const user = await api.createUser(tenant.tenantId, { password, values: { passwordHash: old } });
    const before = (await ownerUser(api.db, tenant.tenantId, user.id))!;
    const res = await login(t, { tenant: 'renew-cost', username: user.username, password }, { 'x-forwarded-for': `10.0.2.${i}` });
    t.equal(res.status, 200);
    const after = (await ownerUser(api.db, tenant.tenantId, user.id))!;
    t.not(after.passwordHash, old, 'the stored hash was replaced');
    t.match(after.passwordHash, /^\$argon2id\$v=19\$m=256,t=1,p=1\$/, "at the suite's cost");
    t.notOk(needsRehash(after.passwordHash!));
    t.ok(await verifyPassword(after.passwordHash, password, 0), 'and it verifies the password');
    t.notOk(res.text.includes(after.passwordHash!.split('$')[5]!), 'the new hash is not in the answer');
    t.same(after.updatedAt, before.updatedAt, 'the user record is unchanged');
    t.equal((await api.call(t, 'getCurrentUser', { token: res.body.access_token })).status, 200, 'the token works');
    t.equal((await login(t, { tenant: 'renew-cost', username: user.username, password })).status, 200, 'and the password signs in again');
  }
});

t.test('a sign-in replaces a hash of the password as typed with one of its normalized form', async (t) => {
  const tenant = await api.createTenant('renew-typed');
  const typed = 'cafe\u0301 au lait \uff11\uff12';
  const normalized = 'caf\u00e9 au lait 12';
  t.equal(typed.normalize('NFKC'), normalized);
  // At the suite's cost: only the form held makes it outdated.
  const legacy = await hashAsOf(typed, { memoryCost: 256, timeCost: 1, parallelism: 1 });
  t.notOk(needsRehash(legacy));
  const user = await api.createUser(tenant.tenantId, { password: typed, values: { passwordHash: legacy } });
  t.equal((await login(t, { tenant: 'renew-typed', username: user.username, password: normalized })).status, 401, 'the normalized form does not match it');
  t.equal((await login(t, { tenant: 'renew-typed', username: user.username, password: typed })).status, 200, 'the form it was set in does');
  const stored = (await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash!;
  t.not(stored, legacy);
  t.ok(await verify(stored, normalized), 'the new hash holds the normalized form');
  t.notOk(await verify(stored, typed), 'not the form as typed');
  t.equal((await login(t, { tenant: 'renew-typed', username: user.username, password: normalized })).status, 200, 'which now signs in');
  t.equal((await login(t, { tenant: 'renew-typed', username: user.username, password: typed })).status, 200, 'as does the form as typed');
  t.equal((await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash, stored, 'without another renewal');
});

t.test('a wrong password renews nothing, and a current hash is not rewritten', async (t) => {
  const tenant = await api.createTenant('renew-none');
  const old = await hashAsOf('the right password');
  const outdated = await api.createUser(tenant.tenantId, { password: 'the right password', values: { passwordHash: old } });
  t.equal((await login(t, { tenant: 'renew-none', username: outdated.username, password: 'the wrong password' })).status, 401);
  t.equal((await ownerUser(api.db, tenant.tenantId, outdated.id))!.passwordHash, old, 'an outdated hash stays when the password is wrong');
  const current = await api.createUser(tenant.tenantId);
  const before = (await ownerUser(api.db, tenant.tenantId, current.id))!.passwordHash!;
  t.notOk(needsRehash(before));
  t.equal((await login(t, { tenant: 'renew-none', username: current.username, password: current.password })).status, 200);
  t.equal((await ownerUser(api.db, tenant.tenantId, current.id))!.passwordHash, before, 'a current hash is the same string after a sign-in');
});

t.test('two sign-ins that renew the same hash at once both succeed', async (t) => {
  const tenant = await api.createTenant('renew-race');
  const password = 'signed in twice at once';
  const user = await api.createUser(tenant.tenantId, { password, values: { passwordHash: await hashAsOf(password) } });
  // Both check the old hash, then wait for the user's row; the first to get it renews the hash.
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${user.id} for update`);
  const signIns = [0, 1].map((i) => login(t, { tenant: 'renew-race', username: user.username, password }, { 'x-forwarded-for': `10.0.3.${i}` }));
  await eventually(
    () => lockWaiters(api.db, 'for no key update'),
    (n) => n >= 2,
  );
  await held.release();
  const answers = await Promise.all(signIns);
  t.same(
    answers.map((answer) => answer.status),
    [200, 200],
  );
  const stored = (await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash!;
  t.notOk(needsRehash(stored), 'renewed');
  t.ok(await verifyPassword(stored, password, 0));
});

t.test('a password changed while a sign-in renews the hash is kept, and the sign-in refused', async (t) => {
  const tenant = await api.createTenant('renew-changed');
  const password = 'changed under the sign-in';
  const user = await api.createUser(tenant.tenantId, { password, values: { passwordHash: await hashAsOf(password) } });
  const changed = await hashAsOf('the new password');
  let change!: () => void;
  const changing = new Promise<void>((resolve) => (change = resolve));
  let locked!: () => void;
  const holding = new Promise<void>((resolve) => (locked = resolve));
  // A password change that holds the user's row while the sign-in checks the old password, and commits once the sign-in waits for it.
  const changer = api.db.owner.transaction(async (tx) => {
    await tx.execute(sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${user.id} for update`);
    locked();
    await changing;
    await tx
      .update(users)
      .set({ passwordHash: changed })
      .where(and(eq(users.tenantId, tenant.tenantId), eq(users.id, user.id)));
  });
  await holding;
  const signIn = login(t, { tenant: 'renew-changed', username: user.username, password });
  t.ok((await lockWaiters(api.db, 'for no key update')) > 0, 'the sign-in waits for the row');
  change();
  await changer;
  t.equal((await signIn).status, 401);
  t.equal((await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash, changed, 'the changed password is kept');
});

t.test('a change of one’s own password is made though a sign-in renewed the hash old_password was checked against', async (t) => {
  const tenant = await api.createTenant('renew-then-change');
  const password = 'renewed while changed';
  const user = await api.createUser(tenant.tenantId, { password });
  const session = await login(t, { tenant: 'renew-then-change', username: user.username, password });
  t.equal(session.status, 200);
  await api.db.owner
    .update(users)
    .set({ passwordHash: await hashAsOf(password) })
    .where(and(eq(users.tenantId, tenant.tenantId), eq(users.id, user.id)));
  // The sign-in waits for the user's row first, then the change (whose old_password was checked against the outdated hash).
  const held = await holdRows(api.db, sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${user.id} for update`);
  const signIn = login(t, { tenant: 'renew-then-change', username: user.username, password }, { 'x-forwarded-for': '10.0.4.1' });
  await lockWaiters(api.db, 'for no key update');
  const change = api.call(t, 'updateUser', {
    token: session.body.access_token,
    params: { user: user.id },
    body: { password: 'the password after the change', old_password: password },
  });
  await lockWaiters(api.db, 'for update');
  await held.release();
  const [signedIn, changed] = await Promise.all([signIn, change]);
  t.equal(signedIn.status, 200, 'the sign-in renewed the hash');
  t.equal(changed.status, 200, 'and the change, checked against the hash before, is made');
  const stored = (await ownerUser(api.db, tenant.tenantId, user.id))!.passwordHash!;
  t.ok(await verifyPassword(stored, 'the password after the change', 0), 'the new password is the one stored');
});
