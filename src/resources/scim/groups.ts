/**
 * SCIM Groups ↔ Atrium departments (docs/scim.md#attribute-mapping): `displayName` is the
 * department's name, `members` its memberships of users SCIM sees (personal accounts
 * that are not deleted; memberships of other accounts are left as they are).
 */
import { characterCount } from '../../platform/http/validation.ts';
import { and, asc, count, eq, inArray, sql, type SQL } from 'drizzle-orm';
import { sameJson } from '../../platform/audit/audit.ts';
import type { Caller } from '../../platform/auth/auth.ts';
import { grantablePermissions } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds } from '../../platform/database/existence.ts';
import { idArray, inIdList } from '../../platform/database/id-list.ts';
import { lockRecord, lockTenantScope, type RecordLock } from '../../platform/database/locks.ts';
import { coded, invalid } from '../../platform/http/problem.ts';
import { departmentCountAndLimit, saveDepartment, departmentRecords, type DepartmentRow } from '../departments/queries.ts';
import { departmentAfter, departmentAvailability, departmentLimitRefusal, departmentWrite } from '../departments/rules.ts';
import { departmentUsers, departments } from '../departments/table.ts';
import { membershipsConferringRights, CONFERS_ENTITY_RIGHTS } from '../entity-permissions/rules.ts';
import { roles } from '../roles/table.ts';
import { assertMayAdminister, MAX_DEPARTMENTS_PER_USER } from '../users/rules.ts';
import { users } from '../users/table.ts';
import { GROUP_SCHEMA, invalidValue, isRecordId, scimNotFound } from './protocol.ts';
import { get, SCIM_USERS, type FilterAttribute } from './users.ts';

/** Filterable Group attributes, by lower-case path. `members.value` asks whether the user is a member. */
export const GROUP_ATTRIBUTES: Record<string, FilterAttribute> = {
  id: { value: sql`${departments.id}`, kind: 'id' },
  externalid: { value: sql`${departments.externalId}`, kind: 'exact' },
  displayname: { value: sql`${departments.name}`, kind: 'text' },
  'meta.created': { value: sql`${departments.createdAt}`, kind: 'datetime' },
  'meta.lastmodified': { value: sql`${departments.updatedAt}`, kind: 'datetime' },
  'members.value': { value: sql`${departments.id}`, kind: 'member' },
  members: { value: sql`${departments.id}`, kind: 'member' },
};

/**
 * A membership change is a change of the user: the token's minter must be allowed to
 * administer every user added or removed (`assertMayAdminister`, 403 otherwise), so a
 * delegate cannot move an administrator who holds more than they do. The users' rows are
 * held first (in id order, by a statement of their own), as a new role locks its user's
 * row: one committed meanwhile is what they are judged on. They are held `FOR NO KEY
 * UPDATE`, not `FOR SHARE`: two group writes that change one user's memberships (parallel
 * `PATCH`es of an identity provider) then take turns, so each counts the groups the other
 * gave the user (`MAX_DEPARTMENTS_PER_USER`). Two queries; users that do not exist are
 * left to the caller's own check.
 */
async function requireAdministrableMembers(tx: Tx, caller: Caller & { tenantId: number }, userIds: number[]): Promise<void> {
  if (userIds.length === 0) return;
  await tx
    .select({ id: users.id })
    .from(users)
    .where(and(eq(users.tenantId, caller.tenantId), inIdList(users.id, userIds)))
    .orderBy(asc(users.id))
    .for('no key update');
  const rows = await tx
    .select({ id: users.id, permissions: roles.permissions })
    .from(users)
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .where(inIdList(users.id, userIds));
  for (const row of rows) assertMayAdminister(caller, { id: row.id, grantable: grantablePermissions(row) });
}

/** The department `id` (decimal text), or 404. */
export async function requireGroup(tx: Tx, id: string): Promise<DepartmentRow> {
  if (!isRecordId(id)) throw scimNotFound('The group', id);
  const [row] = await departmentRecords(tx).where(eq(departments.id, Number(id)));
  if (!row) throw scimNotFound('The group', id);
  return row;
}

/**
 * The group `id` as `requireGroup` reads it, its row locked until the transaction ends,
 * for a write of the group: a write reads the group's members only once no other write of
 * the group is under way, so that concurrent PATCHes (an identity provider sends a group's
 * membership changes in parallel batches) each apply to the members the others left.
 * A membership added through `/api` meanwhile does not wait for it (`FOR NO KEY UPDATE`):
 * the two writes then add the same row, and the one that comes second adds nothing. A
 * delete locks it `FOR UPDATE`, as `/api`'s does: a new reference to the department (an
 * entity permission that names it) then waits, and is seen or refused.
 */
export async function lockedGroup(tx: Tx, id: string, strength: RecordLock = 'no key update'): Promise<DepartmentRow> {
  if (!isRecordId(id) || !(await lockRecord(tx, departments, Number(id), strength))) throw scimNotFound('The group', id);
  return requireGroup(tx, id);
}

/** A page of departments matching `where`, by id, and how many match. Two queries. */
export async function listGroups(tx: Tx, where: SQL | undefined, offset: number, limit: number) {
  const [counted] = await tx.select({ n: count() }).from(departments).where(where);
  const rows = limit === 0 ? [] : await departmentRecords(tx).where(where).orderBy(asc(departments.id)).offset(offset).limit(limit);
  return { rows, total: counted?.n ?? 0 };
}

/**
 * The SCIM-visible members of each department, by department id: one query (none for none).
 * With `limit`, the first that many memberships in department order; the last department
 * read may then be cut short.
 */
export async function membersOf(tx: Tx, departmentIds: number[], limit?: number): Promise<Map<number, { id: number; username: string }[]>> {
  const byDepartment = new Map<number, { id: number; username: string }[]>();
  if (departmentIds.length === 0) return byDepartment;
  const query = tx
    .select({ departmentId: departmentUsers.departmentId, id: users.id, username: users.username })
    .from(departmentUsers)
    .innerJoin(users, and(eq(users.tenantId, departmentUsers.tenantId), eq(users.id, departmentUsers.userId)))
    .where(and(inArray(departmentUsers.departmentId, departmentIds), SCIM_USERS))
    .orderBy(asc(departmentUsers.departmentId), asc(users.id))
    .$dynamic();
  const rows = await (limit === undefined ? query : query.limit(limit));
  for (const row of rows) {
    const list = byDepartment.get(row.departmentId) ?? [];
    list.push({ id: row.id, username: row.username });
    byDepartment.set(row.departmentId, list);
  }
  return byDepartment;
}

/**
 * The most members a page of groups lists. Groups share members, so a page of 200 groups
 * of a large tenant would list millions, all held in memory before the answer is written.
 */
export const MAX_LISTED_MEMBERS = 50_000;

/**
 * The groups of a page (`rows`, in id order, as `listGroups` reads them) with their
 * members, the page ended before the group whose members would pass MAX_LISTED_MEMBERS:
 * RFC 7644 §3.4.2.4 lets a page hold fewer resources than asked for, and a client asks
 * for the next from `startIndex` + `itemsPerPage`. A first group beyond the bound is
 * answered alone and whole, as `GET /Groups/{id}` answers it.
 */
export async function groupsWithMembers<Row extends { id: number }>(
  tx: Tx,
  rows: Row[],
): Promise<{ rows: Row[]; memberships: Map<number, { id: number; username: string }[]> }> {
  const memberships = await membersOf(
    tx,
    rows.map((row) => row.id),
    MAX_LISTED_MEMBERS + 1,
  );
  let listed = 0;
  for (const members of memberships.values()) listed += members.length;
  if (listed <= MAX_LISTED_MEMBERS) return { rows, memberships };
  // Read in id order: every group before the last one read is whole.
  const cut = Math.max(...memberships.keys());
  const whole = rows.filter((row) => row.id < cut);
  if (whole.length > 0) return { rows: whole, memberships };
  return { rows: rows.slice(0, 1), memberships: await membersOf(tx, [rows[0]!.id]) };
}

/** The department as a SCIM Group (RFC 7643 §4.2); `members` left out when not wanted. */
export function presentGroup(row: DepartmentRow, members: { id: number; username: string }[] | undefined, baseUrl: string) {
  return {
    schemas: [GROUP_SCHEMA],
    id: String(row.id),
    ...(row.externalId !== null ? { externalId: row.externalId } : {}),
    displayName: row.name,
    ...(members ? { members: members.map((m) => ({ value: String(m.id), display: m.username, $ref: `${baseUrl}/Users/${m.id}`, type: 'User' })) } : {}),
    meta: {
      resourceType: 'Group',
      created: row.createdAt.toISOString(),
      lastModified: row.updatedAt.toISOString(),
      location: `${baseUrl}/Groups/${row.id}`,
    },
  };
}

/** How many missing members a refusal names: a whole directory of unknown ids would otherwise be its detail. */
const MISSING_NAMED = 20;

/** The first `most` of `ids`, and how many more there are. */
const namedUpTo = (ids: number[], most: number) => ids.slice(0, most).join(', ') + (ids.length > most ? ` and ${ids.length - most} more` : '');

/** Whether a member says it is a group: `type` "Group", or a `$ref` to a Group (RFC 7643 §4.2). */
function namesGroup(member: Record<string, unknown>): boolean {
  const type = get(member, 'type');
  const ref = get(member, '$ref');
  return (typeof type === 'string' && type.toLowerCase() === 'group') || (typeof ref === 'string' && /(^|\/)Groups\/[^/?#]+\/?([?#].*)?$/is.test(ref));
}

export interface GroupWrite {
  name: string;
  externalId: string | null;
  /** The SCIM-visible members, as user ids. */
  memberIds: number[];
}

/**
 * A whole Group (a POST or PUT body, or a resource after PATCH) → what it writes. An
 * attribute it lacks writes none: a PUT replaces the group (RFC 7644 §3.5.1), so a PUT
 * without `members` leaves it without SCIM-visible members (docs/scim.md).
 */
export function groupWrite(resource: Record<string, unknown>): GroupWrite {
  const displayName = get(resource, 'displayName');
  if (displayName === undefined || displayName === null || (typeof displayName === 'string' && displayName.trim() === ''))
    throw invalidValue('displayName is required.');
  if (typeof displayName !== 'string') throw invalidValue('displayName must be a string.');
  const externalId = get(resource, 'externalId');
  if (externalId !== undefined && externalId !== null && (typeof externalId !== 'string' || characterCount(externalId) > 255)) {
    throw invalidValue('externalId must be a string of at most 255 characters.');
  }
  const written = { name: displayName, externalId: typeof externalId === 'string' && externalId !== '' ? externalId : null };
  const members = get(resource, 'members');
  if (members === undefined || members === null) return { ...written, memberIds: [] };
  if (!Array.isArray(members)) throw invalidValue('members must be an array.');
  const ids = members.map((member) => {
    const value = (member as { value?: unknown } | null)?.value;
    if (typeof value !== 'string' || !isRecordId(value)) throw invalidValue(`members: ${JSON.stringify(value)} is not a user id.`);
    // User and department ids overlap: a group named as a member must not be read as the user of its id.
    if (namesGroup(member as Record<string, unknown>)) throw invalidValue(`members: ${value} is a group; a group's members are users (groups do not nest).`);
    return Number(value);
  });
  // Repeated adds of the same member are one membership.
  return { ...written, memberIds: [...new Set(ids)] };
}

/**
 * Writes the department's name (through the department rules), its `externalId` and its
 * SCIM-visible members: every member must be a user SCIM sees, and joining must confer no
 * entity right beyond the token's minter (as `department_ids` of the user API is judged).
 * Answers the department's id, and whether the write changed it (its name, `externalId`,
 * members, or the values of fields no longer attached, which any write drops).
 */
export async function saveGroup(
  tx: Tx,
  caller: Caller & { tenantId: number },
  write: GroupWrite,
  current: DepartmentRow | null,
): Promise<{ id: number; changed: boolean }> {
  if (!current) {
    await lockTenantScope(tx, 'departments.limit');
    const refusal = departmentLimitRefusal(departmentAvailability(await departmentCountAndLimit(tx)));
    if (refusal) throw refusal;
  }
  const department = await departmentWrite(tx, { name: write.name }, current);
  const externalIdChanged = (current?.externalId ?? null) !== write.externalId;
  const stored = current ? ((await membersOf(tx, [current.id])).get(current.id)?.map((m) => m.id) ?? []) : [];
  // Compared through sets: each list searched in the other was 10,000 × 10,000 comparisons for a group of 10,000.
  const storedIds = new Set(stored);
  const writtenIds = new Set(write.memberIds);
  const added = write.memberIds.filter((userId) => !storedIds.has(userId));
  const removed = stored.filter((userId) => !writtenIds.has(userId));
  // Before the department's row is written: a new name locks it as a key (FOR UPDATE), which a user's update through
  // `/api` that holds the user and names the department waits for, so the users must be held first, or the two
  // writes wait for each other.
  await requireAdministrableMembers(tx, caller, [...added, ...removed]);
  // A write that leaves the group as it was (an identity provider's periodic PUT) leaves its `updated_at`, which is
  // its `meta.lastModified`, as it was; a change of its members moves it.
  const changed = !current || !sameJson(departmentAfter(current, department), current) || externalIdChanged || added.length + removed.length > 0;
  // A department created over SCIM has no creator (`user_id` null): the token is no user.
  const id = await saveDepartment(tx, { tenantId: caller.tenantId, userId: null as never }, department, current?.id ?? null, { changed });
  if (externalIdChanged) await tx.update(departments).set({ externalId: write.externalId }).where(eq(departments.id, id));
  if (added.length > 0) {
    // Held (FOR KEY SHARE) before the memberships are written, as a user's update through
    // `/api` holds the user before its memberships: one order, so a rename does not deadlock.
    const missing = await missingIds(tx, users, added, SCIM_USERS, { keep: true });
    if (missing.size > 0) throw invalidValue(`members: no user ${namedUpTo([...missing], MISSING_NAMED)}.`);
    const conferred = await membershipsConferringRights(
      tx,
      caller,
      added.map((userId) => ({ userId, departmentIds: [id] })),
    );
    if (conferred.some((c) => c.departmentIds.length > 0)) throw invalid({ members: [coded('confers_rights', CONFERS_ENTITY_RIGHTS)] });
    // A user's update through `/api` may add the same membership meanwhile (`lockedGroup`). The members go as one
    // array, as the statements above take them: a whole directory's "All employees" is one statement, never past
    // PostgreSQL's 65,535 parameters.
    await tx.execute(sql`
      insert into department_users (tenant_id, department_id, user_id)
      select ${caller.tenantId}::bigint, ${id}::bigint, user_id from unnest(${idArray(added)}::bigint[]) as added (user_id)
      on conflict do nothing`);
    // Counted once the memberships are written, in one statement for all the members added; a refusal rolls them back.
    const crowded = await tx.execute<{ user_id: number | string }>(sql`
      select user_id from department_users where tenant_id = ${caller.tenantId} and user_id = any(${idArray(added)}::bigint[])
      group by user_id having count(*) > ${MAX_DEPARTMENTS_PER_USER}`);
    if (crowded.length > 0) {
      const named = namedUpTo(
        crowded.map((row) => Number(row.user_id)).sort((a, b) => a - b),
        MISSING_NAMED,
      );
      throw invalidValue(`members: a user belongs to at most ${MAX_DEPARTMENTS_PER_USER} groups; user ${named} would belong to more.`);
    }
  }
  if (removed.length > 0) await tx.delete(departmentUsers).where(and(eq(departmentUsers.departmentId, id), inIdList(departmentUsers.userId, removed)));
  return { id, changed };
}
