import { asc, eq, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { users } from '../users/table.ts';
import { displayNameProblems, NAME_TAKEN, nameTaken, storedName } from './names.ts';
import { assertMayAdministerRole, roleChangeErrors } from './rules.ts';
import { roles } from './table.ts';
import { roleView } from './view.ts';

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
