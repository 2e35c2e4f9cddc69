/** The rules of Web Push (src/resources/push/rules.ts), without HTTP: registration checks, the cap, and settling send outcomes. */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import { NOT_AN_ALLOWED_DESTINATION, NOT_DELIVERED, OutboundClient } from '../../../src/platform/outbound/client.ts';
import type { DeliveryOutcome } from '../../../src/platform/outbound/delivery-outcome.ts';
import {
  GONE_STATUSES,
  MAX_SUBSCRIPTIONS_PER_USER,
  assertMayRegister,
  canonicalEndpoint,
  authSecretProblem,
  endpointProblem,
  p256dhProblem,
  pushPayload,
  settleOutcomes,
  subscriptionCapErrors,
  subscriptionErrors,
} from '../../../src/resources/push/rules.ts';
import { browserSubscription } from '../../helpers/push-service.ts';

t.test('assertMayRegister: personal accounts may, group accounts and vanished callers get a 403', async (t) => {
  t.doesNotThrow(() => assertMayRegister({ groupAccount: false }));
  for (const caller of [{ groupAccount: true }, undefined]) {
    const error = t.throws(() => assertMayRegister(caller)) as ProblemError;
    t.ok(error instanceof ProblemError);
    t.equal(error.status, 403);
    t.equal(error.message, 'Group accounts cannot receive push notifications.');
  }
});

t.test('subscriptionCapErrors: 20 per user, an endpoint already held is never refused', async (t) => {
  t.equal(MAX_SUBSCRIPTIONS_PER_USER, 20);
  t.strictSame(subscriptionCapErrors({ count: 0, holdsEndpoint: false }), {});
  t.strictSame(subscriptionCapErrors({ count: 19, holdsEndpoint: false }), {});
  t.strictSame(subscriptionCapErrors({ count: 20, holdsEndpoint: false }), {
    endpoint: [coded('limit_reached', 'at most 20 push subscriptions per user; delete one first')],
  });
  t.strictSame(subscriptionCapErrors({ count: 25, holdsEndpoint: false }), {
    endpoint: [coded('limit_reached', 'at most 20 push subscriptions per user; delete one first')],
  });
  t.strictSame(subscriptionCapErrors({ count: 20, holdsEndpoint: true }), {}, 'registering one of the 20 again updates it');
});

t.test('p256dhProblem and authSecretProblem: what a browser sends passes, anything else is named', async (t) => {
  const { keys } = browserSubscription();
  t.equal(p256dhProblem(keys.p256dh), null);
  t.equal(p256dhProblem(`${keys.p256dh}=`), null, 'padding is accepted');
  t.equal(authSecretProblem(keys.auth), null);
  const wrongShape = 'must be the base64url encoding of a 65-byte uncompressed P-256 public key';
  t.equal(p256dhProblem('***'), wrongShape, 'not base64url');
  t.equal(p256dhProblem(randomBytes(33).toString('base64url')), wrongShape, 'compressed length');
  t.equal(p256dhProblem(Buffer.concat([Buffer.from([2]), randomBytes(64)]).toString('base64url')), wrongShape, 'no 0x04 prefix');
  t.equal(p256dhProblem(Buffer.concat([Buffer.from([4]), Buffer.alloc(64, 0xff)]).toString('base64url')), 'is not a point on the P-256 curve');
  for (const auth of ['', '***', randomBytes(15).toString('base64url'), randomBytes(17).toString('base64url')]) {
    t.equal(authSecretProblem(auth), 'must be the base64url encoding of a 16-byte authentication secret', JSON.stringify(auth));
  }
});

t.test('endpointProblem: https to a permitted address, plain http only where the allow-list admits it', async (t) => {
  const outbound = new OutboundClient({ allowedCidrs: ['127.0.0.1/32'], connectTimeoutMs: 1000, timeoutMs: 1000 });
  t.equal(await endpointProblem(outbound, 'https://127.0.0.1/push'), null, 'allow-listed https');
  t.equal(await endpointProblem(outbound, 'http://127.0.0.1:9/push'), null, 'allow-listed http');
  t.equal(await endpointProblem(outbound, 'https://10.1.2.3/push'), NOT_AN_ALLOWED_DESTINATION);
  t.equal(await endpointProblem(outbound, 'https://169.254.169.254/push'), NOT_AN_ALLOWED_DESTINATION);
  t.equal(await endpointProblem(outbound, 'http://127.0.0.2/push'), 'must be an https URL (plain http only to destinations the operator admits)');
  t.equal(await endpointProblem(outbound, 'http://10.1.2.3/push'), 'must be an https URL (plain http only to destinations the operator admits)');
  t.equal(await endpointProblem(outbound, 'ftp://127.0.0.1/push'), 'must be an https URL');
  t.equal(await endpointProblem(outbound, 'not a url'), 'must be an absolute https URL');
  // Port 0 reaches nothing, whatever the scheme: plain http on it is no question of the allow-list.
  const port = 'must name a port from 1 to 65535 (or none)';
  t.equal(await endpointProblem(outbound, 'https://127.0.0.1:0/push'), port);
  t.equal(await endpointProblem(outbound, 'http://127.0.0.1:0/push'), port, 'http on an admitted host');
  t.equal(await endpointProblem(outbound, 'http://10.1.2.3:0/push'), port, 'http on a host not admitted');
  // A push endpoint has no `auth` of its own to send credentials with (keys.auth is the browser's encryption secret):
  // the endpoint is told that credentials do not belong in its URL, not to use something else.
  const credentials = 'must not contain credentials (a user name or password before the host)';
  for (const endpoint of [
    'https://user:pw@127.0.0.1/push',
    'https://user@127.0.0.1/push',
    'https://:pw@127.0.0.1/push',
    'http://user:pw@127.0.0.1:9/push',
    'https://:@127.0.0.1/push',
    'https://@127.0.0.1/push',
  ]) {
    t.equal(await endpointProblem(outbound, endpoint), credentials, endpoint);
  }
});

t.test('canonicalEndpoint: one spelling for every spelling of one URL', async (t) => {
  const spellings = [
    'https://push.example/send/victim?key=a~b%2Fc',
    'HTTPS://Push.Example:443/send/victim?key=a~b%2Fc#fragment',
    'https://push.example/%73end/%76ictim?key=%61%7Eb%2fc',
  ];
  for (const spelling of spellings) t.equal(canonicalEndpoint(spelling), spellings[0], spelling);
  t.equal(canonicalEndpoint('http://[::ffff:127.0.0.1]:9/push'), 'http://127.0.0.1:9/push', 'an IPv4-mapped IPv6 host');
  t.equal(canonicalEndpoint('http://[::ffff:7f00:2]/push'), 'http://127.0.0.2/push', 'the same, as URL parsing writes it');
  t.equal(canonicalEndpoint('https://push.example/a%2fb%c3%a9'), 'https://push.example/a%2Fb%C3%A9', 'a reserved or non-ASCII one stays encoded');
  t.equal(canonicalEndpoint('https://push.example/x?'), 'https://push.example/x?', 'an empty query as it was');
  for (const spelling of [...spellings, 'http://[::ffff:7f00:2]/push', 'https://push.example/a%2fb%c3%a9?%7e=%2e%2E', 'https://push.example/%2e%2e/a/%2E/b']) {
    t.equal(canonicalEndpoint(canonicalEndpoint(spelling)), canonicalEndpoint(spelling), `written once and twice alike: ${spelling}`);
  }
});

t.test('an endpoint with a space, control or format character of any script is refused', async (t) => {
  const outbound = new OutboundClient({ allowedCidrs: ['127.0.0.1/32'], connectTimeoutMs: 1000, timeoutMs: 1000 });
  // A "%" that begins no percent-encoding: normalizing the encodings after it would make a new one (`%%37%30` as `%70`).
  for (const endpoint of ['https://127.0.0.1/%%37%30ush', 'https://127.0.0.1/push/%', 'https://127.0.0.1/push?t=%%34%31', 'https://127.0.0.1/%zzpush']) {
    t.equal(await endpointProblem(outbound, endpoint), 'must not contain a "%" that does not begin a percent-encoding (write it as %25)', endpoint);
  }
  t.equal(await endpointProblem(outbound, 'https://127.0.0.1/push/%25x%2F'), null, 'percent-encodings are fine');
  for (const hidden of ['\u00a0', '\u0085', '\u200b', '\u3000']) {
    t.equal(await endpointProblem(outbound, `https://127.0.0.1/pu${hidden}sh`), 'must not contain a space, control or format character (percent-encode it)');
  }
});

t.test('subscriptionErrors: every problem at once, by field', async (t) => {
  const outbound = new OutboundClient({ allowedCidrs: ['127.0.0.1/32'], connectTimeoutMs: 1000, timeoutMs: 1000 });
  const { keys } = browserSubscription();
  t.strictSame(await subscriptionErrors(outbound, { endpoint: 'http://127.0.0.1:9/push', keys }), {});
  t.strictSame(await subscriptionErrors(outbound, { endpoint: 'ftp://x/push', keys: { p256dh: '***', auth: '' } }), {
    endpoint: [coded('format', 'must be an https URL')],
    'keys.p256dh': [coded('format', 'must be the base64url encoding of a 65-byte uncompressed P-256 public key')],
    'keys.auth': [coded('format', 'must be the base64url encoding of a 16-byte authentication secret')],
  });
  t.strictSame(await subscriptionErrors(outbound, { endpoint: 'https://10.1.2.3/push', keys }), {
    endpoint: [coded('destination_not_allowed', NOT_AN_ALLOWED_DESTINATION)],
  });
  t.strictSame(await subscriptionErrors(outbound, { endpoint: 'http://10.1.2.3/push', keys }), {
    endpoint: [coded('destination_not_allowed', 'must be an https URL (plain http only to destinations the operator admits)')],
  });
  t.strictSame(await subscriptionErrors(outbound, { endpoint: 'http://127.0.0.1:0/push', keys }), {
    endpoint: [coded('format', 'must name a port from 1 to 65535 (or none)')],
  });
});

t.test('pushPayload: {id, title, body, url} with the body as plain text', async (t) => {
  const id = '00000000-0000-0000-0000-000000000001';
  t.strictSame(JSON.parse(pushPayload(id, { title: 'T', body: '<p>a &amp; <b>b</b></p>', url: '/x' })), { id, title: 'T', body: 'a & b', url: '/x' });
});

t.test('pushPayload: the body is shortened first, then the title; a URL that cannot fit alone becomes /', async (t) => {
  const id = '00000000-0000-0000-0000-000000000001';
  const limit = 3072;
  const lone = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
  const made = (data: { title: string; body: string; url: string }) => {
    const json = pushPayload(id, data);
    t.ok(Buffer.byteLength(json) <= limit, `${Buffer.byteLength(json)} bytes`);
    const message = JSON.parse(json) as { id: string; title: string; body: string; url: string };
    for (const field of ['title', 'body', 'url'] as const) t.notMatch(message[field], lone, `${field}: no half of a surrogate pair`);
    return message;
  };
  const controls = '\u0001'.repeat(255);
  // 255 control characters are 1,530 bytes in JSON, a URL of 2047 'ü' 4,095: together 5,700.
  t.strictSame(made({ title: controls, body: '<p>Body</p>', url: `/${'ü'.repeat(2047)}` }), { id, title: controls, body: 'Body', url: '/' });
  const fitting = `/${'ü'.repeat(1400)}`;
  const shortTitle = made({ title: controls, body: '<p>Body</p>', url: fitting });
  t.equal(shortTitle.url, fitting, 'a URL that fits stays whole');
  t.equal(shortTitle.body, '', 'the body gives way first');
  t.equal(shortTitle.title, `${'\u0001'.repeat(shortTitle.title.length - 1)}…`, 'then the title, marked as shortened');
  const oneMore = JSON.stringify({ id, title: `${'\u0001'.repeat(shortTitle.title.length)}…`, body: '', url: fitting });
  t.ok(Buffer.byteLength(oneMore) > limit, 'and no shorter than it must be');
  const emoji = made({ title: '😀'.repeat(255), body: `<p>${'😀'.repeat(5000)}</p>`, url: `/${'😀'.repeat(2047)}` });
  t.equal(emoji.url, '/');
  t.equal(emoji.title, '😀'.repeat(255));
  t.match(emoji.body, /^(😀)+…$/, 'cut between characters');
  const long = made({ title: 'T', body: `<p>${'ä'.repeat(5000)}</p>`, url: '/u' });
  t.match(long.body, /^ä+…$/);
  t.strictSame([long.title, long.url], ['T', '/u'], 'a long body alone leaves title and URL as they are');
});

t.test('settleOutcomes: sent, gone, recorded, retried after the backoff, given up on the last attempt', async (t) => {
  t.strictSame(GONE_STATUSES, [404, 410]);
  const now = new Date('2030-01-01T00:00:00Z');
  const policy = { maxAttempts: 3, retryDelayMs: 1000 };
  const answered = (verdict: DeliveryOutcome['verdict'], status: number, extra: Partial<DeliveryOutcome> = {}): DeliveryOutcome => ({
    verdict,
    responseStatus: status,
    durationMs: 5,
    error: verdict === 'succeeded' ? null : `HTTP ${status}`,
    ...extra,
  });
  const unanswered: DeliveryOutcome = { verdict: 'retry', responseStatus: null, durationMs: null, error: NOT_DELIVERED };
  const message = (subscriptionId: number, notificationId = 'n1') => ({ subscriptionId, notificationId });
  const messages = [message(1), message(2), message(3), message(4), message(5), message(6), message(6, 'n2')];
  const outcomes = [
    answered('succeeded', 201),
    answered('gone', 410),
    answered('failed', 400),
    answered('retry', 503),
    unanswered,
    answered('retry', 429, { retryAfterMs: 60_000 }),
    answered('gone', 404),
  ];

  const first = settleOutcomes(messages, outcomes, 2, policy, now);
  t.strictSame(first.tally, { sent: 1, gone: 2, retried: 3, failed: 1 });
  t.strictSame([...first.gone], [2, 6]);
  t.strictSame([...first.failures], [[3, { status: 400, error: 'HTTP 400' }]], 'failures recorded as they are');
  t.strictSame(
    [...first.retries],
    [
      [now.getTime() + 2000, [message(4), message(5)]],
      [now.getTime() + 60_000, [message(6)]],
    ],
    'base delay doubled for attempt 2, or Retry-After when longer; grouped by when',
  );

  const last = settleOutcomes(messages, outcomes, 3, policy, now);
  t.strictSame(last.tally, { sent: 1, gone: 2, retried: 0, failed: 4 });
  t.strictSame(
    [...last.failures],
    [
      [3, { status: 400, error: 'HTTP 400' }],
      [4, { status: 503, error: 'HTTP 503 (gave up after 3 attempts)' }],
      [5, { status: null, error: `${NOT_DELIVERED} (gave up after 3 attempts)` }],
    ],
    'subscription 6 is gone, so its failure is not recorded',
  );
  t.equal(last.retries.size, 0);

  t.strictSame(settleOutcomes([], [], 1, policy, now), {
    tally: { sent: 0, gone: 0, retried: 0, failed: 0 },
    gone: new Set(),
    failures: new Map(),
    retries: new Map(),
  });
});
