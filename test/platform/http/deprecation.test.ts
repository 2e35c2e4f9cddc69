/**
 * A deprecated operation's answers carry `Deprecation` and `Sunset`
 * (docs/api-versions.md#deprecation): the dates of its `x-deprecated-since` and `x-sunset`,
 * as scripts/generate.ts writes them into generated/operations.ts, on every answer of that
 * operation, refusals included, and on no other operation's.
 */
import Fastify from 'fastify';
import t from 'tap';
import { operations } from '../../../generated/operations.ts';
import { handlers } from '../../../src/handlers.ts';
import { registerErrorHandling } from '../../../src/platform/http/error-handler.ts';
import { registerJsonBodies } from '../../../src/platform/http/json-body.ts';
import { deprecationHeaders, registerOperations, type Deprecation } from '../../../src/platform/http/operations.ts';
import { validatorCompiler } from '../../../src/platform/http/validation.ts';
import { startTestApi } from '../../helpers/atrium.ts';

t.test('the header values: an RFC 9745 date and an RFC 8594 HTTP date, at midnight UTC', async (t) => {
  t.strictSame(deprecationHeaders({ since: '2027-01-15', sunset: '2027-07-15' }), {
    deprecation: '@1799971200',
    sunset: 'Thu, 15 Jul 2027 00:00:00 GMT',
  });
  t.equal(new Date(1_799_971_200_000).toISOString(), '2027-01-15T00:00:00.000Z');
});

t.test('the binding answers a deprecated operation with both headers, and no other', async (t) => {
  const api = await startTestApi(t);
  const tenant = await api.createTenant('deprecation');
  const user = await api.createUser(tenant.tenantId);

  const current = await api.call(t, 'getCurrentUser', { token: user.token });
  t.equal(current.status, 200);
  t.equal(current.headers.deprecation, undefined, 'the spec deprecates no operation today');

  // The real spec, handlers, services and hooks; only getCurrentUser's entry in the
  // generated map is marked deprecated, as `npm run generate` would mark it.
  const entry = operations.getCurrentUser as { deprecation: Deprecation | null };
  entry.deprecation = { since: '2027-01-15', sunset: '2027-07-15' };
  t.teardown(() => {
    entry.deprecation = null;
  });
  const app = Fastify({ logger: false });
  app.setValidatorCompiler(validatorCompiler);
  registerErrorHandling(app);
  registerJsonBodies(app);
  await registerOperations(app, handlers, api.atrium.services);
  t.teardown(() => app.close());
  const get = (url: string, token?: string) => app.inject({ method: 'GET', url, headers: token ? { authorization: `Bearer ${token}` } : {} });

  const answered = await get('/api/users/current', user.token);
  t.equal(answered.statusCode, 200);
  t.equal(answered.json().id, user.id);
  t.equal(answered.headers.deprecation, '@1799971200');
  t.equal(answered.headers.sunset, 'Thu, 15 Jul 2027 00:00:00 GMT');

  const refused = await get('/api/users/current');
  t.equal(refused.statusCode, 401);
  t.equal(refused.headers.deprecation, '@1799971200', 'a refusal carries them too');
  t.equal(refused.headers.sunset, 'Thu, 15 Jul 2027 00:00:00 GMT');

  const other = await get('/api/departments', user.token);
  t.equal(other.statusCode, 200);
  t.equal(other.headers.deprecation, undefined, 'an operation that is not deprecated');
  t.equal(other.headers.sunset, undefined);
});
