import t, { type Test } from 'tap';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { deliverPendingWebhooks, requeueStuckDeliveries } from '../../../src/resources/automations/deliver-pending.job.ts';
import { deliverWebhook } from '../../../src/resources/automations/deliver-webhook.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { webhookViolations } from '../../helpers/contract.ts';
import { startReceiver } from '../../helpers/receiver.ts';
import { eventually } from '../../helpers/eventually.ts';
import { backdateUpdatedAt, rowCount, sleep } from '../../helpers/fixtures.ts';

// The receiver runs on loopback, which only the operator allow-list admits (docs/tenancy-and-security.md#outbound-address-policy).
const api = await startTestApi(t, {
  role: 'all',
  webhookAllowedCidrs: ['127.0.0.0/8', '::1/128'],
  // Long enough for a loopback answer on a busy machine: the receiver answers in this process too. The hang cases wait it out.
  outboundTimeoutMs: 3000,
  webhookRetryDelayMs: 50,
  webhookMaxAttempts: 3,
});
const receiver = await startReceiver(t);
const tenant = await api.createTenant('automations');
const other = await api.createTenant('automations-other');
const token = tenant.adminToken;
const PUBLIC_URL = 'http://93.184.215.14/hook'; // an IP literal: valid without DNS, never called

const countAutomations = () => rowCount(api.db, 'automations');

async function createAutomation(t: Test, config: Record<string, unknown>, name = 'hook') {
  const res = await api.call(t, 'createAutomation', { token, body: { name, config } });
  if (res.status !== 201) throw new Error(`create failed: ${res.status} ${res.text}`);
  return res.body as { id: number; config: Record<string, any> };
}

async function run(t: Test, automationId: number, context?: Record<string, unknown>) {
  const res = await api.call(t, 'runAutomation', { token, params: { automation: automationId }, body: context ? { context } : {} });
  if (res.status !== 202) throw new Error(`run failed: ${res.status} ${res.text}`);
  return res.body as { id: number; event_id: string; status: string };
}

/** The delivery once it is final (succeeded or failed), with its attempt log. */
async function settled(t: Test, automationId: number, deliveryId: number) {
  return eventually(
    async () => {
      const res = await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automationId }, query: { relations: 'attempt_log' } });
      return (res.body as any[]).find((d) => d.id === deliveryId);
    },
    (delivery) => delivery?.status === 'succeeded' || delivery?.status === 'failed',
  );
}

/** Standard Webhooks verification, written from the scheme, independent of Atrium's code. */
function verifyStandardWebhook(secret: string, headers: Record<string, unknown>, body: string, toleranceSeconds = 300): boolean {
  const id = String(headers['webhook-id']);
  const timestamp = Number(headers['webhook-timestamp']);
  if (!Number.isInteger(timestamp) || Math.abs(Date.now() / 1000 - timestamp) > toleranceSeconds) return false;
  const key = secret.startsWith('whsec_') ? Buffer.from(secret.substring(6), 'base64') : new TextEncoder().encode(secret);
  const expected = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest();
  return String(headers['webhook-signature'])
    .split(' ')
    .some((candidate) => {
      const [version, signature] = candidate.split(',');
      const given = Buffer.from(signature ?? '', 'base64');
      return version === 'v1' && given.length === expected.length && timingSafeEqual(given, expected);
    });
}

t.test('automations need a token and the automations.administer permission', async (t) => {
  const employee = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  const body = { name: 'x', config: { url: PUBLIC_URL, headers: {} } };
  t.equal((await api.call(t, 'createAutomation', { body })).status, 401);
  t.equal((await api.call(t, 'createAutomation', { token: employee.token, body })).status, 403);
  t.equal((await api.call(t, 'listAutomations', { token: employee.token })).status, 403);
  t.equal((await api.call(t, 'validateWebhookConfiguration', { token: employee.token, body: body.config })).status, 403);
  t.equal(await countAutomations(), 0, 'nothing stored');
});

t.test('invalid configurations are 422 naming the exact key, and nothing is stored', async (t) => {
  const cases: [string, unknown, string[]][] = [
    ['url missing', { headers: {} }, ['config.url']],
    ['headers key missing', { url: PUBLIC_URL }, ['config.headers']],
    ['method unknown', { url: PUBLIC_URL, headers: {}, method: 'FETCH' }, ['config.method']],
    ['auth.type unknown', { url: PUBLIC_URL, headers: {}, auth: { type: 'oauth' } }, ['config.auth.type']],
    ['basic without its keys', { url: PUBLIC_URL, headers: {}, auth: { type: 'basic' } }, ['config.auth.basic.username', 'config.auth.basic.password']],
    ['basic without password', { url: PUBLIC_URL, headers: {}, auth: { type: 'basic', basic: { username: 'u' } } }, ['config.auth.basic.password']],
    ['header without value', { url: PUBLIC_URL, headers: {}, auth: { type: 'header', header: { name: 'X-Key' } } }, ['config.auth.header.value']],
    ['secret without secret', { url: PUBLIC_URL, headers: {}, auth: { type: 'secret' } }, ['config.auth.secret.secret']],
    ['header value not a string', { url: PUBLIC_URL, headers: { 'X-Count': 3 } }, ['config.headers.X-Count']],
    ['header name invalid', { url: PUBLIC_URL, headers: { 'Bad Name': 'x' } }, ['config.headers.Bad Name']],
    ['framing header', { url: PUBLIC_URL, headers: { Host: 'example.com' } }, ['config.headers.Host']],
    ['header value with a line break', { url: PUBLIC_URL, headers: { 'X-A': 'a\r\nX-Injected: 1' } }, ['config.headers.X-A']],
    // What an HTTP field value cannot hold (RFC 9110 §5.5): other controls, and characters beyond one byte.
    ['header value with a control', { url: PUBLIC_URL, headers: { 'X-A': 'a\u0001', 'X-B': '\u007f' } }, ['config.headers.X-A', 'config.headers.X-B']],
    ['header value beyond Latin-1', { url: PUBLIC_URL, headers: { 'X-A': '€' } }, ['config.headers.X-A']],
    [
      'auth header value beyond Latin-1',
      { url: PUBLIC_URL, headers: {}, auth: { type: 'header', header: { name: 'X-Key', value: 'k\u0100' } } },
      ['config.auth.header.value'],
    ],
    [
      'auth header named like a framing header',
      { url: PUBLIC_URL, headers: {}, auth: { type: 'header', header: { name: 'Content-Length', value: '1' } } },
      ['config.auth.header.name'],
    ],
    ['unknown key', { url: PUBLIC_URL, headers: {}, extra: true }, ['config.extra']],
    ['not a URL', { url: 'not a url', headers: {} }, ['config.url']],
    ['not http(s)', { url: 'ftp://93.184.215.14/x', headers: {} }, ['config.url']],
    ['credentials in the URL', { url: 'http://user:pw@93.184.215.14/x', headers: {} }, ['config.url']],
    ['host does not resolve', { url: 'https://no-such-host.invalid/hook', headers: {} }, ['config.url']],
    // A URL parser drops or encodes these: the URL requested (and a JWT's aud) would not be the one stored.
    ['CR LF in the URL', { url: `${PUBLIC_URL}/a\r\nX-Injected: 1`, headers: {} }, ['config.url']],
    ['tab in the URL', { url: `${PUBLIC_URL}/a\t`, headers: {} }, ['config.url']],
    ['space in the URL', { url: `${PUBLIC_URL}/a b`, headers: {} }, ['config.url']],
    ['DEL in the URL', { url: `${PUBLIC_URL}/a\x7F`, headers: {} }, ['config.url']],
    // A whsec_ secret's key is the base64 after the prefix: decoding skips what is not base64, and would leave no key.
    [
      'whsec_ secret that is not base64',
      { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret: 'whsec_!!!' } } },
      ['config.auth.secret.secret'],
    ],
    ['whsec_ secret without a key', { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret: 'whsec_' } } }, ['config.auth.secret.secret']],
    [
      'whsec_ secret of a 16-byte key',
      { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret: `whsec_${Buffer.alloc(16, 7).toString('base64')}` } } },
      ['config.auth.secret.secret'],
    ],
    [
      'masked secret with nothing stored',
      { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret: '********' } } },
      ['config.auth.secret.secret'],
    ],
  ];
  for (const [label, config, paths] of cases) {
    const res = await api.call(t, 'createAutomation', { token, body: { name: 'bad', config } });
    t.equal(res.status, 422, label);
    t.strictSame(Object.keys(res.body.errors ?? {}).sort(), [...paths].sort(), `${label}: ${JSON.stringify(res.body.errors)}`);
  }
  const nulls = await api.call(t, 'validateWebhookConfiguration', { token, body: { url: PUBLIC_URL, method: null, headers: {}, auth: null } });
  t.equal(nulls.status, 200, 'method and auth may be null');
  const typeNull = await api.call(t, 'validateWebhookConfiguration', { token, body: { url: PUBLIC_URL, headers: {}, auth: { type: null } } });
  t.equal(typeNull.status, 200, 'auth.type may be null');
  const noName = await api.call(t, 'createAutomation', { token, body: { config: { url: PUBLIC_URL, headers: {} } } });
  t.equal(noName.status, 422);
  t.ok(noName.body.errors.name);
  const noConfig = await api.call(t, 'createAutomation', { token, body: { name: 'x' } });
  t.equal(noConfig.status, 422);
  t.strictSame(Object.keys(noConfig.body.errors), ['config'], 'an unconditionally required object keeps its own path');
  t.equal(await countAutomations(), 0, 'nothing stored');
});

t.test('the validate endpoint checks a configuration without storing it', async (t) => {
  const valid = await api.call(t, 'validateWebhookConfiguration', {
    token,
    body: { url: receiver.url('/v'), method: null, headers: { 'X-Trace': '{{user.id}}' }, auth: { type: 'jwt' } },
  });
  t.equal(valid.status, 200);
  t.strictSame(valid.body, { valid: true });
  const incomplete = await api.call(t, 'validateWebhookConfiguration', {
    token,
    body: { url: receiver.url('/v'), headers: {}, auth: { type: 'basic', basic: { username: 'u' } } },
  });
  t.equal(incomplete.status, 422);
  t.strictSame(Object.keys(incomplete.body.errors), ['auth.basic.password']);
  const unresolvable = await api.call(t, 'validateWebhookConfiguration', {
    token,
    body: { url: 'https://no-such-host.invalid/', headers: { Connection: 'close' } },
  });
  t.equal(unresolvable.status, 422);
  t.strictSame(Object.keys(unresolvable.body.errors).sort(), ['headers.Connection', 'url']);
  const keyless = await api.call(t, 'validateWebhookConfiguration', {
    token,
    body: { url: receiver.url('/v'), headers: {}, auth: { type: 'secret', secret: { secret: 'whsec_!!!' } } },
  });
  t.equal(keyless.status, 422, 'a whsec_ secret without a key');
  t.strictSame(Object.keys(keyless.body.errors), ['auth.secret.secret']);
  const masked = await api.call(t, 'validateWebhookConfiguration', {
    token,
    body: { url: receiver.url('/v'), headers: {}, auth: { type: 'basic', basic: { username: 'u', password: '********' } } },
  });
  t.equal(masked.status, 422, 'a masked secret, as a create answers it: nothing is stored to keep');
  t.strictSame(masked.body.errors, { 'auth.basic.password': ['is masked, but no value is stored to keep'] });
  t.match(unresolvable.body.errors.url[0], /is not an allowed destination/);
  t.equal(await countAutomations(), 0, 'nothing stored');
  t.equal(receiver.received('/v').length, 0, 'nothing sent');
});

t.test('method, auth and auth.type a configuration leaves out are answered as null', async (t) => {
  const bare = await createAutomation(t, { url: PUBLIC_URL, headers: {} }, 'bare');
  t.strictSame(bare.config, { url: PUBLIC_URL, method: null, headers: {}, auth: null });
  const stored = (await api.db.owner.execute<{ config: any }>(sql`select config from automations where id = ${bare.id}`))[0]!.config;
  t.strictSame(stored, { url: PUBLIC_URL, headers: {} }, 'stored as written');

  const untyped = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: bare.id },
    body: { config: { url: PUBLIC_URL, headers: {}, auth: {} } },
  });
  t.equal(untyped.status, 200);
  t.strictSame(untyped.body.config, { url: PUBLIC_URL, method: null, headers: {}, auth: { type: null } });
  const listed = await api.call(t, 'listAutomations', { token, query: { selects: 'id,config' } });
  t.strictSame((listed.body as { id: number; config: unknown }[]).find((automation) => automation.id === bare.id)?.config, {
    url: PUBLIC_URL,
    method: null,
    headers: {},
    auth: { type: null },
  });
});

t.test('an update to a whsec_ secret that holds no key is a 422, and the stored secret stays', async (t) => {
  const secret = `whsec_${Buffer.alloc(24, 6).toString('base64')}`;
  const created = await createAutomation(t, { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret } } }, 'signed');
  const storedSecret = async () =>
    api.atrium.services.secrets.decrypt(
      'webhook-secrets',
      (await api.db.owner.execute<{ config: any }>(sql`select config from automations where id = ${created.id}`))[0]!.config.auth.secret.secret,
    );
  for (const bad of ['whsec_!!!', 'whsec_']) {
    const res = await api.call(t, 'updateAutomation', {
      token,
      params: { automation: created.id },
      body: { config: { url: PUBLIC_URL, headers: {}, auth: { type: 'secret', secret: { secret: bad } } } },
    });
    t.equal(res.status, 422, bad);
    t.strictSame(Object.keys(res.body.errors), ['config.auth.secret.secret'], bad);
  }
  t.equal(await storedSecret(), secret, 'the stored secret is unchanged');
});

t.test('secrets are stored encrypted, answered masked, and a masked value keeps the stored one', async (t) => {
  const created = await createAutomation(
    t,
    { url: PUBLIC_URL, headers: {}, auth: { type: 'basic', basic: { username: 'ann', password: 'pa55word' } } },
    'masked',
  );
  t.equal(created.config.auth.basic.password, '********');
  t.equal(created.config.auth.basic.username, 'ann');
  const stored = async () => (await api.db.owner.execute<{ config: any }>(sql`select config from automations where id = ${created.id}`))[0]!.config;
  t.notMatch(JSON.stringify(await stored()), /pa55word/, 'not stored in plain text');
  const decrypt = async () => api.atrium.services.secrets.decrypt('webhook-secrets', (await stored()).auth.basic.password);
  t.equal(await decrypt(), 'pa55word');

  const listed = await api.call(t, 'listAutomations', { token });
  t.notMatch(listed.text, /pa55word/);
  const shown = await api.call(t, 'getAutomation', { token, params: { automation: created.id } });
  t.equal(shown.body.config.auth.basic.password, '********');

  const kept = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: created.id },
    body: { name: 'renamed', config: shown.body.config },
  });
  t.equal(kept.status, 200);
  t.equal(kept.body.name, 'renamed');
  t.equal(await decrypt(), 'pa55word', 'masked value kept the stored password');

  const replaced = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: created.id },
    body: { config: { ...shown.body.config, auth: { type: 'basic', basic: { username: 'ann', password: 'n3w' } } } },
  });
  t.equal(replaced.status, 200);
  t.equal(await decrypt(), 'n3w');

  const switched = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: created.id },
    body: { config: { url: PUBLIC_URL, headers: {}, auth: { type: 'header', header: { name: 'X-Key', value: '********' } } } },
  });
  t.equal(switched.status, 422, 'a mask where nothing is stored under that key');
  t.ok(switched.body.errors['config.auth.header.value']);
  t.equal(await decrypt(), 'n3w', 'unchanged by the refused update');
});

t.test('an update that changes nothing leaves updated_at as it was and records no event', async (t) => {
  const created = await createAutomation(
    t,
    { url: PUBLIC_URL, headers: { 'X-Team': 'ops' }, auth: { type: 'basic', basic: { username: 'ann', password: 'kept-secret' } } },
    'unchanged',
  );
  const past = await backdateUpdatedAt(api.db, 'automations', created.id);
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const read = (await api.call(t, 'getAutomation', { token, params: { automation: created.id } })).body;
  // The configuration as answered, its secret masked: the stored secret is kept.
  const same = await api.call(t, 'updateAutomation', { token, params: { automation: created.id }, body: { name: read.name, config: read.config } });
  t.equal(same.status, 200, same.text);
  t.equal(same.body.updated_at, past, 'the automation sent back as read answers the updated_at it had');
  t.strictSame(same.body, read, 'and the automation as it was');
  t.equal(await events(), eventsBefore, 'and no event is recorded');
  const resealed = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: created.id },
    body: { config: { ...read.config, auth: { type: 'basic', basic: { username: 'ann', password: 'kept-secret' } } } },
  });
  t.equal(resealed.status, 200);
  t.not(resealed.body.updated_at, past, 'a secret sent again is stored anew (and recorded as a change): it moves');
  t.equal(await events(), eventsBefore + 1);
});

t.test('a masked secret is kept only while url and auth type stay the same; otherwise it must be sent again (422)', async (t) => {
  const created = await createAutomation(
    t,
    {
      url: PUBLIC_URL,
      headers: {},
      auth: { type: 'basic', basic: { username: 'ann', password: 'do-not-leak' }, header: { name: 'X-Key', value: 'key-value' } },
    },
    'exfiltration',
  );
  const stored = async () => (await api.db.owner.execute<{ config: any }>(sql`select config from automations where id = ${created.id}`))[0]!.config;
  const before = JSON.stringify(await stored());
  const cases: [string, Record<string, unknown>, string][] = [
    [
      'url changed',
      { url: 'http://93.184.215.15/attacker', headers: {}, auth: { type: 'basic', basic: { username: 'ann', password: '********' } } },
      'config.auth.basic.password',
    ],
    ['auth type changed', { url: PUBLIC_URL, headers: {}, auth: { type: 'header', header: { name: 'X-Key', value: '********' } } }, 'config.auth.header.value'],
  ];
  for (const [label, config, key] of cases) {
    const res = await api.call(t, 'updateAutomation', { token, params: { automation: created.id }, body: { config } });
    t.equal(res.status, 422, label);
    t.ok(res.body.errors?.[key], `${label}: names ${key}`);
  }
  t.equal(JSON.stringify(await stored()), before, 'nothing changed');
  const resent = await api.call(t, 'updateAutomation', {
    token,
    params: { automation: created.id },
    body: { config: { url: 'http://93.184.215.15/new', headers: {}, auth: { type: 'basic', basic: { username: 'ann', password: 'fresh' } } } },
  });
  t.equal(resent.status, 200, 'sending the secret again with the new url is accepted');
  t.equal(api.atrium.services.secrets.decrypt('webhook-secrets', (await stored()).auth.basic.password), 'fresh');
});

t.test('an update reads and writes the automation in one transaction: a concurrent secret change is not lost', async (t) => {
  const created = await createAutomation(
    t,
    { url: PUBLIC_URL, headers: {}, auth: { type: 'basic', basic: { username: 'ann', password: 'old' } } },
    'concurrent',
  );
  const secrets = api.atrium.services.secrets;
  let update: Promise<{ status: number }> | undefined;
  await api.db.owner.transaction(async (tx) => {
    // Another writer changes the password and holds its row lock while the API update starts.
    await tx.execute(
      sql`update automations set config = jsonb_set(config, '{auth,basic,password}', to_jsonb(${secrets.encrypt('webhook-secrets', 'concurrent-new')}::text)) where id = ${created.id}`,
    );
    update = api.call(t, 'updateAutomation', { token, params: { automation: created.id }, body: { name: 'renamed', config: created.config } });
    await sleep(400);
  });
  t.equal((await update!).status, 200);
  const [row] = await api.db.owner.execute<{ name: string; config: any }>(sql`select name, config from automations where id = ${created.id}`);
  t.equal(row!.name, 'renamed');
  t.equal(secrets.decrypt('webhook-secrets', row!.config.auth.basic.password), 'concurrent-new', 'the masked secret kept the value committed first');
});

t.test('show, update and delete answer 404 for missing and other tenants’ automations alike', async (t) => {
  const foreign = await api.call(t, 'createAutomation', { token: other.adminToken, body: { name: 'theirs', config: { url: PUBLIC_URL, headers: {} } } });
  t.equal(foreign.status, 201);
  const missing = await api.call(t, 'getAutomation', { token, params: { automation: 999999 } });
  t.equal(missing.status, 404);
  for (const operationId of ['getAutomation', 'deleteAutomation', 'listAutomationDeliveries', 'runAutomation'] as const) {
    const res = await api.call(t, operationId, { token, params: { automation: foreign.body.id }, ...(operationId === 'runAutomation' ? { body: {} } : {}) });
    t.equal(res.status, 404, operationId);
    t.strictSame(res.body, missing.body, `${operationId} like a missing one`);
  }
  const update = await api.call(t, 'updateAutomation', { token, params: { automation: foreign.body.id }, body: { name: 'mine' } });
  t.equal(update.status, 404);
  const [row] = await api.db.owner.execute<{ name: string }>(sql`select name from automations where id = ${foreign.body.id}`);
  t.equal(row!.name, 'theirs', 'unchanged');

  const own = await createAutomation(t, { url: PUBLIC_URL, headers: {} }, 'doomed');
  t.equal((await api.call(t, 'deleteAutomation', { token, params: { automation: own.id } })).status, 204);
  t.equal((await api.call(t, 'getAutomation', { token, params: { automation: own.id } })).status, 404);
});

t.test('basic auth: POST by default, custom headers and {{…}} sent literally, the documented payload', async (t) => {
  const automation = await createAutomation(
    t,
    {
      url: receiver.url('/basic'),
      headers: { 'X-Custom': '{{user.email}}' },
      auth: { type: 'basic', basic: { username: 'hook-user', password: 's3cret:with:colons' } },
    },
    'basic hook',
  );
  const delivery = await run(t, automation.id, { order: 42 });
  t.equal(delivery.status, 'pending');
  const final = await settled(t, automation.id, delivery.id);
  t.equal(final.status, 'succeeded');
  t.equal(final.attempts, 1);
  t.equal(final.response_status, 200);
  const [request] = receiver.received('/basic');
  t.equal(request!.method, 'POST');
  t.equal(request!.headers['x-custom'], '{{user.email}}');
  const [scheme, encoded] = String(request!.headers.authorization).split(' ');
  t.equal(scheme, 'Basic');
  t.equal(Buffer.from(encoded!, 'base64').toString('utf8'), 'hook-user:s3cret:with:colons');
  t.equal(request!.headers['content-type'], 'application/json');
  const payload = JSON.parse(request!.body);
  t.strictSame(Object.keys(payload).sort(), ['automation', 'context', 'id', 'timestamp', 'type']);
  t.equal(payload.id, delivery.event_id);
  t.equal(payload.type, 'automation.run');
  t.strictSame(payload.automation, { id: automation.id, name: 'basic hook' });
  t.strictSame(payload.context, { order: 42 });
  t.match(payload.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/);
  t.strictSame(webhookViolations('automation.run', request!), [], "the request is the spec's automation.run webhook");
});

t.test('header auth sends the configured header; GET carries no body', async (t) => {
  const automation = await createAutomation(t, {
    url: receiver.url('/header'),
    method: 'GET',
    headers: {},
    auth: { type: 'header', header: { name: 'X-Api-Key', value: 'k-123' } },
  });
  const final = await settled(t, automation.id, (await run(t, automation.id)).id);
  t.equal(final.status, 'succeeded');
  const [request] = receiver.received('/header');
  t.equal(request!.method, 'GET');
  t.equal(request!.headers['x-api-key'], 'k-123');
  t.equal(request!.body, '');
});

t.test('jwt auth: the bearer token verifies against the served JWKS', async (t) => {
  const automation = await createAutomation(t, { url: receiver.url('/jwt'), method: 'PUT', headers: {}, auth: { type: 'jwt' } });
  const final = await settled(t, automation.id, (await run(t, automation.id)).id);
  t.equal(final.status, 'succeeded');
  const [request] = receiver.received('/jwt');
  t.equal(request!.method, 'PUT');
  t.strictSame(webhookViolations('automation.run', request!), [], "the request is the spec's automation.run webhook");
  const [scheme, jwt] = String(request!.headers.authorization).split(' ');
  t.equal(scheme, 'Bearer');
  const jwks = await api.call(t, 'getWebhookJwks', {});
  t.equal(jwks.status, 200);
  t.notOk(jwks.text.includes('"d"'), 'no private key material');
  const { payload, protectedHeader } = await jwtVerify(jwt!, createLocalJWKSet(jwks.body), {
    issuer: 'atrium',
    audience: receiver.url('/jwt'),
    algorithms: ['RS256'],
  });
  t.equal(protectedHeader.alg, 'RS256');
  t.equal(payload.sub, `automation:${automation.id}`);
  t.type(payload.jti, 'string');
  t.ok(payload.iat! <= Date.now() / 1000 + 1);
  t.ok(payload.exp! > payload.iat!);
  const again = await api.call(t, 'getWebhookJwks', {});
  t.strictSame(again.body, jwks.body, 'the key pair is generated once');

  // A URL written otherwise than URL parsing writes it: requested in its parsed form, named in `aud` as stored (what
  // receivers pinned before; the spec tells to write the URL in its parsed form to have the two agree).
  const written = `HTTP://127.0.0.1:${receiver.port}/jwt-written/a/../b/./é?q=ü#fragment`;
  const odd = await createAutomation(t, { url: written, headers: {}, auth: { type: 'jwt' } });
  t.equal(odd.config.url, written, 'stored and answered as written');
  t.equal((await settled(t, odd.id, (await run(t, odd.id)).id)).status, 'succeeded');
  const [oddRequest] = receiver.received('/jwt-written/b/%C3%A9');
  t.ok(oddRequest, 'requested at the parsed URL');
  const verified = await jwtVerify(String(oddRequest!.headers.authorization).split(' ')[1]!, createLocalJWKSet(jwks.body), { audience: written });
  t.equal(verified.payload.aud, written, 'aud is the URL as stored');
});

t.test('secret auth: the Standard Webhooks signature verifies independently', async (t) => {
  for (const [path, secret] of [
    ['/signed-whsec', `whsec_${Buffer.from('a 24-byte secret key!!!!').toString('base64')}`],
    ['/signed-plain', 'plain shared secret {{not a variable}}'],
  ] as const) {
    const automation = await createAutomation(t, { url: receiver.url(path), headers: {}, auth: { type: 'secret', secret: { secret } } });
    const delivery = await run(t, automation.id, { n: 1 });
    const final = await settled(t, automation.id, delivery.id);
    t.equal(final.status, 'succeeded', path);
    const [request] = receiver.received(path);
    t.equal(request!.headers['webhook-id'], delivery.event_id);
    t.ok(verifyStandardWebhook(secret, request!.headers, request!.body), `${path}: signature verifies`);
    t.notOk(verifyStandardWebhook(secret, request!.headers, request!.body + ' '), `${path}: a changed body does not`);
    t.strictSame(webhookViolations('automation.run', request!), [], `${path}: the request is the spec's automation.run webhook`);
    t.ok(['webhook-id', 'webhook-timestamp', 'webhook-signature'].every((header) => typeof request!.headers[header] === 'string'));
  }
});

t.test('500, 500, 200: three attempts, each recorded, the same event id', async (t) => {
  receiver.script('/flaky', [500, 500, 200]);
  const automation = await createAutomation(t, { url: receiver.url('/flaky'), headers: {}, auth: { type: 'secret', secret: { secret: 'k' } } });
  const delivery = await run(t, automation.id);
  const final = await settled(t, automation.id, delivery.id);
  t.equal(final.status, 'succeeded');
  t.equal(final.attempts, 3);
  t.equal(final.response_status, 200);
  t.equal(final.error, null);
  t.strictSame(
    final.attempt_log.map((a: any) => [a.number, a.response_status, a.error]),
    [
      [1, 500, 'HTTP 500'],
      [2, 500, 'HTTP 500'],
      [3, 200, null],
    ],
  );
  const requests = receiver.received('/flaky');
  t.equal(requests.length, 3);
  t.strictSame(new Set(requests.map((r) => r.headers['webhook-id'])), new Set([delivery.event_id]));
});

t.test('a 4xx other than 429 is not retried; 429 is; the last failed attempt is final', async (t) => {
  receiver.script('/gone', [404]);
  const gone = await createAutomation(t, { url: receiver.url('/gone'), headers: {} });
  const goneFinal = await settled(t, gone.id, (await run(t, gone.id)).id);
  t.equal(goneFinal.status, 'failed');
  t.equal(goneFinal.attempts, 1);
  t.equal(goneFinal.response_status, 404);
  t.equal(receiver.received('/gone').length, 1);

  receiver.script('/busy', [429, 503]);
  const busy = await createAutomation(t, { url: receiver.url('/busy'), headers: {} });
  const busyFinal = await settled(t, busy.id, (await run(t, busy.id)).id);
  t.equal(busyFinal.status, 'failed', 'WEBHOOK_MAX_ATTEMPTS (3) exhausted');
  t.equal(busyFinal.attempts, 3);
  t.strictSame(
    busyFinal.attempt_log.map((a: any) => a.response_status),
    [429, 503, 503],
  );
  t.type(busyFinal.completed_at, 'string');
});

t.test('redirects are not followed', async (t) => {
  receiver.script('/moved', ['redirect']);
  const automation = await createAutomation(t, { url: receiver.url('/moved'), headers: {} });
  const final = await settled(t, automation.id, (await run(t, automation.id)).id);
  t.equal(final.status, 'failed');
  t.equal(final.response_status, 302);
  t.match(final.error, /redirects are not followed/);
  t.equal(receiver.received('/redirected').length, 0);
});

t.test('a receiver that hangs is cut off by the timeout and retried', async (t) => {
  receiver.script('/slow', ['hang', 200]);
  const automation = await createAutomation(t, { url: receiver.url('/slow'), headers: {} });
  const final = await settled(t, automation.id, (await run(t, automation.id)).id);
  t.equal(final.status, 'succeeded');
  t.equal(final.attempts, 2);
  const [first] = final.attempt_log;
  t.equal(first.response_status, null);
  t.equal(first.error, 'could not be delivered', 'a timeout reads like any other failure without a response');
  t.equal(first.duration_ms, null);
});

t.test('an automation deleted while its attempt is made: the attempt ends quietly, nothing is retried', async (t) => {
  receiver.script('/deleted-meanwhile', ['hang']);
  const automation = await createAutomation(t, { url: receiver.url('/deleted-meanwhile'), headers: {} });
  const delivery = await run(t, automation.id);
  await eventually(
    async () => receiver.received('/deleted-meanwhile').length,
    (n) => n === 1,
  );
  t.equal((await api.call(t, 'deleteAutomation', { token, params: { automation: automation.id } })).status, 204);
  // The attempt is cut off by the timeout, then finds its delivery gone.
  const [job] = await eventually(
    () =>
      api.db.owner.execute<{ state: string }>(
        sql`select state from pgboss.job where name = 'automations.deliver-webhook' and (data->>'deliveryId')::bigint = ${delivery.id}`,
      ),
    (rows) => rows.length === 1 && !['created', 'active'].includes(rows[0]!.state),
  );
  t.equal(job!.state, 'completed', 'the job ended without an error, and is not retried');
  t.equal(await rowCount(api.db, 'webhook_delivery_attempts', sql`delivery_id = ${delivery.id}`), 0, 'nothing recorded of a deleted delivery');
});

t.test('a host allowed for webhooks is not one for push subscriptions, which every user registers', async (t) => {
  // WEBHOOK_ALLOWED_CIDRS admits loopback here; PUSH_ALLOWED_CIDRS is not set.
  const employee = await api.createUser(tenant.tenantId);
  const endpoint = receiver.url('/push-here');
  const webhook = await api.call(t, 'validateWebhookConfiguration', { token, body: { url: endpoint, headers: {} } });
  t.equal(webhook.status, 200, 'a webhook may reach it');
  const keys = { p256dh: 'BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM', auth: 'tBHItJI5svbpez7KI4CCXg' };
  const push = await api.call(t, 'createPushSubscription', { token: employee.token, body: { endpoint, keys } });
  t.equal(push.status, 422, 'a push subscription may not');
  t.ok(push.body.errors.endpoint);
  t.equal(await rowCount(api.db, 'push_subscriptions', sql`user_id = ${employee.id}`), 0, 'nothing stored');
});

t.test('deliveries: newest first, filterable, no secrets, constant query count', async (t) => {
  const automation = await createAutomation(t, {
    url: receiver.url('/many'),
    headers: { 'X-Token': 'header-secret' },
    auth: { type: 'basic', basic: { username: 'u', password: 'basic-secret' } },
  });
  const first = await run(t, automation.id);
  await settled(t, automation.id, first.id);
  const list = async () => {
    const before = api.db.queryCount;
    const res = await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automation.id }, query: { relations: 'attempt_log' } });
    return { res, queries: api.db.queryCount - before };
  };
  const one = await list();
  for (let i = 0; i < 3; i++) await settled(t, automation.id, (await run(t, automation.id)).id);
  const four = await list();
  t.equal(four.res.body.length, 4);
  t.equal(four.queries, one.queries, 'same number of queries for 1 and 4 deliveries');
  t.ok(four.res.body[0].id > four.res.body[3].id, 'newest first');
  t.notMatch(four.res.text, /basic-secret|header-secret|Authorization/i);
  t.strictSame(Object.keys(four.res.body[0]).sort(), [
    'attempt_log',
    'attempts',
    'automation_id',
    'completed_at',
    'created_at',
    'duration_ms',
    'error',
    'event_id',
    'id',
    'next_attempt_at',
    'response_status',
    'status',
  ]);
  const byStatus = async (status: string) => {
    const res = await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automation.id }, query: { filter: { status } } });
    t.equal(res.status, 200, status);
    return (res.body as { id: number }[]).map((delivery) => delivery.id);
  };
  const delivered = four.res.body.map((delivery: { id: number }) => delivery.id);
  t.strictSame(await byStatus('failed'), [], 'none failed yet');
  const badFilter = await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automation.id }, query: { filter: { status: 'lost' } } });
  t.equal(badFilter.status, 422);
  const selected = await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automation.id }, query: { selects: 'status', limit: 1 } });
  t.strictSame(selected.body, [{ status: 'succeeded' }]);
  // One delivery refused (a 4xx is final at once): each filter finds exactly its own.
  receiver.script('/many', [404, 200]);
  const refused = await run(t, automation.id);
  t.equal((await settled(t, automation.id, refused.id)).status, 'failed');
  t.strictSame(await byStatus('failed'), [refused.id], 'the failed one');
  t.strictSame(await byStatus('succeeded'), delivered, 'the four delivered, newest first');
  t.strictSame(await byStatus('pending'), [], 'none pending');
});

t.test('run accepts no body at all, and refuses a context that is not an object or holds an infinite number', async (t) => {
  const automation = await createAutomation(t, { url: receiver.url('/nobody'), headers: {} });
  const bare = await api.call(t, 'runAutomation', { token, params: { automation: automation.id } });
  t.equal(bare.status, 202);
  const final = await settled(t, automation.id, bare.body.id);
  t.strictSame(JSON.parse(receiver.received('/nobody')[0]!.body).context, {});
  t.equal(final.status, 'succeeded');
  // No bytes with a JSON Content-Type (clients that send one on every request) is no body too.
  const labelled = await api.call(t, 'runAutomation', { token, params: { automation: automation.id }, payload: '', contentType: 'application/json' });
  t.equal(labelled.status, 202, 'an empty body labelled JSON is no body');
  t.equal((await settled(t, automation.id, labelled.body.id)).status, 'succeeded');
  const bad = await api.call(t, 'runAutomation', { token, params: { automation: automation.id }, body: { context: [1] } });
  t.equal(bad.status, 422);
  t.ok(bad.body.errors.context);
  // A number too large for a double is read as Infinity, which JSON has no text for: it would reach the receiver as null.
  for (const [text, path] of [
    ['{"context": {"amount": 1e400}}', 'context.amount'],
    ['{"context": {"lines": [1, {"total": -1e999}]}}', 'context.lines.1.total'],
  ] as const) {
    const infinite = await api.call(t, 'runAutomation', { token, params: { automation: automation.id }, payload: text, contentType: 'application/json' });
    t.equal(infinite.status, 422, text);
    t.strictSame(infinite.body.error_codes, { [path]: ['type'] }, text);
  }
  const count = await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from webhook_deliveries where automation_id = ${automation.id}`);
  t.equal(count[0]!.n, 2, 'the refused runs queued nothing');
});

t.test('a duplicated delivery job sends once: each attempt is claimed by its number', async (t) => {
  const automation = await createAutomation(t, { url: receiver.url('/duplicated'), headers: {} }, 'duplicated');
  receiver.script('/duplicated', ['hang']); // the run's own job hangs until the timeout: attempt 1 is in flight
  const delivery = await run(t, automation.id);
  await eventually(
    async () => receiver.received('/duplicated').length,
    (n) => n === 1,
  );
  // The same job twice more (as pg-boss re-running a batch would): attempt 1 is taken.
  await Promise.all([
    api.atrium.services.jobs.send(deliverWebhook, { tenantId: tenant.tenantId, deliveryId: delivery.id, attempt: 1 }),
    api.atrium.services.jobs.send(deliverWebhook, { tenantId: tenant.tenantId, deliveryId: delivery.id, attempt: 1 }),
  ]);
  receiver.script('/duplicated', [200]);
  const done = await settled(t, automation.id, delivery.id);
  t.equal(done.status, 'succeeded');
  t.strictSame(
    done.attempt_log.map((a: { number: number }) => a.number),
    [1, 2],
    'the timed-out attempt and its retry, nothing twice',
  );
  await sleep(500);
  t.equal(receiver.received('/duplicated').length, 2, 'two requests: no duplicate send');
});

t.test('the sweeper re-queues deliveries stuck past their due time, and only those', async (t) => {
  const automation = await createAutomation(t, { url: receiver.url('/stuck'), headers: {} }, 'stuck');
  const insert = async (eventId: string, status: string, attempts: number, nextAttemptAt: string | null, ageMinutes: number) =>
    (
      await api.db.owner.execute<{
        id: number;
      }>(sql`insert into webhook_deliveries (tenant_id, automation_id, event_id, payload, status, attempts, next_attempt_at, created_at)
        values (${tenant.tenantId}, ${automation.id}, ${eventId}, '{}', ${status}, ${attempts}, ${nextAttemptAt}::timestamptz, now() - make_interval(mins => ${ageMinutes}))
        returning id::int`)
    )[0]!.id;
  // Lost jobs: a pending delivery whose job was never queued, a retry whose job vanished.
  const lostPending = await insert('evt_lost_pending', 'pending', 0, null, 10);
  const lostRetry = await insert('evt_lost_retry', 'retrying', 1, new Date(Date.now() - 5 * 60_000).toISOString(), 10);
  // Not stuck: created just now, or its retry is not due yet.
  const fresh = await insert('evt_fresh', 'pending', 0, null, 0);
  const notDue = await insert('evt_not_due', 'retrying', 1, new Date(Date.now() + 3_600_000).toISOString(), 10);
  // Its last allowed attempt (3) was claimed and then lost with its process: no fourth request.
  const exhausted = await insert('evt_exhausted', 'retrying', 3, new Date(Date.now() - 5 * 60_000).toISOString(), 10);
  const queued = await requeueStuckDeliveries(api.atrium.services);
  t.equal(queued, 2, 'two deliveries re-queued');
  const [exhaustedRow] = await api.db.owner.execute<{ status: string; attempts: number; error: string }>(
    sql`select status, attempts, error from webhook_deliveries where id = ${exhausted}`,
  );
  t.match(exhaustedRow, { status: 'failed', attempts: 3, error: /interrupted/ }, 'a delivery out of attempts fails instead');
  const lostPendingDone = await settled(t, automation.id, lostPending);
  const lostRetryDone = await settled(t, automation.id, lostRetry);
  t.equal(lostPendingDone.status, 'succeeded');
  t.strictSame(
    lostRetryDone.attempt_log.map((a: { number: number }) => a.number),
    [2],
    'the retry continues with attempt 2',
  );
  const [freshRow, notDueRow] = await api.db.owner.execute<{ status: string; attempts: number }>(
    sql`select status, attempts from webhook_deliveries where id in (${fresh}, ${notDue}) order by id`,
  );
  t.strictSame([freshRow!.attempts, notDueRow!.attempts], [0, 1], 'the others were left alone');
  t.equal(receiver.received('/stuck').length, 2, 'one request for each re-queued delivery, none for the exhausted one');
  t.equal(deliverPendingWebhooks.name, 'automations.deliver-pending');
  t.ok(deliverPendingWebhooks.cron, 'runs on a schedule');
});
