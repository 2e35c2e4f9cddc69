import { count, eq, inArray, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { notFound } from '../../platform/http/problem.ts';
import { departmentAttributeSets } from '../departments/table.ts';
import { attributeSets, type AttributeField } from './table.ts';

export type AttributeSetRow = typeof attributeSets.$inferSelect;

/** The set, or 404. */
export async function findAttributeSet(tx: Tx, id: number): Promise<AttributeSetRow> {
  const [row] = await tx.select().from(attributeSets).where(eq(attributeSets.id, id));
  if (!row) throw notFound('The attribute set');
  return row;
}

/** The fields of the given sets (one query; none for []). */
export async function attributeSetFields(tx: Tx, setIds: readonly number[]): Promise<{ fields: AttributeField[] }[]> {
  if (setIds.length === 0) return [];
  return tx
    .select({ fields: attributeSets.fields })
    .from(attributeSets)
    .where(inArray(attributeSets.id, [...setIds]));
}

/** The sets `ids` names, in no particular order: one query (also for []). */
export function attributeSetsByIds(tx: Tx, ids: number[]): Promise<AttributeSetRow[]> {
  return tx.select().from(attributeSets).where(inArray(attributeSets.id, ids));
}

export async function insertAttributeSet(tx: Tx, tenantId: number, values: { name: string; fields: AttributeField[] }): Promise<AttributeSetRow[]> {
  return tx
    .insert(attributeSets)
    .values({ tenantId, ...values })
    .returning();
}

/** The updated set, or 404. */
export async function updateAttributeSet(tx: Tx, id: number, values: { name: string; fields: AttributeField[] }): Promise<AttributeSetRow[]> {
  const rows = await tx
    .update(attributeSets)
    .set({ ...values, updatedAt: sql`now()` })
    .where(eq(attributeSets.id, id))
    .returning();
  if (rows.length === 0) throw notFound('The attribute set');
  return rows;
}

/** How many departments have the set attached. */
export async function attachedDepartmentCount(tx: Tx, id: number): Promise<number> {
  const [used] = await tx.select({ n: count() }).from(departmentAttributeSets).where(eq(departmentAttributeSets.attributeSetId, id));
  return used?.n ?? 0;
}

export async function deleteAttributeSet(tx: Tx, id: number): Promise<void> {
  await tx.delete(attributeSets).where(eq(attributeSets.id, id));
}
