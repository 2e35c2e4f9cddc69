/** Reads and writes of roles, in the transaction's tenant. */
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Caller } from '../../platform/auth/auth.ts';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { forbidden } from '../../platform/http/problem.ts';
import { scimTokens } from '../scim/table.ts';
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

/**
 * For a write that can take administration away (a user's role changed, a user
 * deactivated, deleted or blacked out, a role changed): serialises such writes of the
 * tenant, then reads the caller's permissions again behind the lock. Two administrators
 * who demote each other at the same moment are so judged one after the other, as if the
 * requests came in turn: the second finds its permissions gone and is refused (403), and
 * the tenant keeps an administrator. Taken before the write locks any row, so that two
 * such writes never wait for each other's rows. A SCIM token (`scimTokenId`) acts with
 * the permissions of the administrator who minted it: theirs are read again.
 * `shared`, for a write that grants what the caller holds (a new user given a role, a user restored, another
 * user's update, a new role, departments assigned): it waits for such a change under way and is judged by what
 * it left, and a change of the caller's permissions waits for it, so none is acknowledged
 * before a grant made under the permissions it removed; grants do not wait for each other.
 */
export async function lockAdministration(tx: Tx, caller: Caller, scimTokenId?: number, mode: 'exclusive' | 'shared' = 'exclusive'): Promise<void> {
  await lockTenantScope(tx, 'administration', undefined, mode);
  const tenantId = transactionTenant(tx)!;
  const holder =
    scimTokenId === undefined
      ? caller.userId
      : sql`(select ${scimTokens.userId} from ${scimTokens} where ${scimTokens.tenantId} = ${tenantId} and ${scimTokens.id} = ${scimTokenId})`;
  const [row] = await tx
    .select({ active: roles.active, permissions: roles.permissions })
    .from(users)
    // Tenants paired and named: Citus joins and routes only so (docs/scaling.md).
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .where(and(eq(users.tenantId, tenantId), eq(users.id, holder), eq(users.active, true), isNull(users.deletedAt)));
  const held = new Set<string>(row?.active ? row.permissions : []);
  const lost = [...caller.permissions].filter((permission) => !held.has(permission));
  if (lost.length > 0) {
    throw forbidden(`Your permissions changed while this request was under way; it lacks "${lost.join('", "')}" now.`, 'permission_missing');
  }
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

/** Stores `values` on the role, and the time of the update unless it changes nothing (`changed`: `updateTime`). */
export async function updateRoleRow(
  tx: Tx,
  roleId: number,
  values: Pick<RoleRow, 'name' | 'active' | 'permissions'>,
  { changed }: { changed: boolean },
): Promise<RoleRow> {
  const [updated] = await tx
    .update(roles)
    .set({ ...values, updatedAt: updateTime(roles.updatedAt, changed) })
    .where(eq(roles.id, roleId))
    .returning();
  return updated!;
}
