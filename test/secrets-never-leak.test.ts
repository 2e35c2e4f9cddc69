/**
 * One sweep over every write that takes or mints a secret (passwords, access, login and SCIM
 * tokens, webhook secrets, push subscription keys, a picture's bytes), its refusals and its
 * database failures included: no secret, nor a stored password hash, may be in another
 * answer than the one that hands it out, in any log line at trace level (the production
 * logger's options), or in the audit trail (the table, the list, each event, the export).
 */
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import type { OperationId } from '../generated/operations.ts';
import { DEMO_PASSWORD, startTestApi, type CallOptions } from './helpers/atrium.ts';
import { assertServedAnswer } from './helpers/contract.ts';
import { eventually } from './helpers/eventually.ts';
import { roleNamed } from './helpers/fixtures.ts';
import { multipart, PNG_1X1 } from './helpers/multipart.ts';
import { browserSubscription } from './helpers/push-service.ts';
import { startReceiver } from './helpers/receiver.ts';

t.setTimeout(300_000);
// Job workers in the process (deliveries log what they send), every log line kept at trace.
const api = await startTestApi(t, {
  role: 'all',
  logLevel: 'trace',
  webhookAllowedCidrs: ['127.0.0.1/32'],
  pushAllowedCidrs: ['127.0.0.1/32'],
  smtpUrl: 'smtp://mailer:SMTP-PASSWORD-probe-77@127.0.0.1:1',
});
const { db, logLines: lines } = api;
const app = api.atrium.app!;
const receiver = await startReceiver(t);

interface Seen {
  what: string;
  text: string;
}
const responses: Seen[] = [];
/** Secrets, by name: [value, answers allowed to hold it (operation ids)]. */
const secrets = new Map<string, { value: string; allowedIn: Set<string> }>();
const secret = (name: string, value: string, ...allowedIn: string[]) => {
  secrets.set(name, { value, allowedIn: new Set(allowedIn) });
  return value;
};

/** `api.call` (the answer checked against the spec), each answer's headers and body kept for the sweep. */
async function call(t: Test, operationId: OperationId, options: CallOptions = {}) {
  const res = await api.call(t, operationId, options);
  responses.push({ what: `${operationId} ${res.status}`, text: `${JSON.stringify(res.headers)}\n${res.text}` });
  return res;
}

async function scim(method: string, url: string, token: string, body?: unknown) {
  const res = await app.inject({
    method: method as never,
    url,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  assertServedAnswer(method, url, res);
  responses.push({ what: `SCIM ${method} ${url} ${res.statusCode}`, text: `${JSON.stringify(res.headers)}\n${res.body}` });
  return { status: res.statusCode, body: res.body ? res.json() : null };
}

t.test('no secret reaches another answer, the log or the audit trail', async (t: Test) => {
  const tenant = await api.createTenant('probe');
  secret('admin access token (fixture)', tenant.adminToken);
  const roleId = (await roleNamed(db, tenant.tenantId, 'Employee')).id;

  // Sign-in with password: answer holds the access token.
  const signedIn = await call(t, 'login', { body: { tenant: 'probe', username: 'admin', password: secret('admin password', DEMO_PASSWORD) } });
  t.equal(signedIn.status, 200);
  const adminSession = secret('login access token', signedIn.body.access_token, 'login');
  // Failed sign-ins.
  t.equal((await call(t, 'login', { body: { tenant: 'probe', username: 'admin', password: secret('wrong password', 'WRONG-pw-probe-123') } })).status, 401);
  t.equal(
    (await call(t, 'login', { body: { tenant: 'probe', username: secret('password as username', 'PW-IN-NAME-probe-1'), password: 'xxxxxxxxxxx' } })).status,
    401,
  );
  t.equal((await call(t, 'login', { body: { tenant: 'probe', username: 'admin', password: secret('too long password', 'L'.repeat(1100)) } })).status, 422);

  // User create with password.
  const created = await call(t, 'createUser', {
    token: adminSession,
    body: { username: 'probed', password: secret('new user password', 'NEW-user-pw-probe-42'), first_name: 'P', last_name: 'Q', role_id: roleId },
  });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const userId = created.body.id as number;
  // A 422 with a too-short and too-long password.
  t.equal(
    (
      await call(t, 'createUser', {
        token: adminSession,
        body: { username: 'short', password: secret('short pw', 'SHpw1'), first_name: 'P', last_name: 'Q', role_id: roleId },
      })
    ).status,
    422,
  );
  t.equal(
    (
      await call(t, 'createUser', {
        token: adminSession,
        body: { username: 'long', password: secret('long pw', 'LONGpw'.repeat(200)), first_name: 'P', last_name: 'Q', role_id: roleId },
      })
    ).status,
    422,
  );
  // Duplicate username (a database refusal) with a password.
  t.equal(
    (
      await call(t, 'createUser', {
        token: adminSession,
        body: { username: 'probed', password: secret('dup pw', 'DUP-user-pw-probe-43'), first_name: 'P', last_name: 'Q', role_id: roleId },
      })
    ).status,
    422,
  );
  // NUL in another field with a password.
  const nul = await call(t, 'createUser', {
    token: adminSession,
    body: { username: 'nul', password: secret('nul pw', 'NUL-user-pw-probe-44'), first_name: 'P\u0000', last_name: 'Q', role_id: roleId },
  });
  t.equal(nul.status, 422, 'a NUL character is refused');

  // Password reset by the admin, and own change.
  t.equal(
    (await call(t, 'updateUser', { token: adminSession, params: { user: userId }, body: { password: secret('reset pw', 'RESET-pw-probe-45') } })).status,
    200,
  );
  const userLogin = await call(t, 'login', { body: { tenant: 'probe', username: 'probed', password: 'RESET-pw-probe-45' } });
  const userToken = secret('user access token', userLogin.body.access_token, 'login');
  const wrongOld = await call(t, 'updateUser', {
    token: userToken,
    params: { user: userId },
    body: { old_password: secret('wrong old pw', 'WRONG-old-probe-46'), password: secret('pw after wrong old', 'AFTER-wrong-probe-47') },
  });
  t.equal(wrongOld.status, 422);
  const own = await call(t, 'updateUser', {
    token: userToken,
    params: { user: userId },
    body: { old_password: 'RESET-pw-probe-45', password: secret('own new pw', 'OWN-new-pw-probe-48') },
  });
  t.equal(own.status, 200, JSON.stringify(own.body));
  const userLogin2 = await call(t, 'login', { body: { tenant: 'probe', username: 'probed', password: 'OWN-new-pw-probe-48' } });
  const userToken2 = secret('user access token 2', userLogin2.body.access_token, 'login');

  // Login tokens.
  const lt = await call(t, 'createUserLoginToken', { token: adminSession, body: { expires_in: 600 } });
  t.equal(lt.status, 201, JSON.stringify(lt.body));
  secret('login token', lt.body.token, 'createUserLoginToken');
  await call(t, 'listUserLoginTokens', { token: adminSession, query: { limit: 100 } });
  await call(t, 'getUserLoginToken', { token: adminSession, params: { userLoginToken: lt.body.uuid } });
  const consumed = await call(t, 'loginWithToken', { body: { token: lt.body.token } });
  t.equal(consumed.status, 200);
  secret('token-login access token', consumed.body.access_token, 'loginWithToken');
  t.equal((await call(t, 'loginWithToken', { body: { token: lt.body.token } })).status, 401, 'used');
  t.equal((await call(t, 'loginWithToken', { body: { token: secret('bogus login token', 'BOGUS-login-token-probe') } })).status, 401);
  await call(t, 'updateUser', { token: adminSession, params: { user: userId }, body: { email: 'probed@example.com' } });
  const lte = await call(t, 'createUserLoginTokenForEmail', { token: adminSession, body: { email: 'probed@example.com', expires_in: 600 } });
  t.equal(lte.status, 201);
  secret('email login token', lte.body.token, 'createUserLoginTokenForEmail');

  // SCIM token and SCIM writes.
  t.equal((await call(t, 'updateUserSettings', { token: adminSession, body: { required_profile_keys: [], default_role_id: roleId } })).status, 200);
  const st = await call(t, 'createScimToken', { token: adminSession, body: { name: 'probe-idp' } });
  t.equal(st.status, 201, JSON.stringify(st.body));
  const scimToken = secret('scim token', st.body.token, 'createScimToken');
  await call(t, 'listScimTokens', { token: adminSession });
  const su = await scim('POST', '/scim/v2/Users', scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'scimmed',
    name: { givenName: 'S', familyName: 'C' },
    password: secret('scim user pw', 'SCIM-user-pw-probe-49'),
  });
  t.equal(su.status, 201, JSON.stringify(su.body));
  const scimUserId = su.body.id as string;
  await scim('PATCH', `/scim/v2/Users/${scimUserId}`, scimToken, {
    schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
    Operations: [{ op: 'replace', path: 'password', value: secret('scim patch pw', 'SCIM-patch-pw-probe-50') }],
  });
  await scim('PATCH', `/scim/v2/Users/${scimUserId}`, scimToken, {
    schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
    Operations: [{ op: 'replace', value: { password: secret('scim patch pw2', 'SCIM-patch-pw2-probe-51'), displayName: 'x' } }],
  });
  await scim('PUT', `/scim/v2/Users/${scimUserId}`, scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'scimmed',
    name: { givenName: 'S', familyName: 'C' },
    password: secret('scim put pw', 'SCIM-put-pw-probe-52'),
  });
  // SCIM refusals with a password.
  await scim('POST', '/scim/v2/Users', scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'scimmed',
    password: secret('scim dup pw', 'SCIM-dup-pw-probe-53'),
  });
  await scim('POST', '/scim/v2/Users', scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'short-pw',
    password: secret('scim short pw', 'SCs1'),
  });
  await scim('POST', '/scim/v2/Users', scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'long-pw',
    password: secret('scim long pw', 'SCIMlong'.repeat(200)),
  });
  await scim('POST', '/scim/v2/Users', scimToken, { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: 'nopw', password: 12345678901 });
  await scim('POST', '/scim/v2/Users', scimToken, {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
    userName: 'nul\u0000',
    password: secret('scim nul pw', 'SCIM-nul-pw-probe-54'),
  });
  await scim('GET', `/scim/v2/Users/${scimUserId}`, scimToken);
  await scim('GET', `/scim/v2/Users?filter=${encodeURIComponent('userName eq "scimmed"')}`, scimToken);
  await scim('GET', '/scim/v2/Users', secret('bogus scim token', 'atrs_BOGUS-scim-token-probe'));

  // Webhooks: each auth type, create, update (rotate), mask, refusals.
  const hookUrl = receiver.url('/hook/probe');
  const basic = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'basic',
      config: { url: hookUrl, headers: {}, auth: { type: 'basic', basic: { username: 'u', password: secret('webhook basic pw', 'HOOK-basic-pw-probe-55') } } },
    },
  });
  t.equal(basic.status, 201, JSON.stringify(basic.body));
  const header = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'header',
      config: {
        url: hookUrl,
        headers: {},
        auth: { type: 'header', header: { name: 'X-Probe-Key', value: secret('webhook header value', 'HOOK-header-val-probe-56') } },
      },
    },
  });
  t.equal(header.status, 201, JSON.stringify(header.body));
  const signed = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'signed',
      config: { url: hookUrl, headers: {}, auth: { type: 'secret', secret: { secret: secret('webhook signing secret', 'HOOK-signing-secret-probe-57') } } },
    },
  });
  t.equal(signed.status, 201, JSON.stringify(signed.body));
  const rotated = await call(t, 'updateAutomation', {
    token: adminSession,
    params: { automation: signed.body.id },
    body: {
      config: { url: hookUrl, headers: {}, auth: { type: 'secret', secret: { secret: secret('webhook rotated secret', 'HOOK-rotated-secret-probe-58') } } },
    },
  });
  t.equal(rotated.status, 200, JSON.stringify(rotated.body));
  const moved = await call(t, 'updateAutomation', {
    token: adminSession,
    params: { automation: header.body.id },
    body: { config: { url: receiver.url('/hook/elsewhere'), headers: {}, auth: { type: 'header', header: { name: 'X-Probe-Key', value: '********' } } } },
  });
  t.equal(moved.status, 422, 'mask refused on a new url');
  const refused = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'refused',
      config: {
        url: 'http://10.0.0.1/x',
        headers: {},
        auth: { type: 'header', header: { name: 'X-Probe-Key', value: secret('refused hook value', 'HOOK-refused-val-probe-59') } },
      },
    },
  });
  t.equal(refused.status, 422);
  const bad = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'bad header',
      config: {
        url: hookUrl,
        headers: {},
        auth: { type: 'header', header: { name: 'X-Probe-Key', value: secret('bad header value', 'BAD\r\nheader-probe-60') } },
      },
    },
  });
  t.equal(bad.status, 422, 'a header value with a line break is refused');
  const validate = await call(t, 'validateWebhookConfiguration', {
    token: adminSession,
    body: { url: 'http://10.0.0.2/x', headers: {}, auth: { type: 'basic', basic: { username: 'u', password: secret('validate pw', 'VALIDATE-pw-probe-61') } } },
  });
  t.equal(validate.status, 422);
  for (const id of [basic.body.id, header.body.id, rotated.body.id]) {
    t.equal((await call(t, 'runAutomation', { token: adminSession, params: { automation: id }, body: { context: {} } })).status, 202);
  }
  const delivered = await eventually(
    async () => receiver.received('/hook/probe').length,
    (n) => n >= 3,
    10_000,
  );
  t.ok(delivered >= 3, 'the webhooks were delivered');
  await call(t, 'listAutomations', { token: adminSession, query: { limit: 100 } });
  for (const id of [basic.body.id, header.body.id, rotated.body.id]) {
    await call(t, 'getAutomation', { token: adminSession, params: { automation: id } });
    await call(t, 'listAutomationDeliveries', { token: adminSession, params: { automation: id }, query: { limit: 100 } });
  }

  // Push subscription.
  const browser = browserSubscription();
  secret('push auth key', browser.keys.auth);
  secret('push p256dh', browser.keys.p256dh);
  const endpointPath = '/push/ENDPOINT-capability-probe-62';
  secret('push endpoint path', 'ENDPOINT-capability-probe-62', 'createPushSubscription', 'listPushSubscriptions');
  const sub = await call(t, 'createPushSubscription', { token: userToken2, body: { endpoint: receiver.url(endpointPath), keys: browser.keys } });
  t.equal(sub.status, 201, JSON.stringify(sub.body));
  await call(t, 'listPushSubscriptions', { token: userToken2 });
  const badSub = await call(t, 'createPushSubscription', {
    token: userToken2,
    body: { endpoint: 'https://10.1.2.3/push/ENDPOINT-refused-probe-63', keys: browser.keys },
  });
  t.equal(badSub.status, 422);
  const vapid = await call(t, 'getVapidPublicKey', { token: userToken2 });
  t.equal(vapid.status, 200);
  await call(t, 'createNotification', { token: adminSession, body: { user_ids: [userId], title: 'Probe', body: '<p>x</p>', url: '/x' } });
  const pushed = await eventually(
    async () => receiver.received(endpointPath).length,
    (n) => n >= 1,
    10_000,
  );
  t.ok(pushed >= 1, 'the push message was sent');
  await call(t, 'deletePushSubscription', { token: userToken2, params: { subscription: sub.body.id } });

  // Profile picture.
  const picture = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'me.png', type: 'image/png' } });
  const up = await call(t, 'uploadProfilePicture', { token: adminSession, params: { user: userId }, ...picture });
  t.equal(up.status, 200, up.text.slice(0, 300));

  // CSV import (a preview) with passwords, good and bad.
  const csv = `username,password,first_name,last_name,role_id\ncsvuser,${secret('csv pw', 'CSV-pw-probe-64')},A,B,${roleId}\nprobed,${secret('csv update pw', 'CSV-update-pw-probe-65')},A,B,${roleId}\nshorty,${secret('csv short pw', 'CSVs1')},A,B,${roleId}\nbad,${secret('csv quote pw', 'CSV-QUOTE-probe-66"x')},A,B,${roleId}\n`;
  const form = await multipart({ user_data_csv: { content: Buffer.from(csv), fileName: 'users.csv', type: 'text/csv' } });
  const imported = await call(t, 'importUsersCsv', { token: adminSession, ...form });
  t.equal(imported.status, 422, 'a stray quote refuses the file');
  const csv2 = `username,password,first_name,last_name,role_id\ncsvuser,${secret('csv pw 2', 'CSV-pw2-probe-67')},A,B,${roleId}\nprobed,${secret('csv update pw 2', 'CSV-update-pw2-probe-68')},A,B,${roleId}\n`;
  const form2 = await multipart({ user_data_csv: { content: Buffer.from(csv2), fileName: 'users.csv', type: 'text/csv' }, update_users: 'true' });
  const imported2 = await call(t, 'importUsersCsv', { token: adminSession, ...form2 });
  t.equal(imported2.status, 200);

  // Database refusals under secret-bearing writes.
  await db.owner.execute(
    sql.raw(`create function probe_refuse() returns trigger language plpgsql as $$ begin raise exception 'refused by probe'; end $$;
      create trigger probe_refuse_users before update of password_hash on users for each row when (new.username = 'probed') execute function probe_refuse();
      create trigger probe_refuse_hooks before insert on automations for each row when (new.name = 'boom') execute function probe_refuse();
      create trigger probe_refuse_scim before insert on scim_tokens for each row when (new.name = 'boom') execute function probe_refuse();
      create trigger probe_refuse_lt before insert on user_login_tokens for each row execute function probe_refuse();`),
  );
  const failedReset = await call(t, 'updateUser', {
    token: adminSession,
    params: { user: userId },
    body: { password: secret('failed reset pw', 'FAILED-reset-pw-probe-80') },
  });
  t.equal(failedReset.status, 500);
  const failedHook = await call(t, 'createAutomation', {
    token: adminSession,
    body: {
      name: 'boom',
      config: { url: hookUrl, headers: {}, auth: { type: 'secret', secret: { secret: secret('failed hook secret', 'FAILED-hook-secret-probe-81') } } },
    },
  });
  t.equal(failedHook.status, 500);
  t.equal((await call(t, 'createScimToken', { token: adminSession, body: { name: 'boom' } })).status, 500);
  t.equal((await call(t, 'createUserLoginToken', { token: adminSession, body: { expires_in: 600 } })).status, 500);
  await db.owner.execute(sql.raw('drop function probe_refuse() cascade'));
  // A picture by its signed URL, the metrics, a malformed bearer.
  const pictureUrl = (await call(t, 'getUser', { token: adminSession, params: { user: userId } })).body.profile_picture_url as string;
  const signature = /signature=([^&]+)/.exec(pictureUrl)![1]!;
  secret('picture signature', signature, 'getUser', 'uploadProfilePicture', 'listUsers', 'getCurrentUser');
  const pic = await app.inject({ method: 'GET', url: pictureUrl });
  t.equal(pic.statusCode, 200);
  const metrics = await app.inject({ method: 'GET', url: '/metrics' });
  responses.push({ what: 'metrics', text: metrics.body });
  await call(t, 'getCurrentUser', { token: secret('malformed bearer', 'atr_MALFORMED-bearer-probe-82') });

  // Reads after all that.
  await call(t, 'getCurrentUser', { token: userToken2 });
  await call(t, 'getUser', { token: adminSession, params: { user: userId } });
  await call(t, 'listUsers', { token: adminSession, query: { limit: 100 } });
  // A URL with a credential-named query parameter.
  await call(t, 'listUsers', {
    token: adminSession,
    query: { limit: 100, password: secret('query pw', 'QUERY-pw-probe-69'), token: secret('query token', 'QUERY-token-probe-70') },
  });

  // Sign out, revoke, delete.
  await call(t, 'deleteUserLoginToken', { token: adminSession, params: { userLoginToken: lt.body.uuid } });
  await call(t, 'deleteScimToken', { token: adminSession, params: { scimTokenId: st.body.id } });
  await call(t, 'logout', { token: userToken2 });

  // Audit: API, each event, export.
  const list = await call(t, 'listAuditEvents', { token: adminSession, query: { limit: 1000 } });
  t.ok(list.body.data?.length ?? list.body.length, 'events listed');
  const events = (list.body.data ?? list.body) as { id: string }[];
  for (const event of events) await call(t, 'getAuditEvent', { token: adminSession, params: { auditEvent: event.id } });
  const exported = await call(t, 'exportAuditEvents', { token: adminSession });
  t.equal(exported.status, 200);

  // Hashes, as the owner.
  const hashes = await db.owner.execute<{ username: string; password_hash: string }>(
    sql`select username, password_hash from users where password_hash is not null`,
  );
  for (const row of hashes) secret(`password hash of ${row.username}`, row.password_hash);
  const sealed = await db.owner.execute<{ config: unknown }>(sql`select config from automations`);
  for (const [i, row] of sealed.entries()) {
    const text = JSON.stringify(row.config);
    for (const m of text.matchAll(/"(?:password|value|secret)":"([^"*]{20,})"/g)) secret(`sealed webhook secret ${i}`, m[1]!);
  }
  const vapidRow = await db.owner.execute<{ value: string }>(sql`select * from instance_secrets`);
  for (const row of vapidRow) {
    const text = JSON.stringify(row);
    for (const m of text.matchAll(/"privateKey\\?":\\?"([^"\\]+)/g)) secret('VAPID private key', m[1]!);
  }
  secret('smtp password', 'SMTP-PASSWORD-probe-77');
  secret('any argon2 hash', '$argon2');
  secret('picture base64', PNG_1X1.toString('base64'));
  secret('picture hex', PNG_1X1.toString('hex'));

  // Every job due by now has run, so its log lines are in.
  await eventually(
    async () =>
      (await db.owner.execute<{ n: number }>(sql`select count(*)::int as n from pgboss.job where state in ('created', 'active') and start_after <= now()`))[0]!
        .n,
    (n) => n === 0,
  );
  const table = await db.owner.execute(sql`select * from audit_events`);
  const tableText = table.map((row) => JSON.stringify(row));
  const auditTexts = responses.filter((r) => /AuditEvent/.test(r.what)).map((r) => r.text);

  const found: string[] = [];
  for (const [name, { value, allowedIn }] of secrets) {
    for (const r of responses) {
      const op = r.what.split(' ')[0]!;
      if (allowedIn.has(op)) continue;
      if (r.text.includes(value)) found.push(`RESPONSE ${r.what}: ${name}`);
    }
    for (const line of lines) if (line.includes(value)) found.push(`LOG: ${name}: ${line.slice(0, 600)}`);
    for (const row of tableText) if (row.includes(value)) found.push(`TABLE: ${name}`);
    for (const text of auditTexts) if (text.includes(value)) found.push(`AUDIT API: ${name}`);
  }
  // The sweep saw what it looks for: the failures' log lines, trace lines, stored hashes and sealed secrets.
  t.ok(
    lines.some((line) => line.includes('refused by probe')),
    'the database refusals are logged',
  );
  t.ok(
    lines.some((line) => line.includes('"level":10')),
    'trace lines are logged',
  );
  t.ok(
    [...secrets.keys()].some((key) => key.startsWith('password hash')),
    'stored hashes are looked for',
  );
  t.ok(
    [...secrets.keys()].some((key) => key.startsWith('sealed webhook secret')),
    'sealed secrets are looked for',
  );
  t.ok(secrets.has('VAPID private key'), 'the VAPID private key is looked for');
  t.ok(
    receiver.received('/hook/probe').some((request) => JSON.stringify(request.headers).includes('HOOK-header-val-probe-56')),
    'the webhook secret did reach its receiver',
  );
  t.strictSame(found, [], 'no secret anywhere');
});
