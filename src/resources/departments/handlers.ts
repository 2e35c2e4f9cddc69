import { eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockRecord, lockTenantScope } from '../../platform/database/locks.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound } from '../../platform/http/problem.ts';
import { ALL_FIELDS, listRecords, presentAll, selectRecords, showRecord } from '../../platform/result-controls/listing.ts';
import { audit, recordChanges } from '../audit-events/record.ts';
import { deleteDepartment, departmentCountAndLimit, entityPermissionsNaming, findDepartment, saveDepartment } from './queries.ts';
import {
  departmentAfter,
  departmentAvailability,
  departmentLimitRefusal,
  departmentWrite,
  NAMED_ENTITIES_SHOWN,
  namedByEntityPermissionsRefusal,
} from './rules.ts';
import { departments } from './table.ts';
import { departmentListing, departmentView } from './view.ts';

/** The department just written, with every field and no relations. */
async function presentDepartment(tx: Tx, auth: Auth, id: number) {
  const [record] = await selectRecords(tx, departmentListing, auth, { where: eq(departments.id, id), presentation: ALL_FIELDS });
  return record!;
}

/** A department as the audit trail names it. */
const departmentTarget = (record: Record<string, unknown>) => ({
  type: 'department',
  id: record.id as number,
  label: (record.name as string | undefined) ?? null,
});

export const departmentHandlers = {
  async listDepartments({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, departmentListing, query, auth) };
  },

  async getDepartment({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, departmentListing, query, auth, { key: params.department }, 'The department');
    return { status: 200, body };
  },

  async getDepartmentAvailability({ auth, services: { db } }) {
    return { status: 200, body: departmentAvailability(await db.tenant(auth.tenantId, departmentCountAndLimit)) };
  },

  async createDepartment(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const created = await db.tenant(auth.tenantId, async (tx) => {
      // Serialised per tenant, so two requests cannot both take the last free place.
      await lockTenantScope(tx, 'departments.limit');
      const refusal = departmentLimitRefusal(departmentAvailability(await departmentCountAndLimit(tx)));
      if (refusal) throw refusal;
      const record = await presentDepartment(tx, auth, await saveDepartment(tx, auth, await departmentWrite(tx, body, null), null));
      await audit(tx, ctx, { action: 'department.created', target: departmentTarget(record), changes: recordChanges(null, record) });
      return record;
    });
    return { status: 201, body: created };
  },

  async updateDepartment(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      // A concurrent update or delete of the department waits, or is waited for: no change is lost.
      if (!(await lockRecord(tx, departments, params.department))) throw notFound('The department');
      const current = await findDepartment(tx, params.department);
      const write = await departmentWrite(tx, body, current);
      // Judged before the write, on the department as reads answer it: one that changes nothing (the record sent back
      // as it was read) leaves updated_at as it was (the spec, operationId updateDepartment), and records no event.
      const [before, after] = await presentAll(departmentView, null, [current, departmentAfter(current, write)], auth);
      const changes = recordChanges(before!, after!);
      await saveDepartment(tx, auth, write, current.id, { changed: Object.keys(changes).length > 0 });
      const record = await presentDepartment(tx, auth, current.id);
      if (Object.keys(changes).length > 0) await audit(tx, ctx, { action: 'department.updated', target: departmentTarget(record), changes });
      return record;
    });
    return { status: 200, body: updated };
  },

  /**
   * Hard delete (see the spec, operationId deleteDepartment): memberships and assignments
   * cascade. Refused (422) while an entity permission names the department: removing the
   * last restriction row of a menu item, form or task template would make it unrestricted.
   */
  async deleteDepartment(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // The row lock keeps a concurrent delete of the same department from racing the check.
      if (!(await lockRecord(tx, departments, params.department, 'update'))) throw notFound('The department');
      const refusal = namedByEntityPermissionsRefusal(await entityPermissionsNaming(tx, auth, params.department, NAMED_ENTITIES_SHOWN));
      if (refusal) throw refusal;
      const record = await presentDepartment(tx, auth, params.department);
      await deleteDepartment(tx, params.department);
      await audit(tx, ctx, { action: 'department.deleted', target: departmentTarget(record) });
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
