import type { Auth } from '../../platform/auth/auth.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import { forbidden } from '../../platform/http/problem.ts';
import type { RoleRow } from './view.ts';

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
