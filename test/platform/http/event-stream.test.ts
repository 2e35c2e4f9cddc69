import http, { type ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import Fastify from 'fastify';
import { EVENT_STREAM_HEADERS, isGone, sseComment, sseEvent, sseRetry, startEventStream } from '../../../src/platform/http/event-stream.ts';

t.test('frames', async (t) => {
  t.equal(sseEvent('count', 3), 'event: count\ndata: 3\n\n', 'an event without id');
  t.equal(sseEvent('notification', { title: 'a' }, '17-x'), 'id: 17-x\nevent: notification\ndata: {"title":"a"}\n\n', 'the id comes first');
  t.equal(sseEvent('note', 'two\nlines\r\n'), 'event: note\ndata: "two\\nlines\\r\\n"\n\n', 'line breaks in the data stay inside one data line');
  t.equal(sseComment('heartbeat'), ': heartbeat\n\n');
  t.equal(sseRetry(3000), 'retry: 3000\n\n');
  t.equal(sseRetry(2500.7), 'retry: 2500\n\n', 'whole milliseconds');
});

/** A real server whose one route starts an event stream, then hands its response to `serve`. */
async function streamingServer(t: Test, serve: (response: ServerResponse) => void = () => {}) {
  const responses: ServerResponse[] = [];
  const app = Fastify();
  app.get('/stream', async (_request, reply) => {
    startEventStream(reply, 2500);
    responses.push(reply.raw);
    serve(reply.raw);
    return reply;
  });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return { url: `${base}/stream`, responses };
}

/** GETs `url`; resolves with what was read once `until` holds for the body so far. */
function read(url: string, until: (body: string) => boolean) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; request: http.ClientRequest }>((resolve, reject) => {
    const request = http.get(url, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
        if (until(body)) resolve({ status: response.statusCode!, headers: response.headers, body, request });
      });
    });
    request.on('error', reject);
  });
}

t.test('startEventStream answers 200 with the event-stream head and the reconnection delay; Fastify adds nothing', async (t) => {
  const { url } = await streamingServer(t, (response) => {
    response.write(sseEvent('hello', { n: 1 }, '1'));
    response.end(sseComment('bye'));
  });
  const answer = await read(url, (body) => body.endsWith(': bye\n\n'));
  t.equal(answer.status, 200);
  for (const [name, value] of Object.entries(EVENT_STREAM_HEADERS)) t.equal(answer.headers[name], value, name);
  t.equal(answer.body, 'retry: 2500\n\nid: 1\nevent: hello\ndata: {"n":1}\n\n: bye\n\n', 'exactly the frames written, nothing else');
  answer.request.destroy();
});

t.test('headers set on the reply before the stream starts (request id, CORS) are sent with it', async (t) => {
  const app = Fastify();
  app.get('/stream', async (_request, reply) => {
    reply.header('x-request-id', 'stream-1').header('access-control-allow-origin', 'https://app.example.com');
    startEventStream(reply, 2500);
    reply.raw.end();
    return reply;
  });
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const answer = await read(`${base}/stream`, (body) => body.startsWith('retry:'));
  t.equal(answer.headers['x-request-id'], 'stream-1');
  t.equal(answer.headers['access-control-allow-origin'], 'https://app.example.com');
  t.equal(answer.headers['content-type'], EVENT_STREAM_HEADERS['content-type']);
  answer.request.destroy();
});

t.test('isGone: false while the client listens, true once it left or the stream was ended', async (t) => {
  const { url, responses } = await streamingServer(t);
  const leaving = await read(url, (body) => body.startsWith('retry:'));
  const staying = await read(url, (body) => body.startsWith('retry:'));
  const [left, ended] = responses;
  t.notOk(isGone(left!), 'connected');
  t.notOk(isGone(ended!), 'connected');
  const closed = new Promise((resolve) => left!.once('close', resolve));
  leaving.request.destroy();
  await closed;
  t.ok(isGone(left!), 'the client left');
  ended!.end();
  t.ok(isGone(ended!), 'the server ended the stream');
  staying.request.destroy();
});
