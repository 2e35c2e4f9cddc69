/** The webhook configuration's rules beyond its schema (src/resources/automations/rules.ts), without HTTP or a database. */
import { createHmac } from 'node:crypto';
import t from 'tap';
import { NOT_AN_ALLOWED_DESTINATION, OutboundClient } from '../../../src/platform/outbound/client.ts';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import { assertValidConfiguration, configurationErrors, isReservedHeader } from '../../../src/resources/automations/rules.ts';
import { standardWebhookSignature, whsecKey } from '../../../src/resources/automations/webhook-request.ts';

// IP literals only: judged without DNS, and nothing is ever sent.
const PUBLIC_URL = 'http://93.184.215.14/hook';
const outbound = new OutboundClient({ allowedCidrs: ['10.0.0.0/8'], connectTimeoutMs: 1000, timeoutMs: 1000 });
t.teardown(() => outbound.close());

t.test('isReservedHeader: the framing and hop-by-hop headers Atrium sets, in any case', async (t) => {
  for (const name of [
    'Host',
    'content-length',
    'Transfer-Encoding',
    'CONNECTION',
    'Keep-Alive',
    'Upgrade',
    'TE',
    'Trailer',
    'Expect',
    'Proxy-Authorization',
    'proxy-anything',
  ]) {
    t.ok(isReservedHeader(name), name);
  }
  for (const name of ['Authorization', 'Content-Type', 'X-Host', 'X-Proxy-Id', 'webhook-id', 'User-Agent', 'Hosts']) {
    t.notOk(isReservedHeader(name), name);
  }
});

t.test('configurationErrors: a reachable url and ordinary headers pass', async (t) => {
  t.strictSame(await configurationErrors({ url: PUBLIC_URL, headers: { 'X-Trace': '{{user.id}}', Authorization: 'Bearer x' } }, outbound), {});
  t.strictSame(await configurationErrors({ url: 'https://10.1.2.3/hook', headers: {}, auth: { type: 'jwt' } }, outbound), {}, 'an allow-listed range');
  t.strictSame(
    await configurationErrors({ url: PUBLIC_URL, headers: {}, auth: { type: 'basic', header: { name: 'Host', value: 'x' } } }, outbound),
    {},
    'the header of another auth type is ignored',
  );
});

t.test('configurationErrors: every bad path at once, prefixed', async (t) => {
  const errors = await configurationErrors(
    {
      url: 'http://127.0.0.1/hook',
      headers: { Host: 'example.com', 'Proxy-Authorization': 'x', 'X-Ok': 'y' },
      auth: { type: 'header', header: { name: 'content-length', value: '1' } },
    },
    outbound,
    'config.',
  );
  t.strictSame(errors, {
    'config.url': [coded('destination_not_allowed', NOT_AN_ALLOWED_DESTINATION)],
    'config.headers.Host': [coded('reserved', 'is set by Atrium and cannot be configured')],
    'config.headers.Proxy-Authorization': [coded('reserved', 'is set by Atrium and cannot be configured')],
    'config.auth.header.name': [coded('reserved', 'is set by Atrium and cannot be configured')],
  });
  t.strictSame(
    await configurationErrors({ url: 'ftp://93.184.215.14/x', headers: {} }, outbound),
    { url: [coded('format', 'must be an http or https URL')] },
    'no prefix',
  );
  t.strictSame(await configurationErrors({ url: 'http://user:pw@93.184.215.14/x', headers: {} }, outbound), {
    url: [coded('format', 'must not contain credentials; use auth instead')],
  });
});

t.test('assertValidConfiguration: nothing for no errors, otherwise one 422 naming every path', async (t) => {
  t.doesNotThrow(() => assertValidConfiguration({}));
  const errors = { 'config.url': ['is bad'], 'config.headers.Host': ['is set by Atrium and cannot be configured'] };
  const thrown = t.throws(() => assertValidConfiguration(errors));
  t.ok(thrown instanceof ProblemError);
  t.match(thrown, { status: 422, message: 'The webhook configuration is invalid.', errors });
});

t.test('whsecKey: the base64 after whsec_ of a 24 to 64 byte key, and nothing else', async (t) => {
  for (const bytes of [24, 32, 64]) {
    const key = Buffer.alloc(bytes, 9);
    t.strictSame(whsecKey(`whsec_${key.toString('base64')}`), key, `${bytes} bytes, padded`);
    t.strictSame(whsecKey(`whsec_${key.toString('base64').replace(/=+$/, '')}`), key, `${bytes} bytes, unpadded`);
  }
  for (const secret of ['whsec_', 'whsec_!!!', `whsec_${Buffer.alloc(23, 1).toString('base64')}`, `whsec_${Buffer.alloc(65, 1).toString('base64')}`]) {
    t.equal(whsecKey(secret), undefined, secret);
  }
  const key = Buffer.alloc(24, 3).toString('base64');
  for (const secret of [`whsec_${key}!`, `whsec_ ${key}`, `whsec_${key.slice(0, 16)}-${key.slice(17)}`, `whsec_${key}A`, `whsec_${key}===`]) {
    t.equal(whsecKey(secret), undefined, `not base64 throughout: ${secret}`);
  }
});

t.test('configurationErrors: a whsec_ secret must hold a key; any other secret is its own bytes', async (t) => {
  const withSecret = (secret: string) => ({ url: PUBLIC_URL, headers: {}, auth: { type: 'secret' as const, secret: { secret } } });
  t.strictSame(await configurationErrors(withSecret('whsec_!!!'), outbound, 'config.'), {
    'config.auth.secret.secret': [coded('format', 'must be whsec_ followed by the base64 of a 24 to 64 byte key')],
  });
  t.strictSame(await configurationErrors(withSecret(`whsec_${Buffer.alloc(32, 5).toString('base64')}`), outbound), {});
  t.strictSame(await configurationErrors(withSecret('any shared secret'), outbound), {});
  t.strictSame(await configurationErrors(withSecret('********'), outbound), {}, 'a mask is judged where it is kept, not here');
});

t.test('standardWebhookSignature: a whsec_ secret stored before its form was checked signs with its own bytes, never an empty key', async (t) => {
  const empty = `v1,${createHmac('sha256', Buffer.alloc(0)).update('id.1.body').digest('base64')}`;
  const own = `v1,${createHmac('sha256', Buffer.from('whsec_!!!', 'utf8')).update('id.1.body').digest('base64')}`;
  t.not(standardWebhookSignature('whsec_!!!', 'id', 1, 'body'), empty);
  t.equal(standardWebhookSignature('whsec_!!!', 'id', 1, 'body'), own);
  const key = Buffer.alloc(24, 4);
  t.equal(standardWebhookSignature(`whsec_${key.toString('base64')}`, 'id', 1, 'body'), `v1,${createHmac('sha256', key).update('id.1.body').digest('base64')}`);
});
