/** The webhook configuration's rules beyond its schema (src/resources/automations/rules.ts), without HTTP or a database. */
import t from 'tap';
import { NOT_AN_ALLOWED_DESTINATION, OutboundClient } from '../../../src/platform/outbound/client.ts';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import { assertValidConfiguration, configurationErrors, isReservedHeader } from '../../../src/resources/automations/rules.ts';

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
