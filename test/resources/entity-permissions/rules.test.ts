/** missingSubjects against PostgreSQL: ids naming no record of the tenant, in the one wording. */
import t from 'tap';
import { MISSING_REFERENCE } from '../../../src/platform/database/existence.ts';
import { departments } from '../../../src/resources/departments/table.ts';
import { missingSubjects } from '../../../src/resources/entity-permissions/rules.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const home = await data.createTenant('subjects-home');
const away = await data.createTenant('subjects-away');
const member = await data.createUser(home.tenantId);
const deleted = await data.createUser(home.tenantId, { values: { deletedAt: new Date() } });
const stranger = await data.createUser(away.tenantId);
const unused = 2_000_000_000;

t.test('users that are deleted, of another tenant or unused are missing, per position', async (t) => {
  const errors = await data.db.tenant(home.tenantId, (tx) =>
    missingSubjects(tx, { user_ids: [member.id, deleted.id, stranger.id, member.id, unused] }, 'entity_permissions'),
  );
  t.strictSame(errors, {
    'entity_permissions.user_ids.1': [MISSING_REFERENCE],
    'entity_permissions.user_ids.2': [MISSING_REFERENCE],
    'entity_permissions.user_ids.4': [MISSING_REFERENCE],
  });
});

t.test('roles and departments: another tenant’s are missing; every list is checked; nothing sent, no query', async (t) => {
  const roleOf = (tenantId: number) => data.db.tenant(tenantId, async (tx) => (await tx.select({ id: roles.id }).from(roles).limit(1))[0]!.id);
  const departmentOf = async (tenantId: number) =>
    (
      await data.db.owner
        .insert(departments)
        .values({ tenantId, name: `D${tenantId}` })
        .returning({ id: departments.id })
    )[0]!.id;
  const [homeRole, awayRole, homeDepartment, awayDepartment] = [
    await roleOf(home.tenantId),
    await roleOf(away.tenantId),
    await departmentOf(home.tenantId),
    await departmentOf(away.tenantId),
  ];
  const errors = await data.db.tenant(home.tenantId, (tx) =>
    missingSubjects(tx, { role_ids: [homeRole, awayRole], department_ids: [awayDepartment, homeDepartment, unused], user_ids: [] }, 'p'),
  );
  t.strictSame(errors, { 'p.role_ids.1': [MISSING_REFERENCE], 'p.department_ids.0': [MISSING_REFERENCE], 'p.department_ids.2': [MISSING_REFERENCE] });
  await data.db.tenant(home.tenantId, async (tx) => {
    const before = data.db.queryCount;
    t.strictSame(await missingSubjects(tx, {}, 'entity_permissions'), {});
    t.equal(data.db.queryCount - before, 0);
  });
});
