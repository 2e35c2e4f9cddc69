import { asc, count, eq, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Body, Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { departmentAttributeSets } from '../departments/table.ts';
import { DEPARTMENT_KEYS } from './attributes.ts';
import { attributeSets } from './table.ts';
import { attributeSetView, type AttributeSetRow } from './view.ts';

/** The unique rule can still be hit by a concurrent request after the check: same 422. */


/** Field keys are unique in a set and may not shadow a department field. */
function checkFields(body: Body<'createAttributeSet'>): void {
  const errors: FieldErrors = {};
  const seen = new Set<string>();
  body.fields.forEach((field, index) => {
    if ((DEPARTMENT_KEYS as readonly string[]).includes(field.key)) errors[`fields.${index}.key`] = ['is a department field name'];
    else if (seen.has(field.key)) errors[`fields.${index}.key`] = ['is used twice'];
    seen.add(field.key);
  });
  if (body.name.trim() === '') errors.name = ['must not be blank'];
  if (Object.keys(errors).length > 0) throw invalid(errors);
}


async function findSet(tx: Tx, id: number): Promise<AttributeSetRow> {
  const [row] = await tx.select().from(attributeSets).where(eq(attributeSets.id, id));
  if (!row) throw notFound('The attribute set');
  return row;
}

const all = { selects: null, relations: [] };

export const attributeSetHandlers = {
  async listAttributeSets({ auth, query, services: { db } }) {
    const controls = readControls(attributeSetView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(attributeSets).orderBy(asc(attributeSets.name), asc(attributeSets.id));
      return present(attributeSetView, tx, controls.limit ? await base.limit(controls.limit) : await base, controls, auth);
    });
    return { status: 200, body };
  },

  async getAttributeSet({ auth, query, params, services: { db } }) {
    const controls = readControls(attributeSetView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => present(attributeSetView, tx, [await findSet(tx, params.attributeSet)], controls, auth));
    return { status: 200, body: body! };
  },

  async createAttributeSet({ auth, body, services: { db } }) {
    checkFields(body);
    const [created] = await db.tenant(auth.tenantId, async (tx) => {
        const rows = await tx.insert(attributeSets).values({ tenantId: auth.tenantId, name: body.name.trim(), fields: body.fields }).returning();
        return present(attributeSetView, tx, rows, all, auth);
    });
    return { status: 201, body: created! };
  },

  async updateAttributeSet({ auth, body, params, services: { db } }) {
    checkFields(body);
    const [updated] = await db.tenant(auth.tenantId, async (tx) => {
        const rows = await tx
          .update(attributeSets)
          .set({ name: body.name.trim(), fields: body.fields, updatedAt: sql`now()` })
          .where(eq(attributeSets.id, params.attributeSet))
          .returning();
        if (rows.length === 0) throw notFound('The attribute set');
        return present(attributeSetView, tx, rows, all, auth);
    });
    return { status: 200, body: updated! };
  },

  /** Refused while attached: departments would silently lose the values' meaning. */
  async deleteAttributeSet({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      await findSet(tx, params.attributeSet);
      const [used] = await tx.select({ n: count() }).from(departmentAttributeSets).where(eq(departmentAttributeSets.attributeSetId, params.attributeSet));
      if ((used?.n ?? 0) > 0) throw invalid({ attributeSet: [`is attached to ${used!.n} department(s)`] }, 'The attribute set is in use.');
      await tx.delete(attributeSets).where(eq(attributeSets.id, params.attributeSet));
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
