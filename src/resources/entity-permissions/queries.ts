/**
 * Entity permissions as the API shows them: per entity, the lists
 * `{user_ids, role_ids, department_ids}`. Generic over the entity's morph alias, so menu
 * items, forms and task templates share one implementation. Every function is set-based.
 */
import { and, Column, eq, getTableColumns, getTableName, is, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { entityPermissions } from './table.ts';

export interface SubjectLists {
  user_ids: number[];
  role_ids: number[];
  department_ids: number[];
}

const LIST_OF = { user: 'user_ids', role: 'role_ids', department: 'department_ids' } as const;

export const emptySubjectLists = (): SubjectLists => ({ user_ids: [], role_ids: [], department_ids: [] });

/** The lists of every entity in `entityIds` (absent entities get empty lists), in one query. */
export async function loadSubjectLists(tx: Tx, entityType: string, entityIds: number[]): Promise<Map<number, SubjectLists>> {
  const result = new Map(entityIds.map((id) => [id, emptySubjectLists()]));
  if (entityIds.length === 0) return result;
  const rows = await tx
    .select({ entityId: entityPermissions.entityId, subjectType: entityPermissions.subjectType, subjectId: entityPermissions.subjectId })
    .from(entityPermissions)
    .where(and(eq(entityPermissions.entityType, entityType), inIdList(entityPermissions.entityId, entityIds)))
    .orderBy(entityPermissions.subjectId);
  for (const row of rows) result.get(row.entityId)?.[LIST_OF[row.subjectType]].push(row.subjectId);
  return result;
}

/** Removes every entity permission of the entity (it is being deleted). */
export async function deleteSubjectLists(tx: Tx, entityType: string, entityId: number): Promise<void> {
  await tx.delete(entityPermissions).where(and(eq(entityPermissions.entityType, entityType), eq(entityPermissions.entityId, entityId)));
}

/**
 * `lists` as `replaceSubjectLists` stores them and `loadSubjectLists` reads them back: each
 * list without duplicates, by id; a missing list empty. What a write is compared with to
 * know, before it is stored, whether it changes the entity's lists.
 */
export function storedSubjectLists(lists: Partial<SubjectLists>): SubjectLists {
  const stored = (ids: number[] | undefined) => [...new Set(ids ?? [])].sort((a, b) => a - b);
  return { user_ids: stored(lists.user_ids), role_ids: stored(lists.role_ids), department_ids: stored(lists.department_ids) };
}

/** Replaces the entity's lists with `lists` (duplicates collapse). */
export async function replaceSubjectLists(tx: Tx, tenantId: number, entityType: string, entityId: number, lists: Partial<SubjectLists>): Promise<void> {
  await deleteSubjectLists(tx, entityType, entityId);
  const rows = (Object.entries(LIST_OF) as [keyof typeof LIST_OF, keyof SubjectLists][]).flatMap(([subjectType, list]) =>
    [...new Set(lists[list] ?? [])].map((subjectId) => ({ tenantId, entityType, entityId, subjectType, subjectId })),
  );
  if (rows.length > 0) await tx.insert(entityPermissions).values(rows);
}

/**
 * The outer query's `tenant_id` beside `entityId`: a column of the same table, or the SQL
 * given. Pairing it with the subquery's keeps the subquery on the entity's shard on Citus,
 * which refuses a correlated subquery between tenant tables that does not pair their
 * `tenant_id`s (docs/scaling.md#writing-queries-that-stay-on-one-worker). Null when the
 * outer query names none: row-level security alone then keeps the tenant.
 */
export function tenantBeside(entityId: AnyColumn | SQL, tenantId?: SQL): SQL | null {
  if (tenantId) return tenantId;
  if (is(entityId, Column)) {
    const column = getTableColumns(entityId.table).tenantId;
    // Qualified by hand: in a select list drizzle writes a column unqualified, which the subquery would take for its own.
    if (column) return sql`${sql.identifier(getTableName(entityId.table))}.${sql.identifier(column.name)}`;
  }
  return null;
}

const sameTenant = (alias: string, entityId: AnyColumn | SQL, tenantId?: SQL) => {
  const outer = tenantBeside(entityId, tenantId);
  return outer ? sql` and ${sql.raw(alias)}.tenant_id = ${outer}` : sql``;
};

/** True when the entity (the outer query's `entityId` column) has any entity permission. */
export function isRestricted(entityType: string, entityId: AnyColumn): SQL {
  return sql`exists (select 1 from entity_permissions p
    where p.entity_type = ${entityType} and p.entity_id = ${entityId}${sameTenant('p', entityId)})`;
}

/**
 * True when the entity's permissions name `userId` directly, through the user's role while
 * it is active, or through one of the user's departments (`subjectIsUser`). A correlated
 * EXISTS: one set-based query for any number of entities. (The subquery's alias is `p`:
 * outer queries use another one.) `administrative: false` counts the departments only, for
 * a judgment whose answer must not depend on what the caller may not see of the user (their
 * role and the entity permissions naming them are administrative fields).
 */
export function namesUser(entityType: string | SQL, entityId: AnyColumn | SQL, userId: number | SQL, tenantId?: SQL, { administrative = true } = {}): SQL {
  return sql`exists (select 1 from entity_permissions p
    where p.entity_type = ${entityType} and p.entity_id = ${entityId}${sameTenant('p', entityId, tenantId)} and ${subjectIsUser('p', userId, { administrative })})`;
}

/**
 * True when the entity-permission row `row` (an alias of `entity_permissions`) names
 * `userId` directly, through the user's role, or through one of the user's departments.
 * An inactive role grants nothing, so by default it names no one. `inactiveRoles: true`
 * asks what the user could hold instead: an inactive role can be reactivated at any time
 * (as `grantablePermissions` counts its permission keys). `administrative: false` counts
 * the departments only, leaving out naming directly and through the role.
 */
export function subjectIsUser(row: 'p' | 'e', userId: number | SQL, { inactiveRoles = false, administrative = true } = {}): SQL {
  const r = sql.raw(row);
  const active = inactiveRoles ? sql`` : sql` and exists (select 1 from roles ro where ro.tenant_id = u.tenant_id and ro.id = u.role_id and ro.active)`;
  const directlyOrByRole = administrative
    ? sql`(${r}.subject_type = 'user' and ${r}.subject_id = ${userId})
        or (${r}.subject_type = 'role' and ${r}.subject_id = (select u.role_id from users u where u.tenant_id = ${r}.tenant_id and u.id = ${userId}${active}))
        or `
    : sql``;
  return sql`(${directlyOrByRole}(${r}.subject_type = 'department' and ${r}.subject_id in (
          select du.department_id from department_users du where du.tenant_id = ${r}.tenant_id and du.user_id = ${userId})))`;
}
