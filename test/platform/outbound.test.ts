/** The outbound HTTP client (src/platform/outbound) against a real peer on loopback. */
import t from 'tap';
import { OutboundClient, OutboundError } from '../../src/platform/outbound/client.ts';
import { startReceiver } from '../helpers/receiver.ts';

const receiver = await startReceiver(t);
const client = new OutboundClient({ allowedCidrs: ['127.0.0.0/8', '::1/128'], connectTimeoutMs: 1000, timeoutMs: 800, maxResponseBytes: 1024 });
t.teardown(() => client.close());

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => error as OutboundError,
  );

t.test('sends method, headers and body, and answers status, headers, body and duration', async (t) => {
  receiver.script('/echo', [{ status: 201, body: 'created' }]);
  const response = await client.send({ url: receiver.url('/echo'), method: 'PATCH', headers: { 'X-One': '1' }, body: '{"a":1}' });
  t.equal(response.status, 201);
  t.equal(response.body.toString(), 'created');
  t.equal(response.truncated, false);
  t.type(response.durationMs, 'number');
  const [request] = receiver.received('/echo');
  t.equal(request!.method, 'PATCH');
  t.equal(request!.headers['x-one'], '1');
  t.equal(request!.body, '{"a":1}');
});

t.test('the response body is read up to the cap and no further', async (t) => {
  receiver.script('/large', [{ status: 200, body: 'x'.repeat(5_000_000) }]);
  const response = await client.send({ url: receiver.url('/large'), method: 'GET', headers: {} });
  t.equal(response.body.length, 1024);
  t.equal(response.truncated, true);
});

t.test('redirects are answered as they are, not followed', async (t) => {
  receiver.script('/from', ['redirect']);
  const response = await client.send({ url: receiver.url('/from'), method: 'GET', headers: {} });
  t.equal(response.status, 302);
  t.equal(response.headers.location, '/redirected');
  t.equal(receiver.received('/redirected').length, 0);
});

t.test('a peer that does not answer is cut off by the total timeout', async (t) => {
  receiver.script('/hang', ['hang']);
  const started = Date.now();
  const error = await failure(client.send({ url: receiver.url('/hang'), method: 'GET', headers: {} }));
  t.ok(error instanceof OutboundError);
  t.equal(error!.kind, 'timeout');
  t.ok(Date.now() - started < 3000, 'within the timeout, not the peer’s pace');
});

t.test('network errors and non-admitted addresses are OutboundErrors of their kind', async (t) => {
  // Port 1 (tcpmux) is closed on any test machine: the connection is refused.
  const closed = await failure(client.send({ url: 'http://127.0.0.1:1/', method: 'GET', headers: {} }));
  t.equal(closed?.kind, 'network');
  for (const url of ['http://10.0.0.1/', 'http://[fe80::1]:1/', 'http://169.254.169.254/latest/meta-data/']) {
    const refused = await failure(client.send({ url, method: 'GET', headers: {} }));
    t.equal(refused?.kind, 'refused', url);
  }
});

t.test('destinationProblem explains what is wrong with a URL, or answers null', async (t) => {
  t.equal(await client.destinationProblem(receiver.url('/ok')), null);
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/`), null, 'localhost resolves into the admitted range');
  t.match(await client.destinationProblem('mailto:a@b.c'), /http or https/);
  t.match(await client.destinationProblem('/relative'), /absolute/);
  t.match(await client.destinationProblem('http://no-such-host.invalid/'), /does not resolve|did not resolve within/);
  t.match(await client.destinationProblem('http://192.168.0.1/'), /192\.168\.0\.1 \(private\) is refused/);
});
