import { and, count, eq, inArray, sql } from 'drizzle-orm';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { inIdList } from '../../platform/database/id-list.ts';
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

/**
 * The fields of the given sets (one query; none for []), for a department write that
 * attaches them. The sets are kept until the transaction ends (`FOR KEY SHARE`): an update
 * of one of them (`lockRecord(…, 'update')`) waits, and then judges its new fields against
 * the sets attached beside it (`fieldsAttachedBeside`). Named by its tenant: Citus locks
 * rows only in a statement that names its shard.
 */
export async function attributeSetFields(tx: Tx, setIds: readonly number[]): Promise<{ fields: AttributeField[] }[]> {
  if (setIds.length === 0) return [];
  return tx
    .select({ fields: attributeSets.fields })
    .from(attributeSets)
    .where(and(eq(attributeSets.tenantId, transactionTenant(tx)!), inArray(attributeSets.id, [...setIds])))
    .for('key share');
}

/**
 * The fields of every other set attached to a department beside the set `id`, by
 * department (one query). Those sets are kept until the transaction ends (`FOR KEY
 * SHARE`), and updates of sets take turns in the tenant (`updateAttributeSet`), so that two
 * concurrent updates of sets attached together judge each other's new fields, one after
 * the other.
 */
export async function fieldsAttachedBeside(tx: Tx, id: number): Promise<{ departmentId: number; fields: AttributeField[] }[]> {
  const tenantId = transactionTenant(tx)!;
  const rows = await tx.execute<{ department_id: string; fields: AttributeField[] }>(sql`
    select mine.department_id, s.fields
    from ${departmentAttributeSets} mine
    join ${departmentAttributeSets} beside
      on beside.tenant_id = mine.tenant_id and beside.department_id = mine.department_id and beside.attribute_set_id <> mine.attribute_set_id
    join ${attributeSets} s on s.tenant_id = beside.tenant_id and s.id = beside.attribute_set_id
    where mine.tenant_id = ${tenantId} and mine.attribute_set_id = ${id}
    for key share of s`);
  return rows.map((row) => ({ departmentId: Number(row.department_id), fields: row.fields }));
}

/** The sets `ids` names, in no particular order: one query (also for []). */
export function attributeSetsByIds(tx: Tx, ids: number[]): Promise<AttributeSetRow[]> {
  return tx.select().from(attributeSets).where(inIdList(attributeSets.id, ids));
}

export async function insertAttributeSet(tx: Tx, tenantId: number, values: { name: string; fields: AttributeField[] }): Promise<AttributeSetRow[]> {
  return tx
    .insert(attributeSets)
    .values({ tenantId, ...values })
    .returning();
}

/** The updated set, or 404; the time of the update is stored unless it changes nothing (`changed`: `updateTime`). */
export async function updateAttributeSet(
  tx: Tx,
  id: number,
  values: { name: string; fields: AttributeField[] },
  { changed }: { changed: boolean },
): Promise<AttributeSetRow[]> {
  const rows = await tx
    .update(attributeSets)
    .set({ ...values, updatedAt: updateTime(attributeSets.updatedAt, changed) })
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
