import t from 'tap';
import { count, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { scimSettings, scimTokens } from '../../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../../src/resources/scim/tokens.ts';
import { GROUP_ATTRIBUTES, MAX_LISTED_MEMBERS } from '../../../src/resources/scim/groups.ts';
import { parseFilter } from '../../../src/resources/scim/users.ts';
import { departments } from '../../../src/resources/departments/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { wireClient } from '../../helpers/http-client.ts';
import { assertServedAnswer } from '../../helpers/contract.ts';
import { eventually } from '../../helpers/eventually.ts';
import { backdateUpdatedAt, bearer, createDepartment, roleNamed, rowCount } from '../../helpers/fixtures.ts';

// SCIM Groups ↔ departments through HTTP: bad input first.
const api = await startTestApi(t);
const app = api.atrium.app!;
// SCIM requests go over a real connection, as an identity provider's do.
const wire = await wireClient(app);
const tenant = await api.createTenant('scim-groups');
const other = await api.createTenant('scim-groups-other');
const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
await api.db.owner.insert(scimSettings).values({ tenantId: tenant.tenantId, defaultRoleId: employee.id });

async function tokenOf(tenantId: number, userId: number): Promise<string> {
  const value = newScimTokenValue();
  await api.db.owner.insert(scimTokens).values({ tenantId, userId, name: 'IdP', tokenHash: hashToken(value) });
  return value;
}
const scimToken = await tokenOf(tenant.tenantId, tenant.adminUserId);

const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';
const PATCH = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

async function scim(method: string, url: string, body?: unknown, token = scimToken) {
  const response = await wire.send({
    method: method as never,
    url: `/scim/v2${url}`,
    headers: { ...bearer(token), ...(body === undefined ? {} : { 'content-type': 'application/scim+json' }) },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  assertServedAnswer(method, `/scim/v2${url}`, response);
  return { status: response.statusCode, body: response.body ? response.json() : undefined };
}

const departmentCount = () => rowCount(api.db, 'departments', sql`tenant_id = ${tenant.tenantId}`);
const memberIds = async (departmentId: number) =>
  (await api.db.owner.execute<{ user_id: string }>(sql`select user_id from department_users where department_id = ${departmentId} order by user_id`)).map(
    (row) => String(row.user_id),
  );

/** Users' ids as `memberIds` answers them: ascending by number. */
const idsOf = (...ids: number[]) => ids.sort((a, b) => a - b).map(String);

const ann = await api.createUser(tenant.tenantId, { username: 'ann' });
const ben = await api.createUser(tenant.tenantId, { username: 'ben' });
const foreigner = await api.createUser(other.tenantId, { username: 'carl' });

t.test('refused group writes store nothing', async (t) => {
  const before = await departmentCount();
  for (const body of [
    {},
    { displayName: '' },
    { displayName: 5 },
    { displayName: 'X', members: 'ann' },
    { displayName: 'X', members: [{ value: 'abc' }] },
    { displayName: 'X', externalId: 5 },
    { displayName: 'X', externalId: 'x'.repeat(256) },
    // The contract's limit and the department API's: a longer name could not be saved under /api afterwards.
    { displayName: 'x'.repeat(256) },
  ]) {
    const res = await scim('POST', '/Groups', { schemas: [GROUP], ...body });
    t.equal(res.status, 400, JSON.stringify(body));
    t.same(res.body.schemas, [ERROR]);
    t.not(res.body.detail, 'The request is invalid.', `the detail names what is wrong: ${res.body.detail}`);
  }
  const long = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'x'.repeat(256) });
  t.match(long.body, { scimType: 'invalidValue', detail: /^displayName .*255/ });
  // Beyond 2^53 − 1 no number reads it exactly: refused as no id, named as sent (not as the number it would round to).
  const huge = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Huge', members: [{ value: '9007199254740993' }] });
  t.equal(huge.status, 400);
  t.match(huge.body, { scimType: 'invalidValue', detail: /"9007199254740993" is not a user id/ });
  t.equal((await scim('GET', '/Users/9007199254740993')).status, 404);
  const foreign = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Foreign', members: [{ value: String(foreigner.id) }] });
  t.equal(foreign.status, 400, "another tenant's user is no member");
  const viewer = await api.createUser(tenant.tenantId, {
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'],
  });
  const weak = await tokenOf(tenant.tenantId, viewer.id);
  t.equal((await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Weak' }, weak)).status, 403, 'needs departments.manage');
  t.equal(await departmentCount(), before);
});

t.test('a member that names a group is refused, whatever its id, and changes nothing', async (t) => {
  const parent = await createDepartment(api.db, tenant.tenantId, 'Nesting parent');
  const target = await createDepartment(api.db, tenant.tenantId, 'Nesting target');
  // User ids and department ids overlap: a group's id read as a user's would make that user a member.
  const asGroup = [
    { value: String(ann.id), type: 'Group' },
    { value: String(ann.id), TYPE: 'group' },
    { value: String(ann.id), $ref: `http://localhost/scim/v2/Groups/${ann.id}` },
    { value: String(ann.id), $ref: `http://localhost/scim/v2/Groups/${ann.id}/` },
    { value: String(ann.id), $ref: `Groups/${ann.id}` },
    { value: String(ann.id), $ref: `http://localhost/scim/v2/Groups/${ann.id}?attributes=id` },
    // A line break in the query or the fragment, which URL parsers drop: still the group's URL.
    { value: String(ann.id), $ref: `http://localhost/scim/v2/Groups/${ann.id}?\n` },
    { value: String(ann.id), $ref: `http://localhost/scim/v2/Groups/${ann.id}#a\r\nb` },
    { value: String(parent.id), type: 'Group', $ref: `http://localhost/scim/v2/Groups/${parent.id}` },
  ];
  const before = await departmentCount();
  for (const member of asGroup) {
    const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Nested', members: [member] });
    t.equal(created.status, 400, JSON.stringify(member));
    t.match(created.body, { scimType: 'invalidValue', detail: /group/i });
    const put = await scim('PUT', `/Groups/${target.id}`, { schemas: [GROUP], displayName: 'Nesting target', members: [member] });
    t.equal(put.status, 400, `PUT ${JSON.stringify(member)}`);
    const patched = await scim('PATCH', `/Groups/${target.id}`, { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [member] }] });
    t.equal(patched.status, 400, `PATCH ${JSON.stringify(member)}`);
    t.match(patched.body, { scimType: 'invalidValue' });
  }
  t.equal(await departmentCount(), before, 'no group created');
  t.same(await memberIds(target.id), [], 'no member added');
  // A member said to be a user, as the Group's own answers name them, is one.
  const user = await scim('PATCH', `/Groups/${target.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id), type: 'User', $ref: `http://localhost/scim/v2/Users/${ann.id}` }] }],
  });
  t.equal(user.status, 200);
  t.same(await memberIds(target.id), [String(ann.id)]);
});

t.test('a group is a department; members are memberships', async (t) => {
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Sales', members: [{ value: String(ann.id) }] });
  t.equal(created.status, 201);
  t.match(created.body, { displayName: 'Sales', members: [{ value: String(ann.id), display: 'ann' }] });
  const id = Number(created.body.id);
  const department = await api.call(t, 'getDepartment', { token: tenant.adminToken, params: { department: id } });
  t.equal(department.body.name, 'Sales');

  const taken = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'sales ' });
  t.equal(taken.status, 409, 'a taken (or look-alike) name is refused by the department rules, as SCIM answers a taken unique attribute');
  t.match(taken.body, { scimType: 'uniqueness', detail: /^displayName / });

  // Entra ID: add members (one already there), remove by value filter.
  const added = await scim('PATCH', `/Groups/${id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'Add', path: 'members', value: [{ value: String(ann.id) }, { value: String(ben.id) }] }],
  });
  t.equal(added.status, 200);
  t.same(await memberIds(id), idsOf(ann.id, ben.id), 'a repeated add is one membership');
  const removed = await scim('PATCH', `/Groups/${id}`, { schemas: [PATCH], Operations: [{ op: 'Remove', path: `members[value eq "${ann.id}"]` }] });
  t.equal(removed.status, 200);
  t.same(await memberIds(id), [String(ben.id)]);
  // Okta: rename with a path-less replace.
  const renamed = await scim('PATCH', `/Groups/${id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', value: { id: String(id), displayName: 'Sales EMEA' } }],
  });
  t.equal(renamed.body.displayName, 'Sales EMEA');

  const put = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Sales EMEA', members: [{ value: String(ann.id) }] });
  t.equal(put.status, 200);
  t.same(await memberIds(id), [String(ann.id)]);

  const listed = await scim('GET', `/Groups?filter=${encodeURIComponent('displayName eq "sales emea"')}&excludedAttributes=members`);
  t.equal(listed.body.totalResults, 1);
  t.notOk('members' in listed.body.Resources[0], 'excludedAttributes=members');
  const byMember = await scim('GET', `/Groups?filter=${encodeURIComponent(`id eq "${id}" and members[value eq "${ann.id}"]`)}`);
  t.equal(byMember.body.totalResults, 1, 'membership filter');
  const notMember = await scim('GET', `/Groups?filter=${encodeURIComponent(`members[value eq "${ben.id}"] and id eq "${id}"`)}`);
  t.equal(notMember.body.totalResults, 0);

  t.equal((await scim('DELETE', `/Groups/${id}`)).status, 204);
  t.equal((await scim('GET', `/Groups/${id}`)).status, 404);
  const events = await api.db.owner.execute<{ action: string; actor_type: string }>(
    sql`select action, actor_type from audit_events where target_type = 'department' and target_id = ${String(id)}`,
  );
  t.ok(events.length >= 5 && events.every((event) => event.actor_type === 'scim_token'), 'every write is audited as the token');
});

t.test("another tenant's department is a 404", async (t) => {
  const foreign = await createDepartment(api.db, other.tenantId, 'Elsewhere');
  for (const [method, body] of [
    ['GET', undefined],
    ['PUT', { schemas: [GROUP], displayName: 'Mine' }],
    ['PATCH', { schemas: [PATCH], Operations: [{ op: 'replace', path: 'displayName', value: 'Mine' }] }],
    ['DELETE', undefined],
  ] as const) {
    t.equal((await scim(method, `/Groups/${foreign.id}`, body)).status, 404, method);
  }
  const [row] = await api.db.owner.execute<{ name: string }>(sql`select name from departments where id = ${foreign.id}`);
  t.equal(row!.name, 'Elsewhere');
});

t.test('concurrent PATCHes of one group each apply to the members the others left', async (t) => {
  // Identity providers send membership changes of one group in parallel batches.
  const people = await Promise.all(Array.from({ length: 8 }, (_, i) => api.createUser(tenant.tenantId, { username: `parallel-${i}` })));
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Parallel' })).body;
  const adds = await Promise.all(
    people.map((person) =>
      scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(person.id) }] }] }),
    ),
  );
  t.strictSame(
    adds.map((answer) => answer.status),
    people.map(() => 200),
  );
  t.strictSame(await memberIds(Number(group.id)), idsOf(...people.map((person) => person.id)), 'no add is lost');
  const leaving = people.slice(0, 6);
  const removes = await Promise.all(
    leaving.map((person) =>
      scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'remove', path: `members[value eq "${person.id}"]` }] }),
    ),
  );
  t.strictSame(
    removes.map((answer) => answer.status),
    leaving.map(() => 200),
  );
  t.strictSame(await memberIds(Number(group.id)), idsOf(...people.slice(6).map((person) => person.id)), 'no removed member comes back');
});

t.test('members removed as Entra ID sends it (path members, the members as value), and paths in any case', async (t) => {
  const group = (
    await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Entra removal', members: [{ value: String(ann.id) }, { value: String(ben.id) }] })
  ).body;
  const removed = await scim('PATCH', `/Groups/${group.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'Remove', path: 'members', value: [{ value: String(ann.id) }] }],
  });
  t.equal(removed.status, 200);
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'the member named by value is removed, the other stays');
  const again = await scim('PATCH', `/Groups/${group.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'Remove', path: 'members', value: [{ value: String(ann.id) }] }],
  });
  t.equal(again.status, 200, 'removing a member who left already is no error');
  // One member as an object rather than a list of one: removed the same way.
  await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id) }] }] });
  const single = await scim('PATCH', `/Groups/${group.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'Remove', path: 'members', value: { value: String(ann.id) } }],
  });
  t.equal(single.status, 200);
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'the member sent as an object is removed');
  const bad = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'Remove', path: 'members', value: [{ display: 'ben' }] }] });
  t.equal(bad.status, 400);
  t.equal(bad.body.scimType, 'invalidValue');
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'and changes nothing');
  const tooMany = Array.from({ length: 1001 }, (_, i) => ({ value: String(i + 1) }));
  const refused = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'Remove', path: 'members', value: tooMany }] });
  t.equal(refused.status, 400, 'more than 1000 members in one remove');
  t.equal(refused.body.scimType, 'invalidValue');
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'and changes nothing either');
  // A member's sub-attributes are read-only: a replace of one whose member is absent must not add that member.
  for (const path of [`members[value eq "${ann.id}"].display`, 'members.display', `MEMBERS[VALUE EQ "${ann.id}"].$ref`]) {
    const readOnly = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path, value: 'x' }] });
    t.equal(readOnly.status, 400, path);
    t.equal(readOnly.body.scimType, 'mutability');
  }
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'ann was not added');
  // The bound is on the whole request: 1000 values in all its operations, whichever they are.
  const spread = Array.from({ length: 501 }, (_, i) => ({ op: 'add', path: 'members', value: [{ value: String(ann.id) }, { value: String(1_000_000 + i) }] }));
  const tooLarge = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: spread });
  t.equal(tooLarge.status, 400, '1002 values in 501 operations');
  t.equal(tooLarge.body.detail, 'A PATCH carries at most 1000 values in all its operations, not 1002.');
  t.same(await memberIds(Number(group.id)), [String(ben.id)], 'and changes nothing');
  const pathless = await scim('PATCH', `/Groups/${group.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'add', value: { members: Array.from({ length: 1001 }, () => ({ value: String(ann.id) })) } }],
  });
  t.equal(pathless.status, 400, 'a path-less value counts its arrays’ items');

  const cased = await scim('PATCH', `/Groups/${group.id}`, {
    schemas: [PATCH],
    Operations: [
      { op: 'add', path: 'Members', value: [{ VALUE: String(ann.id) }] },
      { op: 'remove', path: `MEMBERS[VALUE EQ "${ben.id}"]` },
      { op: 'replace', path: 'DisplayName', value: 'Entra removal, cased' },
    ],
  });
  t.equal(cased.status, 200);
  t.equal(cased.body.displayName, 'Entra removal, cased');
  t.same(await memberIds(Number(group.id)), [String(ann.id)]);
  // A remove of `members` with no value, or null, removes them all.
  const all = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'members', value: null }] });
  t.equal(all.status, 200);
  t.same(await memberIds(Number(group.id)), [], 'no member left');
});

t.test('removals in batches succeed when the group runs empty, in both forms; a member not in it is no error', async (t) => {
  for (const form of ['value', 'filter'] as const) {
    const group = (
      await scim('POST', '/Groups', {
        schemas: [GROUP],
        displayName: `Batch removal by ${form}`,
        members: [{ value: String(ann.id) }, { value: String(ben.id) }],
      })
    ).body;
    const gone = [ann.id, ben.id, 999_999].map(String);
    // The attribute with its schema's URN before it, as RFC 7644 allows, the first time.
    const operations =
      form === 'value'
        ? [{ op: 'Remove', path: `${GROUP}:members`, value: gone.map((value) => ({ value })) }]
        : gone.map((value) => ({ op: 'remove', path: `${GROUP}:members[value eq "${value}"]` }));
    const removed = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: operations });
    t.equal(removed.status, 200, `by ${form}`);
    t.same(await memberIds(Number(group.id)), [], 'the group is empty');
    const again = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: operations });
    t.equal(again.status, 200, 'and removing from an empty group changes nothing');
  }
});

t.test('a GET or DELETE is not judged by its Content-Type; a method no endpoint takes is still 405', async (t) => {
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Deleted with a content type' })).body;
  for (const [method, url, status] of [
    ['DELETE', '/Groups', 405],
    ['PUT', '/ServiceProviderConfig', 405],
    ['DELETE', `/Groups/${group.id}`, 204],
  ] as const) {
    for (const type of ['application/scim+json', 'application/json']) {
      const response = await wire.send({ method, url: `/scim/v2${url}`, headers: { ...bearer(scimToken), 'content-type': type } });
      assertServedAnswer(method, `/scim/v2${url}`, response);
      t.equal(response.statusCode, status === 204 && type === 'application/json' ? 404 : status, `${method} ${url} (${type})`);
    }
  }
  t.equal(await rowCount(api.db, 'departments', sql`id = ${Number(group.id)}`), 0, 'the group is gone');
  // A request without a body is not judged by a Content-Type a client library sends by default, as in /api.
  const other = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Deleted with a form type' })).body;
  for (const [method, type, status] of [
    ['GET', 'text/plain', 200],
    ['GET', 'application/x-www-form-urlencoded', 200],
    ['DELETE', 'text/plain', 204],
  ] as const) {
    const response = await wire.send({ method, url: `/scim/v2/Groups/${other.id}`, headers: { ...bearer(scimToken), 'content-type': type } });
    assertServedAnswer(method, `/scim/v2/Groups/${other.id}`, response);
    t.equal(response.statusCode, status, `${method} (${type})`);
  }
  t.equal(await rowCount(api.db, 'departments', sql`id = ${Number(other.id)}`), 0, 'deleted');
  const written = await wire.send({ method: 'POST', url: '/scim/v2/Groups', headers: { ...bearer(scimToken), 'content-type': 'text/plain' }, payload: '{}' });
  t.equal(written.statusCode, 415, 'a body of another type is still refused');
});

t.test('a group PATCH without a value, or path-less without an object, is invalidValue and changes nothing', async (t) => {
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Valueless', members: [{ value: String(ann.id) }] })).body;
  const typed = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 123 });
  t.equal(typed.status, 400);
  t.match(typed.body, { scimType: 'invalidValue', detail: 'displayName must be a string.' }, 'a displayName of another type is told so');
  for (const operation of [
    { op: 'replace' },
    { op: 'add', path: 'members' },
    { op: 'replace', value: 'x' },
    { op: 'add', value: [{ value: String(ben.id) }] },
  ]) {
    const refused = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [operation] });
    t.equal(refused.status, 400, JSON.stringify(operation));
    t.equal(refused.body.scimType, 'invalidValue');
  }
  t.same((await scim('GET', `/Groups/${group.id}`)).body, group, 'the group is as it was');
});

t.test('an add whose path filters members is invalidPath and changes nothing, whichever members it matches', async (t) => {
  // An add names no member by a filter: members are added with the path members and the members as value.
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Filtered adds', members: [{ value: String(ann.id) }] })).body;
  for (const [path, value] of [
    [`members[value eq "${ben.id}"]`, [{ value: String(ben.id) }]],
    [`members[value eq "${ben.id}"]`, { value: String(ben.id) }],
    [`members[value eq "${ann.id}"]`, { value: String(ben.id) }],
    [`Members[Value eq "${ann.id}"]`, [{ value: String(ben.id) }]],
    [`${GROUP}:members[value pr]`, [{ value: String(ben.id) }]],
  ] as const) {
    const refused = await scim('PATCH', `/Groups/${group.id}`, { schemas: [PATCH], Operations: [{ op: 'Add', path, value }] });
    t.equal(refused.status, 400, `${path} ${JSON.stringify(value)}`);
    t.equal(refused.body.scimType, 'invalidPath');
  }
  t.strictSame(await memberIds(Number(group.id)), idsOf(ann.id), 'the members are as they were');
  t.same((await scim('GET', `/Groups/${group.id}`)).body, group, 'the group is as it was');
});

t.test('members filters see the members a group shows: no deleted user, no group account', async (t) => {
  const leaver = await api.createUser(tenant.tenantId, { username: 'filter-leaver' });
  const desk = await api.createUser(tenant.tenantId, { username: 'filter-desk', values: { groupAccount: true } });
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Filtered members', members: [{ value: String(leaver.id) }] })).body;
  const empty = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Filtered, empty' })).body;
  await api.db.owner.execute(sql`insert into department_users (tenant_id, department_id, user_id) values (${tenant.tenantId}, ${empty.id}, ${desk.id})`);
  t.equal((await scim('DELETE', `/Users/${leaver.id}`)).status, 204);
  t.same((await scim('GET', `/Groups/${group.id}`)).body.members ?? [], [], 'the group shows no member');
  const found = async (filter: string) =>
    (
      (await scim('GET', `/Groups?filter=${encodeURIComponent(`(${filter}) and (id eq "${group.id}" or id eq "${empty.id}")`)}`)).body.Resources as {
        id: string;
      }[]
    )
      .map((resource) => resource.id)
      .sort();
  t.same(await found(`members[value eq "${leaver.id}"]`), [], 'a deleted member is no member');
  t.same(await found(`members[value eq "${desk.id}"]`), [], 'nor is a group account');
  t.same(await found('members pr'), [], 'neither group has a member SCIM sees');
  t.same(await found('members eq null'), [group.id, empty.id].sort());
  t.same(await found('not (members pr)'), [group.id, empty.id].sort());
});

t.test('a group list costs a constant number of queries', async (t) => {
  const measure = async () => {
    const before = api.db.queryCount;
    t.equal((await scim('GET', '/Groups')).status, 200);
    return api.db.queryCount - before;
  };
  await createDepartment(api.db, tenant.tenantId, 'Team first', [ann.id]);
  const few = await measure();
  for (let i = 0; i < 4; i++) await createDepartment(api.db, tenant.tenantId, `Team ${i}`, [ann.id, ben.id]);
  t.equal(await measure(), few);
});

t.test('a PATCH path or value key naming __proto__, constructor or prototype is refused and pollutes nothing', async (t) => {
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Protos', members: [{ value: String(ann.id) }] });
  t.equal(created.status, 201);
  const path = `/Groups/${created.body.id}`;
  const attacks = [
    { op: 'add', path: '__proto__.polluted', value: 1 },
    { op: 'add', path: 'constructor.prototype.polluted', value: 1 },
    { op: 'add', path: 'members[value eq "1"].__proto__.polluted', value: 1 },
    // Inside a value filter too, where an operator follows the name.
    { op: 'remove', path: 'members[__proto__ eq "1"]' },
    { op: 'remove', path: 'members[value eq "1" or constructor pr]' },
    { op: 'add', path: 'urn:ietf:params:scim:schemas:core:2.0:Group:__proto__.polluted', value: 1 },
    { op: 'add', path: 'userName', value: 'x' },
    { op: 'add', value: { 'constructor.prototype.polluted': 1 } },
    { op: 'replace', value: { members: [{ value: String(ben.id), PROTOTYPE: { polluted: 1 } }] } },
  ];
  for (const operation of attacks) {
    const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'displayName', value: 'Changed' }, operation] });
    t.equal(res.status, 400, JSON.stringify(operation));
    t.same(res.body.schemas, [ERROR]);
    t.equal(res.body.scimType, 'invalidPath');
    t.equal(({} as Record<string, unknown>).polluted, undefined, `Object.prototype untouched by ${JSON.stringify(operation)}`);
  }
  // A "__proto__" key in the JSON text is refused by the body parser already.
  const refused = await scim('PATCH', path, JSON.parse(`{"schemas":["${PATCH}"],"Operations":[{"op":"add","value":{"__proto__":{"polluted":1}}}]}`));
  t.equal(refused.status, 400);
  t.equal(refused.body.scimType, 'invalidSyntax');
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype untouched by a "__proto__" key');
  t.same((await scim('GET', path)).body, created.body, 'the group is as it was');
});

t.test("a token's minter may add or remove only members they may administer", async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative', 'departments.manage'],
  });
  const weak = await tokenOf(tenant.tenantId, delegate.id);
  // Created by the full administrator's token: the administrator (who holds more than the delegate) is a member.
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Guarded', members: [{ value: String(tenant.adminUserId) }] });
  t.equal(created.status, 201);
  const empty = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Open' });
  t.equal(empty.status, 201);
  const guarded = Number(created.body.id);
  const open = Number(empty.body.id);

  const adding = await scim(
    'PATCH',
    `/Groups/${open}`,
    { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id) }, { value: String(tenant.adminUserId) }] }] },
    weak,
  );
  t.equal(adding.status, 403, 'adding a member who holds more than the minter is refused');
  t.same(adding.body.schemas, [ERROR]);
  t.same(await memberIds(open), [], 'no member added');

  const removing = await scim(
    'PATCH',
    `/Groups/${guarded}`,
    { schemas: [PATCH], Operations: [{ op: 'remove', path: `members[value eq "${tenant.adminUserId}"]` }] },
    weak,
  );
  t.equal(removing.status, 403, 'removing such a member is refused');
  const replacing = await scim('PUT', `/Groups/${guarded}`, { schemas: [GROUP], displayName: 'Renamed', members: [{ value: String(ann.id) }] }, weak);
  t.equal(replacing.status, 403, 'a PUT leaving such a member out is refused');
  t.same(await memberIds(guarded), [String(tenant.adminUserId)], 'the membership is as it was');
  t.equal((await scim('GET', `/Groups/${guarded}`)).body.displayName, 'Guarded', 'the name is as it was');

  const allowed = await scim(
    'PATCH',
    `/Groups/${open}`,
    { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id) }] }] },
    weak,
  );
  t.equal(allowed.status, 200, 'a member the minter may administer is added');
  t.same(await memberIds(open), [String(ann.id)]);
});

t.test('a PUT replaces the group: without members it has no SCIM-visible members', async (t) => {
  const groupAccount = await api.createUser(tenant.tenantId, { username: 'shared-desk', values: { groupAccount: true } });
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Replaced', members: [{ value: String(ann.id) }, { value: String(ben.id) }] });
  t.equal(created.status, 201);
  const id = Number(created.body.id);
  await api.db.owner.execute(sql`insert into department_users (tenant_id, department_id, user_id) values (${tenant.tenantId}, ${id}, ${groupAccount.id})`);

  const refused = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced', members: [{ value: 'abc' }] });
  t.equal(refused.status, 400, 'bad members are refused');
  t.same(await memberIds(id), idsOf(ann.id, ben.id, groupAccount.id), 'and change nothing');

  const put = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced' });
  t.equal(put.status, 200);
  t.same(put.body.members, [], 'answered without members');
  t.same(await memberIds(id), [String(groupAccount.id)], "members absent is no members (RFC 7644 §3.5.1); the group account's membership stays");
  const [event] = await api.db.owner.execute<{ details: { member_ids: number[] } }>(
    sql`select details from audit_events where target_type = 'department' and target_id = ${String(id)} and action = 'department.updated' order by occurred_at desc limit 1`,
  );
  t.same(event!.details.member_ids, [], 'the trail records the replaced membership');
  const eventCount = async () =>
    (
      await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from audit_events where target_type = 'department' and target_id = ${String(id)}`)
    )[0]!.n;
  const before = await eventCount();
  const again = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced' });
  t.equal(again.status, 200);
  t.equal(await eventCount(), before, 'a PUT that changes nothing records no event');

  const nulled = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced', members: [{ value: String(ann.id) }] });
  t.same(await memberIds(id), idsOf(ann.id, groupAccount.id));
  t.equal(nulled.status, 200);
  t.equal((await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced', members: null })).status, 200);
  t.same(await memberIds(id), [String(groupAccount.id)], 'members null is no members too');

  // A PATCH changes what it names: a rename keeps the members.
  await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'Replaced', members: [{ value: String(ben.id) }] });
  const renamed = await scim('PATCH', `/Groups/${id}`, { schemas: [PATCH], Operations: [{ op: 'replace', value: { displayName: 'Replaced again' } }] });
  t.equal(renamed.status, 200);
  t.same(await memberIds(id), idsOf(ben.id, groupAccount.id), 'a PATCH rename keeps the members');
});

t.test('externalId: stored on the department, answered, filtered case-exactly, replaced by PUT, audited', async (t) => {
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'With external id', externalId: 'entra-7f3a' });
  t.equal(created.status, 201);
  t.equal(created.body.externalId, 'entra-7f3a', 'answered');
  const id = Number(created.body.id);
  t.equal((await scim('GET', `/Groups/${id}`)).body.externalId, 'entra-7f3a', 'stored');
  const [row] = await api.db.owner.execute<{ external_id: string }>(sql`select external_id from departments where id = ${id}`);
  t.equal(row!.external_id, 'entra-7f3a', 'on the department');

  const found = await scim('GET', `/Groups?filter=${encodeURIComponent('externalId eq "entra-7f3a"')}`);
  t.equal(found.body.totalResults, 1);
  t.equal(found.body.Resources[0].id, String(id));
  t.equal((await scim('GET', `/Groups?filter=${encodeURIComponent('externalId eq "ENTRA-7F3A"')}`)).body.totalResults, 0, 'case-exact');

  const foreign = await createDepartment(api.db, other.tenantId, 'Foreign with external id');
  await api.db.owner.execute(sql`update departments set external_id = 'entra-7f3a' where id = ${foreign.id}`);
  t.equal((await scim('GET', `/Groups?filter=${encodeURIComponent('externalId eq "entra-7f3a"')}`)).body.totalResults, 1, "another tenant's is not found");
  const twin = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Same external id', externalId: 'entra-7f3a' });
  t.equal(twin.status, 201, 'not unique: RFC 7643 §3.1 leaves that to each provisioning client');

  const patched = await scim('PATCH', `/Groups/${id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'externalId', value: 'entra-8b4c' }] });
  t.equal(patched.body.externalId, 'entra-8b4c', 'PATCH replaces it');
  const put = await scim('PUT', `/Groups/${id}`, { schemas: [GROUP], displayName: 'With external id' });
  t.equal(put.status, 200);
  t.notOk('externalId' in put.body, 'a PUT without it removes it');
  const events = await api.db.owner.execute<{ action: string; changes: Record<string, unknown> }>(
    sql`select action, changes from audit_events where target_type = 'department' and target_id = ${String(id)} order by occurred_at`,
  );
  t.same(
    events.map((event) => event.changes.external_id),
    [
      { from: null, to: 'entra-7f3a' },
      { from: 'entra-7f3a', to: 'entra-8b4c' },
      { from: 'entra-8b4c', to: null },
    ],
    'each change is in the trail',
  );
  const api_ = await api.call(t, 'getDepartment', { token: tenant.adminToken, params: { department: id } });
  t.notOk('external_id' in api_.body, 'the API answers departments as before');
});

t.test('a PUT or PATCH that changes nothing (a periodic sync) leaves meta.lastModified and records no event', async (t) => {
  const members = [{ value: String(ann.id) }, { value: String(ben.id) }];
  const created = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Synced', externalId: 'okta-synced', members })).body;
  const path = `/Groups/${created.id}`;
  const past = await backdateUpdatedAt(api.db, 'departments', Number(created.id));
  const events = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);
  const before = await events();
  const { meta: _meta, id: _id, ...resource } = (await scim('GET', path)).body;
  const put = await scim('PUT', path, { ...resource, members: [...resource.members].reverse() });
  t.equal(put.status, 200);
  t.equal(put.body.meta.lastModified, past, 'a PUT of the group as read, its members in another order');
  const patch = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      { op: 'replace', path: 'displayName', value: 'Synced' },
      { op: 'add', path: 'members', value: [{ value: String(ann.id) }] },
      { op: 'replace', path: 'externalId', value: 'okta-synced' },
    ],
  });
  t.equal(patch.status, 200);
  t.equal(patch.body.meta.lastModified, past, 'a PATCH of the values it has');
  t.equal(await events(), before, 'and neither records an event');
  const removed = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: `members[value eq "${ben.id}"]` }] });
  t.equal(removed.status, 200);
  t.not(removed.body.meta.lastModified, past, 'a change of its members moves it');
  t.equal(await events(), before + 1);
});

t.test('a filter on externalId is an index scan in the tenant', async (t) => {
  const plan = await api.db.tenant(tenant.tenantId, async (tx) => {
    // With this few rows a sequential scan costs less: forbid it, so the plan shows whether an index can serve the filter at all.
    await tx.execute(sql`set local enable_seqscan = off`);
    const rows = await tx.execute<{ 'QUERY PLAN': string }>(
      sql`explain ${tx.select({ n: count() }).from(departments).where(parseFilter('externalId eq "entra-7f3a"', GROUP_ATTRIBUTES))}`,
    );
    return rows.map((row) => row['QUERY PLAN']).join('\n');
  });
  t.match(plan, /Index (Only )?Scan using departments_tenant_id_external_id_idx|Bitmap Index Scan on departments_tenant_id_external_id_idx/, plan);
  t.match(plan, /Index Cond: \(\(tenant_id = .*\) AND \(external_id = /, 'tenant and externalId are both index conditions');
});

/**
 * Where a session waiting on a lock shows: this server's sessions; on Citus, every node's
 * (`citus_stat_activity`), since the row is locked, and waited on, on the worker that holds
 * it, while the coordinator's session only waits for that worker's answer.
 */
const activity = process.env[CITUS_ENV] ? 'citus_stat_activity' : 'pg_stat_activity';

/**
 * Runs `write` while another transaction holds `statement` uncommitted, a write that took no
 * lock of the rules (so their checks cannot see it): `write` waits on the unique rule, and
 * loses once the other commits.
 */
async function racedBy<T>(t: Parameters<typeof api.call>[0], statement: string, write: () => Promise<T>): Promise<T> {
  const other = postgres(api.config.databaseUrl!, { max: 1, onnotice: () => {} });
  t.teardown(() => other.end({ timeout: 1 }));
  let answer!: Promise<T>;
  await other.begin(async (tx) => {
    await tx.unsafe(statement);
    answer = write();
    const waiting = await eventually(
      async () =>
        (await tx<{ n: number }[]>`select count(*)::int as n from ${tx(activity)} where datname = current_database() and wait_event_type = 'Lock'`)[0]!.n,
      (n) => n > 0,
    );
    t.ok(waiting > 0, 'the SCIM write waits on the uncommitted row');
  });
  return answer;
}

t.test("a lost race on a group's displayName is a 409 naming it; a membership made meanwhile is waited for and kept", async (t) => {
  const contested = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Before the race' })).body;
  const renamed = await racedBy(t, `insert into departments (tenant_id, name) values (${tenant.tenantId}, 'Contested')`, () =>
    scim('PUT', `/Groups/${contested.id}`, { schemas: [GROUP], displayName: 'Contested' }),
  );
  t.equal(renamed.status, 409);
  t.match(renamed.body, { schemas: [ERROR], status: '409', scimType: 'uniqueness' });
  t.match(renamed.body.detail, /displayName/, renamed.body.detail);
  t.notMatch(renamed.body.detail, /userName/);
  t.equal((await scim('GET', `/Groups/${contested.id}`)).body.displayName, 'Before the race', 'the group keeps its name');

  const joined = await racedBy(
    t,
    `insert into department_users (tenant_id, department_id, user_id) values (${tenant.tenantId}, ${contested.id}, ${ann.id})`,
    () => scim('PATCH', `/Groups/${contested.id}`, { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id) }] }] }),
  );
  // The PATCH holds the group's row while it reads the members, so it waited for the membership and found it made.
  t.equal(joined.status, 200);
  t.match(joined.body, { members: [{ value: String(ann.id) }] });
  t.same(await memberIds(Number(contested.id)), [String(ann.id)], 'one membership');
});

t.test("a PUT whose body's id names another group is a mutability error and changes nothing", async (t) => {
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Immutable id', members: [{ value: String(ann.id) }] });
  t.equal(created.status, 201);
  const other = Number(created.body.id) + 1000;
  for (const id of [String(other), other]) {
    const res = await scim('PUT', `/Groups/${created.body.id}`, { schemas: [GROUP], id, displayName: 'Renamed' });
    t.equal(res.status, 400, `id ${JSON.stringify(id)}: 400`);
    t.equal(res.body.scimType, 'mutability');
  }
  t.match(
    (await scim('GET', `/Groups/${created.body.id}`)).body,
    { displayName: 'Immutable id', members: [{ value: String(ann.id) }] },
    'the group is as it was',
  );
  const same = await scim('PUT', `/Groups/${created.body.id}`, { schemas: [GROUP], id: created.body.id, displayName: 'Renamed' });
  t.equal(same.status, 200, 'its own id is no change');
});

t.test('attributes or excludedAttributes given twice, or with brackets, is invalidValue, on reads and writes alike', async (t) => {
  const created = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Twice projected' });
  t.equal(created.status, 201);
  for (const query of ['attributes=displayName&attributes=id', 'excludedAttributes=members&excludedAttributes=meta', 'attributes[x]=displayName']) {
    for (const [method, url, body] of [
      ['GET', `/Groups?${query}`],
      ['GET', `/Groups?filter=${encodeURIComponent('displayName eq "no such group"')}&${query}`],
      ['GET', `/Groups/${created.body.id}?${query}`],
      ['PUT', `/Groups/${created.body.id}?${query}`, { schemas: [GROUP], displayName: 'Changed' }],
    ] as const) {
      const res = await scim(method, url, body);
      t.equal(res.status, 400, `${method} ${url}: 400`);
      t.match(res.body, { scimType: 'invalidValue', detail: /given once/ });
    }
  }
  t.equal((await scim('GET', `/Groups/${created.body.id}`)).body.displayName, 'Twice projected', 'the refused PUT changed nothing');
});

t.test('attributes and excludedAttributes shape the answers of POST, PUT and PATCH too', async (t) => {
  const created = await scim('POST', '/Groups?attributes=displayName', { schemas: [GROUP], displayName: 'Projected', members: [{ value: String(ann.id) }] });
  t.equal(created.status, 201);
  t.strictSame(created.body, { schemas: [GROUP], id: created.body.id, displayName: 'Projected', meta: { resourceType: 'Group' } });
  const put = await scim('PUT', `/Groups/${created.body.id}?excludedAttributes=members`, {
    schemas: [GROUP],
    displayName: 'Projected again',
    members: [{ value: String(ann.id) }],
  });
  t.equal(put.status, 200);
  t.notOk('members' in put.body, 'members left out');
  t.equal(put.body.displayName, 'Projected again');
  const patched = await scim('PATCH', `/Groups/${created.body.id}?attributes=members.value`, {
    schemas: [PATCH],
    Operations: [{ op: 'add', path: 'members', value: [{ value: String(ben.id) }] }],
  });
  t.equal(patched.status, 200);
  t.strictSame(patched.body, {
    schemas: [GROUP],
    id: created.body.id,
    members: [{ value: String(ann.id) }, { value: String(ben.id) }].sort((a, b) => Number(a.value) - Number(b.value)),
    meta: { resourceType: 'Group' },
  });
  t.same(await memberIds(Number(created.body.id)), idsOf(ann.id, ben.id), 'the write itself is whole');

  const minimal = async (query: string, displayName: string) => {
    const url = `/scim/v2/Groups/${created.body.id}${query}`;
    const response = await wire.send({
      method: 'PATCH',
      url,
      headers: { ...bearer(scimToken), 'content-type': 'application/scim+json', prefer: 'return=minimal' },
      payload: JSON.stringify({ schemas: [PATCH], Operations: [{ op: 'replace', path: 'displayName', value: displayName }] }),
    });
    assertServedAnswer('PATCH', url, response);
    return response;
  };
  t.equal((await minimal('', 'Minimal')).statusCode, 204, 'Prefer: return=minimal answers no body');
  const asked = await minimal('?attributes=displayName', 'Minimal asked');
  t.equal(asked.statusCode, 200, 'unless attributes asks for one, as for Users');
  t.strictSame(asked.json(), { schemas: [GROUP], id: created.body.id, displayName: 'Minimal asked', meta: { resourceType: 'Group' } });
});

/** A SCIM group of `count` employees, made in SQL (as many as no test would provision one by one), and its member ids. */
async function groupOfMembers(displayName: string, count: number): Promise<{ group: { id: string }; members: string[] }> {
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName })).body;
  await api.db.owner.execute(sql`
    with made as (
      insert into users (tenant_id, username, role_id, first_name, last_name)
      select ${tenant.tenantId}, ${displayName.toLowerCase()} || '-' || g, ${employee.id}, ${displayName}, 'Member ' || g from generate_series(1, ${count}) g
      returning id)
    insert into department_users (tenant_id, department_id, user_id) select ${tenant.tenantId}, ${Number(group.id)}, id from made`);
  // Thousands of rows written at once, as a bulk load does: PostgreSQL's autovacuum would analyze them within a
  // minute. Until then a plan cached while the tables were small joins each member with every user (3 s a read).
  await api.db.owner.execute(sql`analyze users, department_users`);
  return { group, members: await memberIds(Number(group.id)) };
}

t.test('a PATCH whose value filters would hold the process is refused; removing members by id is cheap at any size', async (t) => {
  const { group, members } = await groupOfMembers('Large', 2000);
  t.equal(members.length, 2000);
  // Many removals, each by a long `or` of ids: a few hundred thousand comparisons and more.
  const filter = Array.from({ length: 90 }, (_, i) => `value eq "${9_000_000 + i}"`).join(' or ');
  const heavy = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: Array.from({ length: 50 }, () => ({ op: 'remove', path: `members[${filter}]` })),
  });
  t.equal(heavy.status, 400);
  t.equal(heavy.body.scimType, 'invalidValue');
  t.match(heavy.body.detail, /value filters would compare 9000000 values/);
  t.equal((await memberIds(Number(group.id))).length, 2000, 'and changes nothing');
  // A thousand removals by id, as Okta sends them (and Entra ID's form becomes): 2,000,000 comparisons for scim-patch.
  const removed = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: members.slice(0, 1000).map((id) => ({ op: 'remove', path: `members[value eq "${id}"]` })),
  });
  t.equal(removed.status, 200);
  t.strictSame(await memberIds(Number(group.id)), members.slice(1000), 'the thousand are gone, the others stay');
});

t.test('a write of a group of thousands changes the members it names and keeps the rest', async (t) => {
  // saveGroup compares the stored members with the written ones: searched list in list, 10,000 members held the
  // process for 200 ms on a rename. The answers are pinned here, not the time.
  const { group, members } = await groupOfMembers('Thousands', 3000);
  t.equal(members.length, 3000);
  const renamed = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'displayName', value: 'Thousands renamed' }],
  });
  t.equal(renamed.status, 200);
  t.strictSame(await memberIds(Number(group.id)), members, 'a rename keeps every member');
  const changed = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: [
      { op: 'add', path: 'members', value: [{ value: String(ann.id) }, { value: members[5] }] },
      { op: 'remove', path: 'members', value: [{ value: members[0] }, { value: members[2999] }] },
    ],
  });
  t.equal(changed.status, 200);
  t.strictSame(
    await memberIds(Number(group.id)),
    idsOf(ann.id, ...members.slice(1, 2999).map(Number)),
    'the one added joins, the two removed leave, a member added again stays once',
  );
  // An add of a list is applied as scim-patch applies it (a value held already, as JSON, is not added again), but
  // looked up by its JSON: scim-patch compared each added value with every member, 1000 with 10,000 a quarter second.
  const made = await api.db.owner.execute<{ id: string }>(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${tenant.tenantId}, 'thousands-new-' || g, ${employee.id}, 'Thousands', 'New ' || g from generate_series(1, 500) g
    returning id`);
  const held = (await scim('GET', `/Groups/${group.id}`)).body.members as { value: string }[];
  const added = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: [
      {
        op: 'add',
        path: 'members',
        value: [
          ...held.slice(0, 250).map((member) => Object.fromEntries(Object.entries(member).reverse())),
          ...held.slice(250, 500).map((member) => ({ value: member.value })),
          ...made.map((row) => ({ value: String(row.id) })),
        ],
      },
    ],
  });
  t.equal(added.status, 200);
  t.strictSame(
    await memberIds(Number(group.id)),
    idsOf(ann.id, ...members.slice(1, 2999).map(Number), ...made.map((row) => Number(row.id))),
    'the five hundred new join, the five hundred held stay once',
  );
  // Adds in a row, and between them removals that change the list another way: each add reads the list as it is then.
  const [first, second] = made.map((row) => String(row.id));
  const mixed = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: [
      { op: 'remove', path: `members[value eq "${first}"]` },
      { op: 'add', path: 'members', value: [{ value: first }] },
      { op: 'add', path: 'members', value: [{ value: first }] },
      { op: 'remove', path: 'members', value: [{ value: first }, { value: second }] },
      { op: 'add', path: 'members', value: [{ value: second }] },
    ],
  });
  t.equal(mixed.status, 200);
  const after = await memberIds(Number(group.id));
  t.ok(!after.includes(first!) && after.includes(second!) && after.length === 3498, 'the last word on each member holds');
});

t.test('a POST or PUT naming more members than a statement takes parameters (22,000) is answered, not a 500', async (t) => {
  // Each membership took three parameters of one insert: past 21,844 members PostgreSQL's limit of 65,535 was passed
  // and the identity provider's "All employees" group was answered 500.
  const large = await api.createTenant('scim-groups-large');
  const largeEmployee = await roleNamed(api.db, large.tenantId, 'Employee');
  const made = await api.db.owner.execute<{ id: string }>(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${large.tenantId}, 'everyone-' || g, ${largeEmployee.id}, 'Every', 'One ' || g from generate_series(1, 22000) g
    returning id`);
  const everyone = made.map((row) => String(row.id));
  const token = await tokenOf(large.tenantId, large.adminUserId);
  const created = await scim(
    'POST',
    '/Groups?excludedAttributes=members',
    { schemas: [GROUP], displayName: 'All employees', members: everyone.map((value) => ({ value })) },
    token,
  );
  t.equal(created.status, 201);
  const id = Number(created.body.id);
  t.strictSame(await memberIds(id), idsOf(...everyone.map(Number)), 'every member joins');
  const emptied = await scim('PUT', `/Groups/${id}?excludedAttributes=members`, { schemas: [GROUP], displayName: 'All employees' }, token);
  t.equal(emptied.status, 200);
  t.strictSame(await memberIds(id), [], 'a PUT without members removes all 22,000');
  const refilled = await scim(
    'PUT',
    `/Groups/${id}?excludedAttributes=members`,
    { schemas: [GROUP], displayName: 'All employees', members: everyone.map((value) => ({ value })) },
    token,
  );
  t.equal(refilled.status, 200);
  t.equal((await memberIds(id)).length, 22000, 'and a PUT naming them all adds them again');
});

t.test(`a page of groups lists at most ${MAX_LISTED_MEMBERS} members: it ends before the group that would pass them`, async (t) => {
  // Groups share members: a page of 200 groups of a large tenant listed millions, all held in memory at once.
  const half = MAX_LISTED_MEMBERS / 2 + 1;
  const a = await groupOfMembers('Crowd A', half);
  const b = await groupOfMembers('Crowd B', half);
  const both = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Crowd C' })).body;
  await api.db.owner.execute(sql`insert into department_users (tenant_id, department_id, user_id)
    select tenant_id, ${Number(both.id)}, user_id from department_users where department_id in (${Number(a.group.id)}, ${Number(b.group.id)})`);
  const page = (startIndex: number) => scim('GET', `/Groups?filter=${encodeURIComponent('displayName sw "Crowd"')}&startIndex=${startIndex}`);
  const first = await page(1);
  t.equal(first.status, 200);
  t.match(first.body, { totalResults: 3, startIndex: 1, itemsPerPage: 1 }, `A and B hold ${2 * half} members`);
  t.strictSame(idsOf(...first.body.Resources[0].members.map((m: { value: string }) => Number(m.value))), a.members, 'A with every member');
  const second = await page(2);
  t.match(second.body, { totalResults: 3, startIndex: 2, itemsPerPage: 1 });
  t.equal(second.body.Resources[0].id, b.group.id);
  const third = await page(3);
  t.match(third.body, { totalResults: 3, startIndex: 3, itemsPerPage: 1 }, 'a group beyond the bound alone');
  t.equal(third.body.Resources[0].members.length, 2 * half, 'whole, as GET /Groups/{id} answers it');
  const without = await scim('GET', `/Groups?filter=${encodeURIComponent('displayName sw "Crowd"')}&excludedAttributes=members`);
  t.match(without.body, { totalResults: 3, itemsPerPage: 3 }, 'without members, a whole page');
});

t.test('a replace of members with one member, not a list, makes that user the only member, of an empty group too', async (t) => {
  const empty = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Replaced from empty' })).body;
  const filled = await scim('PATCH', `/Groups/${empty.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'members', value: { value: String(ann.id) } }],
  });
  t.equal(filled.status, 200);
  t.same(await memberIds(Number(empty.id)), [String(ann.id)], 'the member is added, not dropped');
  const full = (
    await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Replaced from two', members: [{ value: String(ann.id) }, { value: String(ben.id) }] })
  ).body;
  const replaced = await scim('PATCH', `/Groups/${full.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'members', value: { value: String(ben.id) } }],
  });
  t.equal(replaced.status, 200);
  t.same(await memberIds(Number(full.id)), [String(ben.id)], 'the one named replaces them all');
  const text = await scim('PATCH', `/Groups/${empty.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'members', value: 'x' }] });
  t.equal(text.status, 400, 'a text is no member, whether the group is empty or not');
  t.equal(text.body.scimType, 'invalidValue');
  t.same(await memberIds(Number(empty.id)), [String(ann.id)], 'and changes nothing');
});

t.test('value filters are judged on the members an earlier operation of the same PATCH added', async (t) => {
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Filled and filtered' })).body;
  const made = await api.db.owner.execute<{ id: string }>(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name)
    select ${tenant.tenantId}, 'filled-' || g, ${employee.id}, 'Filled', 'Member ' || g from generate_series(1, 1000) g
    returning id`);
  // The group is empty when the PATCH arrives: its filters would search nothing, were they judged on the group as it was.
  const filter = Array.from({ length: 90 }, (_, i) => `value eq "${9_000_000 + i}"`).join(' or ');
  const heavy = await scim('PATCH', `/Groups/${group.id}?excludedAttributes=members`, {
    schemas: [PATCH],
    Operations: [
      { op: 'add', path: 'members', value: made.map((row) => ({ value: String(row.id) })) },
      ...Array.from({ length: 50 }, () => ({ op: 'remove', path: `members[${filter}]` })),
    ],
  });
  t.equal(heavy.status, 400);
  t.equal(heavy.body.scimType, 'invalidValue');
  t.match(heavy.body.detail, /value filters would compare .* more than 200000/);
  t.same(await memberIds(Number(group.id)), [], 'and changes nothing');
});

t.test("attributes and filters may name a Group attribute with the Group schema's URN", async (t) => {
  const group = (await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Qualified names', members: [{ value: String(ann.id) }] })).body;
  const only = await scim('GET', `/Groups/${group.id}?attributes=${encodeURIComponent(`${GROUP}:members`)}`);
  t.equal(only.status, 200);
  t.match(only.body.members, [{ value: String(ann.id) }], 'the members are answered');
  const filtered = await scim('GET', `/Groups?filter=${encodeURIComponent(`${GROUP}:displayName eq "Qualified names"`)}`);
  t.equal(filtered.status, 200);
  t.strictSame(
    filtered.body.Resources.map((found: { id: string }) => found.id),
    [group.id],
  );
});

t.test('a user belongs to at most 1000 groups: an add past it is invalidValue and changes nothing', async (t) => {
  // The user API's `department_ids` takes at most 1000; SCIM adds one group at a time, so each write is judged.
  const busy = await api.createUser(tenant.tenantId, { username: 'busy-member' });
  await api.db.owner.execute(sql`
    with made as (insert into departments (tenant_id, name) select ${tenant.tenantId}, 'busy ' || g from generate_series(1, 999) g returning id)
    insert into department_users (tenant_id, department_id, user_id) select ${tenant.tenantId}, id, ${busy.id} from made`);
  const memberships = () => rowCount(api.db, 'department_users', sql`user_id = ${busy.id}`);
  const thousandth = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'busy thousandth', members: [{ value: String(busy.id) }] });
  t.equal(thousandth.status, 201, 'the thousandth group');
  const before = await departmentCount();
  const created = await scim('POST', '/Groups', {
    schemas: [GROUP],
    displayName: 'busy one too many',
    members: [{ value: String(ann.id) }, { value: String(busy.id) }],
  });
  t.equal(created.status, 400);
  t.equal(created.body.scimType, 'invalidValue');
  t.match(created.body.detail, new RegExp(`at most 1000 groups; user ${busy.id} would`));
  t.equal(await departmentCount(), before, 'no group created');
  const empty = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'busy empty' });
  t.equal(empty.status, 201);
  const patched = await scim('PATCH', `/Groups/${empty.body.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'add', path: 'members', value: [{ value: String(ann.id) }, { value: String(busy.id) }] }],
  });
  t.equal(patched.status, 400);
  t.equal(patched.body.scimType, 'invalidValue');
  t.strictSame(await memberIds(Number(empty.body.id)), [], 'no member added, not even the one with room');
  t.equal(await memberships(), 1000);
  const replaced = await scim('PUT', `/Groups/${empty.body.id}`, { schemas: [GROUP], displayName: 'busy empty', members: [{ value: String(busy.id) }] });
  t.equal(replaced.status, 400, 'a PUT too');
  t.equal(await memberships(), 1000);
  // A concurrent group write that adds the user (it holds the user's row as a group write does, and adds a membership):
  // this one waits for it, then counts its membership too.
  const [concurrent] = await api.db.owner.execute<{ id: number }>(
    sql`insert into departments (tenant_id, name) values (${tenant.tenantId}, 'busy concurrent') returning id`,
  );
  await api.db.owner.execute(sql`delete from department_users where user_id = ${busy.id} and department_id = ${Number(thousandth.body.id)}`);
  const raced = await racedBy(
    t,
    `with held as (select tenant_id, id from users where id = ${busy.id} for share)
      insert into department_users (tenant_id, department_id, user_id) select tenant_id, ${concurrent!.id}, id from held`,
    () =>
      scim('PATCH', `/Groups/${thousandth.body.id}`, { schemas: [PATCH], Operations: [{ op: 'add', path: 'members', value: [{ value: String(busy.id) }] }] }),
  );
  t.equal(raced.status, 400, 'the write that came second counts the first one’s membership');
  t.equal(await memberships(), 1000);
  const listed = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: busy.id }, query: { relations: 'departments' } });
  t.equal(listed.status, 200);
  t.equal(listed.body.departments.length, 1000, 'the relation within its maxItems');
});

t.test('a refusal names at most 20 unknown members, and how many more there are', async (t) => {
  const unknown = Array.from({ length: 45 }, (_, index) => String(900_000 + index));
  const refused = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Unknown members', members: unknown.map((value) => ({ value })) });
  t.equal(refused.status, 400);
  t.equal(refused.body.detail, `members: no user ${unknown.slice(0, 20).join(', ')} and 25 more.`);
  const few = await scim('POST', '/Groups', { schemas: [GROUP], displayName: 'Unknown members', members: [{ value: '900100' }] });
  t.equal(few.body.detail, 'members: no user 900100.');
});

t.test('a filter naming what every JavaScript object has is an unknown attribute', async (t) => {
  for (const filter of ['constructor eq "x"', '__proto__ eq "x"', 'constructor pr', 'not (__proto__ pr)']) {
    const res = await scim('GET', `/Groups?filter=${encodeURIComponent(filter)}`);
    t.equal(res.status, 400, filter);
    t.match(res.body, { schemas: [ERROR], status: '400', scimType: 'invalidFilter', detail: /cannot be filtered on/ }, filter);
  }
});

t.test('groups are filtered on meta.created and meta.lastModified, as shown to the millisecond', async (t) => {
  const group = await createDepartment(api.db, tenant.tenantId, 'Filtered by instant');
  await api.db.owner.execute(
    sql`update departments set created_at = '2026-01-02T03:04:05.678901Z', updated_at = '2026-02-03T04:05:06.789012Z' where id = ${group.id}`,
  );
  const shown = (await scim('GET', `/Groups/${group.id}`)).body.meta;
  t.same([shown.created, shown.lastModified], ['2026-01-02T03:04:05.678Z', '2026-02-03T04:05:06.789Z']);
  for (const [filter, matches] of [
    [`meta.created eq "${shown.created}"`, true],
    [`meta.lastModified eq "${shown.lastModified}"`, true],
    [`meta.lastModified gt "${shown.lastModified}"`, false],
    [`meta.lastModified ge "${shown.lastModified}"`, true],
    [`meta.created lt "${shown.created}"`, false],
    [`meta.created le "${shown.created}"`, true],
  ] as const) {
    const res = await scim('GET', `/Groups?filter=${encodeURIComponent(`${filter} and id eq "${group.id}"`)}&excludedAttributes=members`);
    t.equal(res.status, 200, filter);
    t.equal(res.body.totalResults, matches ? 1 : 0, filter);
  }
});

t.test('a PUT as read that drops the values of a field no longer attached records the change', async (t) => {
  const set = await api.call(t, 'createAttributeSet', { token: tenant.adminToken, body: { name: 'Sync colours', fields: [{ key: 'hue', type: 'string' }] } });
  t.equal(set.status, 201);
  const created = await api.call(t, 'createDepartment', {
    token: tenant.adminToken,
    body: { name: 'Coloured', attribute_set_ids: [set.body.id], hue: 'red' } as never,
  });
  t.equal(created.status, 201);
  const id = created.body.id as number;
  // The field goes; the department keeps its value until its next write (docs/departments.md#attribute-sets-and-values).
  const retired = await api.call(t, 'updateAttributeSet', {
    token: tenant.adminToken,
    params: { attributeSet: set.body.id },
    body: { name: 'Sync colours', fields: [] },
  });
  t.equal(retired.status, 200);
  t.same((await api.call(t, 'getDepartment', { token: tenant.adminToken, params: { department: id } })).body.attributes, { hue: 'red' });
  const past = await backdateUpdatedAt(api.db, 'departments', id);
  const events = () => rowCount(api.db, 'audit_events', sql`target_type = 'department' and target_id = ${String(id)}`);
  const before = await events();
  const { meta: _meta, id: _id, ...resource } = (await scim('GET', `/Groups/${id}`)).body;
  const put = await scim('PUT', `/Groups/${id}`, resource);
  t.equal(put.status, 200);
  const after = (await api.call(t, 'getDepartment', { token: tenant.adminToken, params: { department: id } })).body;
  t.same(after.attributes, {}, 'the value is dropped');
  t.not(put.body.meta.lastModified, past, 'which moves meta.lastModified');
  t.equal(await events(), before + 1, 'and is in the trail');
  const [event] = await api.db.owner.execute<{ changes: Record<string, unknown> }>(
    sql`select changes from audit_events where target_type = 'department' and target_id = ${String(id)} order by occurred_at desc limit 1`,
  );
  t.same(event!.changes, { attributes: { from: { hue: 'red' }, to: {} } }, 'as the change it is');
});
