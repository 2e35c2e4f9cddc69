import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { requireVisibleExecution } from '../forms/rules.ts';
import { labelsFor } from './labels.ts';
import { FILTERS, filterOptions, isMultiSelect, previewFields } from './preview.ts';
import { deleteSource, insertSource, updateSource } from './queries.ts';
import { resolveDefaultValues } from './resolve.ts';
import { administrableSource, createdCandidate, entityPairErrors, sortNumberFor, updatedCandidate, validateSource } from './rules.ts';
import { presentSource } from './view.ts';

/** 422 naming every problem, when there is one. */
function refuse(errors: FieldErrors): void {
  if (Object.keys(errors).length > 0) throw invalid(errors);
}

export const defaultValueSourceHandlers = {
  async createDefaultValueSource({ auth, body, services: { db } }) {
    refuse(entityPairErrors(body));
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const candidate = createdCandidate(body);
      await validateSource(tx, auth, candidate, null);
      return insertSource(tx, auth.tenantId, candidate, await sortNumberFor(tx, body.sort_number, candidate));
    });
    return { status: 201, body: presentSource(created) };
  },

  async updateDefaultValueSource({ auth, params, body, services: { db } }) {
    refuse(entityPairErrors(body));
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      const current = await administrableSource(tx, auth, params.defaultValueSource);
      const candidate = updatedCandidate(current, body);
      await validateSource(tx, auth, candidate, current.id);
      return updateSource(tx, current.id, candidate, await sortNumberFor(tx, body.sort_number, candidate, current));
    });
    return { status: 200, body: presentSource(updated) };
  },

  async deleteDefaultValueSource({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      const source = await administrableSource(tx, auth, params.defaultValueSource);
      await deleteSource(tx, source.id);
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
    if (!isMultiSelect(key)) throw invalid({ filterKey: [coded('enum', 'is not a multi-select filter')] });
    const page = await db.tenant(auth.tenantId, async (tx) => filterOptions(tx, auth, key, body ?? {}, await labelsFor(tx, auth)));
    return { status: 200, body: page };
  },

  async getTaskExecutionDefaultValues({ auth, params, services: { db } }) {
    const body = await db.tenant(auth.tenantId, async (tx) => resolveDefaultValues(tx, auth, await requireVisibleExecution(tx, auth, params.taskExecution)));
    return { status: 200, body };
  },
} satisfies Partial<Handlers>;
