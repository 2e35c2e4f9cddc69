import { sql, type SQL } from 'drizzle-orm';
import { can, type Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import { namesUser } from '../entity-permissions/queries.ts';
import { notFound } from '../../platform/http/problem.ts';
import { forms, taskTemplates, type FieldType } from './table.ts';

/** Morph aliases of the parents of fields, as `entity_permissions.entity_type` names them. */
export type ParentType = 'form' | 'taskTemplate';

/**
 * Who may administer a Form or TaskTemplate (decisions §5): holders of `tasks.administer`,
 * and the users, roles or departments its entity permissions name. Returned as ONE
 * set-based condition over the entity's type and id (SQL expressions of the outer query),
 * so lists filter in the database instead of row by row.
 */
export function administrableBy(auth: Auth, entityType: SQL, entityId: SQL): SQL {
  return can(auth, 'tasks.administer') ? sql`true` : namesUser(entityType, entityId, auth.userId);
}

const parentTable = { form: forms, taskTemplate: taskTemplates } as const;

/** Whether `auth` may administer the form/template `id`; undefined when it does not exist (in this tenant). */
export async function canAdminister(tx: Tx, auth: Auth, type: ParentType, id: number): Promise<boolean | undefined> {
  const table = parentTable[type];
  const [row] = await tx
    .select({ allowed: sql<boolean>`${administrableBy(auth, sql`${type}`, sql`${table.id}`)}` })
    .from(table)
    .where(sql`${table.id} = ${id}`);
  return row?.allowed;
}

/**
 * 404 when missing or when the caller may not administer it: one answer for both, so the
 * answer does not tell whether a form or task template hidden from the caller exists.
 */
export async function requireAdministrable(tx: Tx, auth: Auth, type: ParentType, id: number, what: string): Promise<void> {
  if ((await canAdminister(tx, auth, type, id)) !== true) throw notFound(what);
}

/** Why `value` does not fit a field of this type, or null when it does (null always fits: it clears). */
export function fieldValueProblem(field: { fieldType: FieldType; options: string[] | null }, value: unknown): string | null {
  if (value === null) return null;
  switch (field.fieldType) {
    case 'text':
      return typeof value === 'string' ? null : 'must be a string';
    case 'number':
      return typeof value === 'number' ? null : 'must be a number';
    case 'boolean':
      return typeof value === 'boolean' ? null : 'must be a boolean';
    case 'date':
      return typeof value === 'string' && isCalendarDate(value) ? null : 'must be a date YYYY-MM-DD';
    case 'select':
      return typeof value === 'string' && (field.options ?? []).includes(value)
        ? null
        : `must be one of: ${(field.options ?? []).join(', ')}`;
  }
}
