/** Delivery outcomes (src/platform/outbound/delivery-outcome.ts): the rules, and one attempt against a real peer on loopback. */
import t from 'tap';
import { DESTINATION_NOT_ALLOWED, NOT_DELIVERED, OutboundClient, OutboundError } from '../../../src/platform/outbound/client.ts';
import {
  MAX_RETRY_AFTER_MS,
  attemptDelivery,
  failureOutcome,
  judgeResponse,
  judgeResponseWithGone,
  nextState,
  responseError,
  responseOutcome,
  retryAfterMs,
} from '../../../src/platform/outbound/delivery-outcome.ts';
import { startReceiver } from '../../helpers/receiver.ts';

const PUSH_GONE = { goneStatuses: [404, 410] } as const;

t.test('judgeResponse: 2xx succeeded, 429 and 5xx retry, gone statuses only when named, the rest failed', async (t) => {
  const statuses = [200, 201, 204, 299, 301, 302, 304, 400, 401, 403, 404, 408, 410, 413, 429, 500, 502, 503, 504, 599];
  t.strictSame(statuses.map(judgeResponse), [
    'succeeded',
    'succeeded',
    'succeeded',
    'succeeded',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'retry',
    'retry',
    'retry',
    'retry',
    'retry',
    'retry',
  ]);
  // Node's client takes any three-digit status; one past 599 is no server error.
  t.strictSame([600, 699, 999].map(judgeResponse), ['failed', 'failed', 'failed'], 'a status past 5xx fails at once');
  t.strictSame(
    statuses.map((status) => judgeResponseWithGone(status, PUSH_GONE.goneStatuses)),
    [
      'succeeded',
      'succeeded',
      'succeeded',
      'succeeded',
      'failed',
      'failed',
      'failed',
      'failed',
      'failed',
      'failed',
      'gone',
      'failed',
      'gone',
      'failed',
      'retry',
      'retry',
      'retry',
      'retry',
      'retry',
      'retry',
    ],
  );
  t.equal(judgeResponseWithGone(503, [503]), 'gone', 'a named gone status wins over retry');
  t.equal(judgeResponseWithGone(200, [200]), 'succeeded', 'a 2xx is never gone');
  t.equal(judgeResponseWithGone(404, []), 'failed', 'no gone statuses: judgeResponse');
});

t.test('responseError: nothing on success, the status otherwise, and why a 3xx was not followed', async (t) => {
  t.equal(responseError(200), null);
  t.equal(responseError(204), null);
  t.equal(responseError(301), 'HTTP 301: redirects are not followed');
  t.equal(responseError(307), 'HTTP 307: redirects are not followed');
  t.equal(responseError(404), 'HTTP 404');
  t.equal(responseError(429), 'HTTP 429');
  t.equal(responseError(503), 'HTTP 503');
});

t.test('retryAfterMs: seconds or an HTTP date, in the future, capped at an hour', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  t.equal(MAX_RETRY_AFTER_MS, 3_600_000);
  t.equal(retryAfterMs(' 5 ', now), 5_000, 'surrounding spaces are ignored');
  t.equal(retryAfterMs('3600', now), MAX_RETRY_AFTER_MS, 'an hour exactly');
  t.equal(retryAfterMs('3601', now), MAX_RETRY_AFTER_MS, 'longer is capped');
  t.equal(retryAfterMs('Sun, 01 Mar 2026 12:01:00 GMT', now), 60_000);
  t.equal(retryAfterMs('Mon, 02 Mar 2026 12:00:00 GMT', now), MAX_RETRY_AFTER_MS, 'a date a day away is capped');
  t.equal(retryAfterMs(['7', '9'], now), 7_000, 'the first of repeated headers');
  t.equal(retryAfterMs('0', now), undefined, 'no wait is no Retry-After');
  t.equal(retryAfterMs('Sun, 01 Mar 2026 11:59:00 GMT', now), undefined, 'a date in the past');
  t.equal(retryAfterMs('-5', now), undefined);
  t.equal(retryAfterMs('1.5', now), undefined);
  t.equal(retryAfterMs('', now), undefined);
  t.equal(retryAfterMs([], now), undefined);
});

t.test('nextState: backoff doubles from the base delay, Retry-After only when longer, final states', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  const policy = { maxAttempts: 5, retryDelayMs: 250 };
  const delay = (state: ReturnType<typeof nextState>) => state.retryAt!.getTime() - now.getTime();
  t.strictSame(
    [1, 2, 3, 4].map((attempt) => delay(nextState({ verdict: 'retry' }, attempt, policy, now))),
    [250, 500, 1000, 2000],
  );
  t.equal(nextState({ verdict: 'retry' }, 1, policy, now).status, 'retrying');
  t.equal(delay(nextState({ verdict: 'retry', retryAfterMs: 100 }, 3, policy, now)), 1000, 'a shorter Retry-After does not hasten the retry');
  t.equal(delay(nextState({ verdict: 'retry', retryAfterMs: 9_000 }, 3, policy, now)), 9_000, 'a longer one postpones it');
  t.equal(delay(nextState({ verdict: 'retry' }, 1, { maxAttempts: 2, retryDelayMs: 0 }, now)), 0, 'no base delay: retry at once');
  t.strictSame(nextState({ verdict: 'retry' }, 5, policy, now), { status: 'failed', retryAt: null }, 'attempts spent');
  t.strictSame(nextState({ verdict: 'retry' }, 1, { maxAttempts: 1, retryDelayMs: 250 }, now), { status: 'failed', retryAt: null }, 'one attempt in all');
  t.strictSame(nextState({ verdict: 'gone', retryAfterMs: 9_000 }, 1, policy, now), { status: 'failed', retryAt: null }, 'gone is final');
  t.strictSame(nextState({ verdict: 'failed', retryAfterMs: 9_000 }, 1, policy, now), { status: 'failed', retryAt: null });
  t.strictSame(nextState({ verdict: 'succeeded' }, 5, policy, now), { status: 'succeeded', retryAt: null });
});

t.test('nextState: the doubled delay stops at a day, so the highest attempt number WEBHOOK_MAX_ATTEMPTS allows still has a date', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  const policy = { maxAttempts: 100, retryDelayMs: 30_000 };
  const day = 24 * 3600 * 1000;
  const delay = (attempt: number, outcome: { verdict: 'retry'; retryAfterMs?: number } = { verdict: 'retry' }) =>
    nextState(outcome, attempt, policy, now).retryAt!.getTime() - now.getTime();
  t.equal(delay(12), 30_000 * 2 ** 11, 'attempt 12 waits 17 h, still doubled');
  t.equal(delay(13), day, 'attempt 13 would wait 34 h: a day');
  for (const attempt of [40, 60, 99]) t.equal(delay(attempt), day, `attempt ${attempt}: a day, a valid date`);
  t.equal(nextState({ verdict: 'retry' }, 99, policy, now).retryAt!.toISOString(), '2026-03-02T12:00:00.000Z');
  t.equal(delay(99, { verdict: 'retry', retryAfterMs: 3_600_000 }), day, 'a shorter Retry-After changes nothing');
  const longBase = { maxAttempts: 100, retryDelayMs: 2 ** 31 - 1 };
  t.equal(
    nextState({ verdict: 'retry' }, 99, longBase, now).retryAt!.getTime() - now.getTime(),
    2 ** 31 - 1,
    'a base delay above a day (the largest one configurable) is kept, never doubled',
  );
});

t.test('responseOutcome: the status, its verdict and error text, the duration, and a usable Retry-After', async (t) => {
  const now = new Date('2026-03-01T12:00:00Z');
  t.strictSame(responseOutcome({ status: 204, headers: {}, durationMs: 12 }, now), { verdict: 'succeeded', responseStatus: 204, durationMs: 12, error: null });
  t.strictSame(responseOutcome({ status: 503, headers: { 'retry-after': '30' }, durationMs: 7 }, now), {
    verdict: 'retry',
    responseStatus: 503,
    durationMs: 7,
    error: 'HTTP 503',
    retryAfterMs: 30_000,
  });
  t.strictSame(responseOutcome({ status: 429, headers: { 'retry-after': 'later' }, durationMs: 7 }, now), {
    verdict: 'retry',
    responseStatus: 429,
    durationMs: 7,
    error: 'HTTP 429',
  });
  t.strictSame(responseOutcome({ status: 410, headers: {}, durationMs: 3 }, now, PUSH_GONE), {
    verdict: 'gone',
    responseStatus: 410,
    durationMs: 3,
    error: 'HTTP 410',
  });
  t.strictSame(responseOutcome({ status: 410, headers: {}, durationMs: 3 }, now), { verdict: 'failed', responseStatus: 410, durationMs: 3, error: 'HTTP 410' });
});

t.test('failureOutcome: no status, no duration, only the message users may see; refusals are final', async (t) => {
  const refused = failureOutcome(new OutboundError('refused', 'address 10.0.0.1 (private) is not public'));
  t.strictSame(refused, { verdict: 'failed', responseStatus: null, durationMs: null, error: DESTINATION_NOT_ALLOWED });
  // A request the client will never send: the next attempt would be refused alike.
  const invalid = failureOutcome(new OutboundError('invalid', 'UND_ERR_INVALID_ARG: invalid x-a header'));
  t.strictSame(invalid, { verdict: 'failed', responseStatus: null, durationMs: null, error: NOT_DELIVERED });
  for (const kind of ['timeout', 'network'] as const) {
    t.strictSame(
      failureOutcome(new OutboundError(kind, 'ECONNRESET: socket hang up')),
      { verdict: 'retry', responseStatus: null, durationMs: null, error: NOT_DELIVERED },
      `${kind}: the same words whatever went wrong`,
    );
  }
});

t.test('attemptDelivery against a real peer', async (t) => {
  const receiver = await startReceiver(t);
  const logged: string[] = [];
  // Long enough for a loopback answer on a busy machine (800 ms once ran out in CI under load); the hang case waits it out.
  const client = new OutboundClient({
    allowedCidrs: ['127.0.0.0/8'],
    connectTimeoutMs: 3000,
    timeoutMs: 3000,
    logger: { warn: (fields, message) => logged.push(JSON.stringify({ ...fields, message })) },
  });
  t.teardown(() => client.close());
  const post = (path: string) => ({ url: receiver.url(path), method: 'POST' as const, headers: { 'content-type': 'application/json' }, body: '{"n":1}' });

  t.test('a 2xx answer: succeeded, with its status and duration; the request is sent as given', async (t) => {
    receiver.script('/ok', [{ status: 202, body: 'accepted' }]);
    const outcome = await attemptDelivery(client, post('/ok'));
    t.equal(outcome.verdict, 'succeeded');
    t.equal(outcome.responseStatus, 202);
    t.equal(outcome.error, null);
    t.type(outcome.durationMs, 'number');
    t.notOk('retryAfterMs' in outcome);
    const [request] = receiver.received('/ok');
    t.equal(request?.method, 'POST');
    t.equal(request?.headers['content-type'], 'application/json');
    t.equal(request?.body, '{"n":1}');
  });

  t.test("a 503 with Retry-After: retry, after the receiver's delay, capped", async (t) => {
    receiver.script('/busy', [
      { status: 503, body: 'busy', headers: { 'retry-after': '120' } },
      { status: 429, body: 'slow down', headers: { 'retry-after': '86400' } },
    ]);
    const first = await attemptDelivery(client, post('/busy'));
    t.match(first, { verdict: 'retry', responseStatus: 503, error: 'HTTP 503', retryAfterMs: 120_000 });
    const second = await attemptDelivery(client, post('/busy'));
    t.match(second, { verdict: 'retry', responseStatus: 429, error: 'HTTP 429', retryAfterMs: MAX_RETRY_AFTER_MS });
  });

  t.test('gone statuses are gone only for the channel that names them', async (t) => {
    receiver.script('/gone', [410]);
    t.match(await attemptDelivery(client, post('/gone'), PUSH_GONE), { verdict: 'gone', responseStatus: 410, error: 'HTTP 410' });
    t.match(await attemptDelivery(client, post('/gone')), { verdict: 'failed', responseStatus: 410, error: 'HTTP 410' });
  });

  t.test('a redirect is not followed: failed, and said so', async (t) => {
    receiver.script('/moved', ['redirect']);
    const outcome = await attemptDelivery(client, post('/moved'));
    t.match(outcome, { verdict: 'failed', responseStatus: 302, error: 'HTTP 302: redirects are not followed' });
    t.equal(receiver.received('/redirected').length, 0);
  });

  t.test('no answer in time: retry, "could not be delivered", no status, no duration', async (t) => {
    receiver.script('/hang', ['hang']);
    logged.length = 0;
    const outcome = await attemptDelivery(client, post('/hang'));
    t.strictSame(outcome, { verdict: 'retry', responseStatus: null, durationMs: null, error: NOT_DELIVERED });
    t.match(logged.join('\n'), /"kind":"timeout"/, 'the reason is in the server log');
  });

  t.test('a refused connection reads exactly like a timeout', async (t) => {
    logged.length = 0;
    // Port 1 (tcpmux) is closed on any test machine: the connection is refused.
    const outcome = await attemptDelivery(client, { url: 'http://127.0.0.1:1/', method: 'POST', headers: {}, body: '{}' });
    t.strictSame(outcome, { verdict: 'retry', responseStatus: null, durationMs: null, error: NOT_DELIVERED });
    t.match(logged.join('\n'), /ECONNREFUSED/, 'the reason is in the server log');
  });

  t.test('a destination the address policy refuses: failed at once, nothing sent', async (t) => {
    const strict = new OutboundClient({ allowedCidrs: [], connectTimeoutMs: 1000, timeoutMs: 800 });
    t.teardown(() => strict.close());
    receiver.script('/private', [200]);
    const outcome = await attemptDelivery(strict, post('/private'));
    t.strictSame(outcome, { verdict: 'failed', responseStatus: null, durationMs: null, error: DESTINATION_NOT_ALLOWED });
    t.equal(receiver.received('/private').length, 0);
  });

  t.test('allowListedOnly reaches the client: a public address outside the allow-list is refused before connecting', async (t) => {
    // An IP literal is judged before any connection is opened, so no packet leaves.
    const request = { url: 'http://8.8.8.8:9/push', method: 'POST' as const, headers: {}, body: '{}' };
    const outcome = await attemptDelivery(client, request, { allowListedOnly: true });
    t.strictSame(outcome, { verdict: 'failed', responseStatus: null, durationMs: null, error: DESTINATION_NOT_ALLOWED });
  });
});

t.test('retry rules: which statuses retry, exponential backoff, Retry-After, final state', async (t) => {
  t.strictSame([200, 204, 302, 400, 401, 404, 410, 429, 500, 503].map(judgeResponse), [
    'succeeded',
    'succeeded',
    'failed',
    'failed',
    'failed',
    'failed',
    'failed',
    'retry',
    'retry',
    'retry',
  ]);
  const now = new Date('2026-01-01T00:00:00Z');
  const policy = { maxAttempts: 4, retryDelayMs: 1000 };
  const delays = [1, 2, 3].map((attempt) => nextState({ verdict: 'retry' }, attempt, policy, now).retryAt!.getTime() - now.getTime());
  t.strictSame(delays, [1000, 2000, 4000], 'doubles per attempt');
  t.strictSame(nextState({ verdict: 'retry' }, 4, policy, now), { status: 'failed', retryAt: null }, 'the last attempt is final');
  t.strictSame(nextState({ verdict: 'failed' }, 1, policy, now), { status: 'failed', retryAt: null });
  t.strictSame(nextState({ verdict: 'succeeded' }, 2, policy, now), { status: 'succeeded', retryAt: null });
  t.equal(nextState({ verdict: 'retry', retryAfterMs: 60_000 }, 1, policy, now).retryAt!.getTime() - now.getTime(), 60_000, 'Retry-After when longer');
  t.equal(retryAfterMs('120', now), 120_000);
  t.equal(retryAfterMs('Thu, 01 Jan 2026 00:00:30 GMT', now), 30_000);
  t.equal(retryAfterMs('999999', now), 3_600_000, 'capped at an hour');
  t.equal(retryAfterMs('soon', now), undefined);
  t.equal(retryAfterMs(undefined, now), undefined);
});
