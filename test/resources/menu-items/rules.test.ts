/** The menu-item rules on their own (no HTTP, no database). */
import t from 'tap';
import { coded } from '../../../src/platform/http/problem.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import {
  embeddable,
  iframeAccess,
  LINK_VARIABLES,
  linkProblems,
  menuItemDraftErrors,
  PLACEHOLDER_PERMISSIONS,
  placeholderProblems,
  resolveLink,
  sameSubjects,
  type MenuItemDraft,
} from '../../../src/resources/menu-items/rules.ts';
import type { UserRow } from '../../../src/resources/users/queries.ts';

const holder = (...permissions: Permission[]) => ({ permissions: new Set(permissions) });
const user = { id: 42, username: 'a&b', firstName: 'Ada', lastName: 'Byron', email: 'ada@example.com', staffNumber: null, langId: 'en-US' } as UserRow;
const draft = (over: Partial<MenuItemDraft>): MenuItemDraft => ({
  type: 'link',
  link: 'https://example.com/',
  langId: undefined,
  entityPermissions: undefined,
  newLink: true,
  newType: true,
  newAudience: false,
  ...over,
});

t.test('resolveLink: the caller’s values, percent-encoded; an absent value is empty', async (t) => {
  t.equal(resolveLink('/p?u={{ user.id }}&n={{user.username}}&s={{user.staff_number}}', user), '/p?u=42&n=a%26b&s=');
  t.equal(resolveLink('/p/{{user.full_name}}', user), '/p/Ada%20Byron');
  for (const name of ['__proto__', 'constructor', 'toString', '__defineGetter__', 'hasOwnProperty']) {
    t.equal(resolveLink(`/p/{{${name}}}/{{user.id}}`, user), '/p//42', `{{${name}}} is no variable: empty, not a failure`);
  }
});

t.test('resolveLink: a value cannot change where the link leads', async (t) => {
  const named = (username: string, over: Partial<UserRow> = {}) => ({ ...user, username, ...over }) as UserRow;
  // `.` and `..` (and their %2e spellings) as a whole path segment are read by URL parsers as a step in place or up.
  t.equal(resolveLink('https://wiki.example.com/people/{{user.username}}/edit', named('..')), 'https://wiki.example.com/people//edit');
  t.equal(resolveLink('https://wiki.example.com/people/{{user.username}}', named('.')), 'https://wiki.example.com/people/');
  t.equal(resolveLink('/people/{{user.first_name}}{{user.last_name}}/x', named('u', { firstName: '.', lastName: '.' })), '/people//x');
  t.equal(resolveLink('/people/%2e{{user.username}}/x', named('.')), '/people//x', 'a segment that becomes %2e. with the value');
  // Where the template itself has a dot segment, or the value is not a whole segment, or not in the path, it stays.
  t.equal(resolveLink('/people/../{{user.username}}', named('...')), '/people/../...');
  t.equal(resolveLink('/people/a{{user.username}}', named('..')), '/people/a..');
  t.equal(resolveLink('/people?u={{user.username}}#{{user.username}}', named('..')), '/people?u=..#..');
  t.equal(resolveLink('https://wiki.example.com/p?u={{user.username}}/../x', named('..')), 'https://wiki.example.com/p?u=../../x');
  // An absent value opening a same-origin path would make it `//host…`, another host to a browser.
  const sameOrigin = resolveLink('/{{user.staff_number}}/evil.example/x', named('u', { staffNumber: null }));
  t.equal(sameOrigin, '/.//evil.example/x');
  t.equal(new URL(sameOrigin, 'https://atrium.example.com/').host, 'atrium.example.com', 'opened on the same origin');
  t.equal(resolveLink('/{{user.username}}/x', named('..')), '/.//x');
  t.equal(
    resolveLink('https://wiki.example.com/{{user.staff_number}}/x', named('u', { staffNumber: null })),
    'https://wiki.example.com//x',
    'after a host, // stays on it',
  );
  t.equal(resolveLink('mailto:{{user.username}}@example.com', named('..')), 'mailto:..@example.com');
});

t.test('resolveLink: a link its values leave without a host, or with one no URL may have, is no link', async (t) => {
  const named = (username: string, over: Partial<UserRow> = {}) => ({ ...user, username, ...over }) as UserRow;
  // Stored before such a host was refused: `https:///evil.example/x` is opened by browsers as the host evil.example.
  t.equal(resolveLink('https://{{user.staff_number}}/evil.example/x', named('u', { staffNumber: null })), '');
  t.equal(resolveLink('https://{{user.staff_number}}:8443/x', named('u', { staffNumber: null })), '');
  t.equal(resolveLink('http://{{user.first_name}}{{user.last_name}}/x', named('u', { firstName: null, lastName: '' })), '');
  // A host of placeholders and dots alone, stored before it was refused: the empty value leaves a host of dots, which
  // names no host (`https://./x`). No link, as for a host of placeholders alone.
  for (const template of [
    'https://{{user.staff_number}}./x',
    'https://{{user.staff_number}}%2E/x',
    'https://{{user.staff_number}}\u3002/x',
    'https://{{user.first_name}}.{{user.last_name}}/x',
    'https://{{user.first_name}}..{{user.last_name}}.:8443/x',
  ]) {
    t.equal(resolveLink(template, named('u', { staffNumber: null, firstName: null, lastName: '' })), '', template);
  }
  // A value there is the host, as with a host of placeholders alone.
  t.equal(resolveLink('https://{{user.staff_number}}./x', named('u', { staffNumber: 'wiki' })), 'https://wiki./x');
  // A host part whose value no host may hold (a space) makes no URL: no link either.
  t.equal(resolveLink('https://{{user.first_name}}.wiki.example.com/', named('u', { firstName: 'Ada Lovelace' })), '');
  // A host the values leave as a host stays as the author chose it.
  t.equal(resolveLink('https://{{user.first_name}}.wiki.example.com/x', user), 'https://Ada.wiki.example.com/x');
  t.equal(resolveLink('https://wiki{{user.staff_number}}.example.com/x', user), 'https://wiki.example.com/x');
});

t.test('linkProblems: unknown and leading placeholders, malformed braces, forms per type', async (t) => {
  t.strictSame(linkProblems('https://example.com/{{user.id}}', 'link'), []);
  t.match(linkProblems('https://example.com/{{user.password}}', 'link'), [/unknown placeholders: user\.password; supported: user\.id/]);
  for (const name of ['__proto__', 'constructor', 'toString', '__defineGetter__']) {
    t.match(linkProblems(`/x/{{${name}}}`, 'route'), [new RegExp(`^unknown placeholders: ${name};`)], `{{${name}}}: named like an Object member, unknown`);
  }
  t.strictSame(linkProblems('{{user.id}}/x', 'link'), ['may not begin with a placeholder']);
  t.strictSame(linkProblems('/x/{{user.id', 'route'), ['contains a malformed placeholder']);
  t.strictSame(linkProblems('mailto:ada@example.com', 'link'), []);
  t.match(linkProblems('mailto:ada@example.com', 'iframe'), [/^a iframe item needs/]);
  t.match(linkProblems('https://example.com/', 'route'), [/^a route item needs a same-origin path/]);
  t.match(linkProblems('javascript:alert(1)', 'link'), [/needs/]);
});

t.test('linkProblems: a URL whose host is placeholders alone is refused; a host with a placeholder in it is not', async (t) => {
  for (const link of [
    'https://{{user.staff_number}}/x',
    'http://{{ user.username }}',
    'https://{{user.first_name}}{{user.last_name}}:8443/x?y',
    'https://{{user.id}}#x',
  ]) {
    t.match(linkProblems(link, 'link'), [/host may not be placeholders alone/], link);
  }
  t.match(linkProblems('https://{{user.id}}/x', 'iframe'), [/host may not be placeholders alone/]);
  // Dots alone are no part of a host the author chose: a trailing dot names the same host (`evil.example.` is
  // `evil.example`), and URL parsers read `%2e` and the ideographic full stop as a dot too. The readers' values would
  // still be the whole host.
  for (const link of [
    'https://{{user.staff_number}}./x',
    'https://{{user.staff_number}}%2E/x',
    'https://{{user.staff_number}}\u3002/x',
    'https://{{user.first_name}}.{{user.last_name}}/x',
    'https://{{user.first_name}}..{{user.last_name}}.:8443/x',
  ]) {
    t.match(linkProblems(link, 'link'), [/host may not be placeholders alone/], link);
  }
  for (const link of [
    'https://{{user.username}}.wiki.example.com/',
    'https://wiki-{{user.id}}:8443/x',
    'https://wiki.example.com/{{user.id}}',
    'https://{{user.username}}a.example/',
    'https://a{{user.id}}./x',
  ]) {
    t.strictSame(linkProblems(link, 'link'), [], link);
  }
});

t.test('embeddable and iframeAccess: https or a same-origin path, and only when allowed', async (t) => {
  t.ok(embeddable('https://example.com/'));
  t.ok(embeddable('/inside'));
  t.notOk(embeddable('http://example.com/'), 'mixed content');
  t.notOk(embeddable('mailto:ada@example.com'));
  t.ok(iframeAccess(true, 'https://example.com/{{user.id}}'));
  t.notOk(iframeAccess(false, 'https://example.com/'));
  t.notOk(iframeAccess(true, 'http://example.com/'));
});

t.test('placeholderProblems: each placeholder needs users.view, email and staff number their field permission too', async (t) => {
  t.strictSame(Object.keys(PLACEHOLDER_PERMISSIONS).sort(), Object.keys(LINK_VARIABLES).sort(), 'every placeholder has its permissions');
  t.strictSame(placeholderProblems(holder(), 'https://example.com/'), [], 'no placeholder, nothing needed');
  t.match(placeholderProblems(holder(), '/x/{{ user.id }}'), [/the placeholder user\.id needs users\.view:/]);
  t.strictSame(placeholderProblems(holder('users.view'), '/x/{{user.id}}/{{user.full_name}}'), []);
  t.match(placeholderProblems(holder('users.view'), '/x?m={{user.email}}'), [/user\.email needs users\.view-personal:/]);
  t.match(placeholderProblems(holder('users.view-personal'), '/x?s={{user.staff_number}}'), [
    /user\.staff_number needs users\.view and users\.view-administrative:/,
  ]);
  t.strictSame(
    placeholderProblems(holder('users.view', 'users.view-personal', 'users.view-administrative'), '/x?m={{user.email}}&s={{user.staff_number}}'),
    [],
  );
});

t.test('sameSubjects: sets, so order and duplicates do not count; a missing list is empty', async (t) => {
  const current = { user_ids: [1, 2], role_ids: [], department_ids: [5] };
  t.ok(sameSubjects({ user_ids: [2, 1, 2], department_ids: [5] }, current));
  t.notOk(sameSubjects({ user_ids: [1, 2] }, current), 'a department dropped');
  t.notOk(sameSubjects({ user_ids: [1, 2], role_ids: [3], department_ids: [5] }, current), 'a role added');
  t.ok(sameSubjects({}, { user_ids: [], role_ids: [], department_ids: [] }));
});

t.test('menuItemDraftErrors: placeholders are judged for a new link (on link) and a new audience (on entity_permissions)', async (t) => {
  const link = '/x?m={{user.email}}';
  t.strictSame(menuItemDraftErrors(holder(), draft({ link: 'https://example.com/' })), {});
  t.match(menuItemDraftErrors(holder('users.view'), draft({ link })), {
    link: [{ code: 'permission_missing', message: /user\.email needs users\.view-personal/ }],
  });
  t.strictSame(menuItemDraftErrors(holder(), draft({ link, newLink: false })), {}, 'an unchanged link for the same audience is not judged again');
  const audience = menuItemDraftErrors(holder('users.view'), draft({ link, newLink: false, newAudience: true }));
  t.strictSame(Object.keys(audience), ['entity_permissions']);
  t.match(audience.entity_permissions, [
    {
      code: 'permission_missing',
      message: /^who sees this item can be changed only by a caller who may read every user field its link sends: the placeholder user\.email/,
    },
  ]);
  t.strictSame(Object.keys(menuItemDraftErrors(holder(), draft({ link, newAudience: true }))).sort(), ['entity_permissions', 'link']);
  t.strictSame(
    menuItemDraftErrors(holder(), draft({ link: '{{user.id}}', newAudience: true })),
    { link: [coded('format', 'may not begin with a placeholder')] },
    'a bad link is judged as a link only',
  );
});

t.test('menuItemDraftErrors: a stored link a later rule refuses, kept as it is for the same type, leaves the other keys editable', async (t) => {
  const legacy = 'https://{{user.first_name}}/x';
  t.match(linkProblems(legacy, 'link'), [/host may not be placeholders alone/], 'refused as a new link');
  t.strictSame(menuItemDraftErrors(holder('users.view'), draft({ link: legacy, newLink: false, newType: false })), {});
  t.match(
    menuItemDraftErrors(holder('users.view'), draft({ link: legacy, newLink: false, newType: true })),
    { link: [{ code: 'format' }] },
    'a new type judges it',
  );
  t.match(menuItemDraftErrors(holder('users.view'), draft({ link: legacy })), { link: [{ code: 'format' }] }, 'as a new link does');
});
