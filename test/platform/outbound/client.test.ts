/** The outbound HTTP client (src/platform/outbound) against a real peer on loopback. */
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import t from 'tap';
import { AddressPolicy } from '../../../src/platform/outbound/address-policy.ts';
import {
  DESTINATION_NOT_ALLOWED,
  KEEP_ALIVE_MAX_MS,
  NOT_AN_ALLOWED_DESTINATION,
  NOT_DELIVERED,
  OutboundClient,
  OutboundError,
} from '../../../src/platform/outbound/client.ts';
import { eventually } from '../../helpers/eventually.ts';
import { rejection } from '../../helpers/fixtures.ts';
import { startReceiver } from '../../helpers/receiver.ts';

const receiver = await startReceiver(t);
/** What the client logs, as the server log would keep it. */
const logged: string[] = [];
// Long enough for a loopback answer on a busy machine (800 ms once ran out in CI under load); the hang cases wait it out.
const client = new OutboundClient({
  allowedCidrs: ['127.0.0.0/8', '::1/128'],
  connectTimeoutMs: 3000,
  timeoutMs: 3000,
  maxResponseBytes: 1024,
  logger: { warn: (fields, message) => logged.push(JSON.stringify({ ...fields, message })) },
});
t.teardown(() => client.close());

const failure = (promise: Promise<unknown>) => rejection<OutboundError>(promise);

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

t.test('a request the HTTP client refuses to send (a header value it cannot write) is invalid, not a network failure', async (t) => {
  for (const value of ['\u0100', 'a\u0001b', '\u007f', '€']) {
    const error = await failure(client.send({ url: receiver.url('/echo'), method: 'GET', headers: { 'X-A': value } }));
    t.equal(error?.kind, 'invalid', JSON.stringify(value));
  }
});

t.test('a peer that does not answer is cut off by the total timeout', async (t) => {
  receiver.script('/hang', ['hang']);
  const started = Date.now();
  const error = await failure(client.send({ url: receiver.url('/hang'), method: 'GET', headers: {} }));
  t.ok(error instanceof OutboundError);
  t.equal(error!.kind, 'timeout');
  t.ok(Date.now() - started < 10_000, 'within the timeout, not the peer’s pace');
});

t.test('a peer that answers at once, then sends its body a byte at a time for ever, is cut off by the total timeout', async (t) => {
  // Each byte comes well within the body timeout, which restarts with every chunk: only the total timeout ends it.
  const trickler = createHttpServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/plain' });
    const timer = setInterval(() => response.write('x'), 100);
    response.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => trickler.listen(0, '127.0.0.1', resolve));
  t.teardown(() => trickler.close());
  const started = Date.now();
  const error = await failure(client.send({ url: `http://127.0.0.1:${(trickler.address() as { port: number }).port}/`, method: 'GET', headers: {} }));
  t.equal(error?.kind, 'timeout');
  t.ok(Date.now() - started < 10_000, 'within the timeout, not the peer’s pace');
});

t.test('network errors and non-admitted addresses are OutboundErrors of their kind', async (t) => {
  // Port 1 (tcpmux) is closed on any test machine: the connection is refused.
  const closed = await failure(client.send({ url: 'http://127.0.0.1:1/', method: 'GET', headers: {} }));
  t.equal(closed?.kind, 'network');
  for (const url of ['http://10.0.0.1/', 'http://[fe80::1]:1/', 'http://169.254.169.254/latest/meta-data/', 'http://[::7f00:1]:1/']) {
    const refused = await failure(client.send({ url, method: 'GET', headers: {} }));
    t.equal(refused?.kind, 'refused', url);
    t.equal(refused?.message, DESTINATION_NOT_ALLOWED, `${url}: no address or range in the message`);
  }
});

/** An address outside the allow-list of the client above and every address classification. */
const ADDRESSES: [string, boolean, string][] = [
  // [address, public, what it is]
  ['8.8.8.8', true, 'public IPv4'],
  ['2606:4700::1111', true, 'public IPv6'],
  ['127.0.0.1', false, 'loopback'],
  ['10.1.2.3', false, 'private'],
  ['169.254.169.254', false, 'link-local (cloud metadata)'],
  ['::', false, 'unspecified IPv6'],
  ['::1', false, 'loopback IPv6'],
  // IPv4-compatible ::/96 (deprecated): never public, whatever it carries.
  ['::7f00:1', false, 'IPv4-compatible loopback'],
  ['::127.0.0.1', false, 'IPv4-compatible loopback, dotted'],
  ['::a00:1', false, 'IPv4-compatible private'],
  ['::a9fe:a9fe', false, 'IPv4-compatible metadata'],
  ['::808:808', false, 'IPv4-compatible public (the range is refused)'],
  // IPv4-mapped ::ffff:0:0/96: judged as the IPv4 address.
  ['::ffff:127.0.0.1', false, 'IPv4-mapped loopback'],
  ['::ffff:7f00:1', false, 'IPv4-mapped loopback, hex'],
  ['::ffff:a9fe:a9fe', false, 'IPv4-mapped metadata'],
  ['::ffff:8.8.8.8', true, 'IPv4-mapped public'],
  // IPv4-translated ::ffff:0:0:0/96: refused.
  ['::ffff:0:7f00:1', false, 'IPv4-translated loopback'],
  ['::ffff:0:808:808', false, 'IPv4-translated public (the range is refused)'],
  // NAT64 well-known prefix 64:ff9b::/96: judged as the IPv4 address.
  ['64:ff9b::7f00:1', false, 'NAT64 loopback'],
  ['64:ff9b::10.0.0.1', false, 'NAT64 private'],
  ['64:ff9b::a9fe:a9fe', false, 'NAT64 metadata'],
  ['64:ff9b::c0a8:1', false, 'NAT64 192.168.0.1'],
  ['64:ff9b::808:808', true, 'NAT64 public'],
  // Local-use NAT64 64:ff9b:1::/48: refused.
  ['64:ff9b:1::7f00:1', false, 'local-use NAT64'],
  ['64:ff9b:1:0:808:808::', false, 'local-use NAT64 of a public address'],
  // 6to4 2002::/16: refused.
  ['2002:7f00:1::1', false, '6to4 of loopback'],
  ['2002:a00:1::1', false, '6to4 of private'],
  ['2002:808:808::1', false, '6to4 of a public address (the range is refused)'],
  // Teredo 2001::/32 (server IPv4 in bits 32-63, client IPv4 inverted in the last 32): refused.
  ['2001:0:7f00:1::', false, 'Teredo with a loopback server'],
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', false, 'Teredo with a loopback client (inverted 7f00:0001)'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', false, 'Teredo of public addresses (the range is refused)'],
  // ISATAP interface identifiers carrying a non-public IPv4 address: refused.
  ['2606:4700::5efe:7f00:1', false, 'ISATAP of loopback'],
  ['2606:4700::200:5efe:a00:1', false, 'ISATAP (global bit) of private'],
  ['2606:4700::5efe:808:808', true, 'ISATAP of a public address under a public prefix'],
];

t.test('the address policy: IPv6 forms that carry a non-public IPv4 address are not public', async (t) => {
  const strict = new AddressPolicy([]);
  for (const [address, expected, what] of ADDRESSES) t.equal(strict.permits(address), expected, `${address}: ${what}`);
  const admitted = new AddressPolicy(['127.0.0.0/8', '10.0.0.0/8']);
  for (const address of ['::7f00:1', '64:ff9b::7f00:1', '2002:7f00:1::1', '2001:0:7f00:1::', '::ffff:0:7f00:1']) {
    t.notOk(admitted.permits(address), `${address}: an IPv4 allow-list does not admit its IPv6 forms`);
  }
  t.ok(admitted.permits('::ffff:127.0.0.1'), 'IPv4-mapped is the IPv4 address itself');
  const compatible = new AddressPolicy(['::/96']);
  t.ok(compatible.permits('::7f00:1'), 'the allow-list can admit a refused range explicitly');
});

t.test('embedded forms are refused at connect time, not only when validated', async (t) => {
  const strict = new OutboundClient({ allowedCidrs: [], connectTimeoutMs: 1000, timeoutMs: 1000 });
  t.teardown(() => strict.close());
  for (const [address, expected] of ADDRESSES) {
    if (expected) continue;
    const url = `http://${address.includes(':') ? `[${address}]` : address}:${receiver.port}/embedded`;
    t.equal(await strict.destinationProblem(url), NOT_AN_ALLOWED_DESTINATION, `validated: ${address}`);
    const refused = await failure(strict.send({ url, method: 'GET', headers: {} }));
    t.equal(refused?.kind, 'refused', `sent: ${address}`);
  }
  t.equal(receiver.received('/embedded').length, 0);
});

t.test('an idle connection is closed after KEEP_ALIVE_MAX_MS, though the receiver asks to keep it ten minutes', async (t) => {
  let closed = 0;
  const lingering = createHttpServer((_request, response) => {
    response.writeHead(204, { connection: 'keep-alive', 'keep-alive': 'timeout=600' });
    response.end();
  });
  lingering.keepAliveTimeout = 600_000;
  lingering.on('connection', (socket) => socket.on('close', () => closed++));
  await new Promise<void>((resolve) => lingering.listen(0, '127.0.0.1', resolve));
  t.teardown(() => lingering.close());
  const port = (lingering.address() as { port: number }).port;
  const started = Date.now();
  t.equal((await client.send({ url: `http://127.0.0.1:${port}/`, method: 'POST', headers: {}, body: '{}' })).status, 204);
  t.equal(
    await eventually(
      async () => closed,
      (count) => count === 1,
      KEEP_ALIVE_MAX_MS + 10_000,
    ),
    1,
    'the client closed it',
  );
  t.ok(Date.now() - started >= KEEP_ALIVE_MAX_MS - 1_000, 'not before it was idle for about that long');
});

t.test('failures without a response are told apart only in the log', async (t) => {
  // A peer that accepts and resets every connection.
  const resetter = createServer((socket) => socket.resetAndDestroy());
  await new Promise<void>((resolve) => resetter.listen(0, '127.0.0.1', resolve));
  t.teardown(() => resetter.close());
  const resetPort = (resetter.address() as { port: number }).port;
  receiver.script('/hang-failure', ['hang']);
  const cases: [string, string][] = [
    ['connection refused', 'http://127.0.0.1:1/x?token=SECRET-1'],
    ['connection reset', `http://127.0.0.1:${resetPort}/x?token=SECRET-2`],
    ['timeout', `${receiver.url('/hang-failure')}?token=SECRET-3`],
    ['DNS failure', 'http://no-such-host.invalid/x?token=SECRET-4'],
    ['TLS failure', `https://127.0.0.1:${receiver.port}/x?token=SECRET-5`],
  ];
  for (const [what, url] of cases) {
    logged.length = 0;
    const error = await failure(client.send({ url, method: 'POST', headers: { authorization: 'Bearer SECRET-H' }, body: 'SECRET-B' }));
    t.ok(error instanceof OutboundError, what);
    t.equal(error?.message, NOT_DELIVERED, `${what}: the same message as every other failure`);
    t.ok(error?.detail, `${what}: the reason is kept for the log`);
    t.equal(logged.length, 1, `${what}: logged once`);
    t.match(logged[0], /outbound request failed/);
    t.notMatch(logged[0], /SECRET/, `${what}: the log holds no path, query, header or body`);
  }
});

t.test('destinationProblem explains what is wrong with a URL, never where its host points', async (t) => {
  t.equal(await client.destinationProblem(receiver.url('/ok')), null);
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/`), null, 'localhost resolves into the admitted range');
  t.match(await client.destinationProblem('mailto:a@b.c'), /http or https/);
  t.match(await client.destinationProblem('/relative'), /absolute/);
  t.match(await client.destinationProblem(`http://localhost:0/`), /port/, 'port 0 reaches nothing, even on an admitted host');
  t.match(await client.destinationProblem(`https://127.0.0.1:000/`), /port/);
  // Characters URL parsing would drop, map or encode: the URL requested would not be the one stored and shown.
  for (const hidden of ['\u0085', '\u009b', '\u00a0', '\u3000', '\u2028', '\u200b', '\u202e', '\ufeff']) {
    const code = `U+${hidden.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
    t.equal(
      await client.destinationProblem(`http://localhost:${receiver.port}/a${hidden}b`),
      'must not contain a space, control or format character (percent-encode it)',
      `${code} in the path`,
    );
    t.equal(
      await client.destinationProblem(`http://local${hidden}host:${receiver.port}/`),
      'must not contain a space, control or format character (percent-encode it)',
      `${code} in the host`,
    );
  }
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/a%C2%A0b`), null, 'percent-encoded, it is fine');
  // The zero-width non-joiner and joiner are parts of words in some scripts: a host's IDNA form keeps them.
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/\u0646\u0627\u0645\u0647\u200c\u0627\u06cc`), null, 'U+200C');
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/\u0915\u094d\u200d`), null, 'U+200D');
  t.equal(
    await client.destinationProblem(`http://localhost:${receiver.port}/caf\u00e9`),
    null,
    'a letter of another script is fine (requested percent-encoded)',
  );
  for (const userinfo of [':@', '@', 'user@', ':pw@']) {
    t.equal(await client.destinationProblem(`http://${userinfo}localhost:${receiver.port}/`), 'must not contain credentials; use auth instead', userinfo);
  }
  t.equal(
    await client.destinationProblem(`http:\\\\:@localhost:${receiver.port}/`),
    'must not contain credentials; use auth instead',
    'backslashes as slashes',
  );
  t.equal(await client.destinationProblem(`http://localhost:${receiver.port}/a@b?c=d@e`), null, 'an @ in the path or query is no user information');
  logged.length = 0;
  const unresolvable = await client.destinationProblem('http://no-such-host.invalid/');
  const privateAddress = await client.destinationProblem('http://192.168.0.1/');
  t.equal(unresolvable, NOT_AN_ALLOWED_DESTINATION);
  t.equal(privateAddress, unresolvable, 'a name that does not resolve and a private address read the same');
  t.notMatch(privateAddress, /192|private/);
  t.match(logged.join('\n'), /does not resolve/, 'the log says why');
  t.match(logged.join('\n'), /192\.168\.0\.1 \(private\)/, 'the log names the address');
});
