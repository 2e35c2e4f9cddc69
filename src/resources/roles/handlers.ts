import { asc, eq, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { forbidden, invalid, notFound } from '../../platform/http/problem.ts';
import { defineView, present, readControls } from '../../platform/result-controls/result-controls.ts';
import { users } from '../users/table.ts';
import { displayNameProblems, NAME_TAKEN, nameTaken, storedName } from './names.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import { roles } from './table.ts';

type RoleRow = typeof roles.$inferSelect;

export const roleView = defineView<RoleRow, Auth, 'active'>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    active: {},
    permissions: {},
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
  },
  filters: {
    active: (value: boolean) => eq(roles.active, value),
  },
});

/**
 * A role is administered (updated in any way: name, `active`, permissions) only by a
 * caller holding every permission it lists, active or not (403 otherwise, like
 * administering a user who holds more): a delegate may neither rename, deactivate nor
 * strip a role that grants more than they hold, such as the Administrator role.
 */
export function assertMayAdministerRole(auth: Auth, role: Pick<RoleRow, 'permissions'>): void {
  const lacking = permissionsLacking(auth, role.permissions);
  if (lacking.length > 0) {
    throw forbidden(`This role grants permissions you do not hold (${lacking.join(', ')}); you cannot change it.`);
  }
}

/**
 * No escalation through role administration (the shared rule `permissionsLacking`): a
 * caller may grant or revoke only permissions they hold, and may change `active` only of a
 * role whose permissions they all hold (deactivating or re-activating changes what the
 * role grants its users). Nor may they lock themselves out by deactivating their own role
 * or removing `users.administer` from it.
 */
export function roleChangeErrors(
  auth: Auth,
  before: Pick<RoleRow, 'permissions' | 'active'> & { ownRole: boolean },
  after: { permissions: string[]; active: boolean },
): Record<string, string[]> {
  const errors: Record<string, string[]> = {};
  const changed = [
    ...after.permissions.filter((p) => !before.permissions.includes(p)),
    ...before.permissions.filter((p) => !after.permissions.includes(p)),
  ];
  const notHeld = permissionsLacking(auth, changed);
  if (notHeld.length > 0) errors.permissions = [`you cannot grant or revoke permissions you do not hold: ${notHeld.join(', ')}`];
  if (before.active !== after.active) {
    const notHeldOfRole = permissionsLacking(auth, [...before.permissions, ...after.permissions]);
    if (notHeldOfRole.length > 0) {
      errors.active = [`you cannot activate or deactivate a role granting permissions you do not hold: ${notHeldOfRole.join(', ')}`];
    }
  }
  if (before.ownRole && !after.active) (errors.active ??= []).push('you cannot deactivate your own role');
  if (before.ownRole && !after.permissions.includes('users.administer')) {
    (errors.permissions ??= []).push('you cannot remove users.administer from your own role');
  }
  return errors;
}

/**
 * A new role name (create, rename): no whitespace at either end, no invisible characters,
 * and not a look-alike of another role's name (`nameKey`). The check runs under a tenant
 * lock, so two concurrent requests cannot both take look-alike names (the database's
 * unique rule compares names exactly). Returns the name to store (NFC).
 */
async function checkNewName(tx: Tx, name: string, exceptId?: number): Promise<string> {
  const problems = displayNameProblems(name);
  if (problems.length > 0) throw invalid({ name: problems });
  await lockTenantScope(tx, 'roles.name');
  const existing = await tx.select({ id: roles.id, name: roles.name }).from(roles);
  if (nameTaken(existing, name, exceptId)) throw invalid({ name: [NAME_TAKEN] });
  return storedName(name);
}

async function callerRoleId(tx: Tx, auth: Auth): Promise<number | undefined> {
  const [row] = await tx.select({ roleId: users.roleId }).from(users).where(eq(users.id, auth.userId));
  return row?.roleId;
}

export const roleHandlers = {
  async listRoles({ auth, query, services: { db } }) {
    const controls = readControls(roleView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(roles).where(controls.where).orderBy(asc(roles.name), asc(roles.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(roleView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getRole({ auth, query, params, services: { db } }) {
    const controls = readControls(roleView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => {
      const rows = await tx.select().from(roles).where(eq(roles.id, params.role));
      if (rows.length === 0) throw notFound('The role');
      return present(roleView, tx, rows, controls, auth);
    });
    return { status: 200, body: body! };
  },

  async createRole({ auth, body, services: { db } }) {
    const permissions = body.permissions ?? [];
    const errors = roleChangeErrors(auth, { permissions: [], active: true, ownRole: false }, { permissions, active: body.active ?? true });
    if (Object.keys(errors).length > 0) throw invalid(errors);
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
      const name = await checkNewName(tx, body.name);
      const rows = await tx
        .insert(roles)
        .values({ tenantId: auth.tenantId, name, active: body.active ?? true, permissions })
        .returning();
      return present(roleView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 201, body: created! };
  },

  async updateRole({ auth, params, body, services: { db } }) {
    const [updated] = await db.tenant(auth.tenantId, async (tx) => {
      const [role] = await tx.select().from(roles).where(eq(roles.id, params.role)).for('update');
      if (!role) throw notFound('The role');
      assertMayAdministerRole(auth, role);
      const next = { name: body.name ?? role.name, active: body.active ?? role.active, permissions: body.permissions ?? role.permissions };
      const ownRole = (await callerRoleId(tx, auth)) === role.id;
      const errors = roleChangeErrors(auth, { ...role, ownRole }, next);
      if (Object.keys(errors).length > 0) throw invalid(errors);
      // A name sent back unchanged is not judged again (it may predate these rules).
      if (next.name !== role.name) next.name = await checkNewName(tx, next.name, role.id);
      const rows = await tx
        .update(roles)
        .set({ ...next, updatedAt: sql`now()` })
        .where(eq(roles.id, role.id))
        .returning();
      return present(roleView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 200, body: updated! };
  },
} satisfies Partial<Handlers>;
