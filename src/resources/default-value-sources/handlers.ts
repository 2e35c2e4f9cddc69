import { lockRecord } from '../../platform/database/locks.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { requireVisibleExecution } from '../forms/rules.ts';
import { audit, recordChanges } from '../audit-events/record.ts';
import { labelsFor } from './labels.ts';
import { FILTERS, filterOptions, isMultiSelect, previewFields } from './preview.ts';
import { deleteSource, holdTargetField, insertSource, updateSource } from './queries.ts';
import { resolveDefaultValues } from './resolve.ts';
import { administrableSource, createdCandidate, sortNumberFor, updatedCandidate, validateSource } from './rules.ts';
import { defaultValueSources } from './table.ts';
import { presentSource } from './view.ts';

/** A default value source as the audit trail names it (it has no name of its own). */
const sourceTarget = (record: Record<string, unknown>) => ({ type: 'default_value_source', id: record.id as number, label: null });

export const defaultValueSourceHandlers = {
  async createDefaultValueSource(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const candidate = createdCandidate(body);
      await validateSource(tx, auth, candidate, null);
      const source = await insertSource(tx, auth.tenantId, candidate, await sortNumberFor(tx, body.sort_number, candidate));
      const record = presentSource(source);
      await audit(tx, ctx, { action: 'default_value_source.created', target: sourceTarget(record), changes: recordChanges(null, record) });
      return source;
    });
    return { status: 201, body: presentSource(created) };
  },

  async updateDefaultValueSource(ctx) {
    const {
      auth,
      params,
      body,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      // A concurrent update or delete of the source waits, or is waited for: no change is
      // lost. The field it fills is held first (`holdTargetField`), as a field's delete takes it.
      await holdTargetField(tx, params.defaultValueSource);
      if (!(await lockRecord(tx, defaultValueSources, params.defaultValueSource))) throw notFound('The default value source');
      const current = await administrableSource(tx, auth, params.defaultValueSource);
      const candidate = updatedCandidate(current, body);
      await validateSource(tx, auth, candidate, current.id);
      const sortNumber = await sortNumberFor(tx, body.sort_number, candidate, current);
      // Judged before the write: one that changes nothing (the source sent back as it was read) leaves updated_at as it was.
      const changes = recordChanges(presentSource(current), presentSource({ ...current, ...candidate, sortNumber }));
      const source = await updateSource(tx, current.id, candidate, sortNumber, { changed: Object.keys(changes).length > 0 });
      const record = presentSource(source);
      if (Object.keys(changes).length > 0) await audit(tx, ctx, { action: 'default_value_source.updated', target: sourceTarget(record), changes });
      return source;
    });
    return { status: 200, body: presentSource(updated) };
  },

  async deleteDefaultValueSource(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // A second delete of the source waits for the first, then finds nothing (404).
      if (!(await lockRecord(tx, defaultValueSources, params.defaultValueSource))) throw notFound('The default value source');
      const source = await administrableSource(tx, auth, params.defaultValueSource);
      await deleteSource(tx, source.id);
      await audit(tx, ctx, {
        action: 'default_value_source.deleted',
        target: sourceTarget(presentSource(source)),
      });
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
