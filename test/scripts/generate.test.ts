/**
 * How scripts/generate.ts reads `x-permission`, an operation's deprecation and
 * `x-atrium-served-by` into generated/operations.ts: the forms each may take, and every
 * declaration the binding could not enforce as written refused at generation.
 */
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { deprecationOf, operationEntry, permissionRule, servedEntry, servingService, unreferencedPathItems } from '../../scripts/generate.ts';

t.test('x-permission none: any signed-in user; none at all only without an access token', async (t) => {
  t.strictSame(permissionRule('listThings', '/api/things', true, 'none'), { permission: null, unlessSelf: null });
  t.strictSame(permissionRule('getLiveness', '/health/live', false, undefined), { permission: null, unlessSelf: null });
  // Left out, an operation with an access token would be open to every signed-in user without anyone choosing it.
  t.throws(() => permissionRule('listThings', '/api/things', true, undefined), {
    message: /^listThings: x-permission is missing: .* says none when any signed-in user may call it/,
  });
  t.throws(() => permissionRule('getLiveness', '/health/live', false, 'none'), { message: /needs no access token/ });
});

t.test('a permission key', async (t) => {
  t.strictSame(permissionRule('createThing', '/api/things', true, 'users.administer'), { permission: 'users.administer', unlessSelf: null });
});

t.test('the unless-self form names a permission and a path parameter', async (t) => {
  t.strictSame(permissionRule('getThing', '/api/things/{user}', true, { permission: 'users.view', 'unless-self': 'user' }), {
    permission: 'users.view',
    unlessSelf: 'user',
  });
  t.strictSame(permissionRule('markThing', '/api/things/logout/{user}', true, { 'unless-self': 'user', permission: 'users.administer' }), {
    permission: 'users.administer',
    unlessSelf: 'user',
  });
});

t.test('declarations the binding could not enforce are refused', async (t) => {
  const refused = (route: string, secured: boolean, value: unknown, why: RegExp) =>
    t.throws(() => permissionRule('op', route, secured, value), { message: why }, JSON.stringify(value));
  refused('/api/things', true, 'users.anything', /op: x-permission names "users\.anything", which is not a permission key/);
  refused('/api/things', true, '', /not a permission key/);
  refused('/api/things', true, ['users.view'], /must be a permission key or \{ permission, unless-self \}/);
  refused('/api/things', true, 42, /must be a permission key or/);
  refused('/api/things/{user}', true, { permission: 'users.view' }, /exactly the keys permission and unless-self \(got permission\)/);
  refused('/api/things/{user}', true, { key: 'users.view', 'unless-self': 'user' }, /exactly the keys permission and unless-self/);
  refused('/api/things/{user}', true, { permission: 'users.view', unlessSelf: 'user' }, /exactly the keys/);
  refused('/api/things/{user}', true, { permission: 'users.views', 'unless-self': 'user' }, /"users\.views", which is not a permission key/);
  refused('/api/things/{user}', true, { 'unless-self': 'user' }, /names undefined, which is not a permission key/);
  refused(
    '/api/things/{thing}',
    true,
    { permission: 'users.view', 'unless-self': 'user' },
    /unless-self must name a parameter of the path \/api\/things\/\{thing\}/,
  );
  refused('/api/things', true, { permission: 'users.view', 'unless-self': 'user' }, /must name a parameter of the path/);
  refused('/users/{user}/picture', false, 'users.view', /needs no access token/);
  refused('/users/{user}/picture', false, { permission: 'users.view', 'unless-self': 'user' }, /needs no access token/);
});

t.test('a deprecated operation: both dates, the sunset at least 180 days after', async (t) => {
  t.equal(deprecationOf('listThings', undefined, undefined, undefined), null);
  t.equal(deprecationOf('listThings', false, undefined, undefined), null);
  t.strictSame(deprecationOf('listThings', true, '2027-01-15', '2027-07-14'), { since: '2027-01-15', sunset: '2027-07-14' }, 'exactly 180 days');
  t.strictSame(deprecationOf('listThings', true, '2027-01-15', '2028-01-15'), { since: '2027-01-15', sunset: '2028-01-15' });
});

t.test('deprecations the headers could not state as written are refused', async (t) => {
  const refused = (deprecated: unknown, since: unknown, sunset: unknown, why: RegExp) =>
    t.throws(() => deprecationOf('op', deprecated, since, sunset), { message: why }, JSON.stringify([deprecated, since, sunset]));
  refused(true, undefined, undefined, /op: a deprecated operation needs x-deprecated-since, a date written YYYY-MM-DD \(got undefined\)/);
  refused(true, '2027-01-15', undefined, /needs x-sunset/);
  refused(true, undefined, '2027-12-31', /needs x-deprecated-since/);
  refused(true, '2027-01-15', '2027-02-30', /needs x-sunset, a date .* \(got "2027-02-30"\)/);
  refused(true, '2027-1-15', '2027-12-31', /needs x-deprecated-since/);
  refused(true, '2027-01-15T00:00:00.000Z', '2027-12-31', /needs x-deprecated-since/);
  refused(true, 20270115, '2027-12-31', /needs x-deprecated-since/);
  refused(true, '2027-01-15', '2027-07-13', /x-sunset must be at least 180 days after x-deprecated-since \(it is 179\)/);
  refused(true, '2027-07-15', '2027-01-15', /at least 180 days after .*it is -181/);
  refused(undefined, '2027-01-15', '2027-12-31', /op: x-deprecated-since and x-sunset belong to an operation marked deprecated: true/);
  refused(false, undefined, '2027-12-31', /belong to an operation marked deprecated: true/);
  refused('yes', undefined, undefined, /deprecated must be true or false \(got "yes"\)/);
});

t.test('each operation is one line of the map, with both parts of its rule and its deprecation', async (t) => {
  t.equal(
    operationEntry('getThing', 'get', '/api/things/{user}', true, { permission: 'users.view', unlessSelf: 'user' }, false, null),
    "  getThing: { method: 'GET', path: '/api/things/{user}', secured: true, permission: 'users.view', unlessSelf: 'user', extension: false, deprecation: null },",
  );
  t.equal(
    operationEntry('getLiveness', 'get', '/health/live', false, { permission: null, unlessSelf: null }, true, { since: '2027-01-15', sunset: '2027-07-15' }),
    "  getLiveness: { method: 'GET', path: '/health/live', secured: false, permission: null, unlessSelf: null, extension: true, " +
      "deprecation: { since: '2027-01-15', sunset: '2027-07-15' } },",
  );
});

t.test('x-atrium-served-by: absent, the binding serves the operation; scim, the SCIM service does', async (t) => {
  const none = { permission: undefined, deprecated: undefined };
  t.equal(servingService('listThings', undefined, none), null);
  t.equal(servingService('listScimUsers', 'scim', none), 'scim');
  t.equal(servingService('listScimUsers', 'scim', { permission: undefined, deprecated: false }), 'scim');
  t.equal(
    servedEntry('listScimUsers', 'get', '/scim/v2/Users', 'scim', true),
    "  listScimUsers: { method: 'GET', path: '/scim/v2/Users', service: 'scim', extension: true },",
  );
});

t.test('x-atrium-served-by refuses an unknown service, and what only the binding would enforce', async (t) => {
  const none = { permission: undefined, deprecated: undefined };
  const refused = (value: unknown, declarations: { permission: unknown; deprecated: unknown }, why: RegExp) =>
    t.throws(() => servingService('op', value, declarations), { message: why }, JSON.stringify([value, declarations]));
  refused('SCIM', none, /op: x-atrium-served-by names "SCIM", not one of scim/);
  refused(true, none, /x-atrium-served-by names true/);
  refused('', none, /x-atrium-served-by names ""/);
  refused('scim', { permission: 'users.administer', deprecated: undefined }, /op: x-permission is set, but the scim service serves the operation/);
  refused('scim', { permission: undefined, deprecated: true }, /op: deprecated is set, but the scim service .* sends no Deprecation or Sunset header/);
});

t.test('a path item openapi.yaml does not reference is refused; shared schemas and parameters in path files are not path items', async (t) => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'atrium-generate-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(path.join(root, 'openapi/paths'), { recursive: true });
  writeFileSync(path.join(root, 'openapi/openapi.yaml'), 'paths:\n  /api/things:\n    $ref: paths/things.yaml#/collection\n');
  writeFileSync(
    path.join(root, 'openapi/paths/things.yaml'),
    [
      'collection:',
      '  get:',
      '    operationId: listThings',
      'names:',
      '  get:',
      '    operationId: listThingNames',
      'col:',
      '  get:',
      '    operationId: listCols',
      'ThingParameter:',
      '  name: thing',
      '  in: path',
      'Thing:',
      '  type: object',
      '',
    ].join('\n'),
  );
  // `col` is a prefix of the referenced `collection`: still not referenced.
  t.strictSame(unreferencedPathItems(root), ['openapi/paths/things.yaml#/names', 'openapi/paths/things.yaml#/col']);
  t.strictSame(unreferencedPathItems(path.resolve('.')), [], "the repository's own spec references every path item");
});
