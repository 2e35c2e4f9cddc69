import t from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';
import { entityPermissions } from '../../../src/resources/entity-permissions/table.ts';
import { acceptedPolicies, termsOfUse } from '../../../src/resources/terms-of-use/table.ts';
import { selectUsers, usersWithRoleGrants } from '../../../src/resources/users/queries.ts';
import { MAX_DEPARTMENTS_SHOWN, MAX_ENTITY_PERMISSIONS_SHOWN } from '../../../src/resources/users/view.ts';
import { userProfilePictures, users } from '../../../src/resources/users/table.ts';
import { createDepartment, roleNamed } from '../../helpers/fixtures.ts';
import { PNG_1X1 } from '../../helpers/multipart.ts';

const api = await startTestApi(t);

/** A tenant with `count` users, each with a department, an entity permission, an accepted policy and a picture. */
async function tenantWithUsers(slug: string, count: number) {
  const tenant = await api.createTenant(slug);
  const tenantId = tenant.tenantId;
  const role = await roleNamed(api.db, tenantId, 'Employee');
  const [terms] = await api.db.owner.insert(termsOfUse).values({ tenantId, title: 'Terms', version: '1' }).returning();
  const created = await api.db.owner
    .insert(users)
    .values(Array.from({ length: count }, (_, i) => ({ tenantId, username: `u${i}`, firstName: 'U', lastName: `L${i}`, roleId: role!.id, langId: 'de-DE' })))
    .returning({ id: users.id });
  await createDepartment(
    api.db,
    tenantId,
    'All',
    created.map((u) => u.id),
  );
  await api.db.owner
    .insert(entityPermissions)
    .values(created.map((u) => ({ tenantId, entityType: 'menuItem', entityId: 1, subjectType: 'user' as const, subjectId: u.id })));
  await api.db.owner.insert(acceptedPolicies).values(created.map((u) => ({ tenantId, userId: u.id, termsOfUseId: terms!.id })));
  await api.db.owner
    .insert(userProfilePictures)
    .values(created.map((u) => ({ tenantId, userId: u.id, mediaType: 'image/png', fileName: 'p.png', content: PNG_1X1, etag: 'e' })));
  return tenant;
}

const small = await tenantWithUsers('queries-small', 10);
const large = await tenantWithUsers('queries-large', 1000);

async function countListQueries(token: string, expected: number) {
  const before = api.db.queryCount;
  const res = await api.call(t, 'listUsers', { token, query: { relations: 'role|language|departments|entityPermissions|acceptedPolicies' } });
  t.equal(res.status, 200);
  t.equal(res.body.length, expected + 1, 'every user plus the administrator');
  const last = res.body.find((u: { username: string }) => u.username === 'u0');
  t.match(last, {
    departments: [{ name: 'All' }],
    entityPermissions: [{ entity_type: 'menuItem' }],
    acceptedPolicies: [{ title: 'Terms' }],
    language: { id: 'de-DE' },
    role: { name: 'Employee' },
  });
  t.match(last.profile_picture_url, /^\/users\/\d+\/profile-picture\/p\.png\?/);
  return api.db.queryCount - before;
}

t.test('listing 1,000 users with every relation costs as many queries as 10', async (t) => {
  const ten = await countListQueries(small.adminToken, 10);
  const thousand = await countListQueries(large.adminToken, 1000);
  t.equal(thousand, ten, `${ten} statements either way`);
  t.ok(ten <= 8, 'a handful: tenant setting, users, one per relation');
});

t.test('reading users for an answer never reads their password hashes', async (t) => {
  // The statements `GET /api/users` and the CSV preview read users with: no column of them is the hash.
  const statements = await api.db.tenant(small.tenantId, async (tx) => [selectUsers(tx).toSQL().sql, usersWithRoleGrants(tx).toSQL().sql]);
  for (const statement of statements) {
    t.match(statement, /"users"\."username"/, 'a statement reading users');
    t.notMatch(statement, /password_hash/, 'without the password hash');
  }
});

t.test('a list of more users than a statement takes parameters loads their relations', async (t) => {
  // PostgreSQL takes at most 65,535 parameters in a statement: a relation that named each user as one answered 500.
  const crowd = await api.createTenant('queries-crowd');
  const role = await roleNamed(api.db, crowd.tenantId, 'Employee');
  await api.db.owner.execute(sql`insert into users (tenant_id, username, role_id)
    select ${crowd.tenantId}, 'crowd' || g, ${role!.id} from generate_series(1, 65536) g`);
  const listed = await api.call(t, 'listUsers', {
    token: crowd.adminToken,
    query: { selects: 'id', relations: 'departments|acceptedPolicies|entityPermissions', filter: { text: 'crowd' } },
  });
  t.equal(listed.status, 200);
  t.equal(listed.body.length, 65536);
  t.strictSame(listed.body[0], { id: listed.body[0].id, departments: [], acceptedPolicies: [], entityPermissions: [] });
});

/** A tenant of its own with `count` employees named `<prefix>1` … (inserted by the owner, statistics taken). */
async function tenantOfUsers(slug: string, prefix: string, count: number) {
  const crowd = await api.createTenant(slug);
  const role = await roleNamed(api.db, crowd.tenantId, 'Employee');
  await api.db.owner.execute(
    sql`insert into users (tenant_id, username, role_id) select ${crowd.tenantId}, ${prefix} || g, ${role!.id} from generate_series(1, ${count}) g`,
  );
  await api.db.owner.execute(sql`analyze users`);
  return crowd;
}

t.test(`relation departments shows at most ${MAX_DEPARTMENTS_SHOWN} memberships in one answer: more are refused (422), not loaded`, async (t) => {
  // A user may be in 1000 departments, and the list is unpaged without limit: 5,000 users in 200 departments took 13 s.
  const perUser = 1000;
  const members = MAX_DEPARTMENTS_SHOWN / perUser + 1;
  const crowd = await tenantOfUsers('queries-departments', 'member', members);
  await api.db.owner.execute(sql`insert into departments (tenant_id, name) select ${crowd.tenantId}, 'Department ' || g from generate_series(1, ${perUser}) g`);
  await api.db.owner.execute(sql`insert into department_users (tenant_id, department_id, user_id)
    select ${crowd.tenantId}, d.id, u.id from departments d, users u where d.tenant_id = ${crowd.tenantId} and u.tenant_id = ${crowd.tenantId} and u.username like 'member%'`);
  const query = { selects: 'id', relations: 'departments', filter: { text: 'member' } };
  const all = await api.call(t, 'listUsers', { token: crowd.adminToken, query });
  t.equal(all.status, 422, `${members * perUser} memberships`);
  t.match(all.body.errors, { relations: [new RegExp(`more than ${MAX_DEPARTMENTS_SHOWN} departments`)] });
  const page = await api.call(t, 'listUsers', { token: crowd.adminToken, query: { ...query, limit: members - 1 } });
  t.equal(page.status, 200, 'a page of fewer users');
  t.equal(page.body[0].departments.length, perUser);
});

t.test(`relation entityPermissions shows at most ${MAX_ENTITY_PERMISSIONS_SHOWN} in one answer: more are refused (422), not loaded`, async (t) => {
  // Each form or task template may name 1000 users, and a tenant may hold any number of them.
  const perUser = 1000;
  const named = MAX_ENTITY_PERMISSIONS_SHOWN / perUser + 1;
  const crowd = await tenantOfUsers('queries-entity-rights', 'named', named);
  await api.db.owner.execute(sql`insert into entity_permissions (tenant_id, entity_type, entity_id, subject_type, subject_id)
    select ${crowd.tenantId}, 'form', g, 'user', u.id from generate_series(1, ${perUser}) g, users u
    where u.tenant_id = ${crowd.tenantId} and u.username like 'named%'`);
  const query = { selects: 'id', relations: 'entityPermissions', filter: { text: 'named' } };
  const all = await api.call(t, 'listUsers', { token: crowd.adminToken, query });
  t.equal(all.status, 422, `${named * perUser} entity permissions`);
  t.match(all.body.errors, { relations: [new RegExp(`more than ${MAX_ENTITY_PERMISSIONS_SHOWN} entity permissions`)] });
  const page = await api.call(t, 'listUsers', { token: crowd.adminToken, query: { ...query, limit: named - 1 } });
  t.equal(page.status, 200, 'a page of fewer users');
  t.equal(page.body[0].entityPermissions.length, perUser);
});
