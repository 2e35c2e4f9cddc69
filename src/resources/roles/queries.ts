/** Reads and writes of roles, in the transaction's tenant. */
import { and, eq, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { users } from '../users/table.ts';
import { roles } from './table.ts';
import type { RoleRow } from './view.ts';

/** Every role's id and name (for the look-alike rule). */
export function roleNames(tx: Tx): Promise<{ id: number; name: string }[]> {
  return tx.select({ id: roles.id, name: roles.name }).from(roles);
}

/**
 * The role `roleId`, locked for the rest of the transaction, or undefined. Named by its
 * tenant too: Citus locks rows only in a statement that names its shard.
 */
export async function lockRole(tx: Tx, tenantId: number, roleId: number): Promise<RoleRow | undefined> {
  const [role] = await tx
    .select()
    .from(roles)
    .where(and(eq(roles.tenantId, tenantId), eq(roles.id, roleId)))
    .for('update');
  return role;
}

/** The role of the user `userId`. */
export async function roleIdOf(tx: Tx, userId: number): Promise<number | undefined> {
  const [row] = await tx.select({ roleId: users.roleId }).from(users).where(eq(users.id, userId));
  return row?.roleId;
}

export async function insertRole(tx: Tx, values: Omit<typeof roles.$inferInsert, 'id'>): Promise<RoleRow> {
  const [created] = await tx.insert(roles).values(values).returning();
  return created!;
}

export async function updateRoleRow(tx: Tx, roleId: number, values: Pick<RoleRow, 'name' | 'active' | 'permissions'>): Promise<RoleRow> {
  const [updated] = await tx
    .update(roles)
    .set({ ...values, updatedAt: sql`now()` })
    .where(eq(roles.id, roleId))
    .returning();
  return updated!;
}
