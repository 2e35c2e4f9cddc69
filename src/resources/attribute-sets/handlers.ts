import type { Body, Handlers } from '../../platform/http/handler.ts';
import { coded, invalid } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { attachedDepartmentCount, deleteAttributeSet, findAttributeSet, insertAttributeSet, updateAttributeSet } from './queries.ts';
import { attributeSetErrors } from './rules.ts';
import { attributeSetListing, attributeSetView } from './view.ts';

/** The stored values of a create or update body, after the set's rules (422 otherwise). */
function attributeSetValues(body: Body<'createAttributeSet'>) {
  const errors = attributeSetErrors(body);
  if (Object.keys(errors).length > 0) throw invalid(errors);
  return { name: body.name.trim(), fields: body.fields };
}

export const attributeSetHandlers = {
  async listAttributeSets({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, attributeSetListing, query, auth) };
  },

  async getAttributeSet({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, attributeSetListing, query, auth, { key: params.attributeSet }, 'The attribute set');
    return { status: 200, body };
  },

  async createAttributeSet({ auth, body, services: { db } }) {
    const values = attributeSetValues(body);
    const rows = await db.tenant(auth.tenantId, (tx) => insertAttributeSet(tx, auth.tenantId, values));
    const [created] = await presentAll(attributeSetView, null, rows, auth);
    return { status: 201, body: created! };
  },

  async updateAttributeSet({ auth, body, params, services: { db } }) {
    const values = attributeSetValues(body);
    const rows = await db.tenant(auth.tenantId, (tx) => updateAttributeSet(tx, params.attributeSet, values));
    const [updated] = await presentAll(attributeSetView, null, rows, auth);
    return { status: 200, body: updated! };
  },

  /** Refused while attached: departments would silently lose the values' meaning. */
  async deleteAttributeSet({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      await findAttributeSet(tx, params.attributeSet);
      const attached = await attachedDepartmentCount(tx, params.attributeSet);
      if (attached > 0) throw invalid({ attributeSet: [coded('in_use', `is attached to ${attached} department(s)`)] }, 'The attribute set is in use.');
      await deleteAttributeSet(tx, params.attributeSet);
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
