/** The permission keys of decisions §5. A role holds a subset of them. */
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
] as const;

export type Permission = (typeof PERMISSIONS)[number];

export function isPermission(value: string): value is Permission {
  return (PERMISSIONS as readonly string[]).includes(value);
}
