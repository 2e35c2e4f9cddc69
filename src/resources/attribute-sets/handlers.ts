import { lockRecord, lockTenantScope } from '../../platform/database/locks.ts';
import type { Body, Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { audit, recordChanges } from '../audit-events/record.ts';
import { attachedDepartmentCount, deleteAttributeSet, fieldsAttachedBeside, findAttributeSet, insertAttributeSet, updateAttributeSet } from './queries.ts';
import { attributeSetErrors, clashesBeside } from './rules.ts';
import { attributeSets } from './table.ts';
import { attributeSetListing, attributeSetView } from './view.ts';

/** The stored values of a create or update body, after the set's rules (422 otherwise). */
function attributeSetValues(body: Body<'createAttributeSet'>) {
  const errors = attributeSetErrors(body);
  if (Object.keys(errors).length > 0) throw invalid(errors);
  return { name: body.name.trim(), fields: body.fields };
}

/** An attribute set as the audit trail names it. */
const attributeSetTarget = (record: Record<string, unknown>) => ({ type: 'attribute_set', id: record.id as number, label: record.name as string });

export const attributeSetHandlers = {
  async listAttributeSets({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, attributeSetListing, query, auth) };
  },

  async getAttributeSet({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, attributeSetListing, query, auth, { key: params.attributeSet }, 'The attribute set');
    return { status: 200, body };
  },

  async createAttributeSet(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const values = attributeSetValues(body);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const [record] = await presentAll(attributeSetView, null, await insertAttributeSet(tx, auth.tenantId, values), auth);
      await audit(tx, ctx, { action: 'attribute_set.created', target: attributeSetTarget(record!), changes: recordChanges(null, record!) });
      return record;
    });
    return { status: 201, body: created! };
  },

  async updateAttributeSet(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const values = attributeSetValues(body);
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      // Updates of sets take turns in the tenant: each holds its set and then the sets attached beside it, so two sets
      // attached together and updated at once would otherwise each wait for the other's (a deadlock, 503).
      await lockTenantScope(tx, 'attribute_sets.update');
      // FOR UPDATE: a department that attaches the set meanwhile waits, and then judges it by its new fields.
      if (!(await lockRecord(tx, attributeSets, params.attributeSet, 'update'))) throw notFound('The attribute set');
      const clashes = clashesBeside(values.fields, await fieldsAttachedBeside(tx, params.attributeSet));
      if (Object.keys(clashes).length > 0) throw invalid(clashes);
      const current = await findAttributeSet(tx, params.attributeSet);
      // Judged before the write: one that changes nothing (the set sent back as it was read) leaves updated_at as it was.
      const [before, after] = await presentAll(attributeSetView, null, [current, { ...current, ...values }], auth);
      const changes = recordChanges(before!, after!);
      const stored = await updateAttributeSet(tx, params.attributeSet, values, { changed: Object.keys(changes).length > 0 });
      const [record] = await presentAll(attributeSetView, null, stored, auth);
      if (Object.keys(changes).length > 0) await audit(tx, ctx, { action: 'attribute_set.updated', target: attributeSetTarget(record!), changes });
      return record;
    });
    return { status: 200, body: updated! };
  },

  /** Refused while attached: departments would silently lose the values' meaning. */
  async deleteAttributeSet(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // FOR UPDATE: a second delete waits, then finds nothing (404), and a department that
      // attaches the set meanwhile is seen by the count below, or waits and then misses it.
      if (!(await lockRecord(tx, attributeSets, params.attributeSet, 'update'))) throw notFound('The attribute set');
      const current = await findAttributeSet(tx, params.attributeSet);
      const attached = await attachedDepartmentCount(tx, params.attributeSet);
      if (attached > 0) throw invalid({ attributeSet: [coded('in_use', `is attached to ${attached} department(s)`)] }, 'The attribute set is in use.');
      await deleteAttributeSet(tx, params.attributeSet);
      await audit(tx, ctx, { action: 'attribute_set.deleted', target: { type: 'attribute_set', id: current.id, label: current.name } });
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
