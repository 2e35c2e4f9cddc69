import { eq, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound } from '../../platform/http/problem.ts';
import { administrableBy } from '../forms/rules.ts';
import { formFields, taskExecutions } from '../forms/table.ts';
import { labelsFor } from './labels.ts';
import { FILTERS, filterOptions, isMultiSelect, previewFields } from './preview.ts';
import { resolveDefaultValues } from './resolve.ts';
import { entityPairErrors, nextSortNumber, validateSource } from './rules.ts';
import { defaultValueSources } from './table.ts';

type SourceRow = typeof defaultValueSources.$inferSelect;

const presentSource = (row: SourceRow) => ({
  id: row.id,
  type: row.type,
  form_field_id: row.formFieldId,
  config: row.config,
  source_entity_type: row.sourceEntityType,
  source_entity_id: row.sourceEntityId,
  sort_number: row.sortNumber,
  created_at: rfc3339(row.createdAt)!,
  updated_at: rfc3339(row.updatedAt)!,
});

/**
 * The source `id` if the caller can administer its target field's task template; 404
 * otherwise, the same answer as for a missing source (it does not tell that one exists).
 */
async function administrableSource(tx: Tx, auth: Auth, id: number): Promise<SourceRow> {
  const [row] = await tx
    .select({
      source: defaultValueSources,
      allowed: sql<boolean>`${administrableBy(auth, sql`'taskTemplate'`, sql`${formFields.taskTemplateId}`)}`,
    })
    .from(defaultValueSources)
    .innerJoin(formFields, eq(formFields.id, defaultValueSources.formFieldId))
    .where(eq(defaultValueSources.id, id));
  if (!row?.allowed) throw notFound('The default value source');
  return row.source;
}

export const defaultValueSourceHandlers = {
  async createDefaultValueSource({ auth, body, services: { db } }) {
    const pair = entityPairErrors(body);
    if (Object.keys(pair).length > 0) throw invalid(pair);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const candidate = {
        type: body.type,
        formFieldId: body.form_field_id,
        config: (body.config ?? {}) as Record<string, unknown>,
        sourceEntityType: body.source_entity_type ?? null,
        sourceEntityId: body.source_entity_id ?? null,
      };
      await validateSource(tx, auth, candidate, null);
      const [row] = await tx
        .insert(defaultValueSources)
        .values({ tenantId: auth.tenantId, ...candidate, sortNumber: body.sort_number ?? (await nextSortNumber(tx, body.form_field_id)) })
        .returning();
      return row!;
    });
    return { status: 201, body: presentSource(created) };
  },

  async updateDefaultValueSource({ auth, params, body, services: { db } }) {
    const pair = entityPairErrors(body);
    if (Object.keys(pair).length > 0) throw invalid(pair);
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      const current = await administrableSource(tx, auth, params.defaultValueSource);
      const candidate = {
        type: current.type,
        formFieldId: body.form_field_id ?? current.formFieldId,
        config: (body.config as Record<string, unknown> | undefined) ?? current.config,
        sourceEntityType: body.source_entity_type !== undefined ? body.source_entity_type : current.sourceEntityType,
        sourceEntityId: body.source_entity_id !== undefined ? body.source_entity_id : current.sourceEntityId,
      };
      await validateSource(tx, auth, candidate, current.id);
      const moved = candidate.formFieldId !== current.formFieldId;
      const sortNumber = body.sort_number ?? (moved ? await nextSortNumber(tx, candidate.formFieldId) : current.sortNumber);
      const [row] = await tx
        .update(defaultValueSources)
        .set({ ...candidate, sortNumber, updatedAt: new Date() })
        .where(eq(defaultValueSources.id, current.id))
        .returning();
      return row!;
    });
    return { status: 200, body: presentSource(updated) };
  },

  async deleteDefaultValueSource({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      const source = await administrableSource(tx, auth, params.defaultValueSource);
      await tx.delete(defaultValueSources).where(eq(defaultValueSources.id, source.id));
    });
    return { status: 204 };
  },

  async previewFormFieldValueSourceFields({ auth, body, services: { db } }) {
    const page = await db.tenant(auth.tenantId, async (tx) => previewFields(tx, auth, body ?? {}, await labelsFor(tx, auth)));
    return { status: 200, body: page };
  },

  async listFormFieldValueSourceFieldFilters({ auth, services: { db } }) {
    const labels = await db.tenant(auth.tenantId, (tx) => labelsFor(tx, auth));
    return { status: 200, body: { data: FILTERS.map((f) => ({ key: f.key, kind: f.kind, title: labels[f.key] })) } };
  },

  async listFormFieldValueSourceFieldFilterOptions({ auth, params, body, services: { db } }) {
    const key = params.filterKey;
    if (!isMultiSelect(key)) throw invalid({ filterKey: ['is not a multi-select filter'] });
    const page = await db.tenant(auth.tenantId, async (tx) => filterOptions(tx, auth, key, body ?? {}, await labelsFor(tx, auth)));
    return { status: 200, body: page };
  },

  async getTaskExecutionDefaultValues({ auth, params, services: { db } }) {
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const [row] = await tx
        .select({
          execution: taskExecutions,
          allowed: sql<boolean>`${taskExecutions.userId} = ${auth.userId} or ${administrableBy(auth, sql`'taskTemplate'`, sql`${taskExecutions.taskTemplateId}`)}`,
        })
        .from(taskExecutions)
        .where(eq(taskExecutions.id, params.taskExecution));
      // One answer for a missing execution and one the caller may not see.
      if (!row?.allowed) throw notFound('The task execution');
      return resolveDefaultValues(tx, auth, row.execution);
    });
    return { status: 200, body };
  },
} satisfies Partial<Handlers>;
