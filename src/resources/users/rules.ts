/** Business rules of users: self-service limits, no escalation, logout marking, blackout. */
import { sql } from 'drizzle-orm';
import { can, type Auth } from '../../platform/auth/auth.ts';
import { forbidden, type FieldErrors } from '../../platform/http/problem.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import type { users } from './table.ts';

type UserUpdate = Partial<typeof users.$inferInsert>;

/** Today's date (UTC) as `YYYY-MM-DD`. */
export const todayUtc = (now = new Date()) => now.toISOString().slice(0, 10);

/**
 * `active` when a create does not send it: a user who has not entered yet (entering
 * date in the future) or has left (leaving date in the past) cannot log in; otherwise
 * true. The leaving date itself is still a working day.
 */
export function deriveActive(enteringDate: string | null | undefined, leavingDate: string | null | undefined, today = todayUtc()): boolean {
  if (enteringDate && enteringDate > today) return false;
  if (leavingDate && leavingDate < today) return false;
  return true;
}

/**
 * Keys a user's update of their own record ignores (see `PUT /api/users/{user}`):
 * `prevent_logout` always, and their own `role_id` and `active`, even for administrators
 * (no one locks themselves out or raises their own role). Without `users.administer`
 * their department membership and `request_password_change` too: only an actual password
 * change clears that flag.
 */
export function selfUpdateIgnoredKeys(auth: Auth): string[] {
  const keys = ['role_id', 'active', 'prevent_logout'];
  if (!can(auth, 'users.administer')) keys.push('department_ids', 'request_password_change');
  return keys;
}

/** The keys a session whose password must be changed may send when updating itself. */
const PASSWORD_KEYS = new Set(['password', 'old_password']);

/**
 * A restricted session (`request_password_change`) may update its own record only to
 * change the password: `password` is required and every other key but `old_password` is
 * refused, so the flag cannot be lifted, nor anything else changed, before the password
 * is. Field errors, empty when the body is acceptable.
 */
export function restrictedSelfUpdateErrors(auth: Auth, input: Record<string, unknown>): FieldErrors {
  const errors: FieldErrors = {};
  if (!auth.passwordChangeRequired) return errors;
  for (const key of Object.keys(input)) {
    if (!PASSWORD_KEYS.has(key)) errors[key] = ['cannot be changed until your password has been changed'];
  }
  if (input.password === undefined) errors.password = ['is required: your password must be changed first'];
  return errors;
}

/**
 * Renaming oneself needs `users.view`: the answer "is already taken" tells whether a
 * username exists (deleted accounts included), which only `users.view` may learn. Sending
 * one's current username is no change and always accepted. The error for `username`, or
 * undefined.
 */
export function selfRenameError(auth: Auth, username: string | undefined, current: string): string[] | undefined {
  if (username === undefined || username === current || can(auth, 'users.view')) return undefined;
  return ['changing your own username needs the permission "users.view"'];
}

/** Deleting (or blacking out) one's own account is refused. */
export function assertNotSelf(auth: Auth, userId: number, action: string): void {
  if (auth.userId === userId) throw forbidden(`You cannot ${action} your own account.`);
}

/**
 * Logout marking: a user may mark themselves unless `prevent_logout` protects them;
 * marking someone else needs `users.administer` (and, like every administration of
 * another user, `assertMayAdminister`), and then works on protected accounts too.
 */
export function assertMayMarkForLogout(auth: Auth, target: { id: number; preventLogout: boolean }): void {
  if (target.id === auth.userId) {
    if (target.preventLogout) throw forbidden('Your account is protected from logout (prevent_logout).');
    return;
  }
  if (!can(auth, 'users.administer')) throw forbidden('This requires the permission "users.administer".');
}

/**
 * No escalation through user administration (the shared rule `permissionsLacking`):
 * (a) a role may be assigned (create, update, restore, CSV import) only if the caller
 * holds every permission it could grant (`grantablePermissions`, active or not).
 * Returns the error for `role_id`.
 */
export function roleAssignmentError(auth: Auth, grantable: readonly string[]): string[] | undefined {
  const lacking = permissionsLacking(auth, grantable);
  return lacking.length > 0 ? [`grants permissions you do not hold: ${lacking.join(', ')}`] : undefined;
}

/**
 * Why `auth` may not administer `target` (another user whose role could grant more), or
 * undefined. The permissions are named only to callers who may see the user's role
 * (`users.view-administrative`); to others the refusal tells nothing more about it.
 */
export function administerRefusal(auth: Auth, target: { id: number; grantable: readonly string[] }): string | undefined {
  if (target.id === auth.userId) return undefined;
  const lacking = permissionsLacking(auth, target.grantable);
  if (lacking.length === 0) return undefined;
  const which = can(auth, 'users.view-administrative') ? ` (${lacking.join(', ')})` : '';
  return `This user holds permissions you do not hold${which}; you cannot administer them.`;
}

/**
 * (b) Updating (password included), deleting, blacking out, restoring or marking for
 * logout ANOTHER user is refused (403) while that user's role could grant a permission
 * the caller lacks (`grantablePermissions`, active or not): otherwise a delegate could
 * take over — or sign out — an administrator's account.
 */
export function assertMayAdminister(auth: Auth, target: { id: number; grantable: readonly string[] }): void {
  const refusal = administerRefusal(auth, target);
  if (refusal) throw forbidden(refusal);
}

const BLACKED_OUT_USERNAME = /^deleted-user-\d+$/;

/** Blackout renames accounts `deleted-user-<id>`; no one else may take such a name. */
export const isReservedUsername = (username: string) => BLACKED_OUT_USERNAME.test(username);

/**
 * Blackout: the values that replace an account irreversibly. Names,
 * personal and administrative fields and the password are cleared; the id stays so
 * authored records remain linked. The role stays (it is required and not personal).
 */
export function blackoutValues(userId: number): UserUpdate {
  const now = sql`clock_timestamp()`;
  return {
    username: `deleted-user-${userId}`,
    passwordHash: null,
    firstName: null,
    lastName: null,
    email: null,
    phone: null,
    street: null,
    zipcode: null,
    city: null,
    birthdate: null,
    gender: null,
    staffNumber: null,
    enteringDate: null,
    leavingDate: null,
    active: false,
    requestPasswordChange: false,
    preventLogout: false,
    wantsEmailNotifications: false,
    defaultRoute: null,
    lastLoginAt: null,
    logoutMarkedAt: now as never,
    blackedOutAt: now as never,
    deletedAt: sql`coalesce(deleted_at, clock_timestamp())` as never,
    updatedAt: now as never,
  };
}
