/**
 * The platform's refusals are answers the spec declares: an over-long path segment (414),
 * an over-large body (413), a body of a media type the operation does not take (415), a
 * malformed path parameter (422), an unreadable body (400) and a request line and headers
 * over Node's limit (431) are problem documents, as is a request that is not received in
 * time (408: `REQUEST_TIMEOUT`, 2 s here), and each operation that gives them
 * declares them. `api.call` asserts the declaration (test/helpers/contract.ts), which is
 * strict: a status the operation does not declare fails the test, problem document or not.
 */
import { connect } from 'node:net';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { contractViolations } from '../../helpers/contract.ts';

const api = await startTestApi(t, { requestTimeoutSeconds: 2 });
const app = api.atrium.app!;
const tenant = await api.createTenant('declared');
const token = tenant.adminToken;

/** The problem document of `status`, with the problem type the status is answered with. */
function isProblem(t: Test, answer: { status: number; headers: Record<string, unknown>; body: any }, status: number, type: string): void {
  t.equal(answer.status, status);
  t.match(String(answer.headers['content-type']), /^application\/problem\+json/);
  t.match(answer.body, { status, type: `/problems/${type}` });
}

t.test('a path segment over 1024 characters is a declared 414', async (t) => {
  for (const [operationId, params] of [
    ['getUser', { user: '1'.repeat(1025) }],
    ['deleteAutomation', { automation: 'a'.repeat(2000) }],
    ['listNotificationsByType', { targetableType: 'x'.repeat(1025) }],
  ] as const) {
    const answer = await api.call(t, operationId, { token, params });
    isProblem(t, answer, 414, 'uri-too-long');
  }
  const longest = await api.call(t, 'getUser', { token, params: { user: '1'.repeat(1024) } });
  t.equal(longest.status, 422, 'a segment of 1024 characters reaches validation');
});

t.test('a body over the limit is a declared 413, also where the operation takes no body', async (t) => {
  const payload = JSON.stringify({ name: 'a'.repeat(api.config.bodyLimitBytes) });
  const created = await api.call(t, 'createRole', { token, payload, contentType: 'application/json' });
  isProblem(t, created, 413, 'content-too-large');
  const marked = await api.call(t, 'markUserForLogout', { token, params: { user: tenant.adminUserId }, payload, contentType: 'application/json' });
  isProblem(t, marked, 413, 'content-too-large');
});

t.test('a body of a media type the operation does not take is a declared 415', async (t) => {
  const text = await api.call(t, 'createRole', { token, payload: '{"name":"Text","permissions":[]}', contentType: 'text/plain' });
  isProblem(t, text, 415, 'unsupported-media-type');
  t.match(text.body.detail, /application\/json/, 'detail names the media type it takes');
  const form = await api.call(t, 'getCurrentUser', { token, payload: '--x--\r\n', contentType: 'multipart/form-data; boundary=x' });
  isProblem(t, form, 415, 'unsupported-media-type');
  const health = await api.call(t, 'getLiveness', { payload: '--x--\r\n', contentType: 'multipart/form-data; boundary=x' });
  isProblem(t, health, 415, 'unsupported-media-type');
  const deleted = await api.call(t, 'deleteUser', {
    token,
    params: { user: 9007199254740991 },
    payload: 'a=1',
    contentType: 'application/x-www-form-urlencoded',
  });
  isProblem(t, deleted, 415, 'unsupported-media-type');
});

t.test('a malformed path parameter is a declared 422 naming it', async (t) => {
  for (const [operationId, params, name] of [
    ['getRole', { role: 'abc' }, 'role'],
    ['deleteAutomation', { automation: '1e3' }, 'automation'],
    ['getNotification', { notification: 'not-a-uuid' }, 'notification'],
  ] as const) {
    const answer = await api.call(t, operationId, { token, params });
    isProblem(t, answer, 422, 'unprocessable-content');
    t.ok(answer.body.errors?.[name], `errors.${name}`);
  }
});

t.test('a JSON body that cannot be read is a declared 400, also where the operation takes no body', async (t) => {
  const answer = await api.call(t, 'deleteUser', { token, params: { user: 9007199254740991 }, payload: '{"a":', contentType: 'application/json' });
  isProblem(t, answer, 400, 'bad-request');
});

/** Sends raw bytes to the listening server (and nothing more) and answers the status, media type and body, and when the server closed. */
function rawRequest(port: number, request: string): Promise<{ status: number; contentType: string; body: unknown; closedAt: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const done = () => {
      const text = Buffer.concat(chunks).toString();
      const head = text.slice(0, text.indexOf('\r\n\r\n'));
      resolve({
        status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]),
        contentType: /\r\ncontent-type: ([^\r]*)/i.exec(head)?.[1] ?? '',
        body: JSON.parse(text.slice(head.length + 4)),
        closedAt: Date.now(),
      });
    };
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', done);
    socket.on('close', done);
    socket.setTimeout(10_000, () => reject(new Error('no answer')));
    socket.write(request);
  });
}

t.test('a request line and headers over 16 KiB are a declared 431, before any operation runs', async (t) => {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const url = await rawRequest(port, `GET /api/users?selects=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`);
  t.equal(url.status, 431, 'a URL of 20 kB');
  t.strictSame(contractViolations('listUsers', url.status, url.contentType, url.body), [], 'listUsers declares it');
  const header = await rawRequest(port, `GET /api/users/current HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${'x'.repeat(20_000)}\r\n\r\n`);
  t.equal(header.status, 431, 'an access token of 20 kB');
  t.strictSame(contractViolations('getCurrentUser', header.status, header.contentType, header.body), [], 'getCurrentUser declares it');
});

t.test('a request not received within REQUEST_TIMEOUT is a declared 408, and its connection is closed', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  // A body announced and never sent in full: before the limit existed, the connection stayed open for ever.
  const body = await rawRequest(
    port,
    `PUT /api/users/${tenant.adminUserId} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"first_name":`,
  );
  t.equal(body.status, 408, 'a body that stops arriving');
  t.match(body.body, { status: 408, type: '/problems/request-timeout' });
  t.strictSame(contractViolations('updateUser', body.status, body.contentType, body.body), [], 'updateUser declares it');
  const headers = await rawRequest(port, `GET /api/users/current HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n`);
  t.equal(headers.status, 408, 'headers that stop arriving');
  t.strictSame(contractViolations('getCurrentUser', headers.status, headers.contentType, headers.body), [], 'getCurrentUser declares it');
});
