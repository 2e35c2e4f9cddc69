/** Reads and writes of default value sources. */
import { and, eq, sql } from 'drizzle-orm';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { formFields } from '../forms/table.ts';
import { defaultValueSources, FORM_FIELD_ALIAS, type SourceType } from './table.ts';

export type SourceRow = typeof defaultValueSources.$inferSelect;

/** A source as it is about to be stored (create, or the merged update), without its sort number. */
export interface SourceCandidate {
  type: SourceType;
  formFieldId: number;
  config: Record<string, unknown>;
  sourceEntityType: string | null;
  sourceEntityId: number | null;
}

/**
 * Holds (FOR SHARE) the field the source fills, before the source itself is locked: a
 * field's delete, and a form's or task template's, locks the field and then deletes the
 * sources filling it, so a source's update takes the two in the same order. Named by its
 * tenant: Citus locks rows only in a statement that names its shard.
 */
export async function holdTargetField(tx: Tx, sourceId: number): Promise<void> {
  const tenantId = transactionTenant(tx)!;
  await tx
    .select({ id: formFields.id })
    .from(formFields)
    .innerJoin(defaultValueSources, and(eq(defaultValueSources.tenantId, formFields.tenantId), eq(defaultValueSources.formFieldId, formFields.id)))
    .where(and(eq(formFields.tenantId, tenantId), eq(defaultValueSources.tenantId, tenantId), eq(defaultValueSources.id, sourceId)))
    .for('share', { of: formFields });
}

/**
 * Would a `formFieldValue` source of `target` copying from `source` close a cycle? It does
 * when `source` already takes its defaults (directly or through other fields) from
 * `target`. One recursive query; `ignoreSourceId` leaves out the source being updated.
 * It names the tenant (row-level security keeps it anyway): Citus runs a recursive query
 * only on one shard, named by a filter on `tenant_id`.
 */
export async function closesCycle(tx: Tx, tenantId: number, target: number, source: number, ignoreSourceId: number | null): Promise<boolean> {
  // Serialise field-to-field source writes per tenant: two concurrent writes could
  // otherwise each pass this check and together close a cycle.
  await lockTenantScope(tx, 'default_value_sources.cycles');
  const [row] = await tx.execute<{ cycle: boolean }>(sql`
    with recursive reach(field_id) as (
      select ${source}::bigint
      union
      select d.source_entity_id from default_value_sources d join reach r on d.form_field_id = r.field_id
      where d.tenant_id = ${tenantId} and d.type = 'formFieldValue' and d.source_entity_type = ${FORM_FIELD_ALIAS}
        and d.source_entity_id is not null and d.id <> ${ignoreSourceId ?? 0}
    )
    select exists (select 1 from reach where field_id = ${target}) as cycle`);
  return row?.cycle === true;
}

/**
 * The next `sort_number` of a target field: one more than its highest (1 for its first
 * source). Under the field's lock until the transaction ends: concurrent creates on one
 * field take one number each.
 */
export async function nextSortNumber(tx: Tx, formFieldId: number): Promise<number> {
  await lockTenantScope(tx, 'default_value_sources.sort_number', sql`${formFieldId}::text`);
  const [row] = await tx
    .select({ next: sql<number>`least(coalesce(max(${defaultValueSources.sortNumber}), 0)::bigint + 1, 2147483647)::int` })
    .from(defaultValueSources)
    .where(eq(defaultValueSources.formFieldId, formFieldId));
  return row?.next ?? 1;
}

export async function insertSource(tx: Tx, tenantId: number, candidate: SourceCandidate, sortNumber: number): Promise<SourceRow> {
  const [row] = await tx
    .insert(defaultValueSources)
    .values({ tenantId, ...candidate, sortNumber })
    .returning();
  return row!;
}

/** Stores the source's keys, and the time of the update unless it changes nothing (`changed`: `updateTime`). */
export async function updateSource(tx: Tx, id: number, candidate: SourceCandidate, sortNumber: number, { changed }: { changed: boolean }): Promise<SourceRow> {
  const [row] = await tx
    .update(defaultValueSources)
    .set({ ...candidate, sortNumber, updatedAt: updateTime(defaultValueSources.updatedAt, changed) })
    .where(eq(defaultValueSources.id, id))
    .returning();
  return row!;
}

export async function deleteSource(tx: Tx, id: number): Promise<void> {
  await tx.delete(defaultValueSources).where(eq(defaultValueSources.id, id));
}
