import { eq } from 'drizzle-orm';
import { changesBetween, recordErasure, SECRET_CHANGED } from '../../platform/audit/audit.ts';
import { queueErasure } from '../../platform/audit/erase.job.ts';
import type { Changes } from '../../platform/audit/table.ts';
import { authenticateRequest, can, presentedTokenHash, requirePermission, requirePermissionUnlessSelf, type Auth } from '../../platform/auth/auth.ts';
import { hashPassword } from '../../platform/auth/passwords.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Body, Context, Handlers } from '../../platform/http/handler.ts';
import { uploadOf } from '../../platform/http/multipart.ts';
import { noneMatchTags } from '../../platform/http/preconditions.ts';
import { coded, invalid, notFound, unauthorized } from '../../platform/http/problem.ts';
import { listRecords, selectRecords, showRecord } from '../../platform/result-controls/listing.ts';
import { endSessionsAfterPasswordChange, holdSession, verifyOwnPassword } from '../auth/credentials.ts';
import { audit, userLabel, type RequestContext } from '../audit-events/record.ts';
import { announceSessionsEnded } from '../notifications/channel.ts';
import { lockRecord, lockTenantScope } from '../../platform/database/locks.ts';
import { lockAdministration } from '../roles/queries.ts';
import { HOLDS_ENTITY_RIGHTS, usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import { defaultRoleErrors, loadDefaultRoleId, storeDefaultRoleId } from '../scim/settings.ts';
import { importTemplate, previewCsvImport, type CsvImportOptions } from './csv-import.ts';
import { columnsOf, storedFieldsOf } from './fields.ts';
import { acceptPicture, inlineDisposition, pictureSignatureValid, type StoredPicture } from './profile-picture.ts';
import {
  blackOut,
  cutOff,
  departmentIdsOf,
  findUser,
  findPicture,
  insertUser,
  loadRequiredProfileKeys,
  loadUserReferences,
  replaceDepartments,
  replacePicture,
  restoreDeletedUser,
  revokePendingLoginTokens,
  softDeleteUser,
  storeRequiredProfileKeys,
  updateUserColumns,
  type UserRow,
} from './queries.ts';
import {
  addErrors,
  assertMayMarkForLogout,
  assertNotSelf,
  blackoutValues,
  conferredRightsErrors,
  deriveActive,
  filterVisibilityErrors,
  hiddenKeyErrors,
  hiddenRequiredKeyErrors,
  missingReferenceErrors,
  passwordErrors,
  requiredProfileKeyErrors,
  requireAdministrableUser,
  restrictedSelfUpdateErrors,
  selfRenameError,
  selfUpdateIgnoredKeys,
  userDraftErrors,
  userReferenceErrors,
  userWriteReferenceErrors,
  userWriteRefusal,
  type UserDraft,
} from './rules.ts';
import { PROFILE_KEYS, users } from './table.ts';
import { deletedUserListing, listedUserListing, userListing } from './view.ts';

/**
 * A create or update request body (JSON or multipart, already validated by the spec):
 * the update schema, which is every create key made optional plus `old_password`.
 */
type UserInput = Body<'updateUser'>;

/** The picture part of a request: a new image, `null` (remove), or undefined (untouched). */
async function pictureOf(ctx: Context<'createUser' | 'updateUser'>, input: UserInput): Promise<StoredPicture | null | undefined> {
  if (input.profile_picture === undefined) return undefined;
  const upload = uploadOf(ctx.request, 'profile_picture');
  if (!upload) {
    if (input.profile_picture === null || input.profile_picture === '') return null;
    throw invalid({ profile_picture: [coded('file_required', 'must be an image file part of a multipart/form-data request, or null')] });
  }
  return acceptPicture(upload);
}

/**
 * What a create or update body writes, over `current` (the stored user; absent: a new one),
 * for the write rules; `picture` is what `pictureOf` made of the body.
 */
const draftOf = (input: UserInput, current: UserDraft['current'], picture: StoredPicture | null | undefined): UserDraft => ({
  ...columnsOf(input),
  password: input.password,
  hasPicture: picture === undefined ? undefined : picture !== null,
  current,
});

/**
 * What a user write changed, for the audit trail: the stored fields before and after,
 * the password only as changed, the picture as changed, the departments' ids.
 */
function userChanges(
  before: Parameters<typeof storedFieldsOf>[0] | null,
  after: Parameters<typeof storedFieldsOf>[0],
  extra: { password: boolean; picture: boolean; departments?: { from: number[] | null; to: readonly number[] | undefined } },
): Changes {
  const changes = changesBetween(before && storedFieldsOf(before), storedFieldsOf(after));
  if (extra.password) changes.password = SECRET_CHANGED;
  if (extra.picture) changes.profile_picture = SECRET_CHANGED;
  const departments = extra.departments;
  if (departments?.to !== undefined) {
    const to = [...departments.to].sort((a, b) => a - b);
    if (JSON.stringify(departments.from) !== JSON.stringify(to)) changes.department_ids = { from: departments.from, to };
  }
  return changes;
}

/**
 * The event of an update of the user `after` (as the write left them) that changed `changes`
 * (`userChanges`): none when it changed nothing, `user.password_changed` for a password
 * change alone, `user.updated` otherwise. The write's last, as `audit` must be.
 */
async function auditUserUpdate(tx: Tx, ctx: RequestContext, after: Parameters<typeof userLabel>[0] & { id: number }, changes: Changes): Promise<void> {
  if (Object.keys(changes).length === 0) return;
  const action = Object.keys(changes).length === 1 && changes.password ? 'user.password_changed' : 'user.updated';
  await audit(tx, ctx, { action, target: { type: 'user', id: after.id, label: userLabel(after) }, changes });
}

/** The user just written, as a request without controls is answered (every visible field, the default relations). */
async function presentUser(tx: Tx, viewer: Auth, userId: number) {
  const [record] = await selectRecords(tx, userListing, viewer, { where: eq(users.id, userId) });
  if (!record) throw notFound('The user');
  return record;
}

/** The users list (deleted ones or the others); filtering by hidden fields is refused first. */
async function listUsersWhere(ctx: Context<'listUsers'> | Context<'listDeletedUsers'>, deleted: boolean) {
  const { auth, query, services } = ctx;
  const hidden = filterVisibilityErrors(auth, query.filter);
  if (Object.keys(hidden).length > 0) throw invalid(hidden);
  return listRecords(services.db, auth.tenantId, deleted ? deletedUserListing : listedUserListing, query, auth);
}

async function servePicture(ctx: Context<'getProfilePicture'> | Context<'getProfilePictureNamed'>, requestedName: string | undefined) {
  const { request, params, query, services } = ctx;
  let tenantId: number;
  if (pictureSignatureValid(services.secrets, query, params.user)) {
    tenantId = query.tenant;
  } else {
    if (query.signature !== undefined && !request.headers.authorization) throw unauthorized('The signature is invalid or has expired.', 'signature_invalid');
    const auth = await authenticateRequest(services.db, services.secrets, request);
    requirePermissionUnlessSelf(auth, 'users.view', params.user);
    tenantId = auth.tenantId;
  }
  const picture = await services.db.tenant(tenantId, (tx) => findPicture(tx, params.user, noneMatchTags(request.headers['if-none-match'])));
  if (!picture) throw notFound('The profile picture');
  const caching = { etag: `"${picture.etag}"`, 'cache-control': 'private, max-age=3600' };
  // No bytes: If-None-Match names the picture's tag.
  if (picture.content === null) return { status: 304 as const, headers: caching };
  return {
    status: 200 as const,
    body: picture.content,
    headers: {
      ...caching,
      'content-type': picture.mediaType,
      'content-disposition': inlineDisposition(requestedName ?? picture.fileName),
      'x-content-type-options': 'nosniff',
    },
  };
}

/** A user can be restored only while deleted and not blacked out (422 otherwise). */
function assertRestorable(user: Pick<UserRow, 'blackedOutAt' | 'deletedAt'>): void {
  if (user.blackedOutAt) throw invalid({ user: [coded('blacked_out', 'was blacked out and cannot be restored')] });
  if (!user.deletedAt) throw invalid({ user: [coded('not_deleted', 'is not deleted')] });
}

export const userHandlers = {
  async getCurrentUser({ auth, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, userListing, {}, auth, { key: auth.userId }, 'The user', { controlsAfterFind: true });
    return { status: 200, body };
  },

  async listUsers(ctx) {
    return { status: 200, body: await listUsersWhere(ctx, false) };
  },

  async listDeletedUsers(ctx) {
    return { status: 200, body: await listUsersWhere(ctx, true) };
  },

  // Another user needs users.view: the operation's x-permission (unless-self form).
  async getUser({ auth, params, query, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, userListing, query, auth, { key: params.user }, 'The user', { controlsAfterFind: true });
    return { status: 200, body };
  },

  async createUser(ctx) {
    const { auth, services } = ctx;
    // A taken username is refused ("is already taken"), which tells whether it exists: only users.view may learn that.
    requirePermission(auth, 'users.view');
    const input = ctx.body as UserInput;
    const picture = await pictureOf(ctx, input);
    const draft = draftOf(input, undefined, picture);
    // The tenant's required profile keys are judged in the transaction (they are stored).
    const errors = userDraftErrors(draft, services.config);
    const passwordHash = Object.keys(errors).length === 0 ? await hashPassword(input.password!, auth.tenantId) : null;
    const body = await services.db.tenant(auth.tenantId, async (tx) => {
      // The role and departments are the caller's to give as their permissions stand now, not as they stood when the
      // request began (its password's hash may have waited): a demotion under way is waited for.
      await lockAdministration(tx, auth, undefined, 'shared');
      addErrors(errors, requiredProfileKeyErrors(draft, await loadRequiredProfileKeys(tx)));
      addErrors(errors, await userWriteReferenceErrors(tx, auth, draft, { userId: null, departmentIds: input.department_ids }));
      if (Object.keys(errors).length > 0) throw userWriteRefusal(errors);
      // A new account with the password the caller chose is theirs to sign in with: the session creating it is held, as
      // one setting another user's password is, so that a session ended while the create waited creates none.
      await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      const stored = {
        ...columnsOf(input),
        username: input.username!,
        roleId: input.role_id!,
        active: input.active ?? deriveActive(input.entering_date, input.leaving_date),
      };
      const id = await insertUser(tx, { ...stored, tenantId: auth.tenantId, passwordHash });
      await replaceDepartments(tx, auth.tenantId, id, input.department_ids);
      const pictureChanged = await replacePicture(tx, auth.tenantId, id, picture);
      await audit(tx, ctx, {
        action: 'user.created',
        target: { type: 'user', id, label: userLabel({ firstName: null, lastName: null, ...stored }) },
        changes: userChanges(null, stored, { password: true, picture: pictureChanged, departments: { from: null, to: input.department_ids } }),
      });
      return presentUser(tx, auth, id);
    });
    return { status: 201, body };
  },

  // Another user needs users.administer: the operation's x-permission (unless-self form).
  async updateUser(ctx) {
    const { auth, params, services } = ctx;
    const self = params.user === auth.userId;
    // The answer is the user's record: another user's needs users.view, as reading it does.
    requirePermissionUnlessSelf(auth, 'users.view', params.user);
    const input = { ...ctx.body };
    if (self) {
      // A session that must change its password may do only that (before anything is counted).
      const restricted = restrictedSelfUpdateErrors(auth, input);
      if (Object.keys(restricted).length > 0) throw invalid(restricted);
      for (const key of selfUpdateIgnoredKeys(auth)) delete input[key as keyof UserInput];
    }
    // The password is judged before the transaction (the rest of the draft in it), so that
    // only an acceptable one is hashed.
    const errors = passwordErrors(input.password, services.config);
    const needsOldPassword = input.password !== undefined && self && !can(auth, 'users.administer');
    // The stored hashes `old_password` is known to match: the change is made only while one of them is the stored one.
    let verifiedHashes: string[] | null = null;
    if (needsOldPassword && input.old_password === undefined) errors.old_password = [coded('required', 'is required to change your own password')];
    // Counted on the account's sign-in failure limit before it is checked (429 beyond it).
    else if (needsOldPassword) {
      verifiedHashes = await verifyOwnPassword(services.db, services.config, auth, input.old_password!);
      if (verifiedHashes === null) errors.old_password = [coded('mismatch', 'does not match your current password')];
    }
    const picture = await pictureOf(ctx, input);
    const passwordHash = input.password !== undefined && Object.keys(errors).length === 0 ? await hashPassword(input.password, auth.tenantId) : undefined;
    const body = await services.db.tenant(auth.tenantId, async (tx) => {
      // A new role or a deactivation may take administration away (`lockAdministration`); departments assigned are a
      // grant, and so is any write of another user (a password, a reactivation), which the caller may make only while
      // it holds every permission the user's role lists: judged as a demotion under way leaves them. Before any row is
      // locked, as every holder of that lock takes it, so that none waits for another's rows.
      if (input.role_id !== undefined || input.active === false) await lockAdministration(tx, auth);
      else if (!self || input.department_ids !== undefined) await lockAdministration(tx, auth, undefined, 'shared');
      // A change of one's own password holds the session that makes it: a concurrent change by another session of
      // theirs ends this one (401), and one by this session changed the hash `old_password` was checked against.
      if (self && passwordHash) {
        const stored = await holdSession(tx, auth, presentedTokenHash(ctx.request)!, 'update');
        if (needsOldPassword && (stored === null || !verifiedHashes!.includes(stored)))
          throw invalid({ old_password: [coded('mismatch', 'does not match your current password')] });
      }
      // Two users' rows are taken in key order, as several rows of one table are: the caller's (the session's hold,
      // below) first when it comes first, so that two administrators updating each other wait instead of deadlocking.
      // The session is then judged again below, once the user's row is held.
      if (!self && auth.userId < params.user) await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      // The user's row before it is read: a concurrent write of the user (a new role, other dates) commits first, and
      // this one is judged on what it left, not on what it replaced.
      await lockRecord(tx, users, params.user);
      const current = await requireAdministrableUser(tx, auth, params.user);
      // A write of another user hands out access (their password, a role, memberships whose departments confer entity
      // rights, a reactivation): the session making it is held as one changing its own password is (above), once the
      // user's row is, so that a session ended meanwhile (a logout mark, a deactivation) writes none of it.
      if (!self) await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      if (self) {
        const renameError = selfRenameError(auth, input.username, current.username);
        if (renameError) {
          errors.username = renameError;
          delete input.username;
        }
      } else {
        // Keys the caller may not see are refused, and leave the input: nothing else judges them.
        const hidden = hiddenKeyErrors(auth, current, Object.keys(input));
        for (const key of Object.keys(hidden)) delete input[key as keyof UserInput];
        Object.assign(errors, hidden);
        if (input.password !== undefined && (await usersHoldingRightsBeyond(tx, auth, [current.id])).size > 0) {
          errors.password ??= [coded('confers_rights', HOLDS_ENTITY_RIGHTS)];
        }
      }
      const draft = { ...draftOf(input, current, picture), password: undefined };
      const requiredProfileKeys = await loadRequiredProfileKeys(tx);
      // First: what the caller may not see is refused before the rules judge it.
      addErrors(errors, hiddenRequiredKeyErrors(auth, current, draft, requiredProfileKeys));
      addErrors(errors, userDraftErrors(draft, { ...services.config, requiredProfileKeys }));
      addErrors(errors, await userWriteReferenceErrors(tx, auth, draft, { userId: current.id, departmentIds: input.department_ids }));
      if (Object.keys(errors).length > 0) throw userWriteRefusal(errors);
      const departmentsBefore = input.department_ids === undefined ? null : ((await departmentIdsOf(tx, [current.id])).get(current.id) ?? []);
      const after = { ...current, ...columnsOf(input) };
      // Before the changes are judged: a `null` for a user without a picture removes none and changes nothing.
      const pictureChanged = await replacePicture(tx, auth.tenantId, current.id, picture);
      const changes = userChanges(current, after, {
        password: passwordHash !== undefined,
        picture: pictureChanged,
        departments: { from: departmentsBefore, to: input.department_ids },
      });
      // Deleted or blacked out since it was read: not written over (`updateUserColumns`). The stored values sent back
      // (a client saving the record it read) are no change: `updated_at` stays, as a SCIM write that changes nothing leaves it.
      const stored = { ...columnsOf(input), ...(passwordHash ? { passwordHash } : {}) };
      if (!(await updateUserColumns(tx, current.id, stored, { changed: Object.keys(changes).length > 0 }))) throw notFound('The user');
      if (passwordHash) await endSessionsAfterPasswordChange(tx, auth, current.id);
      // A login token is judged by its creator's authority and its user's rights: a new role for either ends it for good,
      // so that giving the old role back revives nothing.
      if (passwordHash || (input.role_id !== undefined && input.role_id !== current.roleId)) await revokePendingLoginTokens(tx, current.id);
      if (current.active && input.active === false) await cutOff(tx, current.id);
      // A session that must change its password may hold no stream: the user's open ones end on commit.
      else if (!current.requestPasswordChange && input.request_password_change === true) {
        await announceSessionsEnded(tx, { tenantId: auth.tenantId, userId: current.id });
      }
      await replaceDepartments(tx, auth.tenantId, current.id, input.department_ids);
      // A write that changes nothing leaves no event; a password change alone is an action of its own.
      await auditUserUpdate(tx, ctx, after, changes);
      return presentUser(tx, auth, current.id);
    });
    return { status: 200, body };
  },

  // Another user needs users.administer: the operation's x-permission (unless-self form).
  async uploadProfilePicture(ctx) {
    const { auth, params, services } = ctx;
    // The answer is the user's record: another user's needs users.view, as reading it does.
    requirePermissionUnlessSelf(auth, 'users.view', params.user);
    const upload = uploadOf(ctx.request, 'profile_picture');
    if (!upload) throw invalid({ profile_picture: [coded('file_required', 'must be an image file part')] });
    const picture = await acceptPicture(upload);
    const body = await services.db.tenant(auth.tenantId, async (tx) => {
      // Another user's picture is a write of another user, judged as `updateUser` judges one: by the caller's
      // permissions as a demotion under way leaves them (`lockAdministration`, shared, before any row is locked).
      if (params.user !== auth.userId) await lockAdministration(tx, auth, undefined, 'shared');
      // The user's row first, as a blackout or a delete takes it: the user is then read as they left it (a picture
      // stored behind a blackout would outlive it).
      await lockRecord(tx, users, params.user);
      const current = await requireAdministrableUser(tx, auth, params.user);
      // The picture is judged, stored and recorded as `updateUser` does with a picture alone: a changed picture moves
      // the user's `updated_at`, which clients keep their copies by.
      const pictureChanged = await replacePicture(tx, auth.tenantId, current.id, picture);
      const changes = userChanges(current, current, { password: false, picture: pictureChanged });
      if (!(await updateUserColumns(tx, current.id, {}, { changed: Object.keys(changes).length > 0 }))) throw notFound('The user');
      await auditUserUpdate(tx, ctx, current, changes);
      return presentUser(tx, auth, current.id);
    });
    return { status: 200, body };
  },

  async deleteUser(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    assertNotSelf(auth, params.user, 'delete');
    await db.tenant(auth.tenantId, async (tx) => {
      await lockAdministration(tx, auth);
      // Then the user's row, as an update takes them: the event names the user as a write committed meanwhile left them.
      await lockRecord(tx, users, params.user);
      const user = await requireAdministrableUser(tx, auth, params.user);
      if (!(await softDeleteUser(tx, params.user))) throw notFound('The user');
      await cutOff(tx, params.user);
      await audit(tx, ctx, { action: 'user.deleted', target: { type: 'user', id: user.id, label: userLabel(user) } });
    });
    return { status: 204 };
  },

  async restoreUser(ctx) {
    const {
      auth,
      params,
      body,
      services: { db },
    } = ctx;
    const roleId = (body as { role_id?: number } | undefined)?.role_id;
    // The answer is the user's record: it needs users.view, as reading it does.
    requirePermission(auth, 'users.view');
    const restored = await db.tenant(auth.tenantId, async (tx) => {
      // A restore hands an account back, and a `role_id` is a role assignment: both are judged by the caller's
      // permissions as they stand now, and a demotion under way waits for it (`lockAdministration`, shared, before any
      // row is locked, as every holder of that lock takes it).
      await lockAdministration(tx, auth, undefined, 'shared');
      // Locked before it is read, as an update does; then the session, as an update of another user holds it: a
      // restore hands an account back, and a session ended while it waited for the user restores none.
      await lockRecord(tx, users, params.user);
      const user = await requireAdministrableUser(tx, auth, params.user, { withTrashed: true });
      await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      assertRestorable(user);
      if (roleId !== undefined) {
        // The role is an administrative field: written only by a caller who may see it, as by an update.
        const hidden = hiddenKeyErrors(auth, user, ['role_id']);
        if (Object.keys(hidden).length > 0) throw invalid(hidden);
        const references = await loadUserReferences(tx, { roleIds: [roleId] });
        const missing = missingReferenceErrors({ roleId }, references);
        if (Object.keys(missing).length > 0) throw invalid(missing);
        if (!references.roles.get(roleId)!.active) throw invalid({ role_id: [coded('role_inactive', 'must name an active role')] });
        const escalation = userReferenceErrors({ roleId, current: user }, references, auth);
        if (Object.keys(escalation).length > 0) throw invalid(escalation);
        const conferred = await conferredRightsErrors(tx, auth, user.id, { roleId });
        if (Object.keys(conferred).length > 0) throw invalid(conferred);
      }
      if (!(await restoreDeletedUser(tx, user.id, roleId))) {
        // Restored or blacked out since it was read: answered as it is now.
        assertRestorable((await findUser(tx, user.id, true))!);
      }
      await audit(tx, ctx, {
        action: 'user.restored',
        target: { type: 'user', id: user.id, label: userLabel(user) },
        changes: changesBetween({ role_id: user.roleId }, { role_id: roleId ?? user.roleId }),
      });
      return presentUser(tx, auth, user.id);
    });
    return { status: 200, body: restored };
  },

  async blackoutUser(ctx) {
    const {
      auth,
      params,
      services: { db, config, jobs },
    } = ctx;
    assertNotSelf(auth, params.user, 'black out');
    const userId = await db.tenant(auth.tenantId, async (tx) => {
      await lockAdministration(tx, auth);
      const target = await requireAdministrableUser(tx, auth, params.user, { withTrashed: true });
      const values = blackoutValues(target.id);
      if (!(await blackOut(tx, config, target, values))) throw notFound('The user');
      // The person's data leaves the trail too: past events get the account's anonymized
      // values, in a transaction of its own right after this one (docs/audit.md#erasure).
      await recordErasure(tx, target.id, storedFieldsOf(values));
      const label = userLabel({ firstName: null, lastName: null, username: values.username! });
      await audit(tx, ctx, { action: 'user.blacked_out', target: { type: 'user', id: target.id, label } });
      return target.id;
    });
    await queueErasure(jobs, { tenantId: auth.tenantId, userId });
    return { status: 204 };
  },

  // Another user needs users.administer: the operation's x-permission (unless-self form).
  async markUserForLogout(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // Locked before it is read, as an update does: a promotion committing meanwhile is what the caller is judged against.
      await lockRecord(tx, users, params.user);
      const user = await requireAdministrableUser(tx, auth, params.user);
      assertMayMarkForLogout(auth, user);
      // The remedy for a compromised account (docs/security.md, "A compromised account"): a push subscription registered
      // from a stolen session would outlive it, so the user's go too; their devices register again when they sign in again.
      await cutOff(tx, user.id);
      await audit(tx, ctx, { action: 'user.marked_for_logout', target: { type: 'user', id: user.id, label: userLabel(user) } });
    });
    return { status: 204 };
  },

  async getProfilePicture(ctx) {
    return servePicture(ctx, undefined);
  },

  async getProfilePictureNamed(ctx) {
    return servePicture(ctx, ctx.params.fileName);
  },

  async getUserSettings({ auth, services: { db } }) {
    const body = await db.tenant(auth.tenantId, async (tx) => ({
      required_profile_keys: await loadRequiredProfileKeys(tx),
      default_role_id: await loadDefaultRoleId(tx),
    }));
    return { status: 200, body };
  },

  async updateUserSettings(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const wanted = new Set(body.required_profile_keys);
    const keys = PROFILE_KEYS.filter((key) => wanted.has(key));
    const defaultRoleId = await db.tenant(auth.tenantId, async (tx) => {
      // A default role is a grant to the users provisioned later: judged by the caller's permissions as a demotion
      // under way leaves them (`lockAdministration`, shared, first, as every holder of that lock takes it).
      if (body.default_role_id !== undefined) await lockAdministration(tx, auth, undefined, 'shared');
      // Before reading what it replaces: concurrent updates run in turn, and each one's event
      // records the settings the one before left.
      await lockTenantScope(tx, 'required-profile-keys');
      const before = { required_profile_keys: await loadRequiredProfileKeys(tx), default_role_id: await loadDefaultRoleId(tx) };
      if (body.default_role_id !== undefined) {
        const errors = await defaultRoleErrors(tx, auth, body.default_role_id);
        if (Object.keys(errors).length > 0) throw invalid(errors);
        await storeDefaultRoleId(tx, auth.tenantId, body.default_role_id);
      }
      await storeRequiredProfileKeys(tx, auth.tenantId, keys);
      const after = { required_profile_keys: keys, default_role_id: body.default_role_id === undefined ? before.default_role_id : body.default_role_id };
      const changes = changesBetween(before, after);
      if (Object.keys(changes).length > 0)
        await audit(tx, ctx, { action: 'user_settings.updated', target: { type: 'tenant', id: auth.tenantId, label: null }, changes });
      return after.default_role_id;
    });
    return { status: 200, body: { required_profile_keys: keys, default_role_id: defaultRoleId } };
  },

  async getUserImportTemplate({ query }) {
    return {
      status: 200,
      body: importTemplate(query as Record<string, string>),
      headers: { 'content-type': 'text/csv; charset=utf-8', 'content-disposition': 'attachment; filename="users-import-template.csv"' },
    };
  },

  async importUsersCsv({ auth, request, body, services: { db, config } }) {
    // The preview shows existing users (matches, proposed deletions): it needs users.view too.
    requirePermission(auth, 'users.view');
    const upload = uploadOf(request, 'user_data_csv');
    if (!upload) throw invalid({ user_data_csv: [coded('file_required', 'must be a file part')] });
    const { update_users, delete_users, whitespace_to_null, user_data_csv: _file, ...headers } = body as unknown as Record<string, unknown>;
    const options: CsvImportOptions = {
      updateUsers: update_users === true,
      deleteUsers: delete_users === true,
      whitespaceToNull: whitespace_to_null === true,
      headers: headers as Record<string, string>,
      caller: auth,
      passwordMinLength: config.passwordMinLength,
    };
    const result = await db.tenant(auth.tenantId, (tx) => previewCsvImport(tx, upload, options));
    return { status: 200, body: result };
  },
} satisfies Partial<Handlers>;
