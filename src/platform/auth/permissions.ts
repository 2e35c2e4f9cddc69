/**
 * The permission keys (spec: schema `Permission`; docs/permissions.md#permission-keys-and-seeded-roles).
 * A role holds a subset of them.
 */
export const PERMISSIONS = [
  'users.view',
  'users.view-personal',
  'users.view-administrative',
  'users.administer',
  'departments.manage',
  'menu-items.administer',
  'login-tokens.administer',
  'notifications.send',
  'notifications.administer',
  'tasks.administer',
  'automations.administer',
  'audit.view',
] as const;

export type Permission = (typeof PERMISSIONS)[number];

/** What a role grants: its permissions while active, nothing while inactive. */
export function grantedPermissions(role: { active: boolean; permissions: readonly string[] }): string[] {
  return role.active ? [...role.permissions] : [];
}

/**
 * What a role could grant: every permission it lists, whether it is active or not. An
 * inactive role grants its holders nothing at sign-in (`grantedPermissions`), but it can
 * be reactivated at any moment and then grants all of them — so whoever assigns a role,
 * or administers its holders, is judged against this, never against what it grants today.
 */
export function grantablePermissions(role: { permissions: readonly string[] }): readonly string[] {
  return role.permissions;
}

/**
 * THE no-escalation rule, shared by every place that hands out or takes over permissions:
 * of `permissions`, those `holder` does not hold. A caller may only grant, revoke, assign
 * or act on behalf of permissions they hold themselves — role administration (granting,
 * revoking, (de)activating), user administration (assigning a role, administering a user
 * who holds more) and login tokens (signing in a user who holds more): docs/permissions.md#the-no-escalation-rule.
 */
export function permissionsLacking(holder: { permissions: ReadonlySet<Permission> }, permissions: readonly string[]): string[] {
  const held = holder.permissions as ReadonlySet<string>;
  const lacking: string[] = [];
  for (const permission of permissions) if (!held.has(permission) && !lacking.includes(permission)) lacking.push(permission);
  return lacking;
}
