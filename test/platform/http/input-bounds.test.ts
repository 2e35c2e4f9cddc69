/**
 * Client input never produces a 5xx: numbers outside what the service stores, JSON nested
 * deeper than the parser admits, and requests the router or the HTTP parser refuse are
 * all answered with problem documents.
 */
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import Fastify from 'fastify';
import { sql } from 'drizzle-orm';
import { registerErrorHandling } from '../../../src/platform/http/error-handler.ts';
import { MAX_JSON_DEPTH } from '../../../src/platform/http/json-body.ts';
import { FIELDS_NAMED } from '../../../src/platform/http/problem.ts';
import { MAX_QUERY_ARRAY_ITEMS, MAX_QUERY_PARAMETERS } from '../../../src/platform/http/query-string.ts';
import { bearer } from '../../helpers/fixtures.ts';
import { validatorCompiler } from '../../../src/platform/http/validation.ts';
import { webhookDeliveries } from '../../../src/resources/automations/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { rawRequest } from '../../helpers/http-client.ts';
import { startReceiver } from '../../helpers/receiver.ts';

const api = await startTestApi(t, { webhookAllowedCidrs: ['127.0.0.0/8'], pushAllowedCidrs: ['127.0.0.0/8'] });
const app = api.atrium.app!;
const tenant = await api.createTenant('bounds');
const token = tenant.adminToken;
const receiver = await startReceiver(t);

const PROBLEM = /^application\/problem\+json/;

/** Text that JavaScript's Number() reads as a number but that is no decimal integer in range. */
const NOT_AN_ID = [
  '1e400',
  'Infinity',
  '-Infinity',
  '1e19',
  '10000000000000000000',
  '9007199254740992',
  '2.5',
  'NaN',
  '0x10',
  ' 1',
  '1 ',
  '+1',
  '1e3',
  '0',
  '-1',
  '1'.repeat(400),
  '',
];

t.test('path IDs: anything but a decimal integer from 1 to 2^53-1 is a 422 on the parameter', async (t) => {
  for (const value of NOT_AN_ID.filter((v) => v !== '')) {
    const user = await api.call(t, 'getUser', { token, params: { user: value } });
    t.equal(user.status, 422, `getUser ${JSON.stringify(value)}`);
    t.ok(user.body.errors?.user, `the error names the parameter (${JSON.stringify(value)})`);
    const item = await api.call(t, 'getAdministeredMenuItem', { token, params: { menuItem: value } });
    t.equal(item.status, 422, `getAdministeredMenuItem ${JSON.stringify(value)}`);
  }
  const found = await api.call(t, 'getUser', { token, params: { user: tenant.adminUserId } });
  t.equal(found.status, 200, 'a plain decimal ID still works');
  const largest = await api.call(t, 'getUser', { token, params: { user: '9007199254740991' } });
  t.equal(largest.status, 404, 'the largest ID is in range (no such user)');
});

t.test('query integers (filter keys, limit, signed URL expiry) refuse the same text', async (t) => {
  for (const value of NOT_AN_ID) {
    const filtered = await api.call(t, 'listUsers', { token, query: { filter: { role_id: value } } });
    t.equal(filtered.status, 422, `filter[role_id]=${JSON.stringify(value)}`);
    t.ok(filtered.body.errors?.['filter.role_id'], 'named filter.role_id');
    const limited = await api.call(t, 'listUsers', { token, query: { limit: value } });
    t.equal(limited.status, 422, `limit=${JSON.stringify(value)}`);
    t.ok(limited.body.errors?.limit, 'named limit');
  }
  const picture = await api.call(t, 'getProfilePicture', {
    params: { user: tenant.adminUserId },
    query: { tenant: tenant.tenantId, expires: '1e400', signature: 'x' },
  });
  t.equal(picture.status, 422);
  t.ok(picture.body.errors?.expires);
  const repeated = await api.call(t, 'listUsers', { token, query: { limit: ['Infinity', '2'] } });
  t.equal(repeated.status, 422, 'a repeated parameter is judged element by element');
  const ok = await api.call(t, 'listUsers', { token, query: { filter: { role_id: '1' }, limit: '5' } });
  t.equal(ok.status, 200, 'decimal values pass');
});

t.test('an integer of more than 20 decimal digits is told it is out of range, not that it is no decimal integer', async (t) => {
  const huge = '1'.repeat(21);
  const tooLarge = /^must be <= 9007199254740991$/;
  const user = await api.call(t, 'getUser', { token, params: { user: huge } });
  t.equal(user.status, 422, 'a path ID');
  t.match(user.body.errors, { user: [tooLarge] });
  t.match(user.body.error_codes, { user: ['maximum'] });
  const zeros = await api.call(t, 'getUser', { token, params: { user: `${'0'.repeat(30)}${tenant.adminUserId}` } });
  t.equal(zeros.status, 200, 'leading zeros are no digits too many');
  const filtered = await api.call(t, 'listUsers', { token, query: { filter: { role_id: '9'.repeat(400) } } });
  t.equal(filtered.status, 422, 'a filter');
  t.match(filtered.body.errors, { 'filter.role_id': [tooLarge] });
  const limited = await api.call(t, 'listUsers', { token, query: { limit: `-${huge}` } });
  t.equal(limited.status, 422, 'a negative limit');
  t.match(limited.body.errors, { limit: [/^must be >= 1$/] });
  t.match(limited.body.error_codes, { limit: ['minimum'] });
  // A schema without a bound of its own: its format's range.
  const text = validatorCompiler({
    schema: { type: 'object', properties: { small: { type: 'integer', format: 'int32' }, any: { type: 'integer' } } },
    httpPart: 'querystring',
    method: 'GET',
    url: '/',
  } as never) as ((data: unknown) => boolean) & { errors?: { instancePath: string; keyword: string; message?: string }[] };
  t.notOk(text({ small: huge, any: `-${huge}` }));
  t.match(
    text.errors?.map(({ instancePath, keyword, message }) => ({ instancePath, keyword, message })),
    [
      { instancePath: '/small', keyword: 'maximum', message: 'must be <= 2147483647' },
      { instancePath: '/any', keyword: 'minimum', message: 'is too small' },
    ],
  );
});

t.test(`a query string of more than ${MAX_QUERY_PARAMETERS} parameters is refused, not read in part`, async (t) => {
  const junk = (n: number) => Array.from({ length: n }, (_, i) => `j${i}=1`).join('&');
  // Past the limit, qs would drop the filter and answer every user.
  const refused = await app.inject({ method: 'GET', url: `/api/users?${junk(MAX_QUERY_PARAMETERS)}&filter[text]=no-such-user`, headers: bearer(token) });
  t.equal(refused.statusCode, 400);
  t.match(refused.headers['content-type'], PROBLEM);
  t.match(refused.json().detail, /parameter limit/i);
  t.equal(refused.headers['x-content-type-options'], 'nosniff', 'with the security headers every answer has');
  const array = await app.inject({
    method: 'GET',
    url: `/api/users?${Array.from({ length: MAX_QUERY_ARRAY_ITEMS + 1 }, (_, i) => `selects[${i}]=id`).join('&')}`,
    headers: bearer(token),
  });
  t.equal(array.statusCode, 400, 'an array beyond its limit too');
  const within = await app.inject({ method: 'GET', url: `/api/users?${junk(MAX_QUERY_PARAMETERS - 1)}&filter[text]=no-such-user`, headers: bearer(token) });
  t.equal(within.statusCode, 200);
  t.strictSame(within.json(), [], 'within the limit, the filter holds');
});

t.test('a query string whose percent-encoding does not decode is refused, as such a path is, not read as the text sent', async (t) => {
  // `%E9t%E9` is "été" from a Latin-1 form: read as those nine characters, the filter would answer a question never asked.
  for (const query of ['filter[text]=%E9t%E9', 'filter[text]=%FF', 'filter[text]=100%', 'selects=%E0%A4%A', 'filter[te%FFxt]=a', 'cache=%ED%A0%80']) {
    const refused = await app.inject({ method: 'GET', url: `/api/users?${query}`, headers: bearer(token) });
    t.equal(refused.statusCode, 400, `${query} is refused`);
    t.match(refused.headers['content-type'], PROBLEM);
    t.match(refused.json(), { code: 'malformed_request', detail: /percent-encoded/ });
  }
  const encoded = await app.inject({ method: 'GET', url: '/api/users?filter[text]=%C3%A9t%C3%A9%20100%25+a', headers: bearer(token) });
  t.strictSame([encoded.statusCode, encoded.json()], [200, []], 'UTF-8 percent-encoding, `%25` and `+` are read as ever');
});

t.test('the validator enforces the int32 and int64 formats on text and JSON values alike', async (t) => {
  const schema = {
    type: 'object',
    properties: { small: { type: 'integer', format: 'int32' }, large: { type: 'integer', format: 'int64' } },
  };
  const text = validatorCompiler({ schema, httpPart: 'querystring', method: 'GET', url: '/' } as never) as (data: unknown) => boolean;
  const json = validatorCompiler({ schema, httpPart: 'body', method: 'POST', url: '/' } as never) as (data: unknown) => boolean;
  for (const [data, valid] of [
    [{ small: '2147483647', large: '9007199254740991' }, true],
    [{ small: '-2147483648' }, true],
    [{ small: '2147483648' }, false],
    [{ large: '1e400' }, false],
    [{ large: 'Infinity' }, false],
    [{ large: '-Infinity' }, false],
    [{ large: 'NaN' }, false],
    [{ large: '2.5' }, false],
    [{ large: '0x10' }, false],
    [{ large: ' 1' }, false],
  ] as const) {
    t.equal(text({ ...data }), valid, `text ${JSON.stringify(data)}`);
  }
  for (const [data, valid] of [
    [{ small: 2147483647, large: 9007199254740991 }, true],
    [{ small: 2147483648 }, false],
    [{ large: Infinity }, false],
    [{ large: -Infinity }, false],
    [{ large: NaN }, false],
    [{ large: 2.5 }, false],
  ] as const) {
    t.equal(json({ ...data }), valid, `JSON ${JSON.stringify(data)}`);
  }
});

t.test('JSON body integers: infinite, fractional or out-of-range numbers are 422', async (t) => {
  for (const number of ['1e400', '-1e400', '1e19', '2.5', '9007199254740992', '0']) {
    const res = await api.call(t, 'createUser', {
      token,
      payload: `{"username":"n${number.replace(/\W/g, '')}","password":"correct horse battery","first_name":"A","last_name":"B","role_id":${number}}`,
      contentType: 'application/json',
    });
    t.equal(res.status, 422, `role_id ${number}`);
    t.ok(res.body.errors?.role_id, 'named role_id');
  }
  const sort = await api.call(t, 'createMenuItem', {
    token,
    body: { icon_id: 1, menu_identifier: 'bounds', type: 'link', title: 'x', link: 'https://example.com/', sort_number: 2147483648 },
  });
  t.equal(sort.status, 422, 'an int32 column refuses 2^31');
  t.ok(sort.body.errors?.sort_number);
});

t.test(`a body with more faults than a problem names is answered with the first ${FIELDS_NAMED}, not all of them`, async (t) => {
  // No token needed: sign-in takes a JSON body from anyone.
  const keys = 20_000;
  const unknown = JSON.stringify({
    tenant: 'bounds',
    username: 7,
    password: 'x',
    ...Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, 0])),
  });
  const refused = await api.call(t, 'login', { payload: unknown, contentType: 'application/json' });
  t.equal(refused.status, 422);
  t.equal(Object.keys(refused.body.errors).length, FIELDS_NAMED, 'the first fields are named');
  t.same(Object.keys(refused.body.error_codes), Object.keys(refused.body.errors));
  t.ok(refused.body.errors.username, 'a known field at fault is named before unknown keys');
  t.strictSame(refused.body.errors.k0, ['is not a known key']);
  t.match(refused.body.detail, `More than ${FIELDS_NAMED} fields are at fault`);
  t.ok(refused.raw.length < 20_000, `the answer stays small (${refused.raw.length} bytes for ${unknown.length})`);
  const few = await api.call(t, 'login', { body: { tenant: 'bounds', username: 'admin', password: 'x', extra: 1 } });
  t.strictSame(Object.keys(few.body.errors), ['extra'], 'a few faults: each named, and the detail as always');
  t.equal(few.body.detail, 'The request is invalid.');
});

t.test(`JSON bodies nested more than ${MAX_JSON_DEPTH} levels deep are refused before they are walked`, async (t) => {
  const created = await api.call(t, 'createAutomation', { token, body: { name: 'deep', config: { url: receiver.url('/deep'), headers: {} } } });
  t.equal(created.status, 201);
  const automation = created.body.id as number;
  const deliveries = async () =>
    (
      await api.db.owner
        .select({ id: webhookDeliveries.id })
        .from(webhookDeliveries)
        .where(sql`${webhookDeliveries.automationId} = ${automation}`)
    ).length;

  const levels = 150_000;
  const deep = `{"context":{"a":${'['.repeat(levels)}${']'.repeat(levels)}}}`;
  const refused = await api.call(t, 'runAutomation', { token, params: { automation }, payload: deep, contentType: 'application/json' });
  t.equal(refused.status, 400);
  t.match(refused.headers['content-type'], PROBLEM);
  t.match(refused.body.detail, /64 levels/);
  t.equal(await deliveries(), 0, 'nothing was queued');

  // The body object is level 1 and `context` level 2: a context with 62 more levels is the limit.
  const nested = (depth: number) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
  const atLimit = await api.call(t, 'runAutomation', {
    token,
    params: { automation },
    payload: `{"context":${nested(MAX_JSON_DEPTH - 1)}}`,
    contentType: 'application/json',
  });
  t.equal(atLimit.status, 202, `${MAX_JSON_DEPTH} levels are accepted`);
  const overLimit = await api.call(t, 'runAutomation', {
    token,
    params: { automation },
    payload: `{"context":${nested(MAX_JSON_DEPTH)}}`,
    contentType: 'application/json',
  });
  t.equal(overLimit.status, 400, `${MAX_JSON_DEPTH + 1} levels are not`);
  const brackets = await api.call(t, 'runAutomation', {
    token,
    params: { automation },
    body: { context: { text: `${'['.repeat(5000)}"\\{${'{'.repeat(5000)}` } },
  });
  t.equal(brackets.status, 202, 'brackets inside strings do not count');
  t.equal(await deliveries(), 2, 'only the accepted runs were queued');

  const login = await api.call(t, 'login', { payload: '['.repeat(levels) + ']'.repeat(levels), contentType: 'application/json' });
  t.equal(login.status, 400, 'every JSON body is checked, public operations included');
  const poisoned = await api.call(t, 'login', { payload: '{"__proto__":{"x":1}}', contentType: 'application/json' });
  t.equal(poisoned.status, 400, 'prototype poisoning is still refused');
  t.match(poisoned.body.detail, /holds a key "__proto__"/, 'naming the key, not calling the JSON malformed');
  const constructed = await api.call(t, 'login', { payload: '{"constructor":{"prototype":{"x":1}}}', contentType: 'application/json' });
  t.equal(constructed.status, 400);
  t.match(constructed.body.detail, /"constructor" with "prototype"/);
  const malformed = await api.call(t, 'login', { payload: '{"tenant":', contentType: 'application/json' });
  t.equal(malformed.status, 400, 'malformed JSON is still a 400');
});

t.test('a string escaping half of a surrogate pair is refused (400) before it reaches a handler or the database', async (t) => {
  const roles = async () => (await api.call(t, 'listRoles', { token })).body.length as number;
  const before = await roles();
  for (const name of ['\\ud800', 'a\\udc00b', '\\ud800\\u0041', 'x\\udbff']) {
    const refused = await api.call(t, 'createRole', { token, payload: `{"name":"${name}","permissions":[]}`, contentType: 'application/json' });
    t.equal(refused.status, 400, `${name} in a text column`);
    t.match(refused.body.detail, /unpaired surrogate/);
  }
  const created = await api.call(t, 'createAutomation', { token, body: { name: 'surrogates', config: { url: receiver.url('/s'), headers: {} } } });
  const run = await api.call(t, 'runAutomation', {
    token,
    params: { automation: created.body.id },
    payload: '{"context":{"k":"\\udfff"}}',
    contentType: 'application/json',
  });
  t.equal(run.status, 400, 'in a JSON column too');
  t.equal(await roles(), before, 'nothing stored');
  const paired = await api.call(t, 'createRole', {
    token,
    payload: '{"name":"smile \\ud83d\\ude00 \\\\ud800","permissions":[]}',
    contentType: 'application/json',
  });
  t.equal(paired.status, 201, 'a whole pair, and an escaped backslash before "ud800", are fine');
  t.equal(paired.body.name, 'smile 😀 \\ud800');
});

t.test('a body that is not UTF-8, or declares another charset, is refused rather than stored with U+FFFD', async (t) => {
  const departments = async () => (await api.call(t, 'listDepartments', { token })).body.length as number;
  const before = await departments();
  const latin1 = Buffer.concat([Buffer.from('{"name":"Caf'), Buffer.from([0xe9]), Buffer.from(' latin1"}')]);
  const invalid = await api.call(t, 'createDepartment', { token, payload: latin1, contentType: 'application/json' });
  t.equal(invalid.status, 400);
  t.match(invalid.headers['content-type'], PROBLEM);
  t.match(invalid.body.detail, /not valid UTF-8/);
  // A lone surrogate written as raw bytes (CESU-8), which no UTF-8 decoder accepts either.
  const cesu = Buffer.concat([Buffer.from('{"name":"x'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]);
  t.equal((await api.call(t, 'createDepartment', { token, payload: cesu, contentType: 'application/json' })).status, 400);
  const declared = await api.call(t, 'createDepartment', { token, payload: latin1, contentType: 'application/json; charset=iso-8859-1' });
  t.equal(declared.status, 415);
  t.match(declared.body.detail, /UTF-8/);
  t.equal(await departments(), before, 'nothing stored');
  const utf8 = await api.call(t, 'createDepartment', { token, payload: Buffer.from('{"name":"Café ☕"}'), contentType: 'application/json; charset=UTF-8' });
  t.equal(utf8.status, 201, 'UTF-8, declared or not, is read');
  t.equal(utf8.body.name, 'Café ☕');
});

t.test('a content-coded body is refused (415), labelled or really compressed; an uncoded one is read', async (t) => {
  const departments = async () => (await api.call(t, 'listDepartments', { token })).body.length as number;
  const before = await departments();
  // Plain JSON said to be gzip was read as if uncoded; real gzip was refused as text that is not UTF-8.
  const labelled = await api.call(t, 'createDepartment', { token, body: { name: 'Labelled gzip' }, headers: { 'content-encoding': 'gzip' } });
  t.equal(labelled.status, 415, 'plain JSON labelled gzip');
  t.match(labelled.body.detail, /Content-Encoding/);
  const gzipped = gzipSync(JSON.stringify({ name: 'Really gzip' }));
  const real = await api.call(t, 'createDepartment', { token, payload: gzipped, contentType: 'application/json', headers: { 'content-encoding': 'gzip' } });
  t.equal(real.status, 415, 'a gzip body');
  const listed = await api.call(t, 'createDepartment', { token, body: { name: 'Two codings' }, headers: { 'content-encoding': 'identity, br' } });
  t.equal(listed.status, 415, 'a list naming a coding');
  const upload = await api.call(t, 'importUsersCsv', {
    token,
    payload: '--b\r\nContent-Disposition: form-data; name="file"; filename="u.csv"\r\n\r\nusername\r\n--b--\r\n',
    contentType: 'multipart/form-data; boundary=b',
    headers: { 'content-encoding': 'deflate' },
  });
  t.equal(upload.status, 415, 'a multipart body');
  t.equal((await api.call(t, 'createDepartment', { body: { name: 'No token' }, headers: { 'content-encoding': 'gzip' } })).status, 401, 'authentication first');
  t.equal(await departments(), before, 'nothing stored');
  const identity = await api.call(t, 'createDepartment', { token, body: { name: 'Identity' }, headers: { 'content-encoding': 'Identity' } });
  t.equal(identity.status, 201, '`identity` is no coding');
  t.equal(
    (await api.call(t, 'listDepartments', { token, headers: { 'content-encoding': 'gzip' } })).status,
    200,
    'a GET ignores the header, as it ignores a body',
  );
  // A DELETE's body is parsed when it has one (no operation reads it): coded, it is refused as the others are.
  const deleteParams = { params: { department: identity.body.id } };
  const codedDelete = await api.call(t, 'deleteDepartment', { token, ...deleteParams, body: {}, headers: { 'content-encoding': 'gzip' } });
  t.equal(codedDelete.status, 415, 'a DELETE with a coded body');
  const bodiless = await api.call(t, 'deleteDepartment', { token, ...deleteParams, headers: { 'content-encoding': 'gzip' } });
  t.equal(bodiless.status, 204, 'a DELETE without a body is a DELETE, whatever the header says');
  // A path no route serves answers 404 as ever, whatever the body's coding.
  const nowhere = await api.atrium.app!.inject({
    method: 'POST',
    url: '/api/no-such-route',
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    payload: '{}',
  });
  t.equal(nowhere.statusCode, 404);
});

t.test('a body sent with a transfer coding other than chunked is refused (415) like a content-coded one', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const departments = async () => (await api.call(t, 'listDepartments', { token })).body.length as number;
  const before = await departments();
  const chunked = (codings: string, body: string) =>
    rawRequest(
      port,
      `POST /api/departments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n` +
        `Transfer-Encoding: ${codings}\r\nConnection: close\r\n\r\n${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`,
    );
  // Node takes the chunked framing and hands the bytes on as they are: plain JSON labelled gzip was read as if uncoded.
  const labelled = await chunked('gzip, chunked', JSON.stringify({ name: 'Transfer-coded' }));
  t.match(labelled, /^HTTP\/1\.1 415 /, 'plain JSON labelled gzip');
  t.match(labelled, /\r\ncontent-type: application\/problem\+json/i);
  t.match(JSON.parse(labelled.slice(labelled.indexOf('\r\n\r\n') + 4)), { status: 415, detail: /Transfer-Encoding/ });
  t.equal(await departments(), before, 'nothing stored');
  t.match(await chunked('chunked', JSON.stringify({ name: 'Only chunked' })), /^HTTP\/1\.1 201 /, 'chunked alone is framing, read as ever');
});

t.test('a JSON media type without content is no body: a DELETE stays a DELETE, a body an operation requires is missing (422)', async (t) => {
  const department = await api.call(t, 'createDepartment', { token, body: { name: 'Deleted with a content type' } });
  const deleted = await api.call(t, 'deleteDepartment', { token, params: { department: department.body.id }, payload: '', contentType: 'application/json' });
  t.equal(deleted.status, 204, 'deleted');
  const missing = await api.call(t, 'createDepartment', { token, payload: '', contentType: 'application/json' });
  t.equal(missing.status, 422);
  t.strictSame(missing.body.errors, { body: ['is required'] });
});

t.test('router refusals are problem documents', async (t) => {
  const long = await api.call(t, 'getUser', { token, params: { user: '1'.repeat(1025) } });
  t.equal(long.status, 414, 'a path segment over 1024 characters');
  t.match(long.headers['content-type'], PROBLEM);
  t.match(long.body, { status: 414, title: 'URI Too Long' });
  const longish = await api.call(t, 'getUser', { token, params: { user: '1'.repeat(150) } });
  t.equal(longish.status, 422, 'a segment of 150 characters reaches validation');
  const named = await api.call(t, 'getProfilePictureNamed', {
    params: { user: tenant.adminUserId, fileName: `${'a'.repeat(251)}.png` },
    query: { tenant: tenant.tenantId, expires: 1, signature: 'x' },
  });
  t.not(named.status, 414, 'a file name of the documented 255 characters is routed');

  const badEncoding = await app.inject({ method: 'GET', url: '/api/users/%E0%A4%A', headers: { authorization: `Bearer ${token}` } });
  t.equal(badEncoding.statusCode, 400);
  t.match(badEncoding.headers['content-type'], PROBLEM);
  t.match(badEncoding.json(), { status: 400, title: 'Bad Request', detail: /percent-encoding/ });

  const wrongMethod = await app.inject({ method: 'PATCH', url: '/api/users/1', headers: { authorization: `Bearer ${token}` } });
  // A path parameter left empty is no path the spec declares, before authentication.
  for (const url of ['/api/users/', '/api/departments/?limit=1']) {
    const empty = await app.inject({ method: 'GET', url });
    t.equal(empty.statusCode, 404, `${url}: no route`);
    t.match(empty.json(), { type: '/problems/not-found', detail: `No route GET ${url.split('?')[0]}.` });
  }
  const emptyOfPut = await app.inject({ method: 'GET', url: '/api/users/profile-picture/', headers: { authorization: `Bearer ${token}` } });
  t.equal(emptyOfPut.statusCode, 404, 'a path served with another method only through an empty parameter: 404, not 405');

  t.equal(wrongMethod.statusCode, 405, 'an undeclared method of a known path: 405');
  t.equal(wrongMethod.headers.allow, 'GET, HEAD, PUT, DELETE');
  t.match(wrongMethod.headers['content-type'], PROBLEM);
});

t.test('requests the HTTP parser refuses are problem documents', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;

  const huge = await rawRequest(port, `GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`);
  t.match(huge, /^HTTP\/1\.1 431 /);
  t.match(huge, /\r\nContent-Type: application\/problem\+json/i);
  const hugeBody = JSON.parse(huge.slice(huge.indexOf('\r\n\r\n') + 4));
  t.match(hugeBody, { status: 431, title: 'Request Header Fields Too Large' });

  const garbage = await rawRequest(port, 'NOT HTTP AT ALL\r\n\r\n');
  t.match(garbage, /^HTTP\/1\.1 400 /);
  t.match(garbage, /\r\nContent-Type: application\/problem\+json/i);
  t.match(JSON.parse(garbage.slice(garbage.indexOf('\r\n\r\n') + 4)), { status: 400, title: 'Bad Request' });
  // Written before any hook runs, with the headers every answer carries.
  for (const answer of [huge, garbage]) {
    t.match(answer, /\r\ncache-control: no-store\r\n/i);
    t.match(answer, /\r\nx-content-type-options: nosniff\r\n/i);
    t.match(answer, /\r\ncontent-security-policy: default-src 'none'/i);
  }
});

t.test('requests Node would answer by itself: no Host is a 400 problem document, an unknown Expect is ignored', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as unknown;

  // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400, a problem document like any other.
  const hostless = await rawRequest(port, 'GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n');
  t.match(hostless, /^HTTP\/1\.1 400 /);
  t.match(hostless, /\r\ncontent-type: application\/problem\+json/i);
  t.match(hostless, /\r\nx-request-id: /i);
  t.match(bodyOf(hostless), { status: 400, code: 'malformed_request', detail: /Host/ });
  // HTTP/1.0 has no Host to require.
  t.match(await rawRequest(port, 'GET /health/live HTTP/1.0\r\n\r\n'), /^HTTP\/1\.1 200 /);

  // RFC 9110 §10.1.1 lets a server refuse an expectation it cannot meet with 417; the request is answered instead.
  const expecting = await rawRequest(
    port,
    `GET /api/roles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nExpect: something-else\r\nConnection: close\r\n\r\n`,
  );
  t.match(expecting, /^HTTP\/1\.1 200 /);
  t.ok(Array.isArray(bodyOf(expecting)), 'the list of roles');
  const continued = await rawRequest(
    port,
    `POST /api/departments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 19\r\nConnection: close\r\n\r\n{"name":"Expected"}`,
  );
  t.match(continued, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /, '100-continue works as before');
});

t.test('CONNECT is answered as any other method no route serves, and the connection is then closed', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  const headOf = (answer: string) => answer.slice(0, answer.indexOf('\r\n\r\n'));
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as unknown;

  // Node closes a CONNECT's connection without a word unless something takes it; the client would not learn why.
  // The answer comes whole, and the server closes the connection (rawRequest resolves once it is closed).
  const tunnel = await rawRequest(port, 'CONNECT atrium.test:443 HTTP/1.1\r\nHost: atrium.test:443\r\n\r\n');
  t.match(tunnel, /^HTTP\/1\.1 404 /, 'an authority is no path a route serves');
  t.match(headOf(tunnel), /\r\ncontent-type: application\/problem\+json/i);
  t.match(headOf(tunnel), /\r\nx-request-id: /i);
  t.match(headOf(tunnel), /\r\nx-content-type-options: nosniff/i, 'with the headers every answer has');
  t.match(headOf(tunnel), /\r\nconnection: close/i);
  t.match(bodyOf(tunnel), { status: 404, code: 'not_found', detail: 'No route CONNECT atrium.test:443.' });

  // As PROPFIND, which Node hands to the router: 405 on a path served with other methods.
  const propfind = await rawRequest(port, 'PROPFIND /api/roles HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  const connect = await rawRequest(port, 'CONNECT /api/roles HTTP/1.1\r\nHost: x\r\n\r\n');
  t.match(propfind, /^HTTP\/1\.1 405 /);
  t.match(connect, /^HTTP\/1\.1 405 /);
  t.equal(/\r\nallow: ([^\r]*)/i.exec(connect)?.[1], /\r\nallow: ([^\r]*)/i.exec(propfind)?.[1], 'the same Allow');
  t.match(bodyOf(connect), { status: 405, code: 'method_not_allowed', detail: '/api/roles is served with GET, HEAD, not CONNECT.' });
});

t.test('a CONNECT pipelined behind requests still being answered is answered after them, in order', async (t) => {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as { port: number }).port;
  // Node parses all three at once and hands over the CONNECT's connection while the others' answers are still owed
  // on it: the CONNECT's answer waits its turn (it took the connection from under them, a throw that ended the process).
  const get = `GET /api/roles HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`;
  const answers = await rawRequest(port, `${get}${get}CONNECT atrium.test:443 HTTP/1.1\r\nHost: x\r\n\r\n`);
  const statuses = [...answers.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => match[1]);
  t.strictSame(statuses, ['200', '200', '404'], 'both lists, then the refusal of the CONNECT');
  t.match(answers.slice(answers.lastIndexOf('HTTP/1.1 ')), /\r\nconnection: close\r\n[^]*"detail":"No route CONNECT atrium\.test:443\."/i);

  // The server still answers.
  t.match(await rawRequest(port, 'GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), /^HTTP\/1\.1 200 /);
});

t.test('a number out of range or text of the wrong type that reaches PostgreSQL is a 422, not a 500', async (t) => {
  const logged: string[] = [];
  const bare = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => logged.push(line) } } });
  registerErrorHandling(bare);
  bare.get('/overflow', async () => api.db.owner.execute(sql`select ${'99999999999999999999'}::bigint`));
  bare.get('/int32', async () => api.db.owner.execute(sql`select ${2147483648}::integer`));
  bare.get('/text', async () => api.db.owner.execute(sql`select ${'1e400'}::bigint`));
  for (const url of ['/overflow', '/int32', '/text']) {
    const res = await bare.inject({ method: 'GET', url });
    t.equal(res.statusCode, 422, url);
    t.match(res.headers['content-type'], PROBLEM);
    t.notMatch(res.body, /select|bigint|integer/i, 'no query text in the answer');
  }
  t.equal(logged.filter((line) => line.includes('input reached the database unchecked')).length, 3, 'each is logged as a missing bound');
});

t.test('a client that leaves in the middle of its body is no database outage', async (t) => {
  const logged: string[] = [];
  const bare = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => logged.push(line) } } });
  registerErrorHandling(bare);
  bare.post('/echo', async (request) => request.body);
  const failures: { code?: string; statusCode?: number }[] = [];
  bare.addHook('onError', async (_request, _reply, error) => {
    failures.push(error);
  });
  const address = new URL(await bare.listen({ port: 0, host: '127.0.0.1' }));
  t.teardown(() => bare.close());
  const socket = connect(Number(address.port), address.hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write('POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"tenant":');
  await new Promise((resolve) => setTimeout(resolve, 100));
  socket.destroy();
  // The server's reading of the body fails once the socket is gone.
  for (let waited = 0; failures.length === 0 && waited < 5_000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  t.match(failures, [{ code: 'ECONNRESET', statusCode: 400 }], 'reading the body failed');
  t.notOk(
    logged.some((line) => line.includes('database unavailable')),
    `not as the database's trouble: ${logged.map((line) => JSON.parse(line).msg).join(', ')}`,
  );
});

t.test('the spec gives every integer a format, and every integer input bounds within it', async (t) => {
  const spec = JSON.parse(readFileSync('generated/openapi.json', 'utf8'));
  const LIMITS = { int32: 2147483647, int64: 9007199254740991 } as const;
  const problems: string[] = [];
  const visit = (node: unknown, path: string, input: boolean) => {
    if (Array.isArray(node)) return node.forEach((item, index) => visit(item, `${path}/${index}`, input));
    if (typeof node !== 'object' || node === null) return;
    const schema = node as Record<string, unknown>;
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (types.includes('integer')) {
      const format = schema.format as keyof typeof LIMITS | undefined;
      if (format !== 'int32' && format !== 'int64') problems.push(`${path}: no int32/int64 format`);
      else if (input) {
        const { minimum, maximum } = schema as { minimum?: number; maximum?: number };
        if (typeof minimum !== 'number' || typeof maximum !== 'number') problems.push(`${path}: an input without minimum and maximum`);
        else if (maximum > LIMITS[format] || minimum < -LIMITS[format]) problems.push(`${path}: bounds beyond ${format}`);
      }
    }
    for (const [key, value] of Object.entries(schema)) {
      if (key === 'example' || key === 'examples' || key === 'enum' || key === 'const' || key === 'default') continue;
      visit(value, `${path}/${key}`, input);
    }
  };
  const resolve = (ref: string): unknown =>
    ref
      .slice(2)
      .split('/')
      .reduce((at: any, part) => at?.[part.replace(/~1/g, '/').replace(/~0/g, '~')], spec);
  const refs = new Set<string>();
  const collectRefs = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(collectRefs);
    if (typeof node !== 'object' || node === null) return;
    for (const [key, value] of Object.entries(node)) {
      if (key === '$ref' && typeof value === 'string' && !refs.has(value)) {
        refs.add(value);
        collectRefs(resolve(value));
      } else collectRefs(value);
    }
  };
  // Inputs: parameters and request bodies, and every component they refer to.
  for (const [route, item] of Object.entries(spec.paths as Record<string, Record<string, any>>)) {
    for (const [method, operation] of Object.entries(item)) {
      const inputs = [operation.parameters, operation.requestBody, method === 'parameters' ? operation : undefined];
      for (const input of inputs) {
        if (!input) continue;
        visit(input, `${route} ${method}`, true);
        collectRefs(input);
      }
    }
  }
  for (const ref of refs) visit(resolve(ref), ref, true);
  visit(spec, '#', false);
  t.strictSame([...new Set(problems)], []);
});
