/** The rules of role administration (docs/permissions.md#the-no-escalation-rule). */
import { characterCount } from '../../platform/http/validation.ts';
import type { Caller } from '../../platform/auth/auth.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { coded, forbidden, invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { displayNameProblems, NAME_TAKEN, nameTaken, storedName } from './names.ts';
import { roleNames } from './queries.ts';
import type { RoleRow } from './view.ts';

/** The longest role name, as stored: the contract's limit. */
const ROLE_NAME_MAX_LENGTH = 255;

/**
 * A new role name (create, rename): no whitespace at either end, no invisible characters,
 * and not a look-alike of another role's name (`nameKeys`); 422 on `name` otherwise. The
 * check runs under a tenant lock, so two concurrent requests cannot both take look-alike
 * names (the database's unique rule compares names exactly). Returns the name to store (NFC).
 */
export async function newRoleName(tx: Tx, name: string, exceptId?: number): Promise<string> {
  const problems = displayNameProblems(name);
  if (problems.length > 0) throw invalid({ name: problems.map((problem) => coded('pattern', problem)) });
  // The schema judged the name as sent; NFC may make it longer (a character it decomposes), and answers carry the stored one.
  if (characterCount(storedName(name)) > ROLE_NAME_MAX_LENGTH) {
    throw invalid({ name: [coded('max_length', `must be at most ${ROLE_NAME_MAX_LENGTH} characters long (in Unicode NFC, as it is stored)`)] });
  }
  await lockTenantScope(tx, 'roles.name');
  if (nameTaken(await roleNames(tx), name, exceptId)) throw invalid({ name: [coded('taken', NAME_TAKEN)] });
  return storedName(name);
}

/**
 * A role is administered (updated in any way: name, `active`, permissions) only by a
 * caller holding every permission it lists, active or not (403 otherwise, like
 * administering a user who holds more): a delegate may neither rename, deactivate nor
 * strip a role that grants more than they hold, such as the Administrator role.
 */
export function assertMayAdministerRole(caller: Pick<Caller, 'permissions'>, role: Pick<RoleRow, 'permissions'>): void {
  const lacking = permissionsLacking(caller, role.permissions);
  if (lacking.length > 0) {
    throw forbidden(`This role grants permissions you do not hold (${lacking.join(', ')}); you cannot change it.`, 'permission_escalation');
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
  caller: Pick<Caller, 'permissions'>,
  before: Pick<RoleRow, 'permissions' | 'active'> & { ownRole: boolean },
  after: { permissions: string[]; active: boolean },
): FieldErrors {
  const errors: FieldErrors = {};
  const changed = [...after.permissions.filter((p) => !before.permissions.includes(p)), ...before.permissions.filter((p) => !after.permissions.includes(p))];
  const notHeld = permissionsLacking(caller, changed);
  if (notHeld.length > 0)
    errors.permissions = [coded('permission_escalation', `you cannot grant or revoke permissions you do not hold: ${notHeld.join(', ')}`)];
  if (before.active !== after.active) {
    const notHeldOfRole = permissionsLacking(caller, [...before.permissions, ...after.permissions]);
    if (notHeldOfRole.length > 0) {
      errors.active = [
        coded('permission_escalation', `you cannot activate or deactivate a role granting permissions you do not hold: ${notHeldOfRole.join(', ')}`),
      ];
    }
  }
  if (before.ownRole && !after.active) (errors.active ??= []).push(coded('self_change_forbidden', 'you cannot deactivate your own role'));
  if (before.ownRole && !after.permissions.includes('users.administer')) {
    (errors.permissions ??= []).push(coded('self_change_forbidden', 'you cannot remove users.administer from your own role'));
  }
  return errors;
}
