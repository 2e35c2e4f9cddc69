import { readFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import Fastify from 'fastify';
import pino from 'pino';
import { DrizzleQueryError, sql } from 'drizzle-orm';
import { buildApp, loggerOptions } from '../../../src/app.ts';
import { registerErrorHandling } from '../../../src/platform/http/error-handler.ts';
import { ProblemError } from '../../../src/platform/http/problem.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { contractViolations, headerViolations } from '../../helpers/contract.ts';
import { rawRequest, wireClient } from '../../helpers/http-client.ts';
import { multipart as multipartForm } from '../../helpers/multipart.ts';

const api = await startTestApi(t);
const app = api.atrium.app!;

t.test('health probes', async (t) => {
  const live = await api.call(t, 'getLiveness');
  t.strictSame([live.status, live.body], [200, { status: 'ok' }]);
  const ready = await api.call(t, 'getReadiness');
  t.strictSame([ready.status, ready.body], [200, { status: 'ok', database: true }]);
});

t.test('the bundled spec is served (the reference page: api-reference.test.ts)', async (t) => {
  const spec = await app.inject({ method: 'GET', url: '/api/openapi.json' });
  t.equal(spec.statusCode, 200);
  t.strictSame(spec.json(), JSON.parse(readFileSync('generated/openapi.json', 'utf8')));
});

t.test('unknown routes are problem documents', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/api/nothing-here?x=1' });
  t.equal(res.statusCode, 404);
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.match(res.json(), { type: /problems\/not-found/, title: 'Not Found', status: 404, detail: 'No route GET /api/nothing-here.' });
});

t.test('a path served with other methods answers 405 with Allow', async (t) => {
  const wrong = await app.inject({ method: 'PATCH', url: '/api/departments?limit=1', payload: { name: 'x' } });
  t.equal(wrong.statusCode, 405);
  t.equal(wrong.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.equal(wrong.headers.allow, 'GET, HEAD, POST');
  t.match(wrong.json(), {
    type: '/problems/method-not-allowed',
    status: 405,
    code: 'method_not_allowed',
    detail: /^\/api\/departments is served with GET, HEAD, POST, not PATCH\.$/,
  });
  // A multipart body sent with the wrong method is refused unread, the same way.
  const multipart = await app.inject({
    method: 'POST',
    url: '/api/notifications/count',
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
    payload: '--b\r\nContent-Disposition: form-data; name="file"; filename="u.csv"\r\n\r\nusername\r\n--b--\r\n',
  });
  t.equal(multipart.statusCode, 405);
  t.notMatch(multipart.headers.allow, /POST/, `Allow: ${multipart.headers.allow}`);
  t.match(multipart.headers.allow, /^GET, HEAD\b/);
  // A path no method serves stays 404, whatever the method.
  for (const method of ['GET', 'DELETE', 'OPTIONS'] as const) {
    const none = await app.inject({ method, url: '/api/nothing-here' });
    t.equal(none.statusCode, 404, `${method} of an unknown path`);
    t.equal(none.headers.allow, undefined);
  }
  // Whatever the body: it is not read, so neither malformed JSON, nor a charset, nor its size decides the answer.
  const bodies = [
    { headers: { 'content-type': 'application/json' }, payload: '{' },
    { headers: { 'content-type': 'application/json; charset=latin1' }, payload: '{}' },
    { headers: { 'content-type': 'application/json' }, payload: `"${'x'.repeat(2 * 1024 * 1024)}"` },
  ];
  for (const body of bodies) {
    const what = `${body.headers['content-type']}, ${body.payload.length} bytes`;
    const none = await app.inject({ method: 'POST', url: '/api/nothing-here', ...body });
    t.equal(none.statusCode, 404, `an unknown path with ${what}`);
    const other = await app.inject({ method: 'PUT', url: '/api/auth/login', ...body });
    t.equal(other.statusCode, 405, `a path served with other methods with ${what}`);
    t.equal(other.headers.allow, 'POST');
    const probe = await app.inject({ method: 'POST', url: '/health/live', ...body });
    t.equal(probe.statusCode, 405, `a probe with ${what}`);
    t.match(probe.headers.allow, /^GET\b/);
  }
});

t.test('a request target in absolute form is read as its path: links and refusals name the path alone', async (t) => {
  // As a client sends it to a proxy (RFC 9112 §3.2.2), and a proxy may pass it on: the host is the client's to write.
  const tenant = await api.createTenant('absolute-form');
  await api.createUser(tenant.tenantId);
  const wire = await wireClient(app);
  const headers = { authorization: `Bearer ${tenant.adminToken}` };
  const page = await wire.send({ method: 'GET', url: 'http://elsewhere.example/api/roles?limit=1', headers });
  t.strictSame(
    [
      ...contractViolations('listRoles', page.statusCode, page.headers['content-type'] as string, page.json()),
      ...headerViolations('listRoles', page.statusCode, page.headers),
    ],
    [],
  );
  t.equal(page.statusCode, 200);
  t.equal(page.headers.link, '</api/roles?limit=1&offset=1>; rel="next"', 'a relative reference, as for a path');
  const wrong = await wire.send({ method: 'PATCH', url: 'HTTP://elsewhere.example/api/departments?limit=1', headers });
  t.equal(wrong.statusCode, 405);
  t.equal(wrong.headers.allow, 'GET, HEAD, POST');
  t.equal(wrong.json().detail, '/api/departments is served with GET, HEAD, POST, not PATCH.');
  const none = await wire.send({ method: 'GET', url: 'http://elsewhere.example?x=1', headers });
  t.equal(none.statusCode, 404);
  t.equal(none.json().detail, 'No route GET /.');
});

t.test('uncaught errors are logged and answered 500 without internals', async (t) => {
  const logged: string[] = [];
  const bare = Fastify({
    logger: { level: 'error', stream: { write: (line: string) => logged.push(line) } },
  });
  registerErrorHandling(bare);
  bare.get('/boom', async () => {
    throw new Error('secret internal detail: connection string postgres://x');
  });
  bare.get('/problem', async () => {
    throw new ProblemError(409, 'Conflicting.', { errors: { name: ['taken'] } });
  });
  const res = await bare.inject({ method: 'GET', url: '/boom' });
  t.equal(res.statusCode, 500);
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
  t.notMatch(res.body, /secret|postgres/);
  t.match(res.json(), { status: 500, title: 'Internal Server Error' });
  t.ok(
    logged.some((line) => line.includes('secret internal detail')),
    'the cause is in the log',
  );
  const problem = await bare.inject({ method: 'GET', url: '/problem' });
  t.strictSame(problem.json(), {
    type: '/problems/conflict',
    title: 'Conflict',
    status: 409,
    code: 'conflict',
    detail: 'Conflicting.',
    errors: { name: ['taken'] },
    error_codes: { name: ['invalid'] },
    request_id: 'req-2', // a bare Fastify's own id of its second request
  });
});

t.test('database errors are logged without their query parameters or row details', async (t) => {
  const logged: string[] = [];
  const bare = Fastify({
    logger: { level: 'error', stream: { write: (line: string) => logged.push(line) } },
  });
  registerErrorHandling(bare);
  const query = 'insert into "users" ("tenant_id", "username", "password") values ($1, $2, $3)';
  bare.get('/database', async () => {
    // As postgres.js rejects and drizzle wraps: the driver error carries the row in `detail`.
    const cause = Object.assign(new Error('null value in column "email" violates not-null constraint'), {
      name: 'PostgresError',
      severity: 'ERROR',
      code: '23502',
      detail: 'Failing row contains (1, ann, $argon2id$v=19$leaked-hash).',
      table_name: 'users',
      column_name: 'email',
      constraint_name: undefined,
    });
    throw new DrizzleQueryError(query, [1, 'ann', '$argon2id$v=19$leaked-hash'], cause);
  });
  const res = await bare.inject({ method: 'GET', url: '/database' });
  t.equal(res.statusCode, 500);
  t.notMatch(res.body, /leaked-hash|insert into/);
  const line = logged.join('\n');
  t.notMatch(line, /leaked-hash/, 'no parameter or row value in the log');
  t.match(line, /insert into \\"users\\"/, 'the query text is logged');
  t.match(line, /23502/, 'the driver code is logged');
  t.match(line, /violates not-null constraint/, "the driver's message is logged");
});

t.test('a multipart request carries at most one file: a second file part is a 413 problem', async (t) => {
  const tenant = await api.createTenant('multipart-files');
  const form = new FormData();
  form.append('user_data_csv', new Blob(['username\nfirst\n'], { type: 'text/csv' }), 'one.csv');
  form.append('user_data_csv', new Blob(['username\nsecond\n'], { type: 'text/csv' }), 'two.csv');
  const body = new Response(form);
  const res = await api.call(t, 'importUsersCsv', {
    token: tenant.adminToken,
    payload: Buffer.from(await body.arrayBuffer()),
    contentType: body.headers.get('content-type')!,
  });
  t.equal(res.status, 413);
  t.match(res.body, { status: 413, detail: /one file/ });
});

t.test('query strings with nested filters parse with depth 2, deeper nesting is rejected', async (t) => {
  // listRoles declares `filter` (operations that do not declare it ignore the parameter).
  const res = await api.call(t, 'listRoles', {
    token: (await api.createTenant('qs')).adminToken,
    query: { filter: { active: { b: { c: 1 } } } },
  });
  t.equal(res.status, 422);
});

t.test('a problem document is not accepted as a request body (415)', async (t) => {
  const res = await api.call(t, 'login', { payload: '{"tenant":"demo"}', contentType: 'application/problem+json' });
  t.equal(res.status, 415);
});

t.test('an error logged as err: a failed statement keeps its query and reason, never its values', async (t) => {
  const lines: string[] = [];
  const logger = pino(loggerOptions('info') as pino.LoggerOptions, { write: (line: string) => void lines.push(line) });
  const failed = await api.db.owner.execute(sql`select 1 / 0 where ${'SECRET-param-value'}::text is not null`).then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(failed instanceof DrizzleQueryError, 'a failed statement');
  logger.error({ err: failed }, 'a job failed');
  logger.error({ err: new Error('plain failure') }, 'something else failed');
  const [database, plain] = lines.map((line) => JSON.parse(line) as { err: unknown });
  t.match(database!.err, { type: 'DrizzleQueryError', message: /^Failed query: select 1 \/ 0/, cause: { message: 'division by zero' } });
  t.notMatch(lines[0], /SECRET-param-value/, 'not the values it sent');
  t.match(plain!.err, { type: 'Error', message: 'plain failure', stack: /\bat / }, 'any other error as pino serializes it');
});

/** Another app on the test's services, with the production logger (loggerOptions) at `level` writing to `lines`. */
async function appLoggingTo(t: Test, level: string) {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const logged = await buildApp(api.atrium.services, { logger: pino(loggerOptions(level) as pino.LoggerOptions, stream) });
  t.teardown(() => logged.close());
  return { logged, lines };
}

t.test('credential query parameters are redacted from request logs in every spelling', async (t) => {
  const { logged, lines } = await appLoggingTo(t, 'info');
  const tenant = await api.createTenant('redaction');
  const secrets = [
    'signature[]=SECRET-A',
    'signature%5B%5D=SECRET-B',
    'SIGNATURE=SECRET-C',
    '%73ignature=SECRET-D',
    'signature[0]=SECRET-E',
    'signature[]=SECRET-F&signature[]=SECRET-G',
    'access_token=SECRET-H',
    'Token[x]=SECRET-I',
    'signature=SECRET-J',
    'x=1;signature=SECRET-K',
    'signature%3DSECRET-L',
    'sig%3dSECRET-M',
    'x=1;%73ignature=SECRET-N',
    'signature%3DSECRET-O=x',
    'x%3Bsignature%3DSECRET-P=1',
    'signature%253DSECRET-Q',
    // A name the query parser reads as a credential, followed by a percent-encoded `=`: the rest is the value to a
    // lenient parser, and stays out of the name shown.
    'signature[]%3DSECRET-R',
    'Token[x]%253DSECRET-S',
    // A name that starts with a bracket is named by it to the query parser: `[signature]=…` sets `signature`.
    '[signature]=SECRET-T',
    '%5Bsignature%5D=SECRET-U',
    '[token]=SECRET-V',
    '%5bSignature%5d=SECRET-W',
    '[signature]x=SECRET-X',
    '[ signature ][]=SECRET-Y',
    'x=1;[signature]=SECRET-Z',
    '[signature]%3DSECRET-AA',
  ];
  for (const query of secrets) {
    const res = await logged.inject({
      method: 'GET',
      url: `/users/${tenant.adminUserId}/profile-picture?tenant=${tenant.tenantId}&expires=4102444800&${query}`,
    });
    t.ok(res.statusCode < 500, query);
  }
  const requests = lines.map((line) => JSON.parse(line)).filter((entry) => entry.req?.url?.includes('/profile-picture'));
  t.equal(requests.length, secrets.length, 'every request was logged with its URL');
  const text = lines.join('\n');
  t.notMatch(text, /SECRET-/, 'no credential value in the log');
  for (const entry of requests) {
    t.match(entry.req.url, /expires=4102444800/, 'other parameters are kept');
    t.match(entry.req.url, /=\[redacted\]/, 'the credential is marked as redacted');
  }
});

t.test('a filter that names a password is kept out of request logs, other filters are logged', async (t) => {
  // docs/security.md, logging: no password is filterable, so such a filter is refused, but what it compares with is one.
  const { logged, lines } = await appLoggingTo(t, 'info');
  const queries = [
    '/scim/v2/Users?filter=password%20eq%20%22SECRET-1%22',
    '/scim/v2/Users?count=1&Filter=userName%20eq%20%22a%22%20or%20PASSWORD%20eq%20%22SECRET-2%22',
    '/scim/v2/Users?filter%3Dpassword%20eq%20%22SECRET-3%22',
    '/api/users?filter[password]=SECRET-4',
    '/api/users?filter%5Bpassword%5D=SECRET-5',
    // Names the query parser reads as `filter`.
    '/scim/v2/Users?[filter]=password%20eq%20%22SECRET-6%22',
    '/scim/v2/Users?%5Bfilter%5D=password%20eq%20%22SECRET-7%22',
    '/api/users?[filter][password]=SECRET-8',
  ];
  for (const url of queries) t.ok((await logged.inject({ method: 'GET', url })).statusCode < 500, url);
  await logged.inject({ method: 'GET', url: '/scim/v2/Users?filter=userName%20eq%20%22kept%22' });
  const urls = lines
    .map((line) => JSON.parse(line))
    .filter((entry) => entry.msg === 'incoming request')
    .map((entry) => entry.req.url as string);
  t.equal(urls.length, queries.length + 1, 'every request was logged');
  t.notMatch(lines.join('\n'), /SECRET-/, 'no compared password in the log');
  t.strictSame(
    urls.slice(0, 2),
    ['/scim/v2/Users?filter=[redacted]', '/scim/v2/Users?count=1&Filter=[redacted]'],
    'the filter marked as redacted, other parameters kept',
  );
  t.equal(urls.at(-1), '/scim/v2/Users?filter=userName%20eq%20%22kept%22', 'a filter naming no password is logged as sent');
});

t.test('a credential name inside another parameter names no credential: request logs keep its value', async (t) => {
  // The query parser reads each as a key inside another parameter (`filter`, `0`, `a`) or as a name of its own
  // (`[token]`), none of which is a credential.
  const { logged, lines } = await appLoggingTo(t, 'info');
  const query = 'filter[key]=kept-A&[filter][signature]=kept-B&[][code]=kept-C&[[token]]=kept-D&a[signature]=kept-E&[expires]=kept-F';
  await logged.inject({ method: 'GET', url: `/api/nothing-here?${query}` });
  const requests = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'incoming request');
  t.strictSame(
    requests.map((entry) => entry.req.url),
    [`/api/nothing-here?${query}`],
    'the URL as sent',
  );
});

t.test('credentials in the authority of a request target are kept out of request logs', async (t) => {
  // docs/security.md, logging: a request's URL is logged without credentials. A target may carry a user and
  // password before its host: a CONNECT's authority (RFC 9110 §9.3.6) or an absolute-form target (RFC 9112 §3.2.2).
  const { logged, lines } = await appLoggingTo(t, 'info');
  await logged.listen({ port: 0, host: '127.0.0.1' });
  const { port } = logged.server.address() as { port: number };
  const targets = [
    ['CONNECT', 'user:SECRET-A@atrium.test:443'],
    ['CONNECT', 'SECRET-B@atrium.test:443'],
    ['GET', 'http://user:SECRET-C@atrium.test/api/nothing-here'],
    ['GET', 'HTTPS://user:SECRET-D@atrium.test/api/roles?limit=1'],
    ['GET', 'ftp://user:SECRET-E@atrium.test/file'],
    ['GET', 'http://user:SECRET-F@atrium.test'],
    // A CONNECT's target is all authority: a `/` or `?` in its password starts no path or query (Node passes both).
    ['CONNECT', 'user:SECRET-G/more@atrium.test:443'],
    ['CONNECT', 'user:SECRET-H?more@atrium.test:443'],
  ] as const;
  for (const [method, target] of targets) {
    const answer = await rawRequest(port, `${method} ${target} HTTP/1.1\r\nHost: atrium.test\r\nConnection: close\r\n\r\n`);
    t.match(answer, /^HTTP\/1\.1 [1-4]\d\d /, `${method} ${target} is answered`);
  }
  const requests = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'incoming request');
  t.equal(requests.length, targets.length, 'every request was logged');
  t.notMatch(lines.join('\n'), /SECRET-/, 'no credential in the log');
  t.strictSame(
    requests.map((entry) => entry.req.url),
    [
      '[redacted]@atrium.test:443',
      '[redacted]@atrium.test:443',
      '/api/nothing-here',
      '/api/roles?limit=1',
      'ftp://[redacted]@atrium.test/file',
      '/',
      '[redacted]@atrium.test:443',
      '[redacted]@atrium.test:443',
    ],
    'the host and path are kept',
  );
});

t.test('at trace level, headers a plugin logs are redacted too (the multipart parser logs the request headers)', async (t) => {
  const { logged, lines } = await appLoggingTo(t, 'trace');
  const tenant = await api.createTenant('trace-redaction');
  const form = await multipartForm({ username: 'traced', password: 'short' });
  const res = await logged.inject({
    method: 'POST',
    url: '/api/users',
    headers: { authorization: `Bearer ${tenant.adminToken}`, cookie: 'session=SECRET-COOKIE', 'content-type': form.contentType },
    payload: form.payload,
  });
  t.equal(res.statusCode, 422);
  const parser = lines.filter((line) => line.includes('busboy'));
  t.ok(parser.length > 0, 'the multipart parser logged the request headers');
  t.match(parser.join('\n'), /"authorization":"\[redacted\]"/);
  const text = lines.join('\n');
  t.notOk(text.includes(tenant.adminToken), 'no access token in the log');
  t.notMatch(text, /SECRET-COOKIE/, 'no cookie in the log');
});
