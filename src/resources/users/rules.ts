/**
 * The rules of users (docs/users.md, docs/permissions.md), written once: what a user
 * write must satisfy (`userDraftErrors`, `userReferenceErrors`: the create and update
 * operations and the CSV preview judge their writes with them), who may administer whom
 * (`requireAdministrableUser`), the limits of one's own record, logout marking, blackout.
 */
import { characterCount } from '../../platform/http/validation.ts';
import { sql } from 'drizzle-orm';
import { can, type Auth, type Caller } from '../../platform/auth/auth.ts';
import { passwordLength } from '../../platform/auth/passwords.ts';
import { grantablePermissions, permissionsLacking, type Permission } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds, MISSING, reportMissing } from '../../platform/database/existence.ts';
import { navigationUrlProblems, ROUTE_FORMS } from '../../platform/http/navigation-url.ts';
import { coded, forbidden, invalid, notFound, unauthorized, type CodedMessage, type FieldErrors, type FieldMessage } from '../../platform/http/problem.ts';
import { departments } from '../departments/table.ts';
import { hasInvisibleCharacter, INVISIBLE_CHARACTER_PROBLEM } from '../roles/names.ts';
import { CONFERS_ENTITY_RIGHTS, membershipsConferringRights } from '../entity-permissions/rules.ts';
import { findUser, loadUserReferences, usernameTaken, type UserReferences, type UserRow } from './queries.ts';
import type { ProfileKey, users } from './table.ts';
import { hiddenFieldError, hiddenFieldPermission } from './view.ts';

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

// ---- what a user write must satisfy ----

/**
 * The most departments a user belongs to: the spec's `maxItems` of `department_ids` (a
 * user write) and of the user's `departments` relation. SCIM adds members one group at a
 * time, so a group write checks it too.
 */
export const MAX_DEPARTMENTS_PER_USER = 1000;

/** The spec's longest password (`UserCreate.password`): longer ones cannot sign in (the login's schema refuses them). */
export const PASSWORD_MAX_LENGTH = 1024;

/** `UserCreate.username`'s pattern in the spec (test/resources/users/fields.test.ts compares them). */
export const USERNAME_PATTERN = /^\S(.*\S)?$/u;

/**
 * What the spec's schema refuses in a username (1 to 255 characters, the pattern), with the
 * wording of the API's 422, for usernames that do not come through it: a CSV cell, the
 * command line. The reserved names are `usernameProblems`'.
 */
export function usernameShapeProblem(username: string): string | undefined {
  if (characterCount(username) > 255) return 'must NOT have more than 255 characters';
  if (!USERNAME_PATTERN.test(username)) return `must match pattern "${USERNAME_PATTERN.source}"`;
  return undefined;
}

const BLACKED_OUT_USERNAME = /^deleted-user-\d+$/i;

/**
 * Blackout renames accounts `deleted-user-<id>`; no one else may take such a name, in any
 * letter case (a new name is judged taken in any case too).
 */
export const isReservedUsername = (username: string) => BLACKED_OUT_USERNAME.test(username);

/**
 * What is wrong with `username` as a new name (its form is the spec's): it is reserved, or
 * it holds a character that does not show (a zero-width space, a bidirectional override),
 * with which it could pass for another user's name. A stored name kept as it is is not
 * judged again.
 */
export function usernameProblems(username: string): CodedMessage[] {
  const problems: CodedMessage[] = [];
  if (isReservedUsername(username)) problems.push(coded('reserved', 'is reserved for blacked-out accounts'));
  if (hasInvisibleCharacter(username)) problems.push(coded('pattern', INVISIBLE_CHARACTER_PROBLEM));
  return problems;
}

/** What is wrong with `route` as a `default_route`: it must be a same-origin path or an absolute http(s) URL. */
export function defaultRouteProblems(route: string): string[] {
  return navigationUrlProblems(route, ROUTE_FORMS);
}

/** A password (when one is written) has at least `passwordMinLength` characters, counted by `passwordLength`. */
export function passwordErrors(password: string | null | undefined, options: { passwordMinLength: number }): FieldErrors {
  if (password === undefined || password === null || passwordLength(password) >= options.passwordMinLength) return {};
  return { password: [coded('min_length', `must be at least ${options.passwordMinLength} characters long`)] };
}

/** The profile keys that are columns of `users` (all but the picture), under their column names. */
type ProfileColumn = 'street' | 'zipcode' | 'city' | 'email' | 'phone' | 'birthdate' | 'gender';

/** What a user draft falls back on for the values an update does not write. */
export type StoredUser = Pick<UserRow, 'groupAccount' | 'firstName' | 'lastName' | 'enteringDate' | 'leavingDate' | 'roleId'> &
  Partial<Pick<UserRow, ProfileColumn | 'pictureFileName' | 'username'>>;

/**
 * A user as a write would leave it: the values it writes (undefined: not written, so an
 * update keeps the stored one), over `current`, the stored user an update changes
 * (absent: a new user). Both the create and update operations and each CSV row that
 * would create or update a user build one.
 */
export interface UserDraft {
  current?: StoredUser;
  username?: string;
  password?: string | null;
  groupAccount?: boolean;
  firstName?: string | null;
  lastName?: string | null;
  enteringDate?: string | null;
  leavingDate?: string | null;
  defaultRoute?: string | null;
  roleId?: number | null;
  langId?: string | null;
  street?: string | null;
  zipcode?: string | null;
  city?: string | null;
  email?: string | null;
  phone?: string | null;
  birthdate?: string | null;
  gender?: string | null;
  /** Whether the write leaves a picture: true uploads one, false removes it, undefined leaves it. */
  hasPicture?: boolean;
}

/** What the write rules depend on besides the draft: the password length, and the tenant's required profile keys. */
export interface UserWriteSettings {
  passwordMinLength: number;
  requiredProfileKeys?: readonly ProfileKey[];
  /** A new user may have no password (one provisioned over SCIM signs in by other means); a password sent is still judged. */
  passwordOptional?: boolean;
}

/** The error on a profile key that the tenant's settings require (`requiredProfileKeyErrors`). */
export const REQUIRED_BY_SETTINGS = "is required by this tenant's settings";
const requiredBySettings = coded('required_by_settings', REQUIRED_BY_SETTINGS);

const isEmpty = (value: unknown) => value === undefined || value === null || value === false || (typeof value === 'string' && value.trim() === '');

/**
 * The tenant's required profile keys (docs/users.md#required-profile-keys) that the draft
 * leaves empty (null, blank, no picture). Only personal accounts are judged. A new account,
 * and a group account turned personal, must fill every required key; an update of a
 * personal account is judged on the keys it writes only, so users stored before a key
 * became required are not refused for what they lack, but no write may empty a required
 * key.
 */
export function requiredProfileKeyErrors(draft: UserDraft, required: readonly ProfileKey[]): FieldErrors {
  const errors: FieldErrors = {};
  if (required.length === 0 || resultingGroupAccount(draft)) return errors;
  const judgeAll = draft.current === undefined || draft.current.groupAccount;
  for (const key of required) {
    const written = key === 'profile_picture' ? draft.hasPicture : draft[key];
    if (written === undefined && !judgeAll) continue;
    const value = written !== undefined ? written : key === 'profile_picture' ? draft.current?.pictureFileName : draft.current?.[key];
    if (isEmpty(value)) errors[key] = [requiredBySettings];
  }
  return errors;
}

/** The 422 of a refused user write; its detail names the required profile keys it misses, if any. */
export function userWriteRefusal(errors: FieldErrors) {
  const missing = Object.keys(errors).filter((key) => errors[key]!.some((entry) => typeof entry !== 'string' && entry.code === 'required_by_settings'));
  return invalid(errors, missing.length > 0 ? `The request is invalid. This tenant's settings require: ${missing.join(', ')}.` : undefined);
}

/**
 * The draft's values as the write would leave them: the written one, or the stored one.
 * Each is read by its name (not by a computed key), so that judging many drafts (a CSV
 * file's rows) stays fast.
 */
const resultingGroupAccount = (draft: UserDraft) => (draft.groupAccount !== undefined ? draft.groupAccount : draft.current?.groupAccount);
const resultingNames = (draft: UserDraft) => ({
  firstName: draft.firstName !== undefined ? draft.firstName : draft.current?.firstName,
  lastName: draft.lastName !== undefined ? draft.lastName : draft.current?.lastName,
});
const resultingDates = (draft: UserDraft) => ({
  entering: draft.enteringDate !== undefined ? draft.enteringDate : draft.current?.enteringDate,
  leaving: draft.leavingDate !== undefined ? draft.leavingDate : draft.current?.leavingDate,
});

/**
 * What is wrong with the draft by itself (no stored data needed), by key: a new user needs
 * a password and a role; a password has at least `passwordMinLength` characters
 * (`characterCount`); a personal account (not `group_account`) has both names, not blank;
 * `leaving_date` is not before `entering_date`; the username is not reserved; the
 * `default_route` is a navigation target; the tenant's required profile keys are filled
 * (`requiredProfileKeyErrors`). Names and dates are judged as the write would leave them,
 * so an update is refused the same whichever of them it sends.
 */
export function userDraftErrors(draft: UserDraft, options: UserWriteSettings): FieldErrors {
  const isNew = draft.current === undefined;
  const errors =
    isNew && !options.passwordOptional && (draft.password === undefined || draft.password === null)
      ? { password: [coded('required', 'is required for new users')] }
      : passwordErrors(draft.password, options);
  if (isNew && (draft.roleId === undefined || draft.roleId === null)) errors.role_id = [coded('required', 'is required for new users')];
  const usernameIssues = draft.username === undefined || draft.username === draft.current?.username ? [] : usernameProblems(draft.username);
  if (usernameIssues.length > 0) errors.username = usernameIssues;
  if (!resultingGroupAccount(draft)) {
    const { firstName, lastName } = resultingNames(draft);
    if (!firstName?.trim()) errors.first_name = [coded('required', 'is required for personal accounts')];
    if (!lastName?.trim()) errors.last_name = [coded('required', 'is required for personal accounts')];
  }
  const { entering, leaving } = resultingDates(draft);
  if (entering && leaving && leaving < entering) errors.leaving_date = [coded('out_of_range', 'must not be before entering_date')];
  const routeIssues = draft.defaultRoute === undefined || draft.defaultRoute === null ? [] : defaultRouteProblems(draft.defaultRoute);
  if (routeIssues.length > 0) errors.default_route = routeIssues.map((issue) => coded('format', issue));
  return addErrors(errors, requiredProfileKeyErrors(draft, options.requiredProfileKeys ?? []));
}

/** The role and language the draft names must be the tenant's (`does not exist` otherwise). */
export function missingReferenceErrors(draft: Pick<UserDraft, 'roleId' | 'langId'>, references: UserReferences): FieldErrors {
  const errors: FieldErrors = {};
  if (draft.roleId !== undefined && draft.roleId !== null && !references.roles.has(draft.roleId)) errors.role_id = [coded('missing_reference', MISSING)];
  if (draft.langId !== undefined && draft.langId !== null && !references.languages.has(draft.langId)) errors.lang_id = [coded('missing_reference', MISSING)];
  return errors;
}

/** Whether the draft gives the user a role: a new user's, or another than the stored one. */
export const assignsRole = (draft: Pick<UserDraft, 'roleId' | 'current'>) =>
  draft.roleId !== undefined && draft.roleId !== null && draft.roleId !== draft.current?.roleId;

/**
 * What is wrong with the roles and languages the draft names (loaded with
 * `loadUserReferences`): they must be the tenant's (`missingReferenceErrors`), and a role
 * the draft assigns (`assignsRole`) may list only permissions the caller holds
 * (`roleAssignmentError`). The entity rights a role confers are judged apart, in one
 * query for any number of drafts (`membershipsConferringRights`).
 */
export function userReferenceErrors(draft: UserDraft, references: UserReferences, caller: Pick<Caller, 'permissions'>): FieldErrors {
  const errors = missingReferenceErrors(draft, references);
  if (!errors.role_id && assignsRole(draft)) {
    const escalation = roleAssignmentError(caller, grantablePermissions(references.roles.get(draft.roleId!)!));
    if (escalation) errors.role_id = escalation;
  }
  return errors;
}

/**
 * No self-granted entity rights (`membershipsConferringRights`): a new role or new
 * departments of `userId` (null: a user to be created) must not make them named by entity
 * permissions that do not already reach the caller. Errors on `role_id` /
 * `department_ids.<i>`; one query, none when neither changes.
 */
export async function conferredRightsErrors(
  tx: Tx,
  caller: Caller,
  userId: number | null,
  change: { roleId?: number; departmentIds?: readonly number[] },
): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  if (change.roleId === undefined && change.departmentIds === undefined) return errors;
  const [conferred] = await membershipsConferringRights(tx, caller, [{ userId, ...change }]);
  if (conferred!.role) errors.role_id = [coded('confers_rights', CONFERS_ENTITY_RIGHTS)];
  change.departmentIds?.forEach((id, index) => {
    if (conferred!.departmentIds.includes(id)) errors[`department_ids.${index}`] = [coded('confers_rights', CONFERS_ENTITY_RIGHTS)];
  });
  return errors;
}

/**
 * What the tenant's data says against a create or update of the API (the user `userId`;
 * null: a new one): the role and language it names (`userReferenceErrors`), the entity
 * rights its role and departments would confer (`conferredRightsErrors`), departments that
 * do not exist (`department_ids.<i>: does not exist`) and a username another user has
 * (`is already taken`; not judged when the draft's username is refused already; in any case
 * with `usernameAnyCase`, see `usernameTaken`). One query per kind of thing the write names.
 */
export async function userWriteReferenceErrors(
  tx: Tx,
  caller: Caller,
  draft: UserDraft,
  change: { userId: number | null; departmentIds?: readonly number[]; usernameAnyCase?: boolean },
): Promise<FieldErrors> {
  const references = await loadUserReferences(tx, {
    roleIds: draft.roleId === undefined || draft.roleId === null ? [] : [draft.roleId],
    langIds: draft.langId === undefined || draft.langId === null ? [] : [draft.langId],
  });
  const errors = userReferenceErrors(draft, references, caller);
  addErrors(errors, await conferredRightsErrors(tx, caller, change.userId, { roleId: draft.roleId ?? undefined, departmentIds: change.departmentIds }));
  const departmentIds = change.departmentIds ?? [];
  // Kept until the write ends (`keep`): a department's delete, which locks its row first,
  // then waits for this write, instead of both waiting on each other's memberships.
  reportMissing(errors, 'department_ids', departmentIds, await missingIds(tx, departments, departmentIds, undefined, { keep: true }));
  if (
    draft.username !== undefined &&
    usernameProblems(draft.username).length === 0 &&
    (await usernameTaken(tx, draft.username, change.userId ?? undefined, { anyCase: change.usernameAnyCase }))
  ) {
    errors.username = [coded('taken', 'is already taken')];
  }
  return errors;
}

/** Adds `more` to `errors`, keeping the errors a key already has. */
export function addErrors(errors: FieldErrors, more: FieldErrors): FieldErrors {
  for (const key in more) if (Object.hasOwn(more, key)) errors[key] ??= more[key]!;
  return errors;
}

/**
 * Writing ANOTHER user: of `keys`, those whose field the caller may not see
 * (`hiddenFieldPermission`) are refused on the key naming the permission, whatever the
 * value — writing it blind could redirect the user's e-mail, and "changed" or "unchanged"
 * would tell the stored value. The update operation and the CSV preview refuse them alike.
 */
export function hiddenKeyErrors(
  caller: Caller,
  user: Pick<UserRow, 'id'>,
  keys: readonly string[],
  message: (permission: Permission) => string = hiddenFieldError,
): FieldErrors {
  const errors: FieldErrors = {};
  for (const key of keys) {
    const permission = hiddenFieldPermission(caller, key, user);
    if (permission) errors[key] = [coded('permission_missing', message(permission))];
  }
  return errors;
}

/**
 * A group account turned personal is judged on every required profile key, stored values
 * included (`requiredProfileKeyErrors`): those the caller may not see are refused whatever
 * they hold, as writing them is, so that the answer does not tell which are empty. One who
 * may see them turns the account personal.
 */
export function hiddenRequiredKeyErrors(caller: Caller, user: Pick<UserRow, 'id'>, draft: UserDraft, required: readonly ProfileKey[]): FieldErrors {
  if (!draft.current?.groupAccount || resultingGroupAccount(draft)) return {};
  return hiddenKeyErrors(caller, user, required, (permission) => `is required by this tenant's settings, and seeing it needs the permission "${permission}"`);
}

/** Filtering users by the administrative fields `role_id` or `active` would reveal them: it needs their permission. */
export function filterVisibilityErrors(caller: Pick<Caller, 'permissions'>, filter: Record<string, unknown> | undefined): FieldErrors {
  if (can(caller, 'users.view-administrative')) return {};
  const hidden = ['role_id', 'active'].filter((key) => filter?.[key] !== undefined);
  return Object.fromEntries(hidden.map((key) => [`filter.${key}`, [coded('permission_missing', 'needs the permission "users.view-administrative"')]]));
}

// ---- one's own record ----

/**
 * Keys a user's update of their own record ignores (see `PUT /api/users/{user}`):
 * `prevent_logout` always, and their own `role_id` and `active`, even for administrators
 * (no one locks themselves out or raises their own role). Without `users.administer`
 * their department membership, `request_password_change` (only an actual password change
 * clears that flag) and `group_account` too: a group account is a shared login, and one
 * the identity provider neither lists nor deactivates (docs/scim.md), so an account made
 * one by its own user would escape being switched off when its owner leaves.
 */
export function selfUpdateIgnoredKeys(caller: Pick<Caller, 'permissions'>): string[] {
  const keys = ['role_id', 'active', 'prevent_logout'];
  if (!can(caller, 'users.administer')) keys.push('department_ids', 'request_password_change', 'group_account');
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
export function restrictedSelfUpdateErrors(auth: Pick<Auth, 'passwordChangeRequired'>, input: Record<string, unknown>): FieldErrors {
  const errors: FieldErrors = {};
  if (!auth.passwordChangeRequired) return errors;
  for (const key of Object.keys(input)) {
    if (!PASSWORD_KEYS.has(key)) errors[key] = [coded('password_change_required', 'cannot be changed until your password has been changed')];
  }
  if (input.password === undefined) errors.password = [coded('password_change_required', 'is required: your password must be changed first')];
  return errors;
}

/**
 * Renaming oneself needs `users.view`: the answer "is already taken" tells whether a
 * username exists (deleted accounts included), which only `users.view` may learn. Sending
 * one's current username is no change and always accepted. The error for `username`, or
 * undefined.
 */
export function selfRenameError(caller: Pick<Caller, 'permissions'>, username: string | undefined, current: string): FieldMessage[] | undefined {
  if (username === undefined || username === current || can(caller, 'users.view')) return undefined;
  return [coded('permission_missing', 'changing your own username needs the permission "users.view"')];
}

/** Deleting (or blacking out) one's own account is refused. */
export function assertNotSelf(caller: Pick<Caller, 'userId'>, userId: number, action: string): void {
  if (caller.userId === userId) throw forbidden(`You cannot ${action} your own account.`, 'own_account');
}

/**
 * Logout marking of oneself: refused while `prevent_logout` protects the account. Marking
 * someone else needs `users.administer` (the operation's `x-permission`) and that the
 * caller may administer them (`requireAdministrableUser`), and then works on protected
 * accounts too.
 */
export function assertMayMarkForLogout(caller: Pick<Caller, 'userId'>, target: { id: number; preventLogout: boolean }): void {
  if (target.id === caller.userId && target.preventLogout) throw forbidden('Your account is protected from logout (prevent_logout).', 'logout_protected');
}

// ---- no escalation through user administration ----

/**
 * No escalation through user administration (the shared rule `permissionsLacking`):
 * (a) a role may be assigned (create, update, restore, CSV import) only if the caller
 * holds every permission it could grant (`grantablePermissions`, active or not).
 * Returns the error for `role_id`.
 */
export function roleAssignmentError(caller: Pick<Caller, 'permissions'>, grantable: readonly string[]): FieldMessage[] | undefined {
  const lacking = permissionsLacking(caller, grantable);
  return lacking.length > 0 ? [coded('permission_escalation', `grants permissions you do not hold: ${lacking.join(', ')}`)] : undefined;
}

/**
 * Why `caller` may not administer `target` (another user whose role could grant more), or
 * undefined. The permissions are named only to callers who may see the user's role
 * (`users.view-administrative`); to others the refusal tells nothing more about it.
 */
export function administerRefusal(caller: Caller, target: { id: number; grantable: readonly string[] }): string | undefined {
  if (target.id === caller.userId) return undefined;
  const lacking = permissionsLacking(caller, target.grantable);
  if (lacking.length === 0) return undefined;
  const which = can(caller, 'users.view-administrative') ? ` (${lacking.join(', ')})` : '';
  return `This user holds permissions you do not hold${which}; you cannot administer them.`;
}

/**
 * (b) Updating (password included), deleting, blacking out, restoring or marking for
 * logout ANOTHER user is refused (403) while that user's role could grant a permission
 * the caller lacks (`grantablePermissions`, active or not): otherwise a delegate could
 * take over — or sign out — an administrator's account.
 */
export function assertMayAdminister(caller: Caller, target: { id: number; grantable: readonly string[] }): void {
  const refusal = administerRefusal(caller, target);
  if (refusal) throw forbidden(refusal, 'permission_escalation');
}

/**
 * "May administer this user", the one rule of every operation that changes a user (update,
 * delete, restore, blackout, logout mark): the user `userId` of the tenant (soft-deleted
 * ones only `withTrashed`; 404 otherwise), whom the caller may administer
 * (`assertMayAdminister`, 403 otherwise; one's own record always). Answers the user.
 */
export async function requireAdministrableUser(tx: Tx, caller: Caller, userId: number, options: { withTrashed?: boolean } = {}): Promise<UserRow> {
  const user = await findUser(tx, userId, options.withTrashed);
  if (!user) throw notFound('The user');
  if (user.id !== caller.userId) {
    const role = (await loadUserReferences(tx, { roleIds: [user.roleId] })).roles.get(user.roleId);
    assertMayAdminister(caller, { id: user.id, grantable: role ? grantablePermissions(role) : [] });
  }
  return user;
}

/** The refusal of a write whose caller's account was deleted (or blacked out) while it ran: nothing of theirs is stored (401). */
export const accountGone = () => unauthorized('The account was deleted while the request ran.');

// ---- blackout ----

/**
 * Blackout: the values that replace an account irreversibly. Names,
 * personal and administrative fields and the password are cleared; the id stays so
 * authored records remain linked. The role stays (it is required and not personal).
 */
export function blackoutValues(userId: number): UserUpdate {
  // A subquery, as `statementClock` (queries.ts): Citus refuses the bare volatile function here.
  const now = sql`(select clock_timestamp())`;
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
    // The earlier of the two: `least` passes over a null, and Citus refuses `coalesce` over a function that is not immutable.
    deletedAt: sql`least(deleted_at, ${now})` as never,
    updatedAt: now as never,
  };
}
