/**
 * The SSRF guard without an operator allow-list: private destinations are refused when
 * configured, and again at send time on the address actually resolved. Refusals never
 * say where a host name points.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { AddressPolicy } from '../../../src/platform/outbound/address-policy.ts';
import { DESTINATION_NOT_ALLOWED, NOT_AN_ALLOWED_DESTINATION, OutboundClient, OutboundError } from '../../../src/platform/outbound/client.ts';
import { automations } from '../../../src/resources/automations/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { startReceiver } from '../../helpers/receiver.ts';
import { eventually } from '../../helpers/eventually.ts';

const api = await startTestApi(t, { role: 'all', webhookAllowedCidrs: [], webhookRetryDelayMs: 50, webhookMaxAttempts: 3 });
const receiver = await startReceiver(t);
const tenant = await api.createTenant('ssrf');
const token = tenant.adminToken;

t.test('the address policy refuses every non-public range unless a CIDR admits it', async (t) => {
  const strict = new AddressPolicy([]);
  const refused = [
    '127.0.0.1',
    '10.1.2.3',
    '172.16.0.1',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd00:ec2::254',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:10.0.0.1',
  ];
  for (const ip of refused) t.notOk(strict.permits(ip), `${ip} refused`);
  for (const ip of ['93.184.215.14', '8.8.8.8', '2606:4700::1111']) t.ok(strict.permits(ip), `${ip} permitted`);
  t.notOk(strict.permits('localhost'), 'a name is not an address');

  const admitted = new AddressPolicy(['127.0.0.0/8', '10.0.0.0/16', '::1/128']);
  t.ok(admitted.permits('127.0.0.1'));
  t.ok(admitted.permits('::ffff:127.0.0.1'), 'IPv4-mapped judged as IPv4');
  t.ok(admitted.permits('10.0.255.1'));
  t.notOk(admitted.permits('10.1.0.1'), 'outside the admitted range');
  t.ok(admitted.permits('::1'));
  t.notOk(admitted.permits('169.254.169.254'));
  t.throws(() => new AddressPolicy(['10.0.0.0']), /WEBHOOK_ALLOWED_CIDRS/);
  t.throws(() => new AddressPolicy(['nonsense/8']), /WEBHOOK_ALLOWED_CIDRS/);
});

t.test('private destinations are refused when a configuration is validated or stored', async (t) => {
  for (const url of [
    receiver.url('/x'),
    `http://localhost:${receiver.port}/x`,
    'http://169.254.169.254/latest/meta-data/',
    'http://10.0.0.1/',
    'http://[::1]/',
    'http://[::ffff:7f00:1]/',
    // IPv6 forms that carry a loopback or metadata IPv4 address.
    `http://[::7f00:1]:${receiver.port}/x`,
    'http://[::a9fe:a9fe]/latest/meta-data/',
    `http://[64:ff9b::7f00:1]:${receiver.port}/x`,
    `http://[2002:7f00:1::1]:${receiver.port}/x`,
    `http://[2001:0:7f00:1::]:${receiver.port}/x`,
    'http://no-such-host.invalid/',
  ]) {
    const validated = await api.call(t, 'validateWebhookConfiguration', { token, body: { url, headers: {} } });
    t.equal(validated.status, 422, url);
    t.strictSame(validated.body.errors?.url, [NOT_AN_ALLOWED_DESTINATION], `${url}: the same answer, no address or range`);
    const created = await api.call(t, 'createAutomation', { token, body: { name: 'x', config: { url, headers: {} } } });
    t.equal(created.status, 422, url);
    t.strictSame(created.body.errors['config.url'], [NOT_AN_ALLOWED_DESTINATION], url);
  }
  const [count] = await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from automations`);
  t.equal(count!.n, 0, 'nothing stored');
  t.equal(receiver.received().length, 0, 'nothing sent');
});

t.test('port 0, which no connection can reach, is refused when a configuration is validated or stored', async (t) => {
  // A public address literal: only the port is wrong. Accepted, every delivery would fail and be retried.
  for (const url of ['http://1.1.1.1:0/hook', 'https://1.1.1.1:00/hook']) {
    const validated = await api.call(t, 'validateWebhookConfiguration', { token, body: { url, headers: {} } });
    t.equal(validated.status, 422, url);
    t.match(validated.body.errors?.url, [/port/], url);
    const created = await api.call(t, 'createAutomation', { token, body: { name: 'port zero', config: { url, headers: {} } } });
    t.equal(created.status, 422, url);
    t.match(created.body.errors?.['config.url'], [/port/], url);
  }
  const [count] = await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from automations where name = 'port zero'`);
  t.equal(count!.n, 0, 'nothing stored');
  t.equal(
    (await api.call(t, 'validateWebhookConfiguration', { token, body: { url: 'http://1.1.1.1:65535/hook', headers: {} } })).status,
    200,
    'port 65535 is fine',
  );
});

t.test('a URL with a space, control or format character of any script, or empty user information, is refused and not stored', async (t) => {
  // The spec's pattern refuses ASCII ones; these pass it, and URL parsing would request another URL than the one stored.
  for (const url of ['http://1.1.1.1/a\u00a0b', 'http://1.1.1.1/a\u0085b', 'http://1.1.1.\u200b1/hook', 'http://1.1.1.1/\u3000', 'http://:@1.1.1.1/hook']) {
    const validated = await api.call(t, 'validateWebhookConfiguration', { token, body: { url, headers: {} } });
    t.equal(validated.status, 422, JSON.stringify(url));
    t.match(validated.body.errors?.url, [/space, control or format character|credentials/], JSON.stringify(url));
    const created = await api.call(t, 'createAutomation', { token, body: { name: 'hidden character', config: { url, headers: {} } } });
    t.equal(created.status, 422, JSON.stringify(url));
    t.strictSame(created.body.errors?.['config.url'], validated.body.errors?.url, 'the create says the same');
  }
  const [count] = await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from automations where name = 'hidden character'`);
  t.equal(count!.n, 0, 'nothing stored');
});

t.test('at send time a private address is refused, recorded, and not retried', async (t) => {
  // Stored directly: a host that resolved to a public address when it was validated and
  // resolves to loopback now (DNS rebinding) looks exactly like this to the sender.
  for (const url of [receiver.url('/rebound'), `http://localhost:${receiver.port}/rebound`, `http://[::7f00:1]:${receiver.port}/rebound`]) {
    const [automation] = await api.db.owner
      .insert(automations)
      .values({ tenantId: tenant.tenantId, name: 'rebound', config: { url, headers: {} } })
      .returning({ id: automations.id });
    const run = await api.call(t, 'runAutomation', { token, params: { automation: automation!.id }, body: {} });
    t.equal(run.status, 202);
    const delivery = await eventually(
      async () =>
        (await api.call(t, 'listAutomationDeliveries', { token, params: { automation: automation!.id }, query: { relations: 'attempt_log' } })).body[0],
      (d: any) => d?.status === 'failed' || d?.status === 'succeeded',
    );
    t.equal(delivery.status, 'failed', url);
    t.equal(delivery.attempts, 1, 'a refusal is final');
    t.equal(delivery.response_status, null);
    t.equal(delivery.error, DESTINATION_NOT_ALLOWED, 'recorded without the address or its range');
    t.equal(delivery.duration_ms, null);
    t.equal(delivery.attempt_log.length, 1, 'the attempt is recorded');
    t.strictSame(
      delivery.attempt_log.map((a: any) => [a.error, a.duration_ms]),
      [[DESTINATION_NOT_ALLOWED, null]],
    );
  }
  t.equal(receiver.received().length, 0, 'the receiver never saw a request');
});

t.test('the outbound client refuses at connect time whatever the URL says', async (t) => {
  const client = new OutboundClient({ allowedCidrs: [], connectTimeoutMs: 1000, timeoutMs: 1000 });
  t.teardown(() => client.close());
  for (const url of [receiver.url('/direct'), `http://localhost:${receiver.port}/direct`]) {
    const error = await client.send({ url, method: 'POST', headers: {}, body: '{}' }).catch((e: unknown) => e);
    t.ok(error instanceof OutboundError, url);
    t.equal((error as OutboundError).kind, 'refused');
  }
  t.equal(receiver.received('/direct').length, 0);
});
