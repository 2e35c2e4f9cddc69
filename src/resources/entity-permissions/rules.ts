import { isNull, sql } from 'drizzle-orm';
import type { Permission } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds, reportMissing } from '../../platform/database/existence.ts';
import { idArray } from '../../platform/database/id-list.ts';
import type { FieldErrors } from '../../platform/http/problem.ts';
import { departments } from '../departments/table.ts';
import { MENU_ITEM_ENTITY_TYPE } from '../menu-items/table.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { namesUser, subjectIsUser, type SubjectLists } from './queries.ts';

/**
 * Field errors (`<prefix>.user_ids.3: does not exist`) for ids that name no record of the
 * transaction's tenant (users: none that is deleted), see
 * docs/api-conventions.md#missing-references. One query per non-empty list.
 *
 * `stored`, on an update, is what the entity names now: a user it names stays named while
 * deleted (a restore brings them back with their access), so the lists sent back as they
 * were read are no change and pass.
 */
export async function missingSubjects(tx: Tx, lists: Partial<SubjectLists>, prefix: string, stored?: SubjectLists): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  const userIds = lists.user_ids ?? [];
  const roleIds = lists.role_ids ?? [];
  const departmentIds = lists.department_ids ?? [];
  const named = new Set(stored?.user_ids);
  const judged = userIds.filter((id) => !named.has(id));
  reportMissing(errors, `${prefix}.user_ids`, userIds, await missingIds(tx, users, judged, isNull(users.deletedAt)));
  reportMissing(errors, `${prefix}.role_ids`, roleIds, await missingIds(tx, roles, roleIds));
  // Kept until the transaction ends: no foreign key holds a department an entity permission names,
  // and a department's delete refuses while one names it (departments/handlers.ts).
  reportMissing(errors, `${prefix}.department_ids`, departmentIds, await missingIds(tx, departments, departmentIds, undefined, { keep: true }));
  return errors;
}

/**
 * The permission that administers every entity of a type, whatever its entity permissions
 * name: its holders have the rights the entity permissions confer anyway. Entity types
 * not listed here have no such permission.
 */
export const ENTITY_TYPE_ADMINISTRATION: Readonly<Record<string, Permission>> = {
  form: 'tasks.administer',
  taskTemplate: 'tasks.administer',
  [MENU_ITEM_ENTITY_TYPE]: 'menu-items.administer',
};

/** A proposed change of one user's memberships (only what changes is given). */
export interface MembershipChange {
  /** The user whose memberships change; null for a user still to be created. */
  userId: number | null;
  /** The new role, when it changes. */
  roleId?: number;
  /** The new departments, when they change. */
  departmentIds?: readonly number[];
}

/** Of one change: whether the role, and which of the departments, confer rights the caller lacks. */
export interface ConferredRights {
  role: boolean;
  departmentIds: number[];
}

/** The error for a membership that `membershipsConferringRights` refuses; it names no entity. */
export const CONFERS_ENTITY_RIGHTS = 'would give access through entity permissions (of a form, task template or menu item) that you do not have yourself';

/** The entity types whose rights `caller` has anyway, through their administering permission (a text[] literal). */
function coveredEntityTypes(caller: { permissions: ReadonlySet<string> }): string {
  const covered = Object.entries(ENTITY_TYPE_ADMINISTRATION)
    .filter(([, permission]) => caller.permissions.has(permission))
    .map(([entityType]) => entityType);
  return `{${covered.join(',')}}`;
}

/**
 * No self-granted entity rights. A membership change must not give its user rights
 * through entity permissions (being named, through a role or a department, by a form's,
 * task template's or menu item's permissions) that the CALLER does not already have —
 * the caller's own memberships included. The caller already has such a right when the
 * entity's permissions name the caller, or when the caller holds the permission that
 * administers that type of entity (`ENTITY_TYPE_ADMINISTRATION`).
 *
 * Only what the change adds counts: an entity that already names the user (directly, or
 * through their current role or departments) confers nothing new, and removing a
 * membership is always allowed. Naming through the current role or directly counts so only
 * for a caller holding `users.view-administrative`, who may see both: for any other, whether
 * a change is refused must not tell the user's role or the entity permissions naming them
 * (docs/security.md, field visibility). Answers, per change (same order), the offending role and
 * departments; ONE query for any number of changes, none when `newUsers` knows them all.
 *
 * `newUsers`, when given, keeps the answers for users still to be created (`userId`
 * null) across calls that judge one file (the CSV import preview's batches): such an
 * answer depends only on the role or department and the caller, so each is asked once.
 */
export async function membershipsConferringRights(
  tx: Tx,
  caller: { userId: number; permissions: ReadonlySet<string> },
  changes: readonly MembershipChange[],
  newUsers?: Map<string, boolean>,
): Promise<ConferredRights[]> {
  const result: ConferredRights[] = changes.map(() => ({ role: false, departmentIds: [] }));
  const confer = (i: number, roleId: number | null, departmentId: number | null) => {
    if (roleId !== null) result[i]!.role = true;
    else result[i]!.departmentIds.push(departmentId!);
  };
  // Each (user, role or department) pair is asked once, however many changes propose it
  // (the rows of a CSV file that give new users the same role); `askedBy` maps it back.
  const pairs = new Map<string, number>();
  const askedBy: number[][] = [];
  const targets: (number | null)[] = [];
  const roleIds: (number | null)[] = [];
  const departmentIds: (number | null)[] = [];
  const ask = (i: number, userId: number | null, roleId: number | null, departmentId: number | null) => {
    const pair = roleId !== null ? `${userId} role ${roleId}` : `${userId} department ${departmentId}`;
    const known = userId === null ? newUsers?.get(pair) : undefined;
    if (known !== undefined) {
      if (known) confer(i, roleId, departmentId);
      return;
    }
    let at = pairs.get(pair);
    if (at === undefined) {
      at = askedBy.push([]) - 1;
      pairs.set(pair, at);
      targets.push(userId);
      roleIds.push(roleId);
      departmentIds.push(departmentId);
    }
    askedBy[at]!.push(i);
  };
  changes.forEach((change, i) => {
    if (change.roleId !== undefined) ask(i, change.userId, change.roleId, null);
    if (change.departmentIds?.length) for (const departmentId of new Set(change.departmentIds)) ask(i, change.userId, null, departmentId);
  });
  if (askedBy.length === 0) return result;
  // Naming through the user's role or directly (their role and their entity permissions are administrative fields)
  // exempts only for a caller who may see them: otherwise whether a membership is refused would tell them.
  const seesAdministrative = caller.permissions.has('users.view-administrative');
  const index = askedBy.map((_, at) => at);
  const rows = await tx.execute<{ i: number; role_id: string | null; department_id: string | null }>(sql`
    select distinct c.i, c.role_id, c.department_id
    from unnest(${idArray(index)}::int[], ${idArray(targets)}::bigint[], ${idArray(roleIds)}::bigint[], ${idArray(departmentIds)}::bigint[])
      as c(i, user_id, role_id, department_id)
    join entity_permissions e
      on (e.subject_type = 'role' and e.subject_id = c.role_id)
      or (e.subject_type = 'department' and e.subject_id = c.department_id)
    where not (e.entity_type = any(${coveredEntityTypes(caller)}::text[]))
      and not ${namesUser(sql`e.entity_type`, sql`e.entity_id`, caller.userId, sql`e.tenant_id`)}
      and (c.user_id is null or not ${namesUser(sql`e.entity_type`, sql`e.entity_id`, sql`c.user_id`, sql`e.tenant_id`, { administrative: seesAdministrative })})`);
  const found = new Set<number>();
  for (const row of rows) {
    found.add(Number(row.i));
    for (const i of askedBy[Number(row.i)]!)
      confer(i, row.role_id === null ? null : Number(row.role_id), row.department_id === null ? null : Number(row.department_id));
  }
  if (newUsers) for (const [pair, at] of pairs) if (targets[at] === null) newUsers.set(pair, found.has(at));
  return result;
}

/**
 * The refusal for `usersHoldingRightsBeyond`: it names neither the entity nor how the user
 * is named by it.
 */
export const HOLDS_ENTITY_RIGHTS = 'this user holds rights through entity permissions (of a form, task template or menu item) that you do not have';

/**
 * No takeover of entity rights. Whoever obtains a user's credentials (sets their
 * password, or makes a login token that signs them in) can act as that user, and so use
 * every right the user holds through entity permissions — being named, directly, through
 * their role or through a department, by a form's, task template's or menu item's
 * permissions. The caller must already have each such right: the entity names the caller
 * too, or the caller holds the permission that administers that type of entity
 * (`ENTITY_TYPE_ADMINISTRATION`), exactly as `membershipsConferringRights` judges a new
 * membership. The same rule is checked again when a login token is used, in the database
 * function `atrium_consume_login_token` (migration `credential-lifetimes`).
 *
 * Answers which of `userIds` hold a right the caller lacks; ONE query for any number of
 * users. The caller themselves never does. The list is read from `users` (entity
 * permissions name only users that exist), which pairs `tenant_id` with the check's: Citus
 * plans no correlated subquery over a list of values.
 */
export async function usersHoldingRightsBeyond(
  tx: Tx,
  caller: { userId: number; permissions: ReadonlySet<string> },
  userIds: readonly number[],
): Promise<Set<number>> {
  const ids = [...new Set(userIds)].filter((id) => id !== caller.userId);
  if (ids.length === 0) return new Set();
  const rows = await tx.execute<{ user_id: string }>(sql`
    select x.id as user_id
    from users x
    where x.id = any(${idArray(ids)}::bigint[])
      and exists (
        select 1 from entity_permissions e
        where e.tenant_id = x.tenant_id and ${subjectIsUser('e', sql`x.id`, { inactiveRoles: true })}
          and not (e.entity_type = any(${coveredEntityTypes(caller)}::text[]))
          and not ${namesUser(sql`e.entity_type`, sql`e.entity_id`, caller.userId, sql`e.tenant_id`)})`);
  return new Set(rows.map((row) => Number(row.user_id)));
}
