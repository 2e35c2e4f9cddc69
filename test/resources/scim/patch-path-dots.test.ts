/**
 * The dots of SCIM PATCH paths and value keys. scim-patch cuts each path (and each key of
 * an object it writes) at its dots with a pattern that reads, from every dot, on to the
 * next `]` or the end: a path of dots costs the square of its length, on the event loop
 * (128 KiB of them held the process for ten seconds), and a body may carry a mebibyte. A
 * PATCH whose paths and keys would take more than MAX_PATH_READING characters to cut is
 * refused before scim-patch runs; these tests check the refusal and that it changes
 * nothing, not the time.
 *
 * A path's value filter is read by scim2-parse-filter (Atrium's checks and scim-patch), whose
 * time doubles with each line feed in a compared text left unclosed: 28 of them held the
 * process for four seconds. As in a filter of a read (filter-line-feeds.test.ts), such a
 * path is refused before the parser reads it, and the refusal names the line feed.
 */
import t from 'tap';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { scimSettings, scimTokens } from '../../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../../src/resources/scim/tokens.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { assertServedAnswer } from '../../helpers/contract.ts';
import { bearer, roleNamed } from '../../helpers/fixtures.ts';
import { wireClient } from '../../helpers/http-client.ts';

const api = await startTestApi(t);
const wire = await wireClient(api.atrium.app!);
const tenant = await api.createTenant('scim-patch-dots');
const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
await api.db.owner.insert(scimSettings).values({ tenantId: tenant.tenantId, defaultRoleId: employee.id });
const scimToken = newScimTokenValue();
await api.db.owner.insert(scimTokens).values({ tenantId: tenant.tenantId, userId: tenant.adminUserId, name: 'IdP', tokenHash: hashToken(scimToken) });

const USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
const PATCH = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

async function scim(method: string, url: string, body?: unknown) {
  const response = await wire.send({
    method,
    url: `/scim/v2${url}`,
    headers: { ...bearer(scimToken), ...(body === undefined ? {} : { 'content-type': 'application/scim+json' }) },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  assertServedAnswer(method, `/scim/v2${url}`, response);
  return { status: response.statusCode, body: response.body ? response.json() : undefined };
}

const created = await scim('POST', '/Users', {
  schemas: [USER],
  userName: 'dots@example.com',
  name: { givenName: 'Dot', familyName: 'Tester' },
  emails: [{ value: 'dot.tester@mail.example.com', type: 'work', primary: true }],
});
t.equal(created.status, 201);
const user = `/Users/${created.body.id}`;

/** PATCHes whose paths or keys hold more dots than scim-patch may be given to cut. */
const DOTS = '.'.repeat(64 * 1024);
const FILTER_OF_DOTS = `emails[value eq "${'.'.repeat(1970)}"]`;
const refused = {
  'a path of dots': [{ op: 'replace', path: `name${DOTS}`, value: 'Changed' }],
  'a path-less value key of dots': [{ op: 'replace', value: { [`name${DOTS}givenName`]: 'Changed' } }],
  'a key of dots inside a value': [{ op: 'replace', path: 'name', value: { [`givenName${DOTS}`]: 'Changed' } }],
  'five hundred value filters of dots': Array.from({ length: 500 }, () => ({ op: 'remove', path: FILTER_OF_DOTS })),
};

t.test('a PATCH whose paths or keys hold too many dots is invalidPath and changes nothing', async (t) => {
  const before = await scim('GET', user);
  for (const [name, operations] of Object.entries(refused)) {
    const res = await scim('PATCH', user, { schemas: [PATCH], Operations: operations });
    t.equal(res.status, 400, `${name}: 400`);
    t.equal(res.body.scimType, 'invalidPath', `${name}: invalidPath`);
    t.match(res.body.detail, /dots/, `${name}: the detail says why`);
  }
  t.strictSame(await scim('GET', user), before, 'the user is as it was');
});

t.test('the paths identity providers send pass, a thousand of them too', async (t) => {
  const renamed = await scim('PATCH', user, {
    schemas: [PATCH],
    Operations: [
      { op: 'replace', path: 'name.givenName', value: 'Dorothy' },
      { op: 'replace', value: { 'name.familyName': 'Tested' } },
      { op: 'replace', path: 'emails[type eq "work"].value', value: 'dorothy.tested@mail.example.com' },
    ],
  });
  t.equal(renamed.status, 200);
  t.match(renamed.body, { name: { givenName: 'Dorothy', familyName: 'Tested' }, emails: [{ value: 'dorothy.tested@mail.example.com' }] });
  const removals = Array.from({ length: 1000 }, (_, i) => ({ op: 'remove', path: `emails[value eq "first.middle.last${i}@mail.example.co.uk"]` }));
  const removed = await scim('PATCH', user, { schemas: [PATCH], Operations: removals });
  t.equal(removed.status, 200, 'a thousand removals by an e-mail address with dots');
  t.match(removed.body, { emails: [{ value: 'dorothy.tested@mail.example.com' }] }, 'which match nothing');
});

t.test('a forbidden segment is found among a mebibyte of separators, in a path and in a key', async (t) => {
  // Segments are told apart in place (the path is not cut into a million strings); what is refused is as before.
  // No dots: a mebibyte of them is refused for its dots first.
  const separators = '[:]'.repeat(Math.floor((1024 * 1024 - 256) / 3));
  for (const [name, operation] of [
    ['a path', { op: 'remove', path: `emails${separators} Constructor ` }],
    ['a key', { op: 'replace', value: { [`name${separators}\t__PROTO__`]: 'x' } }],
  ] as const) {
    const res = await scim('PATCH', user, { schemas: [PATCH], Operations: [operation] });
    t.equal(res.status, 400, `${name}: 400`);
    t.equal(res.body.scimType, 'invalidPath', `${name}: invalidPath`);
    t.match(res.body.detail, /is not an attribute/, `${name}: as naming no attribute`);
  }
  const allowed = await scim('PATCH', user, { schemas: [PATCH], Operations: [{ op: 'replace', value: { 'name.constructors': 'x' } }] });
  t.not(allowed.body.detail ?? '', /is not an attribute/, 'a segment that only begins with a forbidden name is none');
});

t.test('a path whose value filter holds a line feed in a compared text is invalidPath, naming it, and changes nothing', async (t) => {
  const group = await scim('POST', '/Groups', { schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'], displayName: 'Line feeds' });
  t.equal(group.status, 201);
  const feeds = '\n'.repeat(28);
  const userBefore = await scim('GET', user);
  const groupBefore = await scim('GET', `/Groups/${group.body.id}`);
  for (const [name, url, operations] of [
    ['a removal by an unclosed text', user, [{ op: 'remove', path: `emails[value eq "${feeds}]` }]],
    ['a replace of a sub-attribute', user, [{ op: 'replace', path: `emails[type eq "work${feeds}"].value`, value: 'x@example.com' }]],
    ['a path-less value key', user, [{ op: 'replace', value: { [`emails[value eq "${feeds}].value`]: 'x@example.com' } }]],
    [
      'after an operation that would apply',
      user,
      [
        { op: 'replace', path: 'name.givenName', value: 'Changed' },
        { op: 'remove', path: `emails[value eq "${feeds}` },
      ],
    ],
    ['a member removal', `/Groups/${group.body.id}`, [{ op: 'remove', path: `members[value eq "${feeds}]` }]],
  ] as const) {
    const res = await scim('PATCH', url, { schemas: [PATCH], Operations: operations });
    t.equal(res.status, 400, `${name}: 400`);
    t.equal(res.body.scimType, 'invalidPath', `${name}: invalidPath`);
    t.match(res.body.detail, /line feed/, `${name}: the detail names the line feed`);
  }
  t.strictSame(await scim('GET', user), userBefore, 'the user is as it was');
  t.strictSame(await scim('GET', `/Groups/${group.body.id}`), groupBefore, 'the group is as it was');
  const between = await scim('PATCH', user, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'emails[type eq "work"]\n.value', value: 'lf@example.com' }],
  });
  t.not(between.body.detail ?? '', /line feed/, 'a line feed outside a compared text is not what is refused');
});
