/** The tenant's SCIM settings: the role users provisioned over SCIM get (`default_role_id` of the user settings). */
import type { Caller } from '../../platform/auth/auth.ts';
import { grantablePermissions } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { MISSING } from '../../platform/database/existence.ts';
import { coded, type FieldErrors } from '../../platform/http/problem.ts';
import { loadUserReferences } from '../users/queries.ts';
import { roleAssignmentError } from '../users/rules.ts';
import { scimSettings } from './table.ts';

/** The tenant's default role for SCIM users, or null. */
export async function loadDefaultRoleId(tx: Tx): Promise<number | null> {
  const [row] = await tx.select({ roleId: scimSettings.defaultRoleId }).from(scimSettings);
  return row?.roleId ?? null;
}

/** Why `roleId` cannot be the default role for `caller` to set: the tenant's role, granting nothing the caller lacks (as assigning it would be judged). */
export async function defaultRoleErrors(tx: Tx, caller: Pick<Caller, 'permissions'>, roleId: number | null): Promise<FieldErrors> {
  if (roleId === null) return {};
  const role = (await loadUserReferences(tx, { roleIds: [roleId] })).roles.get(roleId);
  if (!role) return { default_role_id: [coded('missing_reference', MISSING)] };
  const escalation = roleAssignmentError(caller, grantablePermissions(role));
  return escalation ? { default_role_id: escalation } : {};
}

/** Stores the tenant's default role for SCIM users. */
export async function storeDefaultRoleId(tx: Tx, tenantId: number, roleId: number | null): Promise<void> {
  await tx
    .insert(scimSettings)
    .values({ tenantId, defaultRoleId: roleId })
    .onConflictDoUpdate({ target: scimSettings.tenantId, set: { defaultRoleId: roleId } });
}
