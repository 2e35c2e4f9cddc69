/**
 * Problem codes (src/platform/http/problem.ts): every problem document carries a `code` a
 * program can act on, the status's default or the cause's own, and every field of `errors`
 * its codes in `error_codes`, one per message and in the same order. The contract check
 * of every call judges both against the spec's enums.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import type { ErrorObject } from 'ajv';
import { roles } from '../../../src/resources/roles/table.ts';
import { defaultCode, fieldCodes, PROBLEM_CODES, PROBLEM_TYPES, ProblemError } from '../../../src/platform/http/problem.ts';
import { fieldErrors, validatorCompiler } from '../../../src/platform/http/validation.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { newUserBodies, roleNamed } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('problem-codes');
const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
const newUser = newUserBodies(employee.id, 'codes');

/** The field codes a JSON body gets from the schema. */
function bodyCodes(schema: object, body: unknown) {
  const validate = validatorCompiler({ schema, method: 'PUT', url: '/', httpPart: 'body' }) as ((data: unknown) => boolean) & { errors?: ErrorObject[] };
  return validate(body) ? null : fieldCodes(fieldErrors(validate.errors ?? [], 'body'));
}

t.test('every status has a default code, and every code is listed once', async (t) => {
  t.equal(new Set(PROBLEM_CODES).size, PROBLEM_CODES.length, 'no code in two types');
  for (const code of PROBLEM_CODES) t.match(code, /^[a-z]+(_[a-z]+)*$/, `${code} is snake_case`);
  t.strictSame([400, 401, 403, 404, 409, 413, 414, 415, 422, 429, 500, 503].map(defaultCode), [
    'malformed_request',
    'unauthenticated',
    'forbidden',
    'not_found',
    'conflict',
    'content_too_large',
    'uri_too_long',
    'unsupported_media_type',
    'validation_failed',
    'rate_limited',
    'internal_error',
    'service_unavailable',
  ]);
  t.equal(defaultCode(418), 'malformed_request', 'a status without a type takes its class’s');
  t.equal(new ProblemError(409, 'x').code, 'conflict', 'ProblemError takes the default from the status');
  t.equal(new ProblemError(409, 'x', { code: 'record_in_use' }).code, 'record_in_use', 'or the code it is given');
  t.ok(
    PROBLEM_TYPES.every((type) => type.codes.length > 0),
    'every type documents its codes',
  );
});

t.test('schema validation: each field message has the code of its keyword, in order', async (t) => {
  const schema = {
    type: 'object',
    additionalProperties: false,
    required: ['name'],
    properties: {
      name: { type: 'string', minLength: 2, maxLength: 3, pattern: '^[a-z]+$' },
      count: { type: 'integer', minimum: 1, maximum: 9 },
      kind: { type: 'string', enum: ['a', 'b'] },
      day: { type: 'string', format: 'date' },
    },
  };
  t.strictSame(bodyCodes(schema, { count: 0, kind: 'c', day: '2026-02-30', extra: 1 }), {
    extra: ['unknown_property'],
    name: ['required'],
    count: ['minimum'],
    kind: ['enum'],
    day: ['format'],
  });
  t.strictSame(bodyCodes(schema, { name: 'ABCD', count: 10 }), { name: ['max_length', 'pattern'], count: ['maximum'] });
  t.strictSame(bodyCodes(schema, { name: 'a', count: '1' }), { name: ['min_length'], count: ['type'] });

  const res = await api.call(t, 'createDepartment', { token: tenant.adminToken, body: { name: 5, tags: 'x' } });
  t.equal(res.status, 422);
  t.equal(res.body.code, 'validation_failed');
  t.strictSame(Object.keys(res.body.error_codes), Object.keys(res.body.errors), 'the same paths as errors');
  t.strictSame(res.body.error_codes, { name: ['type'], tags: ['type'] });
  for (const [field, messages] of Object.entries(res.body.errors as Record<string, string[]>)) {
    t.equal(res.body.error_codes[field].length, messages.length, `${field}: one code per message`);
  }
});

t.test('a taken username is `taken`, an inactive role `role_inactive`', async (t) => {
  const body = newUser();
  t.equal((await api.call(t, 'createUser', { token: tenant.adminToken, body })).status, 201);
  const taken = await api.call(t, 'createUser', { token: tenant.adminToken, body: { ...newUser(), username: body.username } });
  t.equal(taken.status, 422);
  t.match(taken.body, { code: 'validation_failed', errors: { username: ['is already taken'] }, error_codes: { username: ['taken'] } });

  const created = await api.call(t, 'createUser', { token: tenant.adminToken, body: newUser() });
  await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: created.body.id } });
  const [inactive] = await api.db.owner.insert(roles).values({ tenantId: tenant.tenantId, name: 'Retired codes', active: false }).returning();
  const restore = await api.call(t, 'restoreUser', { token: tenant.adminToken, params: { user: created.body.id }, body: { role_id: inactive!.id } });
  t.equal(restore.status, 422);
  t.strictSame(restore.body.error_codes, { role_id: ['role_inactive'] });
  // A role that does not exist is a missing reference, as everywhere else.
  const missing = await api.call(t, 'restoreUser', { token: tenant.adminToken, params: { user: created.body.id }, body: { role_id: 999_999 } });
  t.equal(missing.status, 422);
  t.strictSame(missing.body.errors, { role_id: ['does not exist'] });
  t.strictSame(missing.body.error_codes, { role_id: ['missing_reference'] });
});

t.test("the service's own rules name their code: a date out of range, a session that must change its password", async (t) => {
  const early = await api.call(t, 'createUser', { token: tenant.adminToken, body: newUser({ entering_date: '2026-05-01', leaving_date: '2026-04-30' }) });
  t.equal(early.status, 422);
  t.strictSame(early.body.errors, { leaving_date: ['must not be before entering_date'] });
  t.strictSame(early.body.error_codes, { leaving_date: ['out_of_range'] });
  const changing = await api.createUser(tenant.tenantId, { values: { requestPasswordChange: true } });
  const restricted = await api.call(t, 'updateUser', { token: changing.token, params: { user: changing.id }, body: { city: 'Bonn' } });
  t.equal(restricted.status, 422);
  t.strictSame(restricted.body.error_codes, { city: ['password_change_required'], password: ['password_change_required'] });
});

t.test('401s tell a missing token, an invalid one and wrong credentials apart', async (t) => {
  const none = await api.call(t, 'getCurrentUser', {});
  t.match(none.body, { status: 401, code: 'unauthenticated' });
  t.match((await api.call(t, 'getCurrentUser', { token: 'not-a-token' })).body, { status: 401, code: 'unauthenticated' }, 'nor is text that is no token');
  const signedOut = await api.createUser(tenant.tenantId);
  t.equal((await api.call(t, 'logout', { token: signedOut.token })).status, 204);
  const revoked = await api.call(t, 'getCurrentUser', { token: signedOut.token });
  t.match(revoked.body, { status: 401, code: 'token_invalid' });
  const login = await api.call(t, 'login', { body: { tenant: 'problem-codes', username: 'nobody', password: 'wrong-password' } });
  t.match(login.body, { status: 401, code: 'credentials_invalid' });
});

t.test('403s tell a missing permission and a password to change apart; 404 is `not_found`', async (t) => {
  const plain = await api.createUser(tenant.tenantId);
  const listing = await api.call(t, 'createRole', { token: plain.token, body: { name: 'Not mine' } });
  t.match(listing.body, { status: 403, code: 'permission_missing' });
  const changing = await api.createUser(tenant.tenantId, { permissions: ['users.view'], values: { requestPasswordChange: true } });
  const refused = await api.call(t, 'listUsers', { token: changing.token });
  t.match(refused.body, { status: 403, code: 'password_change_required' });
  const missing = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: 999999999 } });
  t.match(missing.body, { status: 404, code: 'not_found' });
  const route = await api.atrium.app!.inject({ method: 'GET', url: '/api/no-such-route' });
  t.match(route.json(), { status: 404, code: 'not_found' });
});

t.test('idempotency: a reused key is `idempotency_key_reused`, one still running `idempotency_request_in_progress`', async (t) => {
  const headers = { 'idempotency-key': 'codes-1' };
  t.equal((await api.call(t, 'createDepartment', { token: tenant.adminToken, headers, body: { name: 'Codes' } })).status, 201);
  const reused = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers, body: { name: 'Codes (2)' } });
  t.equal(reused.status, 422);
  t.match(reused.body, { code: 'idempotency_key_reused', error_codes: { 'Idempotency-Key': ['reused'] } });
  // A claim without an answer is a request still running (or whose server stopped).
  await api.db.owner.execute(sql`update idempotency_keys set status = null where key = 'codes-1'`);
  const running = await api.call(t, 'createDepartment', { token: tenant.adminToken, headers, body: { name: 'Codes' } });
  t.equal(running.status, 409);
  t.equal(running.headers['retry-after'], '1');
  t.match(running.body, { code: 'idempotency_request_in_progress' });
  t.notOk('error_codes' in running.body, 'no field codes without field errors');
});
