/**
 * Entity permissions as the API shows them (decisions §5): per entity, the lists
 * `{user_ids, role_ids, department_ids}`. Generic over the entity's morph alias, so menu
 * items, forms and task templates share one implementation. Every function is set-based.
 */
import { and, eq, inArray, isNull, sql, type AnyColumn, type SQL } from 'drizzle-orm';
import type { Tx } from '../database/database.ts';
import { departments } from '../../resources/departments/table.ts';
import { roles } from '../../resources/roles/table.ts';
import { users } from '../../resources/users/table.ts';
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
    .where(and(eq(entityPermissions.entityType, entityType), inArray(entityPermissions.entityId, entityIds)))
    .orderBy(entityPermissions.subjectId);
  for (const row of rows) result.get(row.entityId)?.[LIST_OF[row.subjectType]].push(row.subjectId);
  return result;
}

/** Replaces the entity's lists with `lists` (duplicates collapse). */
export async function replaceSubjectLists(tx: Tx, tenantId: number, entityType: string, entityId: number, lists: Partial<SubjectLists>): Promise<void> {
  await tx.delete(entityPermissions).where(and(eq(entityPermissions.entityType, entityType), eq(entityPermissions.entityId, entityId)));
  const rows = (Object.entries(LIST_OF) as [keyof typeof LIST_OF, keyof SubjectLists][]).flatMap(([subjectType, list]) =>
    [...new Set(lists[list] ?? [])].map((subjectId) => ({ tenantId, entityType, entityId, subjectType, subjectId })),
  );
  if (rows.length > 0) await tx.insert(entityPermissions).values(rows);
}

/**
 * Field errors (`<prefix>.user_ids.3`) for IDs that do not exist in the transaction's
 * tenant (users: not deleted). One query per non-empty list.
 */
export async function missingSubjects(tx: Tx, lists: Partial<SubjectLists>, prefix: string): Promise<Record<string, string[]>> {
  const errors: Record<string, string[]> = {};
  const check = async (list: keyof SubjectLists, existing: (ids: number[]) => Promise<{ id: number }[]>, what: string) => {
    const ids = lists[list] ?? [];
    if (ids.length === 0) return;
    const found = new Set((await existing([...new Set(ids)])).map((row) => row.id));
    ids.forEach((id, index) => {
      if (!found.has(id)) errors[`${prefix}.${list}.${index}`] = [`no ${what} with ID ${id} exists`];
    });
  };
  await check('user_ids', (ids) => tx.select({ id: users.id }).from(users).where(and(inArray(users.id, ids), isNull(users.deletedAt))), 'user');
  await check('role_ids', (ids) => tx.select({ id: roles.id }).from(roles).where(inArray(roles.id, ids)), 'role');
  await check('department_ids', (ids) => tx.select({ id: departments.id }).from(departments).where(inArray(departments.id, ids)), 'department');
  return errors;
}

/** True when the entity (the outer query's `entityId` column) has any entity permission. */
export function isRestricted(entityType: string, entityId: AnyColumn): SQL {
  return sql`exists (select 1 from entity_permissions p
    where p.entity_type = ${entityType} and p.entity_id = ${entityId})`;
}

/**
 * True when the entity's permissions name `userId` directly, through the user's role, or
 * through one of the user's departments. A correlated EXISTS: one set-based query for any
 * number of entities.
 */
export function namesUser(entityType: string | SQL, entityId: AnyColumn | SQL, userId: number): SQL {
  return sql`exists (select 1 from entity_permissions p
    where p.entity_type = ${entityType} and p.entity_id = ${entityId}
      and ((p.subject_type = 'user' and p.subject_id = ${userId})
        or (p.subject_type = 'role' and p.subject_id = (select u.role_id from users u where u.id = ${userId}))
        or (p.subject_type = 'department' and p.subject_id in (select du.department_id from department_users du where du.user_id = ${userId}))))`;
}
