/** Reads and writes of users, in the transaction's tenant. */
import { and, asc, eq, getTableColumns, inArray, isNotNull, isNull, ne, or, sql, type SQL } from 'drizzle-orm';
import type { AnyPgColumn } from 'drizzle-orm/pg-core';
import type { Config } from '../../config.ts';
import { userLabel } from '../../platform/audit/audit.ts';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { idempotencyKeys } from '../../platform/http/idempotency.ts';
import { lockRecord, lockTenantScope } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { textArray } from '../../platform/database/id-list.ts';
import { forgetAccountFailures } from '../auth/queries.ts';
import { accessTokens } from '../auth/table.ts';
import { departmentUsers } from '../departments/table.ts';
import { formSubmissions } from '../forms/table.ts';
import { languages } from '../languages/table.ts';
import { announceSessionsEnded } from '../notifications/channel.ts';
import { userLoginTokens } from '../login-tokens/table.ts';
import { scimExternalIds } from '../scim/table.ts';
import { deleteUserSubscriptions } from '../push/queries.ts';
import { roles } from '../roles/table.ts';
import type { StoredPicture } from './profile-picture.ts';
import { PROFILE_KEYS, requiredProfileKeys, userProfilePictures, users, type ProfileKey } from './table.ts';

/** The columns a user write may set. */
export type UserColumns = Partial<typeof users.$inferInsert>;

/**
 * The columns of a user that reads present or judge: every one but the password hash, which
 * only sign-in and the password checks read, each with a query of its own, and the
 * lower-case username that only SCIM filters compare.
 */
const { passwordHash: _passwordHash, usernameLower: _usernameLower, ...userColumns } = getTableColumns(users);

/** A user row (no password hash) plus the stored picture's file name (never its bytes). */
export type UserRow = Omit<typeof users.$inferSelect, 'passwordHash' | 'usernameLower'> & { pictureFileName: string | null; pictureEtag: string | null };

/** The stored picture of the user in the row (at most one: the key is tenant and user). */
const ownPicture = and(eq(userProfilePictures.tenantId, users.tenantId), eq(userProfilePictures.userId, users.id));

/**
 * Users with their picture's file name and ETag (not its bytes), in the transaction's
 * tenant, plus `columns` (the relations the user listing carries in its statement).
 */
export function selectUsers(tx: Tx, columns?: Record<string, SQL>) {
  return tx
    .select({ ...userColumns, pictureFileName: userProfilePictures.fileName, pictureEtag: userProfilePictures.etag, ...columns })
    .from(users)
    .leftJoin(userProfilePictures, ownPicture);
}

/** Users ordered by last name, first name, id (as `GET /api/users` documents). */
export const USER_ORDER = [asc(users.lastName), asc(users.firstName), asc(users.id)];

/** The user with `id` in the transaction's tenant; soft-deleted ones only when `withTrashed`. */
export async function findUser(tx: Tx, id: number, withTrashed = false): Promise<UserRow | undefined> {
  const [row] = await selectUsers(tx).where(eq(users.id, id));
  if (!row || (!withTrashed && row.deletedAt)) return undefined;
  return row;
}

/** The active, not deleted user called `username`, or undefined. */
export async function activeUserNamed(tx: Tx, username: string): Promise<{ id: number; label: string } | undefined> {
  const [user] = await tx
    .select({ id: users.id, active: users.active, firstName: users.firstName, lastName: users.lastName, username: users.username })
    .from(users)
    .where(and(eq(users.username, username), isNull(users.deletedAt)));
  return user?.active ? { id: user.id, label: userLabel(user) } : undefined;
}

/** Users of the tenant (soft-deleted ones included) with what their role could grant, for the CSV preview (add a `where`). */
export function usersWithRoleGrants(tx: Tx) {
  return tx
    .select({ ...userColumns, grantable: roles.permissions, pictureFileName: userProfilePictures.fileName })
    .from(users)
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .leftJoin(userProfilePictures, ownPicture);
}

/** What a role is to the user rules: whether it is active, and what it lists. */
export interface RoleGrants {
  active: boolean;
  permissions: string[];
}

/** The roles and languages a user write may name, as `userReferenceErrors` (rules.ts) judges them. */
export interface UserReferences {
  roles: ReadonlyMap<number, RoleGrants>;
  languages: ReadonlySet<string>;
}

/**
 * The tenant's roles and languages among those named (one query for each kind named, none
 * for none), or all of them (`'all'`, two queries: the CSV preview reads them once).
 */
export async function loadUserReferences(tx: Tx, which: { roleIds?: readonly number[]; langIds?: readonly string[] } | 'all'): Promise<UserReferences> {
  const roleIds = which === 'all' ? null : (which.roleIds ?? []);
  const langIds = which === 'all' ? null : (which.langIds ?? []);
  const roleQuery = tx.select({ id: roles.id, active: roles.active, permissions: roles.permissions }).from(roles);
  const languageQuery = tx.select({ id: languages.id }).from(languages);
  const foundRoles = roleIds === null ? await roleQuery : roleIds.length > 0 ? await roleQuery.where(inArray(roles.id, [...roleIds])) : [];
  const foundLanguages = langIds === null ? await languageQuery : langIds.length > 0 ? await languageQuery.where(inArray(languages.id, [...langIds])) : [];
  return {
    roles: new Map(foundRoles.map(({ id, ...grants }) => [id, grants])),
    languages: new Set(foundLanguages.map((language) => language.id)),
  };
}

/**
 * Whether a user other than `exceptId` (soft-deleted and blacked-out ones included) is called `username`.
 * `anyCase`: in any case, judged under a transaction lock on the lower-cased name in the
 * tenant, so that two concurrent writes whose names differ only in case take their turn and
 * are not both kept (the table's unique key compares the name as written).
 */
export async function usernameTaken(tx: Tx, username: string, exceptId?: number, options: { anyCase?: boolean } = {}): Promise<boolean> {
  // In any case: through the stored lower-cased column and its index.
  const same = options.anyCase ? sql`${users.usernameLower} = lower(${username})` : eq(users.username, username);
  const lookUp = tx
    .select({ id: users.id })
    .from(users)
    .where(and(same, exceptId === undefined ? undefined : ne(users.id, exceptId)))
    .limit(1);
  if (!options.anyCase) return (await lookUp).length > 0;
  // The lock and the look-up leave together: the server runs them in order, and the look-up,
  // a statement of its own, reads what was committed once the lock was granted.
  const [, taken] = await Promise.all([lockTenantScope(tx, 'username-any-case', sql`lower(${username})`), lookUp]);
  return taken.length > 0;
}

/**
 * Stores a new user; answers the id. A concurrent insert of the same username ends in the
 * unique violation, which the error handler answers as a 422 on `username`
 * (users_tenant_id_username_key).
 */
export async function insertUser(tx: Tx, values: typeof users.$inferInsert): Promise<number> {
  const [created] = await tx.insert(users).values(values).returning({ id: users.id });
  return created!.id;
}

/**
 * The transaction's tenant as a condition on `column` (`users.tenant_id` unless another
 * table's; none outside a tenant's transaction). Citus then reads one worker's shard
 * (docs/scaling.md); row-level security still decides what is seen. On Citus an update that leaves its tenant to row-level security reaches every shard, and
 * such a multi-shard update first locks every shard of the table on the coordinator; one that
 * waits there for another while holding the user's row on a worker (`lockRecord`) makes a
 * distributed deadlock that plain PostgreSQL does not have. Named, it reaches one shard
 * and takes no such lock.
 */
export function tenantNamed(tx: Tx, column: AnyPgColumn = users.tenantId): SQL | undefined {
  const tenantId = transactionTenant(tx);
  return tenantId === undefined ? undefined : eq(column, tenantId);
}

/**
 * Stores `values` on the user (and, unless `changed` is false, the time of the update: a
 * write that changes nothing leaves `updated_at` as it was, `updateTime`), unless the user
 * is deleted or blacked out by now: false then. The condition is judged on the row as it is
 * when written, so a delete or blackout that committed after the caller read the user is
 * not overwritten.
 */
export async function updateUserColumns(tx: Tx, userId: number, values: UserColumns, { changed = true } = {}): Promise<boolean> {
  const [updated] = await tx
    .update(users)
    .set({ ...values, updatedAt: updateTime(users.updatedAt, changed) })
    .where(and(tenantNamed(tx), eq(users.id, userId), isNull(users.deletedAt)))
    .returning({ id: users.id });
  return updated !== undefined;
}

/** The user's departments become `departmentIds` (undefined: unchanged). */
export async function replaceDepartments(tx: Tx, tenantId: number, userId: number, departmentIds: readonly number[] | undefined): Promise<void> {
  if (departmentIds === undefined) return;
  await tx.delete(departmentUsers).where(eq(departmentUsers.userId, userId));
  if (departmentIds.length > 0) {
    // A SCIM group write may add the same membership meanwhile (scim/groups.ts, `lockedGroup`).
    await tx
      .insert(departmentUsers)
      .values(departmentIds.map((departmentId) => ({ tenantId, departmentId, userId })))
      .onConflictDoNothing();
  }
}

/** The user's picture becomes `picture` (null: none; undefined: unchanged); whether that changed it. */
export async function replacePicture(tx: Tx, tenantId: number, userId: number, picture: StoredPicture | null | undefined): Promise<boolean> {
  if (picture === undefined) return false;
  if (picture === null) {
    // No picture to remove is no change (the audit trail records none).
    const removed = await tx.delete(userProfilePictures).where(eq(userProfilePictures.userId, userId)).returning({ userId: userProfilePictures.userId });
    return removed.length > 0;
  }
  const values = { ...picture, updatedAt: sql`now()` as never };
  const written = await tx
    .insert(userProfilePictures)
    .values({ tenantId, userId, ...values })
    // The inserted row's values (excluded), so that the picture's bytes are sent once, and its time: Citus refuses a
    // function that is not immutable in DO UPDATE SET.
    .onConflictDoUpdate({
      target: [userProfilePictures.tenantId, userProfilePictures.userId],
      set: {
        mediaType: sql`excluded.media_type`,
        fileName: sql`excluded.file_name`,
        content: sql`excluded.content`,
        etag: sql`excluded.etag`,
        updatedAt: sql`excluded.updated_at`,
      },
      // The picture stored already, sent again, is no change (docs/audit.md: no event; `updated_at` stays): the same
      // bytes (the ETag is their hash) under the same name and type, all that its URL and its download show. The row
      // is then left as it is, and not returned.
      setWhere: sql`(${userProfilePictures.etag}, ${userProfilePictures.fileName}, ${userProfilePictures.mediaType})
        is distinct from (excluded.etag, excluded.file_name, excluded.media_type)`,
    })
    .returning({ userId: userProfilePictures.userId });
  return written.length > 0;
}

/**
 * The stored picture of a user who is not deleted, or undefined. Its `content` is null when
 * its ETag is one of `known` (`'any'`: whatever it is): a conditional read answered 304
 * reads no bytes of a picture of up to 5 MiB. The bytes come as base64 text, which the
 * server encodes and Node decodes natively: the driver's hex text of a `bytea` is half as
 * long again, and decoding it held the event loop about twice as long
 * (docs/performance.md#profile-pictures).
 */
export async function findPicture(tx: Tx, userId: number, known: 'any' | string[]) {
  const content =
    known === 'any'
      ? sql<null>`null`
      : sql<Buffer | null>`case when ${userProfilePictures.etag} = any(${textArray(known)}::text[]) then null else encode(${userProfilePictures.content}, 'base64') end`.mapWith(
          (v: string | null) => (v === null ? null : Buffer.from(v, 'base64')),
        );
  const [row] = await tx
    .select({
      mediaType: userProfilePictures.mediaType,
      fileName: userProfilePictures.fileName,
      etag: userProfilePictures.etag,
      content,
    })
    .from(userProfilePictures)
    .innerJoin(users, and(eq(users.tenantId, userProfilePictures.tenantId), eq(users.id, userProfilePictures.userId)))
    .where(and(eq(userProfilePictures.userId, userId), isNull(users.deletedAt)));
  return row;
}

/**
 * The time a statement runs, for the values of an `UPDATE`: `clock_timestamp()` as a
 * subquery, evaluated once per statement. Citus refuses a volatile function among an
 * `UPDATE`'s values on a distributed table, and accepts it in a subquery
 * (docs/scaling.md#writing-queries-that-stay-on-one-worker).
 */
export const statementClock = sql`(select clock_timestamp())`;

/**
 * Revokes the pending one-time login tokens that would still sign `userId` in, and those
 * `userId` created (for anyone): a credential dies with the account, session or password
 * it came from. They are deleted, so they show as such and can never be used; used and
 * revoked ones stay as they are. Password changes, logout marks, deactivation, deletion
 * and blackout use it.
 */
export async function revokePendingLoginTokens(tx: Tx, userId: number): Promise<void> {
  await tx
    .update(userLoginTokens)
    .set({ deletedAt: statementClock })
    .where(and(or(eq(userLoginTokens.loginUserId, userId), eq(userLoginTokens.userId, userId)), isNull(userLoginTokens.deletedAt)));
}

/**
 * Revokes the pending one-time login tokens that holders of `roleId` created: a role
 * deactivated or losing a permission takes from its holders the authority their tokens
 * stand on, and giving it back revives none of them, as a new role revives none.
 */
export async function revokeLoginTokensCreatedUnder(tx: Tx, roleId: number): Promise<void> {
  await tx
    .update(userLoginTokens)
    .set({ deletedAt: statementClock })
    .where(
      and(
        isNull(userLoginTokens.deletedAt),
        isNull(userLoginTokens.usedAt),
        inArray(userLoginTokens.userId, tx.select({ id: users.id }).from(users).where(eq(users.roleId, roleId))),
      ),
    );
}

/**
 * Ends everything that signs `userId` in: sessions (a logout mark: tokens issued before it
 * stop authenticating) and pending login tokens (theirs, and those they created). A logout
 * mark and a deactivation use it (through `cutOff`), so a later reactivation revives
 * nothing; an operator's password reset (`resetPassword`) and a SCIM password change too. The user's
 * open event streams end on commit (`announceSessionsEnded`), not at their next heartbeat.
 */
export async function endAllSessions(tx: Tx, userId: number): Promise<void> {
  // The row locked before the mark's time is read: a sign-in that holds it (`stillSignsIn`,
  // a login token's redemption) commits first, and its session is older than the mark.
  // The UPDATE alone reads its clock before it waits for the row.
  await lockRecord(tx, users, userId);
  const [marked] = await tx.update(users).set({ logoutMarkedAt: statementClock }).where(eq(users.id, userId)).returning({ tenantId: users.tenantId });
  if (marked) await announceSessionsEnded(tx, { tenantId: marked.tenantId, userId });
  await revokePendingLoginTokens(tx, userId);
}

/**
 * Cuts a user off (a logout mark; a leaver's deactivation or deletion, through the API or
 * SCIM): every session and pending login token ends (`endAllSessions`), and their push
 * subscriptions are deleted, so that a reactivation or a restore revives none of them, and
 * a subscription registered from a stolen session outlives no logout mark. A password
 * change keeps them: a subscription belongs to the user's devices, not to a session.
 */
export async function cutOff(tx: Tx, userId: number): Promise<void> {
  await endAllSessions(tx, userId);
  await deleteUserSubscriptions(tx, userId);
}

/**
 * Soft-deletes the user unless already deleted, marked for logout too, so a later restore
 * revives no old session (their open streams end on commit); answers whether it was.
 */
export async function softDeleteUser(tx: Tx, userId: number): Promise<boolean> {
  const [deleted] = await tx
    .update(users)
    .set({ deletedAt: statementClock, logoutMarkedAt: statementClock, updatedAt: sql`now()` })
    .where(and(eq(users.id, userId), isNull(users.deletedAt)))
    .returning({ tenantId: users.tenantId });
  if (deleted) await announceSessionsEnded(tx, { tenantId: deleted.tenantId, userId });
  return deleted !== undefined;
}

/**
 * Clears the user's `deleted_at`, and replaces the role when `roleId` is given; false when,
 * by the time it is written, the user is not deleted or was blacked out (a concurrent
 * restore or blackout committed after the caller read the user).
 */
export async function restoreDeletedUser(tx: Tx, userId: number, roleId: number | undefined): Promise<boolean> {
  const [restored] = await tx
    .update(users)
    .set({ deletedAt: null, updatedAt: sql`now()`, ...(roleId !== undefined ? { roleId } : {}) })
    .where(and(eq(users.id, userId), isNotNull(users.deletedAt), isNull(users.blackedOutAt)))
    .returning({ id: users.id });
  return restored !== undefined;
}

/** The lock of one account that `holdLiveUser` shares and `blackOut` takes alone. */
const ACCOUNT_LOCK = 'account';

/**
 * Blackout's writes beside the user's own `values` (rules.ts `blackoutValues`): the
 * picture, access tokens and push subscriptions go, pending login tokens are revoked,
 * open streams end on commit, the sign-in counts under the old username and the id are
 * forgotten, the identity provider's id of the person (SCIM `externalId`) goes, what the
 * user typed into forms and task templates is emptied — it may be about them; the
 * submissions stay (as made by the anonymised account, at that time) — and the answers
 * kept for the user's own `Idempotency-Key` retries go.
 * False when there is no such user.
 */
export async function blackOut(tx: Tx, config: Config, user: { id: number; username: string }, values: UserColumns): Promise<boolean> {
  const [updated] = await tx
    .update(users)
    .set(values)
    .where(and(tenantNamed(tx), eq(users.id, user.id)))
    .returning({ tenantId: users.tenantId });
  if (!updated) return false;
  await announceSessionsEnded(tx, { tenantId: updated.tenantId, userId: user.id });
  await tx.delete(userProfilePictures).where(eq(userProfilePictures.userId, user.id));
  await tx.delete(accessTokens).where(eq(accessTokens.userId, user.id));
  await revokePendingLoginTokens(tx, user.id);
  await deleteUserSubscriptions(tx, user.id);
  await tx.delete(scimExternalIds).where(eq(scimExternalIds.userId, user.id));
  await forgetAccountFailures(tx, config, user);
  // Once every other row of the person is written: waits for their writes that hold the account (`holdLiveUser`),
  // which commit first; later ones see the account gone. Such a write holds nothing the blackout still needs.
  await lockTenantScope(tx, ACCOUNT_LOCK, sql`${user.id}::text`);
  // After the lock, so that submissions those writes committed meanwhile are emptied too.
  await tx.update(formSubmissions).set({ values: {} }).where(eq(formSubmissions.userId, user.id));
  // The answers kept for the person's own Idempotency-Key retries (their submissions' values among them).
  await tx.delete(idempotencyKeys).where(eq(idempotencyKeys.userId, user.id));
  return true;
}

/**
 * An operator's password reset (`atrium user:set-password`, for a lost password): the new
 * hash, and everything that signed the user in ends (sessions, pending login tokens); the
 * sign-in failure counts start over, so a locked-out account can sign in at once.
 */
export async function resetPassword(tx: Tx, config: Config, user: { id: number; username: string }, passwordHash: string): Promise<void> {
  await updateUserColumns(tx, user.id, { passwordHash });
  await endAllSessions(tx, user.id);
  await forgetAccountFailures(tx, config, user);
}

/**
 * Holds the caller's own account until the transaction ends, for a write that records an
 * event of theirs (`audit`): false when the account is deleted, a blackout that committed
 * while the write waited included. Without it such a write, begun before the blackout,
 * would commit the person's name or values after the blackout erased the others. The hold
 * is the account's lock shared (`blackOut` takes it exclusively, after its writes), so
 * holders never wait for each other, and it touches no row; the account is read after the
 * lock is granted (its own statement: a fresh snapshot), both sent together. On Citus the
 * lock is the coordinator's, where both transactions run.
 */
export async function holdLiveUser(tx: Tx, userId: number): Promise<boolean> {
  // Naming the transaction's tenant: Citus sends the read to the one worker holding it (docs/scaling.md).
  const tenantId = transactionTenant(tx);
  const [, [row]] = await Promise.all([
    lockTenantScope(tx, ACCOUNT_LOCK, sql`${userId}::text`, 'shared'),
    tx
      .select({ id: users.id })
      .from(users)
      .where(and(tenantId === undefined ? undefined : eq(users.tenantId, tenantId), eq(users.id, userId), isNull(users.deletedAt))),
  ]);
  return row !== undefined;
}

/** A condition on users: not soft-deleted (`deleted` false) or soft-deleted (true). */
export const deletedIs = (deleted: boolean): SQL => (deleted ? isNotNull(users.deletedAt) : isNull(users.deletedAt));

/** The tenant's required profile keys, in `PROFILE_KEYS` order. */
export async function loadRequiredProfileKeys(tx: Tx): Promise<ProfileKey[]> {
  const rows = await tx.select({ key: requiredProfileKeys.key }).from(requiredProfileKeys);
  const stored = new Set(rows.map((row) => row.key));
  return PROFILE_KEYS.filter((key) => stored.has(key));
}

/** The tenant's required profile keys become `keys` (replacing the stored ones). */
export async function storeRequiredProfileKeys(tx: Tx, tenantId: number, keys: readonly ProfileKey[]): Promise<void> {
  // Two concurrent replacements would both delete, then collide on insert.
  await lockTenantScope(tx, 'required-profile-keys');
  await tx.delete(requiredProfileKeys);
  if (keys.length > 0) await tx.insert(requiredProfileKeys).values(keys.map((key) => ({ tenantId, key })));
}

/** For the CSV preview of `department_ids`: the departments of each of `userIds` (IDs in ascending order); one query, none for []. */
export async function departmentIdsOf(tx: Tx, userIds: readonly number[]): Promise<Map<number, number[]>> {
  const byUser = new Map<number, number[]>();
  if (userIds.length === 0) return byUser;
  const rows = await tx
    .select({ userId: departmentUsers.userId, departmentId: departmentUsers.departmentId })
    .from(departmentUsers)
    .where(inArray(departmentUsers.userId, [...userIds]))
    .orderBy(asc(departmentUsers.userId), asc(departmentUsers.departmentId));
  for (const row of rows) {
    const list = byUser.get(row.userId) ?? [];
    list.push(row.departmentId);
    byUser.set(row.userId, list);
  }
  return byUser;
}
