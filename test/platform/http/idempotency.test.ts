/**
 * Idempotent retries (the `Idempotency-Key` header of every operation that creates or
 * dispatches; src/platform/http/idempotency.ts): a retry with the same key and request gets
 * the first answer again without a second effect, concurrent duplicates never run twice,
 * the same key with another request is refused, and a failed first request keeps nothing.
 */
import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { operations } from '../../../generated/operations.ts';
import { loadSpecification } from '../../../src/platform/http/operations.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('idempotency');
const other = await api.createTenant('idempotency-other');
const departmentsNamed = (name: string) => rowCount(api.db, 'departments', sql`name = ${name}`);
const keyed = (key: string) => ({ 'idempotency-key': key });

t.test('bad keys are 422 problems and create nothing', async (t) => {
  for (const [what, key] of [
    ['too long', 'k'.repeat(256)],
    ['a space', 'two words'],
    ['not ASCII', 'schlüssel'],
  ] as const) {
    const res = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers: { 'idempotency-key': key }, body: { name: `Bad key ${what}` } });
    t.equal(res.status, 422, what);
    t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
    t.equal(await departmentsNamed(`Bad key ${what}`), 0, `${what}: nothing created`);
  }
  t.equal(await rowCount(api.db, 'idempotency_keys'), 0, 'and no key kept');
});

t.test('a retry with the same key gets the first answer again, and nothing is created twice', async (t) => {
  const first = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers: keyed('retry-1'), body: { name: 'Logistics' } });
  t.equal(first.status, 201);
  t.equal(first.headers['idempotent-replayed'], undefined, 'the first answer is no replay');
  const retry = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers: keyed('retry-1'), body: { name: 'Logistics' } });
  t.equal(retry.status, 201);
  t.equal(retry.headers['idempotent-replayed'], 'true');
  t.equal(retry.text, first.text, 'the same body, byte for byte');
  t.equal(retry.headers['content-type'], first.headers['content-type']);
  t.equal(await departmentsNamed('Logistics'), 1, 'one department');

  const reused = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers: keyed('retry-1'), body: { name: 'Logistics (2)' } });
  t.equal(reused.status, 422, 'the same key with another body');
  t.strictSame(reused.body.errors, { 'Idempotency-Key': ['was used for another request'] });
  t.equal(await departmentsNamed('Logistics (2)'), 0, 'creates nothing');

  const elsewhere = await api.call(t, 'createMenuItem', {
    token: tenant.adminToken,
    headers: keyed('retry-1'),
    body: { lang_id: 'en', icon_id: 1, menu_identifier: 'main', type: 'link', title: 'Wiki', link: 'https://wiki.example.test' },
  });
  t.equal(elsewhere.status, 422, 'the same key on another operation is another request');

  const unkeyed = await api.call(t, 'createDepartment', { token: tenant.adminToken, body: { name: 'Unkeyed' } });
  t.equal(unkeyed.status, 201, 'without a key, a request is carried out as ever');
  t.equal(await rowCount(api.db, 'idempotency_keys', sql`key = 'retry-1'`), 1, 'one key kept, for the keyed request');
});

t.test('a kept answer is encrypted: a one-time login token is not stored readable', async (t) => {
  const first = await api.call(t, 'createUserLoginToken', { token: tenant.adminToken, headers: keyed('login-token-1'), body: { expires_in: 600 } });
  t.equal(first.status, 201);
  const token = first.body.token as string;
  t.ok(token);
  const [row] = await api.db.owner.execute<{ body: string }>(sql`select body from idempotency_keys where key = 'login-token-1'`);
  t.ok(row!.body.startsWith('v1.'), 'sealed');
  t.notOk(row!.body.includes(token), 'the token is not in the row');
  t.notOk(row!.body.includes('"token"'), 'nor the answer in clear');
  const retry = await api.call(t, 'createUserLoginToken', { token: tenant.adminToken, headers: keyed('login-token-1'), body: { expires_in: 600 } });
  t.equal(retry.headers['idempotent-replayed'], 'true');
  t.equal(retry.text, first.text, 'the replay is the answer as sent');
});

t.test('keys belong to the caller: another user, another tenant, the same key is a request of its own', async (t) => {
  const colleague = await api.createUser(tenant.tenantId, { permissions: ['departments.manage'] });
  const mine = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers: keyed('shared-key'), body: { name: 'Mine' } });
  const theirs = await api.call(t, 'createDepartment', { token: colleague.token, headers: keyed('shared-key'), body: { name: 'Theirs' } });
  const foreign = await api.call(t, 'createDepartment', { token: other.adminToken, headers: keyed('shared-key'), body: { name: 'Foreign' } });
  t.same([mine.status, theirs.status, foreign.status], [201, 201, 201]);
  t.equal(theirs.headers['idempotent-replayed'], undefined);
  t.equal(foreign.headers['idempotent-replayed'], undefined);
  t.equal(await departmentsNamed('Theirs'), 1);
  t.equal(await departmentsNamed('Foreign'), 1);
});

t.test('a first request that failed keeps nothing: its retry runs afresh', async (t) => {
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const body = newUserBodies(employee.id, 'again')();
  const taken = await api.call(t, 'createUser', { token: tenant.adminToken, body });
  t.equal(taken.status, 201);
  const refused = await api.call(t, 'createUser', { token: tenant.adminToken, headers: keyed('after-failure'), body });
  t.equal(refused.status, 422, 'the username is taken');
  const deleted = await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: taken.body.id } });
  t.equal(deleted.status, 204);
  // Soft-deleted users keep their username: rename the first one out of the way.
  await api.db.owner.execute(sql`update users set username = 'renamed-away' where tenant_id = ${tenant.tenantId} and id = ${taken.body.id}`);
  const retried = await api.call(t, 'createUser', { token: tenant.adminToken, headers: keyed('after-failure'), body });
  t.equal(retried.status, 201, 'the retry is carried out');
  t.equal(retried.headers['idempotent-replayed'], undefined);
});

/** `count` requests at once, each with the same key and body. */
const atOnce = (count: number, send: () => ReturnType<typeof api.call>) => Promise.all(Array.from({ length: count }, send));

t.test('concurrent duplicates: one effect, every other answer a replay or a 409', async (t) => {
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const members = await Promise.all(Array.from({ length: 20 }, () => api.createUser(tenant.tenantId)));
  const message = { title: 'Concurrent retry', body: '<p>Once</p>', url: '/events/once', user_ids: members.map((m) => m.id) };

  const sends = await atOnce(8, () => api.call(t, 'createNotification', { token: tenant.adminToken, headers: keyed('fan-out-1'), body: message }));
  const user = newUserBodies(employee.id, 'concurrent')();
  const creates = await atOnce(8, () => api.call(t, 'createUser', { token: tenant.adminToken, headers: keyed('user-1'), body: user }));

  for (const [what, answers, created] of [
    ['fan-out', sends, 202],
    ['user', creates, 201],
  ] as const) {
    const carriedOut = answers.filter((a) => a.status === created && a.headers['idempotent-replayed'] === undefined);
    t.equal(carriedOut.length, 1, `${what}: carried out once`);
    for (const answer of answers) {
      if (answer.status === 409) {
        t.equal(answer.headers['retry-after'], '1', `${what}: a 409 says when to retry`);
        t.match(answer.body, { status: 409, detail: /in progress/ });
      } else {
        t.equal(answer.status, created, `${what}: otherwise the same answer`);
        t.equal(answer.text, carriedOut[0]!.text);
      }
    }
  }
  t.equal(await rowCount(api.db, 'notification_dispatches', sql`tenant_id = ${tenant.tenantId} and data->>'title' = ${message.title}`), 1, 'one fan-out');
  t.equal(await rowCount(api.db, 'users', sql`tenant_id = ${tenant.tenantId} and username = ${user.username}`), 1, 'one user');

  const later = await api.call(t, 'createNotification', { token: tenant.adminToken, headers: keyed('fan-out-1'), body: message });
  t.equal(later.status, 202);
  t.equal(later.headers['idempotent-replayed'], 'true', 'once answered, a retry is a replay');
  t.equal(await rowCount(api.db, 'notification_dispatches', sql`tenant_id = ${tenant.tenantId} and data->>'title' = ${message.title}`), 1);
});

t.test('an expired key starts over', async (t) => {
  const member = await api.createUser(tenant.tenantId);
  const expiring = { title: 'Expiring', body: '<p>Twice</p>', url: '/events/twice', user_ids: [member.id] };
  const first = await api.call(t, 'createNotification', { token: tenant.adminToken, headers: keyed('expiring'), body: expiring });
  t.equal(first.status, 202);
  await api.db.owner.execute(sql`update idempotency_keys set expires_at = now() - interval '1 second' where key = 'expiring'`);
  const again = await api.call(t, 'createNotification', { token: tenant.adminToken, headers: keyed('expiring'), body: expiring });
  t.equal(again.status, 202);
  t.equal(again.headers['idempotent-replayed'], undefined, 'carried out again');
  t.equal(await rowCount(api.db, 'notification_dispatches', sql`tenant_id = ${tenant.tenantId} and data->>'title' = 'Expiring'`), 2, 'two fan-outs');
});

t.test('every POST that creates or dispatches declares the key, and the 409', async (t: Test) => {
  const spec = loadSpecification() as { paths: Record<string, Record<string, { parameters?: { $ref?: string }[]; responses: Record<string, unknown> }>> };
  const creating = Object.entries(operations).filter(
    ([operationId, meta]) => meta.method === 'POST' && (/^create(?!.*Csv)/.test(operationId) || operationId === 'runAutomation'),
  );
  t.ok(creating.length >= 15);
  for (const [operationId, meta] of creating) {
    const operation = spec.paths[meta.path]!.post!;
    t.ok(
      (operation.parameters ?? []).some((p) => p.$ref === '#/components/parameters/IdempotencyKey'),
      `${operationId} takes Idempotency-Key`,
    );
    t.ok(operation.responses['409'], `${operationId} declares 409`);
  }
});

t.test('a request is kept as a keyed fingerprint: a password in its body cannot be tested against it', async (t) => {
  const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const body = { username: 'fingerprinted', password: 'a guessable password', first_name: 'Finger', last_name: 'Print', role_id: employee.id };
  const created = await api.call(t, 'createUser', { token: tenant.adminToken, headers: keyed('fingerprint-1'), body });
  t.equal(created.status, 201);
  const [kept] = await api.db.owner.execute<{ fingerprint: Buffer }>(sql`select fingerprint from idempotency_keys where key = 'fingerprint-1'`);
  // The request as the fingerprint reads it: keys sorted at every level.
  const sorted = (value: object) => Object.fromEntries(Object.entries(value).sort(([a], [b]) => a.localeCompare(b)));
  const plain = createHash('sha256')
    .update(JSON.stringify({ body: sorted(body), operationId: 'createUser', params: {}, query: {} }))
    .digest();
  t.equal(kept!.fingerprint.length, 32);
  t.notOk(kept!.fingerprint.equals(plain), 'not the plain SHA-256 of the request, which a guess could be checked against');
  const retry = await api.call(t, 'createUser', { token: tenant.adminToken, headers: keyed('fingerprint-1'), body });
  t.equal(retry.headers['idempotent-replayed'], 'true', 'a retry still matches it');
  const other = await api.call(t, 'createUser', {
    token: tenant.adminToken,
    headers: keyed('fingerprint-1'),
    body: { ...body, password: 'another password here' },
  });
  t.equal(other.status, 422, 'another password is another request');
});

t.test("a blackout removes the answers kept for the person's own keys, and no one else's", async (t) => {
  const leaver = await api.createUser(tenant.tenantId, { permissions: ['departments.manage'] });
  const stayer = await api.createUser(tenant.tenantId, { permissions: ['departments.manage'] });
  for (const [user, name] of [
    [leaver, 'Kept for the leaver'],
    [stayer, 'Kept for the stayer'],
  ] as const) {
    const created = await api.call(t, 'createDepartment', { token: user.token, headers: keyed(`blackout-${user.id}`), body: { name } });
    t.equal(created.status, 201);
  }
  const kept = async (userId: number) => rowCount(api.db, 'idempotency_keys', sql`user_id = ${userId}`);
  t.equal(await kept(leaver.id), 1);
  t.equal((await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: leaver.id } })).status, 204);
  t.equal(await kept(leaver.id), 0, "the person's kept answers are gone");
  t.equal(await kept(stayer.id), 1, "another user's stay");
});
