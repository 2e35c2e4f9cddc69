import http from 'node:http';
import net from 'node:net';
import t, { type Test } from 'tap';
import Fastify from 'fastify';
import { registerErrorHandling } from '../../../src/platform/http/error-handler.ts';
import { sseEvent } from '../../../src/platform/http/event-stream.ts';
import { StreamRegistry, type Stream, type StreamRegistryOptions } from '../../../src/platform/streams/registry.ts';
import { eventually } from '../../helpers/eventually.ts';
import { openSse } from '../../helpers/sse.ts';

interface Opened extends Stream {
  label: string;
}

/**
 * A real server whose route `/stream?tenant=&user=&label=` opens a registered stream; its
 * first write is an event `hello`. `ready` is awaited before each open is admitted.
 */
async function streamingServer(t: Test, options: Partial<StreamRegistryOptions> = {}, ready: () => Promise<unknown> = async () => {}) {
  const errors: string[] = [];
  const warnings: { object: unknown; message: string }[] = [];
  const registry = new StreamRegistry<Opened>({
    kind: 'test',
    maxPerUser: 2,
    retryMs: 3000,
    heartbeatMs: 60_000,
    maxUnsentBytes: 1024 * 1024,
    log: { error: (_object, message) => errors.push(message), warn: (object, message) => warnings.push({ object, message }) },
    ...options,
  });
  const opened: Opened[] = [];
  const firstWrites: string[] = [];
  /** Labels of the streams whose open returned. */
  const settled: string[] = [];
  const app = Fastify();
  registerErrorHandling(app);
  app.get('/stream', async (request, reply) => {
    const query = request.query as Record<string, string>;
    const stream: Opened = { auth: { tenantId: Number(query.tenant), userId: Number(query.user) }, response: reply.raw, label: query.label ?? '' };
    opened.push(stream);
    await registry.open(reply, stream, {
      ready,
      first: async () => {
        firstWrites.push(stream.label);
        stream.response.write(sseEvent('hello', stream.label));
      },
    });
    settled.push(stream.label);
    return reply;
  });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(async () => {
    registry.close();
    await app.close();
  });
  const url = (tenant: number, user: number, label = '') => `${base}/stream?tenant=${tenant}&user=${user}&label=${label}`;
  return { registry, opened, firstWrites, settled, errors, warnings, url, port: new URL(base).port };
}

/** A plain GET: status, headers and the whole body (for answers that end). */
function get(url: string) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
    http
      .get(url, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body }));
      })
      .on('error', reject);
  });
}

t.test('a user holds at most maxPerUser streams: one more is a 429 until one closes; the cap is per user and tenant', async (t) => {
  const { registry, url } = await streamingServer(t);
  const first = await openSse(t, url(1, 7, 'a'), {});
  const second = await openSse(t, url(1, 7, 'b'), {});
  t.equal(first.status, 200);
  t.equal(second.status, 200);
  const refused = await get(url(1, 7, 'c'));
  t.equal(refused.status, 429);
  t.match(refused.headers['content-type'], /^application\/problem\+json/);
  t.equal(refused.headers['retry-after'], '3', 'the client retry delay, in seconds');
  t.equal(JSON.parse(refused.body).detail, 'At most 2 test streams per user are open at a time; close one first.');
  t.equal(registry.size(), 2);
  const otherUser = await openSse(t, url(1, 8), {});
  const sameUserIdElsewhere = await openSse(t, url(2, 7), {});
  t.equal(otherUser.status, 200, 'another user of the tenant');
  t.equal(sameUserIdElsewhere.status, 200, 'the same user id in another tenant');
  t.equal(registry.size(), 4);
  t.strictSame([...(registry.ofTenant(1)?.keys() ?? [])].sort(), [7, 8]);
  first.close();
  await eventually(
    async () => registry.size(),
    (n) => n === 3,
    2000,
  );
  const again = await openSse(t, url(1, 7, 'd'), {});
  t.equal(again.status, 200, 'a closed stream frees its place');
  for (const stream of [second, otherUser, sameUserIdElsewhere, again]) stream.close();
  await eventually(
    async () => registry.size(),
    (n) => n === 0,
    2000,
  );
  t.equal(registry.ofTenant(1), undefined, 'a tenant without streams is forgotten');
});

t.test('a stream starts with its first write; enqueued writes run in order, and a failing one ends the stream', async (t) => {
  const { registry, opened, errors, url } = await streamingServer(t);
  const client = await openSse(t, url(1, 1, 'one'), {});
  t.equal((await client.next((e) => e.event === 'hello', 2000)).data, '"one"');
  const [stream] = opened;
  const slow = () => new Promise<void>((resolve) => setTimeout(resolve, 100));
  registry.enqueue(stream!, async () => {
    await slow();
    stream!.response.write(sseEvent('n', 1));
  });
  registry.enqueue(stream!, async () => {
    stream!.response.write(sseEvent('n', 2));
  });
  await client.next((e) => e.event === 'n' && e.data === '2', 2000);
  t.strictSame(
    client.events.filter((e) => e.event === 'n').map((e) => e.data),
    ['1', '2'],
    'the slow write first',
  );
  registry.enqueue(stream!, async () => {
    throw new Error('boom');
  });
  await client.ended;
  t.strictSame(errors, ['test stream: write failed']);
  t.equal(registry.size(), 0);
});

t.test('heartbeats: a comment to every stream, then onHeartbeat; ended streams are forgotten', async (t) => {
  let beats = 0;
  const { registry, opened, url } = await streamingServer(t, { heartbeatMs: 100, onHeartbeat: () => beats++ });
  const client = await openSse(t, url(1, 1), {});
  const other = await openSse(t, url(1, 2), {});
  await eventually(
    async () => client.comments.length,
    (n) => n >= 2,
    3000,
  );
  t.ok(client.comments.every((c) => c === 'heartbeat'));
  t.ok(beats >= 2, 'onHeartbeat runs at each beat');
  t.equal(registry.size(), 2);
  registry.end(opened[1]!);
  await other.ended;
  t.equal(registry.size(), 1, 'end() forgets the stream at once');
  t.strictSame([...registry.all()], [opened[0]]);
  client.close();
});

t.test('a client gone while the registry waits for ready is never registered', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const { registry, opened, firstWrites, settled, url } = await streamingServer(t, {}, () => gate);
  const request = http.get(url(1, 1, 'gone'));
  request.on('error', () => {});
  await eventually(
    async () => opened.length,
    (n) => n === 1,
    2000,
  );
  const closed = new Promise((resolve) => opened[0]!.response.once('close', resolve));
  request.destroy();
  await closed;
  release();
  await eventually(
    async () => settled,
    (labels) => labels.includes('gone'),
    2000,
  );
  t.equal(registry.size(), 0);
  t.strictSame(firstWrites, [], 'nothing was written for it');
});

t.test('close() ends every stream; later ones are ended at once, unregistered', async (t) => {
  const { registry, firstWrites, url } = await streamingServer(t);
  const a = await openSse(t, url(1, 1, 'a'), {});
  const b = await openSse(t, url(2, 1, 'b'), {});
  await a.next((e) => e.event === 'hello', 2000);
  await b.next((e) => e.event === 'hello', 2000);
  registry.close();
  await Promise.all([a.ended, b.ended]);
  t.equal(registry.size(), 0);
  const late = await get(url(1, 1, 'late'));
  t.equal(late.status, 200);
  t.equal(late.body, 'retry: 3000\n\n', 'an empty stream that ends: the client reconnects elsewhere');
  t.strictSame(firstWrites, ['a', 'b']);
  t.equal(registry.size(), 0);
});

t.test('a client that stops reading is ended once it leaves more than maxUnsentBytes unsent; one that reads is not', async (t) => {
  const { registry, opened, warnings, url, port } = await streamingServer(t);
  // A quarter of maxUnsentBytes a write: one write alone never exceeds it.
  const quarter = `: ${'x'.repeat(256 * 1024)}\n\n`;

  // Reads everything: each write is taken before the next is written, and the stream stays.
  const reader = await openSse(t, url(1, 1, 'reader'), {});
  await reader.next((e) => e.event === 'hello', 5000);
  for (let i = 1; i <= 8; i++) {
    registry.enqueue(opened[0]!, async () => void opened[0]!.response.write(quarter));
    registry.enqueue(opened[0]!, async () => void opened[0]!.response.write(sseEvent('n', i)));
    await reader.next((e) => e.event === 'n' && e.data === String(i), 15_000);
  }
  t.equal(registry.size(), 1, 'a client that keeps up keeps its stream');
  t.strictSame(warnings, []);

  // Connected, then never reads: the kernel's buffers fill, then the response's.
  const idle = net.connect(Number(port), '127.0.0.1');
  idle.on('error', () => {});
  t.teardown(() => void idle.destroy());
  idle.write(`GET ${new URL(url(1, 2, 'idle')).pathname}${new URL(url(1, 2, 'idle')).search} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  idle.pause();
  await eventually(
    async () => registry.size(),
    (n) => n === 2,
    15_000,
  );
  const stream = opened[1]!;
  let written = 0;
  while (registry.size() === 2 && written < 256) {
    registry.enqueue(stream, async () => void stream.response.write(quarter));
    written++;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  t.equal(registry.size(), 1, 'the stream of the client that stopped reading is ended and forgotten');
  t.ok(stream.response.destroyed, 'and destroyed: what it held is released');
  t.ok(written > 1 && written < 256, `ended after ${written} writes of 256 KiB`);
  t.equal(warnings.length, 1);
  t.equal(warnings[0]!.message, 'test stream: the client does not keep up; ended');
  t.ok((warnings[0]!.object as { unsent: number }).unsent > 1024 * 1024, 'with what was left unsent');
  registry.enqueue(stream, async () => void stream.response.write(quarter));
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(warnings.length, 1, 'a write queued after the end adds no second warning');
  t.strictSame([...registry.all()], [opened[0]], 'the reader stays');
  reader.close();
});
