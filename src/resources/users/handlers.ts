import { and, eq, inArray, isNotNull, isNull, ne, or, sql } from 'drizzle-orm';
import { accessTokens } from '../auth/table.ts';
import { authenticateRequest, can, requirePermission, type Auth } from '../../platform/auth/auth.ts';
import { endSessionsAfterPasswordChange, verifyOwnPassword } from '../auth/credentials.ts';
import { forgetAccountFailures } from '../auth/queries.ts';
import { hashPassword } from '../../platform/auth/passwords.ts';
import { CONFERS_ENTITY_RIGHTS, HOLDS_ENTITY_RIGHTS, membershipsConferringRights, usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Body, Context, Handlers } from '../../platform/http/handler.ts';
import { uploadOf } from '../../platform/http/multipart.ts';
import { navigationUrlProblems, ROUTE_FORMS } from '../../platform/http/navigation-url.ts';
import { forbidden, invalid, notFound, unauthorized, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls, type ControlsQuery } from '../../platform/result-controls/result-controls.ts';
import type { Services } from '../../platform/services.ts';
import { departments, departmentUsers } from '../departments/table.ts';
import { formSubmissions } from '../forms/table.ts';
import { languages } from '../languages/table.ts';
import { userLoginTokens } from '../login-tokens/table.ts';
import { pushSubscriptions } from '../push/table.ts';
import { roles } from '../roles/table.ts';
import { grantablePermissions } from '../../platform/auth/permissions.ts';
import { importTemplate, previewCsvImport, type CsvImportOptions } from './csv-import.ts';
import { acceptPicture, inlineDisposition, pictureSignatureValid, type StoredPicture } from './profile-picture.ts';
import {
  assertMayAdminister,
  assertMayMarkForLogout,
  assertNotSelf,
  blackoutValues,
  deriveActive,
  isReservedUsername,
  restrictedSelfUpdateErrors,
  roleAssignmentError,
  selfRenameError,
  selfUpdateIgnoredKeys,
} from './rules.ts';
import { userProfilePictures, users } from './table.ts';
import { findUser, findUsers, type UserRow } from './queries.ts';
import { DEFAULT_USER_RELATIONS, hiddenFieldError, hiddenFieldPermission, userView, type UserViewer } from './view.ts';

/**
 * A create or update request body (JSON or multipart, already validated by the spec):
 * the update schema, which is every create key made optional plus `old_password`.
 */
type UserInput = Body<'updateUser'>;

type UserColumns = Partial<typeof users.$inferInsert>;

/** Interface keys → columns, for the keys that are stored as they are sent. */
const PLAIN_KEYS = {
  username: 'username',
  first_name: 'firstName',
  last_name: 'lastName',
  role_id: 'roleId',
  lang_id: 'langId',
  active: 'active',
  group_account: 'groupAccount',
  request_password_change: 'requestPasswordChange',
  street: 'street',
  zipcode: 'zipcode',
  city: 'city',
  phone: 'phone',
  staff_number: 'staffNumber',
  email: 'email',
  birthdate: 'birthdate',
  entering_date: 'enteringDate',
  leaving_date: 'leavingDate',
  gender: 'gender',
  wants_email_notifications: 'wantsEmailNotifications',
  default_route: 'defaultRoute',
  prevent_logout: 'preventLogout',
} as const satisfies Record<string, keyof UserColumns>;

function columnsOf(input: UserInput): UserColumns {
  const values: Record<string, unknown> = {};
  for (const [key, column] of Object.entries(PLAIN_KEYS)) {
    const value = input[key as keyof UserInput];
    if (value !== undefined) values[column] = value;
  }
  return values as UserColumns;
}

/** The picture part of a request: a new image, `null` (remove), or undefined (untouched). */
async function pictureOf(ctx: Context<'createUser' | 'updateUser'>, input: UserInput): Promise<StoredPicture | null | undefined> {
  if (input.profile_picture === undefined) return undefined;
  const upload = uploadOf(ctx.request, 'profile_picture');
  if (!upload) {
    if (input.profile_picture === null || input.profile_picture === '') return null;
    throw invalid({ profile_picture: ['must be an image file part of a multipart/form-data request, or null'] });
  }
  return acceptPicture(upload.content, upload.fileName);
}

function checkPassword(services: Services, password: string | undefined, errors: FieldErrors): void {
  if (password !== undefined && [...password].length < services.config.passwordMinLength) {
    errors.password = [`must be at least ${services.config.passwordMinLength} characters long`];
  }
}

/** Names are required for personal accounts. */
function checkNames(values: { groupAccount: boolean; firstName: string | null | undefined; lastName: string | null | undefined }, errors: FieldErrors): void {
  if (values.groupAccount) return;
  if (!values.firstName?.trim()) errors.first_name = ['is required for personal accounts'];
  if (!values.lastName?.trim()) errors.last_name = ['is required for personal accounts'];
}

function checkDates(entering: string | null | undefined, leaving: string | null | undefined, errors: FieldErrors): void {
  if (entering && leaving && leaving < entering) errors.leaving_date = ['must not be before entering_date'];
}

/** The role `roleId` of the tenant (active or not), or undefined when there is none. */
async function findRole(tx: Tx, roleId: number): Promise<{ active: boolean; permissions: string[] } | undefined> {
  const [role] = await tx.select({ active: roles.active, permissions: roles.permissions }).from(roles).where(eq(roles.id, roleId));
  return role;
}

/** Rule (b) of `assertMayAdminister`, for a user as stored (their current role, active or not). */
async function assertMayAdministerUser(tx: Tx, auth: Auth, user: Pick<UserRow, 'id' | 'roleId'>): Promise<void> {
  if (user.id === auth.userId) return;
  const role = await findRole(tx, user.roleId);
  assertMayAdminister(auth, { id: user.id, grantable: role ? grantablePermissions(role) : [] });
}

/**
 * Updating ANOTHER user: a key whose field the caller may not see (`hiddenFieldPermission`,
 * the rule of the CSV preview) is refused on that key naming the permission, whatever the
 * value — writing it blind could redirect the user's e-mail, and "changed" or "unchanged"
 * would tell the stored value. Such keys leave `input`, so nothing else judges them.
 */
function checkHiddenFields(auth: Auth, user: Pick<UserRow, 'id'>, input: UserInput, errors: FieldErrors): void {
  for (const key of Object.keys(input) as (keyof UserInput)[]) {
    const permission = hiddenFieldPermission(auth, key, user);
    if (!permission) continue;
    errors[key] = [hiddenFieldError(permission)];
    delete input[key];
  }
}

/** `default_route`: a same-origin path or an absolute http(s) URL (null: none). */
function checkDefaultRoute(route: string | null | undefined, errors: FieldErrors): void {
  if (route === undefined || route === null) return;
  const problems = navigationUrlProblems(route, ROUTE_FORMS);
  if (problems.length > 0) errors.default_route = problems;
}

/**
 * No self-granted entity rights (`membershipsConferringRights`): a new role or new
 * departments of `userId` (null: a user to be created) must not make them named by entity
 * permissions that do not already reach the caller. Errors on `role_id` / `department_ids.<i>`.
 */
async function checkConferredRights(tx: Tx, auth: Auth, userId: number | null, change: { roleId?: number; departmentIds?: readonly number[] }, errors: FieldErrors): Promise<void> {
  if (change.roleId === undefined && change.departmentIds === undefined) return;
  const [conferred] = await membershipsConferringRights(tx, auth, [{ userId, ...change }]);
  if (conferred!.role) errors.role_id ??= [CONFERS_ENTITY_RIGHTS];
  change.departmentIds?.forEach((id, index) => {
    if (conferred!.departmentIds.includes(id)) errors[`department_ids.${index}`] ??= [CONFERS_ENTITY_RIGHTS];
  });
}

/**
 * Role, language, departments and username must exist (or be free) in the caller's
 * tenant; the role may grant only permissions the caller holds (`roleAssignmentError`,
 * active or not), and neither role nor departments may confer entity rights the caller
 * lacks (`checkConferredRights`).
 */
async function checkReferences(tx: Tx, auth: Auth, input: UserInput, errors: FieldErrors, userId?: number): Promise<void> {
  checkDefaultRoute(input.default_route, errors);
  if (input.role_id !== undefined) {
    const role = await findRole(tx, input.role_id);
    const escalation = role && roleAssignmentError(auth, grantablePermissions(role));
    if (!role) errors.role_id = ['does not name a role'];
    else if (escalation) errors.role_id = escalation;
  }
  await checkConferredRights(tx, auth, userId ?? null, { roleId: input.role_id, departmentIds: input.department_ids }, errors);
  if (input.lang_id !== undefined && input.lang_id !== null) {
    const [language] = await tx.select({ id: languages.id }).from(languages).where(eq(languages.id, input.lang_id));
    if (!language) errors.lang_id = ['does not name a language'];
  }
  if (input.department_ids && input.department_ids.length > 0) {
    const found = await tx.select({ id: departments.id }).from(departments).where(inArray(departments.id, input.department_ids));
    const known = new Set(found.map((d) => d.id));
    input.department_ids.forEach((id, index) => {
      if (!known.has(id)) errors[`department_ids.${index}`] = ['does not name a department'];
    });
  }
  if (input.username !== undefined) {
    if (isReservedUsername(input.username)) {
      errors.username = ['is reserved for blacked-out accounts'];
      return;
    }
    const taken = await tx
      .select({ id: users.id })
      .from(users)
      .where(and(eq(users.username, input.username), userId === undefined ? undefined : ne(users.id, userId)));
    if (taken.length > 0) errors.username = ['is already taken'];
  }
}

async function replaceDepartments(tx: Tx, tenantId: number, userId: number, departmentIds: number[] | undefined): Promise<void> {
  if (departmentIds === undefined) return;
  await tx.delete(departmentUsers).where(eq(departmentUsers.userId, userId));
  if (departmentIds.length > 0) {
    await tx.insert(departmentUsers).values(departmentIds.map((departmentId) => ({ tenantId, departmentId, userId })));
  }
}

async function replacePicture(tx: Tx, tenantId: number, userId: number, picture: StoredPicture | null | undefined): Promise<void> {
  if (picture === undefined) return;
  if (picture === null) {
    await tx.delete(userProfilePictures).where(eq(userProfilePictures.userId, userId));
    return;
  }
  const values = { ...picture, updatedAt: sql`now()` as never };
  await tx
    .insert(userProfilePictures)
    .values({ tenantId, userId, ...values })
    .onConflictDoUpdate({ target: [userProfilePictures.tenantId, userProfilePictures.userId], set: values });
}

/**
 * Revokes the pending one-time login tokens that would still sign `userId` in, and those
 * `userId` created (for anyone): a credential dies with the account, session or password
 * it came from. They are deleted, so they show as such and can never be used; used and
 * revoked ones stay as they are. Password changes, logout marks, deactivation, deletion
 * and blackout use it.
 */
async function revokePendingLoginTokens(tx: Tx, userId: number): Promise<void> {
  await tx
    .update(userLoginTokens)
    .set({ deletedAt: sql`clock_timestamp()` as never })
    .where(and(or(eq(userLoginTokens.loginUserId, userId), eq(userLoginTokens.userId, userId)), isNull(userLoginTokens.deletedAt)));
}

/**
 * Ends everything that signs `userId` in: sessions (a logout mark: tokens issued before it
 * stop authenticating) and pending login tokens (theirs, and those they created). Logout
 * marking and deactivation use it, so a later reactivation revives nothing.
 */
async function endAllSessions(tx: Tx, userId: number): Promise<void> {
  await tx.update(users).set({ logoutMarkedAt: sql`clock_timestamp()` as never }).where(eq(users.id, userId));
  await revokePendingLoginTokens(tx, userId);
}

async function presentOne(tx: Tx, viewer: UserViewer, userId: number, query: ControlsQuery = {}) {
  const row = await findUser(tx, userId, true);
  if (!row) throw notFound('The user');
  const controls = readControls(userView, query, viewer, { defaultRelations: DEFAULT_USER_RELATIONS, subject: row });
  const [body] = await present(userView, tx, [row], controls, viewer);
  return body!;
}

/** Filtering by administrative fields would reveal them: it needs their permission. */
function checkFilterVisibility(viewer: Auth, filter: Record<string, unknown> | undefined): void {
  const hidden = ['role_id', 'active'].filter((key) => filter?.[key] !== undefined);
  if (hidden.length > 0 && !can(viewer, 'users.view-administrative')) {
    throw invalid(Object.fromEntries(hidden.map((key) => [`filter.${key}`, ['needs the permission "users.view-administrative"']])));
  }
}

async function listWhere(ctx: Context<'listUsers'> | Context<'listDeletedUsers'>, deleted: boolean) {
  const viewer = ctx.auth;
  const query = ctx.query as ControlsQuery;
  checkFilterVisibility(viewer, query.filter);
  const controls = readControls(userView, query, viewer, { defaultRelations: DEFAULT_USER_RELATIONS });
  return ctx.services.db.tenant(ctx.auth.tenantId, async (tx) => {
    const rows: UserRow[] = await findUsers(tx, and(deleted ? isNotNull(users.deletedAt) : isNull(users.deletedAt), controls.where), controls.limit);
    return present(userView, tx, rows, controls, viewer);
  });
}

async function servePicture(ctx: Context<'getProfilePicture'> | Context<'getProfilePictureNamed'>, requestedName: string | undefined) {
  const { request, params, query, services } = ctx;
  let tenantId: number;
  if (pictureSignatureValid(services.secrets, query, params.user)) {
    tenantId = query.tenant;
  } else {
    if (query.signature !== undefined && !request.headers.authorization) throw unauthorized('The signature is invalid or has expired.');
    const auth = await authenticateRequest(services.db, services.secrets, request);
    if (auth.userId !== params.user) requirePermission(auth, 'users.view');
    tenantId = auth.tenantId;
  }
  const picture = await services.db.tenant(tenantId, async (tx) => {
    const [row] = await tx
      .select({ mediaType: userProfilePictures.mediaType, fileName: userProfilePictures.fileName, etag: userProfilePictures.etag, content: userProfilePictures.content })
      .from(userProfilePictures)
      .innerJoin(users, eq(users.id, userProfilePictures.userId))
      .where(and(eq(userProfilePictures.userId, params.user), isNull(users.deletedAt)));
    return row;
  });
  if (!picture) throw notFound('The profile picture');
  const etag = `"${picture.etag}"`;
  const caching = { etag, 'cache-control': 'private, max-age=3600' };
  const ifNoneMatch = request.headers['if-none-match'];
  if (ifNoneMatch && ifNoneMatch.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag || tag.trim() === '*')) {
    return { status: 304 as const, headers: caching };
  }
  return {
    status: 200 as const,
    body: picture.content,
    headers: { ...caching, 'content-type': picture.mediaType, 'content-disposition': inlineDisposition(requestedName ?? picture.fileName), 'x-content-type-options': 'nosniff' },
  };
}

export const userHandlers = {
  async getCurrentUser({ auth, services: { db, secrets } }) {
    const viewer = auth;
    const body = await db.tenant(auth.tenantId, (tx) => presentOne(tx, viewer, auth.userId));
    return { status: 200, body };
  },

  async listUsers(ctx) {
    return { status: 200, body: await listWhere(ctx, false) };
  },

  async listDeletedUsers(ctx) {
    return { status: 200, body: await listWhere(ctx, true) };
  },

  async getUser({ auth, params, query, services: { db, secrets } }) {
    if (params.user !== auth.userId) requirePermission(auth, 'users.view');
    const body = await db.tenant(auth.tenantId, (tx) => presentOne(tx, auth, params.user, query as ControlsQuery));
    return { status: 200, body };
  },

  async createUser(ctx) {
    const { auth, services } = ctx;
    const input = ctx.body as UserInput;
    const errors: FieldErrors = {};
    checkPassword(services, input.password, errors);
    checkNames({ groupAccount: input.group_account ?? false, firstName: input.first_name, lastName: input.last_name }, errors);
    checkDates(input.entering_date, input.leaving_date, errors);
    const picture = await pictureOf(ctx, input);
    const passwordHash = Object.keys(errors).length === 0 ? await hashPassword(input.password!) : null;
    const body = await services.db.tenant(auth.tenantId, async (tx) => {
      await checkReferences(tx, auth, input, errors);
      if (Object.keys(errors).length > 0) throw invalid(errors);
      // A concurrent insert of the same username ends in the unique violation, which the
      // error handler answers as a 422 on `username` (users_tenant_id_username_key).
      const [created] = await tx
        .insert(users)
        .values({
          ...columnsOf(input),
          tenantId: auth.tenantId,
          username: input.username!,
          roleId: input.role_id!,
          passwordHash,
          active: input.active ?? deriveActive(input.entering_date, input.leaving_date),
        })
        .returning({ id: users.id });
      await replaceDepartments(tx, auth.tenantId, created!.id, input.department_ids);
      await replacePicture(tx, auth.tenantId, created!.id, picture);
      return presentOne(tx, auth, created!.id);
    });
    return { status: 201, body };
  },

  async updateUser(ctx) {
    const { auth, params, services } = ctx;
    const self = params.user === auth.userId;
    const administer = can(auth, 'users.administer');
    if (!self && !administer) throw forbidden('Updating another user requires the permission "users.administer".');
    const input = { ...(ctx.body as UserInput) };
    if (self) {
      // A session that must change its password may do only that (before anything is counted).
      const restricted = restrictedSelfUpdateErrors(auth, input);
      if (Object.keys(restricted).length > 0) throw invalid(restricted);
      for (const key of selfUpdateIgnoredKeys(auth)) delete input[key as keyof UserInput];
    }
    const errors: FieldErrors = {};
    checkPassword(services, input.password, errors);
    const needsOldPassword = input.password !== undefined && self && !administer;
    if (needsOldPassword && input.old_password === undefined) errors.old_password = ['is required to change your own password'];
    // Counted on the account's sign-in failure limit before it is checked (429 beyond it).
    else if (needsOldPassword && !(await verifyOwnPassword(services.db, services.config, auth, input.old_password!))) {
      errors.old_password = ['does not match your current password'];
    }
    const picture = await pictureOf(ctx, input);
    const passwordHash = input.password !== undefined && Object.keys(errors).length === 0 ? await hashPassword(input.password) : undefined;
    const body = await services.db.tenant(auth.tenantId, async (tx) => {
      const current = await findUser(tx, params.user);
      if (!current) throw notFound('The user');
      await assertMayAdministerUser(tx, auth, current);
      if (self) {
        const renameError = selfRenameError(auth, input.username, current.username);
        if (renameError) {
          errors.username = renameError;
          delete input.username;
        }
      } else {
        checkHiddenFields(auth, current, input, errors);
        if (input.password !== undefined && (await usersHoldingRightsBeyond(tx, auth, [current.id])).size > 0) {
          errors.password ??= [HOLDS_ENTITY_RIGHTS];
        }
      }
      checkNames(
        {
          groupAccount: input.group_account ?? current.groupAccount,
          firstName: input.first_name !== undefined ? input.first_name : current.firstName,
          lastName: input.last_name !== undefined ? input.last_name : current.lastName,
        },
        errors,
      );
      checkDates(
        input.entering_date !== undefined ? input.entering_date : current.enteringDate,
        input.leaving_date !== undefined ? input.leaving_date : current.leavingDate,
        errors,
      );
      await checkReferences(tx, auth, input, errors, current.id);
      if (Object.keys(errors).length > 0) throw invalid(errors);
      const values: UserColumns = { ...columnsOf(input), ...(passwordHash ? { passwordHash } : {}), updatedAt: sql`now()` as never };
      await tx.update(users).set(values).where(eq(users.id, current.id));
      if (passwordHash) {
        await endSessionsAfterPasswordChange(tx, auth, current.id);
        await revokePendingLoginTokens(tx, current.id);
      }
      if (current.active && input.active === false) await endAllSessions(tx, current.id);
      await replaceDepartments(tx, auth.tenantId, current.id, input.department_ids);
      await replacePicture(tx, auth.tenantId, current.id, picture);
      return presentOne(tx, auth, current.id);
    });
    return { status: 200, body };
  },

  async deleteUser({ auth, params, services: { db } }) {
    assertNotSelf(auth, params.user, 'delete');
    await db.tenant(auth.tenantId, async (tx) => {
      const user = await findUser(tx, params.user);
      if (!user) throw notFound('The user');
      await assertMayAdministerUser(tx, auth, user);
      const deleted = await tx
        .update(users)
        // Marked for logout too, so a later restore does not revive old sessions.
        .set({ deletedAt: sql`clock_timestamp()` as never, logoutMarkedAt: sql`clock_timestamp()` as never, updatedAt: sql`now()` as never })
        .where(and(eq(users.id, params.user), isNull(users.deletedAt)))
        .returning({ id: users.id });
      if (deleted.length === 0) throw notFound('The user');
      await revokePendingLoginTokens(tx, params.user);
    });
    return { status: 204 };
  },

  async restoreUser({ auth, params, body, services: { db, secrets } }) {
    const roleId = (body as { role_id?: number } | undefined)?.role_id;
    const restored = await db.tenant(auth.tenantId, async (tx) => {
      const user = await findUser(tx, params.user, true);
      if (!user) throw notFound('The user');
      await assertMayAdministerUser(tx, auth, user);
      if (user.blackedOutAt) throw invalid({ user: ['was blacked out and cannot be restored'] });
      if (!user.deletedAt) throw invalid({ user: ['is not deleted'] });
      if (roleId !== undefined) {
        const role = await findRole(tx, roleId);
        if (!role?.active) throw invalid({ role_id: ['must name an active role'] });
        const escalation = roleAssignmentError(auth, grantablePermissions(role));
        if (escalation) throw invalid({ role_id: escalation });
        const errors: FieldErrors = {};
        await checkConferredRights(tx, auth, user.id, { roleId }, errors);
        if (Object.keys(errors).length > 0) throw invalid(errors);
      }
      await tx
        .update(users)
        .set({ deletedAt: null, updatedAt: sql`now()` as never, ...(roleId !== undefined ? { roleId } : {}) })
        .where(eq(users.id, user.id));
      return presentOne(tx, auth, user.id);
    });
    return { status: 200, body: restored };
  },

  async blackoutUser({ auth, params, services: { db, config } }) {
    assertNotSelf(auth, params.user, 'black out');
    await db.tenant(auth.tenantId, async (tx) => {
      const target = await findUser(tx, params.user, true);
      if (!target) throw notFound('The user');
      await assertMayAdministerUser(tx, auth, target);
      const [user] = await tx.update(users).set(blackoutValues(params.user)).where(eq(users.id, params.user)).returning({ id: users.id });
      if (!user) throw notFound('The user');
      await tx.delete(userProfilePictures).where(eq(userProfilePictures.userId, user.id));
      await tx.delete(accessTokens).where(eq(accessTokens.userId, user.id));
      await revokePendingLoginTokens(tx, user.id);
      await tx.delete(pushSubscriptions).where(eq(pushSubscriptions.userId, user.id));
      await forgetAccountFailures(tx, config, target);
      // What they typed into forms and task templates may be about them; the submissions
      // stay (as made by the anonymised account, at that time) with no values.
      await tx.update(formSubmissions).set({ values: {} }).where(eq(formSubmissions.userId, user.id));
    });
    return { status: 204 };
  },

  async markUserForLogout({ auth, params, services: { db } }) {
    if (params.user !== auth.userId && !can(auth, 'users.administer')) {
      throw forbidden('Marking another user for logout requires the permission "users.administer".');
    }
    await db.tenant(auth.tenantId, async (tx) => {
      const user = await findUser(tx, params.user);
      if (!user) throw notFound('The user');
      assertMayMarkForLogout(auth, user);
      await assertMayAdministerUser(tx, auth, user);
      await endAllSessions(tx, user.id);
    });
    return { status: 204 };
  },

  async getProfilePicture(ctx) {
    return servePicture(ctx, undefined);
  },

  async getProfilePictureNamed(ctx) {
    return servePicture(ctx, ctx.params.fileName);
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
    if (!upload) throw invalid({ user_data_csv: ['must be a file part'] });
    const { update_users, delete_users, whitespace_to_null, user_data_csv: _file, ...headers } = body as unknown as Record<string, unknown>;
    const options: CsvImportOptions = {
      updateUsers: update_users === true,
      deleteUsers: delete_users === true,
      whitespaceToNull: whitespace_to_null === true,
      headers: headers as Record<string, string>,
      caller: auth,
      passwordMinLength: config.passwordMinLength,
    };
    const result = await db.tenant(auth.tenantId, (tx) => previewCsvImport(tx, upload.content, options));
    return { status: 200, body: result };
  },
} satisfies Partial<Handlers>;
