import t from 'tap';
import { readFileSync } from 'node:fs';
import { sql, type SQL } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { backdateUpdatedAt, createDepartment, rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('menus');
const other = await api.createTenant('menus-other');
const admin = tenant.adminToken;

type Tt = Parameters<typeof api.call>[0];
const base = { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Wiki', link: 'https://wiki.example.com/' };
const create = (tt: Tt, body: Record<string, unknown>, token = admin) => api.call(tt, 'createMenuItem', { token, body: { ...base, ...body } });
/** One integer from the database as the owner (assertions bypass tenancy). */
const scalar = async (query: SQL) => (await api.db.owner.execute<{ value: number }>(query))[0]!.value;
const itemCount = () => rowCount(api.db, 'menu_items');
const permissionCount = () => rowCount(api.db, 'entity_permissions');
const ids = (rows: { id: number }[]) => rows.map((row) => row.id);

t.test('bad create input is a 422 naming the field, and nothing is stored', async (t) => {
  const foreignUser = await api.createUser(other.tenantId);
  const foreignRole = await scalar(sql`select id::int as value from roles where tenant_id = ${other.tenantId} limit 1`);
  const foreignDepartment = (await createDepartment(api.db, other.tenantId, 'elsewhere')).id;
  const beforeItems = await itemCount();
  const beforePermissions = await permissionCount();
  const cases: [Record<string, unknown>, string][] = [
    [{ title: undefined }, 'title'],
    [{ icon_id: '3' }, 'icon_id'],
    [{ icon_id: 1.5 }, 'icon_id'],
    [{ type: 'popup' }, 'type'],
    [{ title: '' }, 'title'],
    [{ colour: 'red' }, 'colour'],
    [{ allow_iframe_access: 'yes' }, 'allow_iframe_access'],
    [{ sort_number: -1 }, 'sort_number'],
    [{ link: 'javascript:alert(1)' }, 'link'],
    [{ link: 'data:text/html,<b>x</b>' }, 'link'],
    [{ link: '//evil.example.com/' }, 'link'],
    [{ link: '/\\evil.example.com/' }, 'link'],
    [{ link: 'https://wiki.example.com/ space' }, 'link'],
    [{ link: 'https:///evil.example.com/' }, 'link'],
    [{ link: 'https://wiki.example.com@evil.example.com/' }, 'link'],
    [{ type: 'iframe', link: 'https://{{user.username}}@evil.example.com/' }, 'link'],
    // The host would be the reader's value; an empty one leaves `https:///evil.example.com/`, opened as that host.
    [{ link: 'https://{{user.staff_number}}/evil.example.com/' }, 'link'],
    [{ link: '{{user.username}}/x' }, 'link'],
    [{ link: 'https://x.example.com/{{user.password}}' }, 'link'],
    // Named like Object members: once stored, every reader's menu answered 500.
    [{ type: 'route', link: '/x/{{__proto__}}' }, 'link'],
    [{ type: 'route', link: '/x/{{constructor}}' }, 'link'],
    [{ type: 'route', link: '/x/{{__defineGetter__}}' }, 'link'],
    [{ link: 'https://x.example.com/{{user.username}' }, 'link'],
    [{ type: 'route', link: 'https://wiki.example.com/' }, 'link'],
    [{ type: 'iframe', link: 'mailto:a@example.com' }, 'link'],
    [{ lang_id: 'xx-XX' }, 'lang_id'],
    [{ entity_permissions: { user_ids: [999999] } }, 'entity_permissions.user_ids.0'],
    [{ entity_permissions: { user_ids: [tenant.adminUserId, foreignUser.id] } }, 'entity_permissions.user_ids.1'],
    [{ entity_permissions: { role_ids: [foreignRole] } }, 'entity_permissions.role_ids.0'],
    [{ entity_permissions: { department_ids: [foreignDepartment] } }, 'entity_permissions.department_ids.0'],
    [{ entity_permissions: { role_ids: [0] } }, 'entity_permissions.role_ids.0'],
    [{ entity_permissions: { groups: [1] } }, 'entity_permissions.groups'],
    [{ entity_permissions: [] }, 'entity_permissions'],
  ];
  for (const [change, field] of cases) {
    const body = { ...base, ...change };
    const res = await api.call(t, 'createMenuItem', { token: admin, body });
    t.equal(res.status, 422, JSON.stringify(change));
    t.ok(res.body.errors?.[field], `errors names ${field}: ${JSON.stringify(res.body.errors)}`);
  }
  const malformed = await api.call(t, 'createMenuItem', { token: admin, payload: '{"title":', contentType: 'application/json' });
  t.equal(malformed.status, 400);
  t.equal(await itemCount(), beforeItems, 'no item stored');
  t.equal(await permissionCount(), beforePermissions, 'no permission stored');
});

t.test('administration routes need menu-items.administer; user routes are open to every signed-in user', async (t) => {
  const employee = await api.createUser(tenant.tenantId);
  const token = employee.token;
  t.equal((await api.call(t, 'listAdministeredMenuItems', { token })).status, 403);
  t.equal((await api.call(t, 'getAdministeredMenuItem', { token, params: { menuItem: 1 } })).status, 403);
  t.equal((await create(t, {}, token)).status, 403);
  t.equal((await api.call(t, 'updateMenuItem', { token, params: { menuItem: 1 }, body: { title: 'x' } })).status, 403);
  t.equal((await api.call(t, 'deleteMenuItem', { token, params: { menuItem: 1 } })).status, 403);
  t.equal((await api.call(t, 'listMenuItems', { token })).status, 200);
  t.equal((await api.call(t, 'listMenuItems', {})).status, 401);
});

t.test('create applies the defaults: system language, next sort number, unrestricted, computed iframe_access', async (t) => {
  const first = await create(t, { menu_identifier: 'defaults' });
  t.equal(first.status, 201);
  t.equal(first.body.lang_id, 'en-US', 'the system language');
  t.equal(first.body.allow_iframe_access, true);
  t.equal(first.body.iframe_access, true, 'https and allowed');
  t.equal(first.body.user_confirmation_required, false);
  t.strictSame(first.body.entity_permissions, { user_ids: [], role_ids: [], department_ids: [] });
  t.equal(first.body.deleted_at, null);
  const second = await create(t, { menu_identifier: 'defaults', lang_id: 'de-DE' });
  t.equal(second.body.sort_number, first.body.sort_number + 1, 'last + 1');
  t.equal(second.body.lang_id, 'de-DE');
  const explicit = await create(t, { sort_number: 500 });
  t.equal(explicit.body.sort_number, 500);
  const next = await create(t, {});
  t.equal(next.body.sort_number, 501, 'after the highest');
  // The largest sort number taken: the next ones share it, instead of failing for the whole tenant.
  const largest = await create(t, { sort_number: 2147483647 });
  t.equal(largest.status, 201);
  const after = await create(t, {});
  t.equal(after.status, 201);
  t.equal(after.body.sort_number, 2147483647, 'the largest, shared');
  // Sort numbers are per tenant.
  const foreign = await create(t, {}, other.adminToken);
  t.equal(foreign.body.sort_number, 1);
});

t.test('iframe_access: only when allowed and the link is an https URL or a same-origin path', async (t) => {
  const cases: [Record<string, unknown>, boolean][] = [
    [{ link: 'https://app.example.com/x' }, true],
    [{ link: '/reports/weekly' }, true],
    [{ link: 'http://legacy.example.com/' }, false],
    [{ link: 'mailto:help@example.com' }, false],
    [{ link: 'tel:+4930123456' }, false],
    [{ link: 'https://app.example.com/x', allow_iframe_access: false }, false],
    [{ type: 'iframe', link: 'https://app.example.com/embed' }, true],
    [{ type: 'route', link: '/tasks' }, true],
  ];
  for (const [change, expected] of cases) {
    const res = await create(t, change);
    t.equal(res.status, 201, JSON.stringify(change));
    t.equal(res.body.iframe_access, expected, JSON.stringify(change));
  }
  const item = await create(t, { link: 'https://app.example.com/' });
  const params = { menuItem: item.body.id };
  const toHttp = await api.call(t, 'updateMenuItem', { token: admin, params, body: { link: 'http://app.example.com/' } });
  t.equal(toHttp.body.iframe_access, false, 'recomputed when the link changes');
  const back = await api.call(t, 'updateMenuItem', { token: admin, params, body: { link: 'https://app.example.com/' } });
  t.equal(back.body.iframe_access, true);
  const disallowed = await api.call(t, 'updateMenuItem', { token: admin, params, body: { allow_iframe_access: false } });
  t.equal(disallowed.body.iframe_access, false, 'recomputed when the preference changes');
});

t.test('placeholders are resolved for the caller on the user routes; administration sees the template', async (t) => {
  const reader = await api.createUser(tenant.tenantId, { username: 'jane&co', values: { email: 'jane@example.com', firstName: 'Jane' } });
  const template = 'https://intranet.example.com/u/{{user.username}}?mail={{ user.email }}&id={{user.id}}&n={{user.full_name}}&s={{user.staff_number}}';
  const item = await create(t, { link: template, menu_identifier: 'placeholders' });
  t.equal(item.status, 201);
  t.equal(item.body.link, template);
  const mine = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: item.body.id } });
  t.equal(mine.status, 200);
  t.equal(mine.body.link, `https://intranet.example.com/u/jane%26co?mail=jane%40example.com&id=${reader.id}&n=Jane%20jane%26co&s=`);
  t.equal(mine.body.iframe_access, true);
  t.notOk('entity_permissions' in mine.body, 'user routes hide the restriction');
  t.notOk('deleted_at' in mine.body);
  const listed = await api.call(t, 'listMenuItems', { token: reader.token });
  t.equal(listed.body.find((row: { id: number }) => row.id === item.body.id).link, mine.body.link);
  const administered = await api.call(t, 'getAdministeredMenuItem', { token: admin, params: { menuItem: item.body.id } });
  t.equal(administered.body.link, template);
});

t.test("a user's values cannot change where a resolved link leads", async (t) => {
  const reader = await api.createUser(tenant.tenantId, { values: { staffNumber: null } });
  // The administrator may name a user `..`: a link with the username as a path segment must not climb out of it.
  const renamed = await api.call(t, 'updateUser', { token: admin, params: { user: reader.id }, body: { username: '..' } });
  t.equal(renamed.status, 200);
  const profile = await create(t, { link: 'https://wiki.example.com/people/{{user.username}}/private', menu_identifier: 'dots' });
  t.equal(profile.status, 201);
  const mine = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: profile.body.id } });
  t.equal(mine.status, 200);
  t.equal(new URL(mine.body.link).pathname, '/people//private', `${mine.body.link} stays under /people/`);
  // An absent value opening a route's path must not turn it into `//host`, which a browser opens as another host.
  const route = await create(t, { type: 'route', link: '/{{user.staff_number}}/evil.example/x', menu_identifier: 'absent' });
  t.equal(route.status, 201);
  const resolved = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: route.body.id } });
  t.equal(resolved.status, 200);
  t.notOk(resolved.body.link.startsWith('//'), `${resolved.body.link} is a same-origin path`);
  t.equal(new URL(resolved.body.link, 'https://atrium.example.com/').host, 'atrium.example.com');
  t.equal(resolved.body.iframe_access, true, 'still a same-origin path, so embeddable');
  const listed = await api.call(t, 'listMenuItems', { token: reader.token });
  t.equal(listed.body.find((row: { id: number }) => row.id === route.body.id).link, resolved.body.link);
  // A host of placeholders alone, stored before it was refused: the reader's empty value leaves no host, and
  // `https:///evil.example/x` is opened as the host evil.example. The reader gets no link.
  const hostless = await create(t, { link: 'https://wiki.example.com/', menu_identifier: 'hostless' });
  t.equal(hostless.status, 201);
  await api.db.owner.execute(sql`update menu_items set link = 'https://{{user.staff_number}}/evil.example/x' where id = ${hostless.body.id}`);
  const noLink = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: hostless.body.id } });
  t.equal(noLink.status, 200);
  t.equal(noLink.body.link, '', 'no link rather than another host');
  t.equal(noLink.body.iframe_access, false, 'and nothing to embed');
  const listedNoLink = await api.call(t, 'listMenuItems', { token: reader.token });
  t.equal(listedNoLink.body.find((row: { id: number }) => row.id === hostless.body.id).link, '');
  // So with a dot after the placeholder (`https://{{user.staff_number}}./x`): the empty value leaves `https://./x`.
  const dotted = await create(t, { link: 'https://wiki.example.com/', menu_identifier: 'dotted-host' });
  t.equal(dotted.status, 201);
  await api.db.owner.execute(sql`update menu_items set link = 'https://{{user.staff_number}}./x' where id = ${dotted.body.id}`);
  const dottedNoLink = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: dotted.body.id } });
  t.equal(dottedNoLink.status, 200);
  t.strictSame([dottedNoLink.body.link, dottedNoLink.body.iframe_access], ['', false], 'no link, and nothing to embed');
  const listedDotted = await api.call(t, 'listMenuItems', { token: reader.token });
  t.equal(listedDotted.body.find((row: { id: number }) => row.id === dotted.body.id).link, '');
  for (const item of [profile, route, hostless, dotted])
    t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem: item.body.id } })).status, 204);
});

t.test('a resolved link may be longer than its template: the answer still matches the spec', async (t) => {
  // Percent-encoding a value of three-byte characters writes nine characters for each.
  const reader = await api.createUser(tenant.tenantId, { values: { firstName: '\u4e2d'.repeat(200), lastName: '\u6587'.repeat(200) } });
  const template = `https://intranet.example.com/p?${Array.from({ length: 8 }, (_, i) => `n${i}={{user.full_name}}`).join('&')}`;
  const item = await create(t, { link: template, menu_identifier: 'long-resolved' });
  t.equal(item.status, 201);
  // api.call checks every answer against the operation's response schema.
  const mine = await api.call(t, 'getMenuItem', { token: reader.token, params: { menuItem: item.body.id } });
  t.equal(mine.status, 200);
  t.ok(mine.body.link.length > 2048, `resolved to ${mine.body.link.length} characters from ${template.length}`);
  t.equal(decodeURIComponent(new URL(mine.body.link).searchParams.get('n7')!), `${'\u4e2d'.repeat(200)} ${'\u6587'.repeat(200)}`);
  const listed = await api.call(t, 'listMenuItems', { token: reader.token });
  t.equal(listed.status, 200);
  t.equal(listed.body.find((row: { id: number }) => row.id === item.body.id).link, mine.body.link);
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem: item.body.id } })).status, 204);
});

t.test("a link may carry only the user fields its author may read: it sends every reader's values to its target", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: ['menu-items.administer'] });
  const reader = await api.createUser(tenant.tenantId, { permissions: ['menu-items.administer', 'users.view'] });
  const before = await itemCount();
  const harvest = (placeholder: string) => `https://collector.example.net/c?v={{${placeholder}}}`;
  for (const placeholder of ['user.email', 'user.staff_number', 'user.username', 'user.id', ' user.full_name ']) {
    const res = await create(t, { link: harvest(placeholder) }, delegate.token);
    t.equal(res.status, 422, `${placeholder} without users.view`);
    t.match(res.body.errors?.link?.[0], /users\.view/, 'names the permission it needs');
  }
  const email = await create(t, { link: harvest('user.email') }, reader.token);
  t.equal(email.status, 422, 'users.view alone does not open e-mail addresses');
  t.match(email.body.errors?.link?.[0], /users\.view-personal/);
  const staff = await create(t, { type: 'iframe', link: harvest('user.staff_number') }, reader.token);
  t.equal(staff.status, 422);
  t.match(staff.body.errors?.link?.[0], /users\.view-administrative/);
  t.equal(await itemCount(), before, 'nothing stored');
  t.equal((await create(t, { link: harvest('user.username') }, reader.token)).status, 201, 'public user fields with users.view');
  t.equal((await create(t, { link: 'https://wiki.example.com/plain' }, delegate.token)).status, 201, 'links without placeholders need nothing more');

  const byAdmin = await create(t, { link: harvest('user.email'), title: 'Mail' });
  t.equal(byAdmin.status, 201, 'an administrator holding the permissions');
  const redirect = await api.call(t, 'updateMenuItem', {
    token: delegate.token,
    params: { menuItem: byAdmin.body.id },
    body: { link: 'https://elsewhere.example.net/?m={{user.email}}' },
  });
  t.equal(redirect.status, 422, 'a delegate cannot point the link (and its placeholders) elsewhere');
  t.equal(
    (await api.call(t, 'getAdministeredMenuItem', { token: admin, params: { menuItem: byAdmin.body.id } })).body.link,
    harvest('user.email'),
    'unchanged',
  );
  const renamed = await api.call(t, 'updateMenuItem', {
    token: delegate.token,
    params: { menuItem: byAdmin.body.id },
    body: { title: 'Mail (renamed)', link: harvest('user.email') },
  });
  t.equal(renamed.status, 200, 'other keys, and the link sent back unchanged, are fine');
});

t.test("who sees a link with placeholders is changed only by a caller who could have written them: the audience receives each reader's values", async (t) => {
  const author = await api.createUser(tenant.tenantId, { permissions: ['menu-items.administer', 'users.view', 'users.view-personal'] });
  const plain = await api.createUser(tenant.tenantId, { permissions: ['menu-items.administer'] });
  const reader = await api.createUser(tenant.tenantId, { values: { email: 'reader@corp.test' } });
  const readerRole = await scalar(sql`select role_id::int as value from users where id = ${reader.id}`);
  const link = 'https://collector.example.net/?e={{user.email}}';
  const item = await create(t, { title: 'Collector', link, entity_permissions: { user_ids: [author.id] } }, author.token);
  t.equal(item.status, 201);
  const params = { menuItem: item.body.id };
  const update = (body: Record<string, unknown>, token = plain.token) => api.call(t, 'updateMenuItem', { token, params, body });
  const readerSees = async () => ids((await api.call(t, 'listMenuItems', { token: reader.token })).body).includes(item.body.id);

  for (const entity_permissions of [{ role_ids: [readerRole] }, {}, { user_ids: [author.id, reader.id] }, { user_ids: [reader.id] }]) {
    const widened = await update({ entity_permissions });
    t.equal(widened.status, 422, `audience ${JSON.stringify(entity_permissions)} refused`);
    t.match(widened.body.errors?.entity_permissions?.[0], /user\.email.*users\.view/, 'names the placeholder and the permissions it needs');
  }
  const retitled = await update({ entity_permissions: { user_ids: [author.id] }, title: 'Collector (renamed)', link });
  t.equal(retitled.status, 200, 'the audience and link sent back unchanged, and other keys, are fine');
  t.strictSame(retitled.body.entity_permissions, { user_ids: [author.id], role_ids: [], department_ids: [] });
  t.notOk(await readerSees(), 'the reader still does not see the item, nor send their e-mail address to its target');

  const byAuthor = await update({ entity_permissions: { role_ids: [readerRole] } }, author.token);
  t.equal(byAuthor.status, 200, 'a caller who may read the fields widens the audience');
  t.ok(await readerSees());
  const narrowed = await update({ entity_permissions: { user_ids: [author.id] } });
  t.equal(narrowed.status, 422, 'any change of the audience, narrowing included');
  t.equal((await update({ link: 'https://wiki.example.com/plain', entity_permissions: {} })).status, 200, 'without placeholders, the item is like any other');
});

t.test('visibility follows entity permissions: user, role or department; unrestricted by default', async (t) => {
  const named = await api.createUser(tenant.tenantId);
  const roleHolder = await api.createUser(tenant.tenantId);
  const member = await api.createUser(tenant.tenantId);
  const outsider = await api.createUser(tenant.tenantId);
  const roleId = await scalar(sql`select role_id::int as value from users where id = ${roleHolder.id}`);
  const department = (await createDepartment(api.db, tenant.tenantId, 'visibility', [member.id])).id;

  const open = await create(t, { menu_identifier: 'visibility' });
  const forUser = await create(t, { menu_identifier: 'visibility', entity_permissions: { user_ids: [named.id] } });
  const forRole = await create(t, { menu_identifier: 'visibility', entity_permissions: { role_ids: [roleId] } });
  const forDepartment = await create(t, { menu_identifier: 'visibility', entity_permissions: { department_ids: [department] } });
  const forAny = await create(t, { menu_identifier: 'visibility', entity_permissions: { user_ids: [outsider.id], department_ids: [department] } });
  t.strictSame(forAny.body.entity_permissions, { user_ids: [outsider.id], role_ids: [], department_ids: [department] });
  const mine = [open, forUser, forRole, forDepartment, forAny].map((res) => res.body.id);

  const visible = async (token: string) => ids((await api.call(t, 'listMenuItems', { token })).body).filter((id) => mine.includes(id));
  t.strictSame(await visible(named.token), [open.body.id, forUser.body.id]);
  t.strictSame(await visible(roleHolder.token), [open.body.id, forRole.body.id]);
  t.strictSame(await visible(member.token), [open.body.id, forDepartment.body.id, forAny.body.id]);
  t.strictSame(await visible(outsider.token), [open.body.id, forAny.body.id]);
  t.equal((await api.call(t, 'getMenuItem', { token: outsider.token, params: { menuItem: forUser.body.id } })).status, 404, 'hidden = missing');
  t.equal((await api.call(t, 'getMenuItem', { token: named.token, params: { menuItem: forUser.body.id } })).status, 200);
  const all = ids((await api.call(t, 'listAdministeredMenuItems', { token: admin })).body);
  t.ok(
    mine.every((id) => all.includes(id)),
    'administration sees every item',
  );
});

t.test('lists cost a constant number of queries, however many items and restrictions', async (t) => {
  const reader = await api.createUser(tenant.tenantId);
  const count = async (operationId: 'listMenuItems' | 'listAdministeredMenuItems', token: string) => {
    const before = api.db.queryCount;
    const res = await api.call(t, operationId, { token, query: { relations: 'language' } });
    t.equal(res.status, 200);
    return api.db.queryCount - before;
  };
  const userQueries = await count('listMenuItems', reader.token);
  const adminQueries = await count('listAdministeredMenuItems', admin);
  for (let i = 0; i < 6; i++) await create(t, { entity_permissions: { user_ids: [reader.id], role_ids: [] } });
  t.equal(await count('listMenuItems', reader.token), userQueries);
  t.equal(await count('listAdministeredMenuItems', admin), adminQueries);
});

t.test('soft-deleted items leave the user routes and stay in the administration list', async (t) => {
  const reader = await api.createUser(tenant.tenantId);
  const item = await create(t, { menu_identifier: 'deleted' });
  const params = { menuItem: item.body.id };
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params })).status, 204);
  t.notOk(ids((await api.call(t, 'listMenuItems', { token: reader.token })).body).includes(item.body.id));
  t.equal((await api.call(t, 'getMenuItem', { token: reader.token, params })).status, 404);
  const listed = (await api.call(t, 'listAdministeredMenuItems', { token: admin })).body.find((row: { id: number }) => row.id === item.body.id);
  t.ok(listed.deleted_at, 'listed with deleted_at');
  const shown = await api.call(t, 'getAdministeredMenuItem', { token: admin, params });
  t.equal(shown.status, 200);
  t.ok(shown.body.deleted_at);
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params })).status, 404, 'already deleted');
  t.equal((await api.call(t, 'updateMenuItem', { token: admin, params, body: { title: 'again' } })).status, 404, 'not updatable');
});

t.test('a deleted item restricts no one any more: its entity permissions go with it', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, { permissions: ['users.administer', 'users.view', 'users.view-administrative'] });
  const member = await api.createUser(tenant.tenantId);
  const department = (await createDepartment(api.db, tenant.tenantId, 'Archived audience')).id;
  const roleId = await scalar(sql`select id::int as value from roles where tenant_id = ${tenant.tenantId} and name = 'Employee'`);
  const item = await create(t, { entity_permissions: { department_ids: [department], role_ids: [roleId], user_ids: [member.id] } });
  const params = { menuItem: item.body.id };
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params })).status, 204);
  const remaining = await scalar(sql`select count(*)::int as value from entity_permissions where entity_type = 'menuItem' and entity_id = ${item.body.id}`);
  t.equal(remaining, 0, 'no entity permission of the deleted item is left');
  const shown = await api.call(t, 'getAdministeredMenuItem', { token: admin, params });
  t.strictSame(shown.body.entity_permissions, { user_ids: [], role_ids: [], department_ids: [] }, 'shown without lists');
  // The item grants nothing any more: joining its former audience confers no right the delegate lacks.
  const joiner = await api.createUser(tenant.tenantId);
  const joined = await api.call(t, 'updateUser', { token: delegate.token, params: { user: joiner.id }, body: { department_ids: [department] } });
  t.equal(joined.status, 200, 'a delegate may add a user to the former audience');
  const password = await api.call(t, 'updateUser', { token: delegate.token, params: { user: member.id }, body: { password: 'a new password for member' } });
  t.equal(password.status, 200, 'and set the password of a user the item named');
  // Nor does it keep the department: it can be deleted (it could not be named out of a deleted item).
  const deleted = await api.call(t, 'deleteDepartment', { token: admin, params: { department } });
  t.equal(deleted.status, 204, 'the department it named can be deleted');
  // Items deleted before kept theirs: the migration removes them, and only them.
  const earlier = await create(t, { entity_permissions: { user_ids: [member.id] } });
  const live = await create(t, { entity_permissions: { user_ids: [member.id] } });
  await api.db.owner.execute(sql`update menu_items set deleted_at = now() where id = ${earlier.body.id}`);
  await api.db.owner.execute(sql.raw(readFileSync(new URL('../../../drizzle/0031_deleted-menu-items-entity-permissions.sql', import.meta.url), 'utf8')));
  const left = async (id: number) => scalar(sql`select count(*)::int as value from entity_permissions where entity_type = 'menuItem' and entity_id = ${id}`);
  t.equal(await left(earlier.body.id), 0, 'the migration removes those of an item deleted before');
  t.equal(await left(live.body.id), 1, 'and keeps those of a live item');
});

t.test('update: absent keys keep their value; entity_permissions replaces the restriction', async (t) => {
  const someone = await api.createUser(tenant.tenantId);
  const item = await create(t, { title: 'Before', user_confirmation_required: true, entity_permissions: { user_ids: [someone.id] } });
  const params = { menuItem: item.body.id };
  const renamed = await api.call(t, 'updateMenuItem', { token: admin, params, body: { title: 'After' } });
  t.equal(renamed.status, 200);
  t.equal(renamed.body.title, 'After');
  t.equal(renamed.body.user_confirmation_required, true, 'kept');
  t.equal(renamed.body.sort_number, item.body.sort_number, 'kept');
  t.strictSame(renamed.body.entity_permissions.user_ids, [someone.id], 'kept when not sent');
  const opened = await api.call(t, 'updateMenuItem', { token: admin, params, body: { entity_permissions: {} } });
  t.strictSame(opened.body.entity_permissions, { user_ids: [], role_ids: [], department_ids: [] }, 'cleared');
  t.equal(await scalar(sql`select count(*)::int as value from entity_permissions where entity_type = 'menuItem' and entity_id = ${item.body.id}`), 0);
  const changedType = await api.call(t, 'updateMenuItem', { token: admin, params, body: { type: 'route' } });
  t.equal(changedType.status, 422, 'the stored https link does not suit a route');
  t.ok(changedType.body.errors.link);
  const before = (await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).body;
  for (const body of [{ lang_id: 'xx' }, { entity_permissions: { user_ids: [987654] } }, { link: 'javascript:x' }, { icon_id: null }, { id: 5 }]) {
    t.equal((await api.call(t, 'updateMenuItem', { token: admin, params, body })).status, 422, JSON.stringify(body));
  }
  t.strictSame((await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).body, before, 'nothing changed');
});

t.test('update: the stored values sent back change nothing: updated_at stays and no event is recorded', async (t) => {
  const [one, two] = [await api.createUser(tenant.tenantId), await api.createUser(tenant.tenantId)];
  const item = await create(t, { title: 'Kept', entity_permissions: { user_ids: [one.id, two.id] } });
  t.equal(item.status, 201);
  const params = { menuItem: item.body.id };
  const backdate = () => backdateUpdatedAt(api.db, 'menu_items', item.body.id);
  const past = await backdate();
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const eventsBefore = await events();
  const read = (await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).body;
  const writable = ['lang_id', 'icon_id', 'menu_identifier', 'type', 'title', 'link', 'allow_iframe_access', 'user_confirmation_required', 'sort_number'];
  const form = {
    ...Object.fromEntries(writable.map((key) => [key, read[key]])),
    // The same subjects in another order, one twice: the same restriction.
    entity_permissions: { ...read.entity_permissions, user_ids: [two.id, one.id, two.id] },
  };
  const same = await api.call(t, 'updateMenuItem', { token: admin, params, body: form });
  t.equal(same.status, 200);
  t.equal(same.body.updated_at, past, 'the item sent back as read answers the updated_at it had');
  t.strictSame(same.body, read, 'and the item as it was');
  t.equal(await events(), eventsBefore, 'and no event is recorded');
  const renamed = await api.call(t, 'updateMenuItem', { token: admin, params, body: { ...form, title: 'Renamed' } });
  t.not(renamed.body.updated_at, past, 'a change moves it');
  t.equal(await events(), eventsBefore + 1);
  await backdate();
  const narrowed = await api.call(t, 'updateMenuItem', { token: admin, params, body: { entity_permissions: { user_ids: [one.id] } } });
  t.equal(narrowed.status, 200);
  t.not(narrowed.body.updated_at, past, 'so does a change of the restriction alone');
  t.equal(await events(), eventsBefore + 2);
});

t.test('a deleted user the item names stays named: the lists sent back as read are accepted', async (t) => {
  const [kept, leaving, gone] = [await api.createUser(tenant.tenantId), await api.createUser(tenant.tenantId), await api.createUser(tenant.tenantId)];
  const item = await create(t, { title: 'Named', entity_permissions: { user_ids: [kept.id, leaving.id] } });
  const params = { menuItem: item.body.id };
  for (const user of [leaving, gone]) t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: user.id } })).status, 204);
  const read = (await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).body;
  t.strictSame(
    read.entity_permissions.user_ids,
    [kept.id, leaving.id].sort((a, b) => a - b),
    'the deleted user is still listed',
  );
  const saved = await api.call(t, 'updateMenuItem', { token: admin, params, body: { title: 'Renamed', entity_permissions: read.entity_permissions } });
  t.equal(saved.status, 200, 'the lists as read are no change');
  t.strictSame(saved.body.entity_permissions, read.entity_permissions);
  const added = await api.call(t, 'updateMenuItem', { token: admin, params, body: { entity_permissions: { user_ids: [kept.id, leaving.id, gone.id] } } });
  t.equal(added.status, 422, 'a deleted user the item did not name is refused');
  t.strictSame(added.body.errors, { 'entity_permissions.user_ids.2': ['does not exist'] });
  const created = await create(t, { entity_permissions: { user_ids: [leaving.id] } });
  t.equal(created.status, 422, 'as on create');
  t.strictSame((await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).body.title, 'Renamed', 'the refusal changed nothing');
});

t.test('another tenant’s item is answered like a missing one on every route', async (t) => {
  const foreign = await create(t, { menu_identifier: 'foreign' }, other.adminToken);
  const params = { menuItem: foreign.body.id };
  t.equal((await api.call(t, 'getMenuItem', { token: admin, params })).status, 404);
  t.equal((await api.call(t, 'getAdministeredMenuItem', { token: admin, params })).status, 404);
  t.equal((await api.call(t, 'updateMenuItem', { token: admin, params, body: { title: 'mine' } })).status, 404);
  t.equal((await api.call(t, 'deleteMenuItem', { token: admin, params })).status, 404);
  t.notOk(ids((await api.call(t, 'listAdministeredMenuItems', { token: admin })).body).includes(foreign.body.id));
  const [row] = await api.db.owner.execute<{ title: string; deleted_at: Date | null }>(
    sql`select title, deleted_at from menu_items where id = ${foreign.body.id}`,
  );
  t.strictSame(row, { title: 'Wiki', deleted_at: null }, 'untouched');
  for (const bad of ['abc', '0', '-1', '1.5']) {
    t.equal((await api.call(t, 'getMenuItem', { token: admin, params: { menuItem: bad } })).status, 422, bad);
  }
  t.equal((await api.call(t, 'getMenuItem', { token: admin, params: { menuItem: 99999999 } })).status, 404);
});

t.test('result controls: selects, relations, limit; administration-only fields are not selectable on user routes', async (t) => {
  const reader = await api.createUser(tenant.tenantId);
  const picked = await api.call(t, 'listMenuItems', { token: reader.token, query: { selects: 'title,link', relations: 'language', limit: 2 } });
  t.equal(picked.status, 200);
  t.equal(picked.body.length, 2);
  t.strictSame(Object.keys(picked.body[0]).sort(), ['language', 'link', 'title']);
  t.strictSame(picked.body[0].language, { id: 'en-US', name: 'English (US)' });
  const hidden = await api.call(t, 'listMenuItems', { token: reader.token, query: { selects: 'entity_permissions' } });
  t.equal(hidden.status, 422);
  t.equal((await api.call(t, 'listMenuItems', { token: reader.token, query: { relations: 'permissions' } })).status, 422);
  const adminPicked = await api.call(t, 'listAdministeredMenuItems', { token: admin, query: { selects: 'id,entity_permissions,deleted_at', limit: 1 } });
  t.strictSame(Object.keys(adminPicked.body[0]).sort(), ['deleted_at', 'entity_permissions', 'id']);
  const ordered = (await api.call(t, 'listAdministeredMenuItems', { token: admin, query: { selects: 'id,sort_number' } })).body as {
    id: number;
    sort_number: number;
  }[];
  const sorted = [...ordered].sort((a, b) => a.sort_number - b.sort_number || a.id - b.id);
  t.strictSame(ordered, sorted, 'ordered by sort_number, id');
});
