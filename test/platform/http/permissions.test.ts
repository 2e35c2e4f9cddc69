/**
 * The order in which the binding answers a request through `x-permission`: 401, then a
 * plain permission (before the body is read), then validation (422), then the
 * `unless-self` form (403 on another user's record), then the operation. `getUser` carries
 * the `unless-self` form (`users.view`), `createUser` the plain one (`users.administer`).
 */
import Fastify from 'fastify';
import t from 'tap';
import { handlers } from '../../../src/handlers.ts';
import { registerErrorHandling } from '../../../src/platform/http/error-handler.ts';
import type { Handlers } from '../../../src/platform/http/handler.ts';
import { registerJsonBodies } from '../../../src/platform/http/json-body.ts';
import { registerOperations } from '../../../src/platform/http/operations.ts';
import { validatorCompiler } from '../../../src/platform/http/validation.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('binding');
const employee = await api.createUser(tenant.tenantId);
const colleague = await api.createUser(tenant.tenantId);
const viewer = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
const FORBIDDEN_VIEW = 'This requires the permission "users.view".';

t.test("unless-self: one's own user needs no permission", async (t) => {
  const own = await api.call(t, 'getUser', { token: employee.token, params: { user: employee.id } });
  t.equal(own.status, 200);
  t.equal(own.body.id, employee.id);
});

t.test('unless-self: another user needs the permission, and the refusal names it', async (t) => {
  const other = await api.call(t, 'getUser', { token: employee.token, params: { user: colleague.id } });
  t.equal(other.status, 403);
  t.equal(other.body.detail, FORBIDDEN_VIEW);
  const allowed = await api.call(t, 'getUser', { token: viewer.token, params: { user: colleague.id } });
  t.equal(allowed.status, 200);
  t.equal(allowed.body.id, colleague.id);
});

t.test('unless-self: a missing user is a 403 too without the permission (nothing tells it apart), a 404 with it', async (t) => {
  const missing = await api.call(t, 'getUser', { token: employee.token, params: { user: 987654 } });
  t.equal(missing.status, 403);
  t.equal(missing.body.detail, FORBIDDEN_VIEW);
  t.equal((await api.call(t, 'getUser', { token: viewer.token, params: { user: 987654 } })).status, 404);
});

t.test('unless-self: 401 comes first', async (t) => {
  t.equal((await api.call(t, 'getUser', { params: { user: colleague.id } })).status, 401);
  t.equal((await api.call(t, 'getUser', { token: 'not-a-valid-token-at-all', params: { user: colleague.id } })).status, 401);
});

t.test("unless-self: an invalid request is a 422 whoever's record it names", async (t) => {
  const badPath = await api.call(t, 'getUser', { token: employee.token, params: { user: '1e3' } });
  t.equal(badPath.status, 422);
  const badQuery = await api.call(t, 'getUser', { token: employee.token, params: { user: colleague.id }, query: { selects: 'x'.repeat(2001) } });
  t.equal(badQuery.status, 422);
  t.ok(badQuery.body.errors, JSON.stringify(badQuery.body));
});

t.test('unless-self: what the operation judges itself comes after the 403', async (t) => {
  // An unknown field in `selects` is the operation's own 422 (result controls): a caller
  // without the permission learns nothing of another user's fields.
  const other = await api.call(t, 'getUser', { token: employee.token, params: { user: colleague.id }, query: { selects: 'no_such_field' } });
  t.equal(other.status, 403);
  const own = await api.call(t, 'getUser', { token: employee.token, params: { user: employee.id }, query: { selects: 'no_such_field' } });
  t.equal(own.status, 422);
});

t.test('a plain permission is refused before the body is read or validated', async (t) => {
  const invalid = await api.call(t, 'createUser', { token: employee.token, body: { username: 5 } });
  t.equal(invalid.status, 403);
  t.equal(invalid.body.detail, 'This requires the permission "users.administer".');
  const malformed = await api.call(t, 'createUser', { token: employee.token, payload: '{"username":', contentType: 'application/json' });
  t.equal(malformed.status, 403);
  const none = await api.call(t, 'createUser', { token: employee.token });
  t.equal(none.status, 403);
  t.equal((await api.call(t, 'createUser', { body: { username: 5 } })).status, 401, '401 before it');
});

t.test('updating another user: an invalid body is a 422 before the 403', async (t) => {
  const invalid = await api.call(t, 'updateUser', { token: employee.token, params: { user: colleague.id }, body: { city: 5 } });
  t.equal(invalid.status, 422);
  t.ok(invalid.body.errors?.city, JSON.stringify(invalid.body));
  const valid = await api.call(t, 'updateUser', { token: employee.token, params: { user: colleague.id }, body: { city: 'Bonn' } });
  t.equal(valid.status, 403);
});

t.test('the binding enforces unless-self by itself: an operation that checks nothing is still guarded', async (t) => {
  // The real spec, services and hooks; only getUser is replaced by one that answers anyone.
  const reached: number[] = [];
  const answersAnyone: Handlers['getUser'] = async ({ params }) => {
    reached.push(params.user);
    return { status: 200, body: { id: params.user } };
  };
  const app = Fastify({ logger: false });
  app.setValidatorCompiler(validatorCompiler);
  registerErrorHandling(app);
  registerJsonBodies(app);
  await registerOperations(app, { ...handlers, getUser: answersAnyone }, api.atrium.services);
  t.teardown(() => app.close());
  const get = (token: string, user: number | string) => app.inject({ method: 'GET', url: `/api/users/${user}`, headers: { authorization: `Bearer ${token}` } });

  const other = await get(employee.token, colleague.id);
  t.equal(other.statusCode, 403);
  t.equal(other.json().detail, FORBIDDEN_VIEW);
  t.strictSame(reached, [], 'the operation never ran');
  t.equal((await get(employee.token, '1e3')).statusCode, 422, 'validation before it');
  t.equal((await get(employee.token, employee.id)).statusCode, 200);
  t.equal((await get(viewer.token, colleague.id)).statusCode, 200);
  t.strictSame(reached, [employee.id, colleague.id], "reached for one's own user and with the permission");
});
