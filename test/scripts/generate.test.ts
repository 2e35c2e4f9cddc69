/**
 * How scripts/generate.ts reads `x-permission` into generated/operations.ts: the two forms,
 * and every declaration the binding could not enforce as written refused at generation.
 */
import t from 'tap';
import { operationEntry, permissionRule } from '../../scripts/generate.ts';

t.test('no x-permission: any signed-in user', async (t) => {
  t.strictSame(permissionRule('listThings', '/api/things', true, undefined), { permission: null, unlessSelf: null });
  t.strictSame(permissionRule('getLiveness', '/health/live', false, undefined), { permission: null, unlessSelf: null });
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

t.test('each operation is one line of the map, with both parts of its rule', async (t) => {
  t.equal(
    operationEntry('getThing', 'get', '/api/things/{user}', true, { permission: 'users.view', unlessSelf: 'user' }, false),
    "  getThing: { method: 'GET', path: '/api/things/{user}', secured: true, permission: 'users.view', unlessSelf: 'user', extension: false },",
  );
  t.equal(
    operationEntry('getLiveness', 'get', '/health/live', false, { permission: null, unlessSelf: null }, true),
    "  getLiveness: { method: 'GET', path: '/health/live', secured: false, permission: null, unlessSelf: null, extension: true },",
  );
});
