import { and, asc, count, eq, inArray, not, sql } from 'drizzle-orm';
import { can, type Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import type { Body, Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import { entityPermissions } from '../entity-permissions/table.ts';
import { attributeFieldTypes, mergeAttributeValues } from '../attribute-sets/attributes.ts';
import { attributeSets } from '../attribute-sets/table.ts';
import { displayNameProblems, NAME_TAKEN, nameTaken, storedName } from '../roles/names.ts';
import { administrableBy } from '../forms/rules.ts';
import { MENU_ITEM_ENTITY_TYPE } from '../menu-items/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { tenants } from '../../platform/database/tenancy.ts';
import { departmentAttributeSets, departmentNotificationSettings, departments } from './table.ts';
import { departmentView, selectDepartments, type DepartmentRow } from './view.ts';

/** The unique rule can still be hit by a concurrent request after the check: same 422. */

type DepartmentInput = Body<'createDepartment'>;


/** Decisions §6: `{count, limit, remaining}`; `limit` null = unlimited. */
export async function departmentAvailability(tx: Tx) {
  const [counted] = await tx.select({ n: count() }).from(departments);
  const [tenant] = await tx.select({ limit: tenants.departmentLimit }).from(tenants);
  const limit = tenant?.limit ?? null;
  const n = counted?.n ?? 0;
  return { count: n, limit, remaining: limit === null ? null : Math.max(limit - n, 0) };
}

/** `[id | {id, sort_number}]` → ordered, de-duplicated assignments. */
function attributeSetAssignments(items: DepartmentInput['attribute_set_ids']): { id: number; sortNumber: number }[] {
  const seen = new Set<number>();
  const result: { id: number; sortNumber: number }[] = [];
  (items ?? []).forEach((item, index) => {
    const id = typeof item === 'number' ? item : item.id;
    if (seen.has(id)) return;
    seen.add(id);
    result.push({ id, sortNumber: typeof item === 'number' ? index : (item.sort_number ?? index) });
  });
  return result;
}

/** Errors `key.N` for every id of `ids` that `existing` lacks (ids of other tenants are invisible, so missing). */
function missingIds(key: string, ids: number[], existing: Set<number>, errors: FieldErrors) {
  ids.forEach((id, index) => {
    if (!existing.has(id)) errors[`${key}.${index}`] = ['does not exist'];
  });
}

/** The body's keys beyond the declared ones: attribute values (read-only fields like `user_id` fail as unknown). */
const INPUT_KEYS = ['name', 'tags', 'notification_setting_ids', 'attribute_set_ids'];
const extraKeys = (body: DepartmentInput): Record<string, unknown> =>
  Object.fromEntries(Object.entries(body).filter(([key]) => !INPUT_KEYS.includes(key)));

/**
 * Validates a create/update body against the tenant's data and writes the department
 * with its assignments. `current` is the stored department on update.
 */
async function saveDepartment(tx: Tx, auth: Auth, body: DepartmentInput, current: DepartmentRow | null): Promise<number> {
  const errors: FieldErrors = {};
  // Surrounding blanks are trimmed; the name is stored in NFC (see ../roles/names.ts).
  const name = storedName(body.name.trim());
  const nameProblems = name.length === 0 ? ['must not be blank'] : displayNameProblems(name);
  if (nameProblems.length > 0) errors.name = nameProblems;

  const settingIds = body.notification_setting_ids ?? current?.notificationSettingIds ?? [];
  const setAssignments = body.attribute_set_ids
    ? attributeSetAssignments(body.attribute_set_ids)
    : (current?.attributeSetIds ?? []).map((id, index) => ({ id, sortNumber: index }));
  const setIds = setAssignments.map((a) => a.id);

  // A new name (create, rename) may not be a look-alike of another department's; the
  // lock keeps two concurrent requests from both taking look-alike names (the database's
  // unique rule compares names exactly). A name sent back unchanged is not judged again.
  const newName = !current || name !== current.name;
  if (newName) await lockTenantScope(tx, 'departments.name');
  const [others, settings, sets] = await Promise.all([
    newName ? tx.select({ id: departments.id, name: departments.name }).from(departments) : [],
    settingIds.length ? tx.select({ id: notificationSettings.id }).from(notificationSettings).where(inArray(notificationSettings.id, settingIds)) : [],
    setIds.length ? tx.select({ id: attributeSets.id }).from(attributeSets).where(inArray(attributeSets.id, setIds)) : [],
  ]);
  if (!errors.name && nameTaken(others, name, current?.id)) errors.name = [NAME_TAKEN];
  if (body.notification_setting_ids) missingIds('notification_setting_ids', body.notification_setting_ids, new Set(settings.map((s) => s.id)), errors);
  if (body.attribute_set_ids) {
    const existing = new Set(sets.map((s) => s.id));
    body.attribute_set_ids.forEach((item, index) => {
      if (!existing.has(typeof item === 'number' ? item : item.id)) errors[`attribute_set_ids.${index}`] = ['does not exist'];
    });
  }
  const { types, conflicts } = await attributeFieldTypes(tx, setIds);
  if (conflicts.length > 0) (errors.attribute_set_ids ??= []).push(`the attached sets define ${conflicts.join(', ')} with different types`);
  const attributes = mergeAttributeValues(types, extraKeys(body), current?.attributes ?? {}, errors);
  if (Object.keys(errors).length > 0) throw invalid(errors);

  const values = { name, tags: body.tags ?? current?.tags ?? [], attributes };
  let id: number;
  if (current) {
    await tx.update(departments).set({ ...values, updatedAt: sql`now()` }).where(eq(departments.id, current.id));
    id = current.id;
  } else {
    const [created] = await tx
      .insert(departments)
      .values({ ...values, tenantId: auth.tenantId, userId: auth.userId })
      .returning({ id: departments.id });
    id = created!.id;
  }
  if (!current || body.notification_setting_ids) {
    await tx.delete(departmentNotificationSettings).where(eq(departmentNotificationSettings.departmentId, id));
    const unique = [...new Set(settingIds)];
    if (unique.length) {
      await tx
        .insert(departmentNotificationSettings)
        .values(unique.map((notificationSettingId) => ({ tenantId: auth.tenantId, departmentId: id, notificationSettingId })));
    }
  }
  if (!current || body.attribute_set_ids) {
    await tx.delete(departmentAttributeSets).where(eq(departmentAttributeSets.departmentId, id));
    if (setAssignments.length) {
      await tx
        .insert(departmentAttributeSets)
        .values(setAssignments.map((a) => ({ tenantId: auth.tenantId, departmentId: id, attributeSetId: a.id, sortNumber: a.sortNumber })));
    }
  }
  return id;
}

/**
 * An entity whose last restriction row vanished would become unrestricted, so such a
 * delete is refused. The refusal names only the entities the caller may administer (menu
 * items with `menu-items.administer`, forms and task templates the caller administers);
 * of the others it says only that there are some, so it reveals no hidden record.
 */
async function refuseWhileEntityPermissionsNameIt(tx: Tx, auth: Auth, departmentId: number) {
  const naming = and(eq(entityPermissions.subjectType, 'department'), eq(entityPermissions.subjectId, departmentId));
  const administrable = sql<boolean>`case
    when ${entityPermissions.entityType} = ${MENU_ITEM_ENTITY_TYPE} then ${sql.raw(can(auth, 'menu-items.administer') ? 'true' : 'false')}
    when ${entityPermissions.entityType} in ('form', 'taskTemplate')
      then ${administrableBy(auth, sql`${entityPermissions.entityType}`, sql`${entityPermissions.entityId}`)}
    else false end`;
  const [shown, [hidden]] = await Promise.all([
    tx
      .select({ entityType: entityPermissions.entityType, entityId: entityPermissions.entityId })
      .from(entityPermissions)
      .where(and(naming, administrable))
      .orderBy(asc(entityPermissions.entityType), asc(entityPermissions.entityId))
      .limit(5),
    tx.execute<{ any: boolean }>(sql`select exists (select 1 from ${entityPermissions} where ${and(naming, not(administrable))}) as any`),
  ]);
  if (shown.length === 0 && !hidden?.any) return;
  const parts = shown.map((row) => `${row.entityType} ${row.entityId}`);
  if (shown.length === 5) parts.push('…');
  if (hidden?.any) parts.push('records you cannot administer');
  throw invalid(
    { department: [`is named by entity permissions (${parts.join(', ')}); remove it from them first`] },
    'The department is still used by entity permissions.',
  );
}

async function findDepartment(tx: Tx, id: number): Promise<DepartmentRow> {
  const [row] = await selectDepartments(tx, eq(departments.id, id));
  if (!row) throw notFound('The department');
  return row;
}

const presentOne = async (tx: Tx, auth: Auth, id: number) => {
  const [body] = await present(departmentView, tx, [await findDepartment(tx, id)], { selects: null, relations: [] }, auth);
  return body!;
};

export const departmentHandlers = {
  async listDepartments({ auth, query, services: { db } }) {
    const controls = readControls(departmentView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const rows = await selectDepartments(tx, controls.where, controls.limit);
      return present(departmentView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getDepartment({ auth, query, params, services: { db } }) {
    const controls = readControls(departmentView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const [presented] = await present(departmentView, tx, [await findDepartment(tx, params.department)], controls, auth);
      return presented!;
    });
    return { status: 200, body };
  },

  async getDepartmentAvailability({ auth, services: { db } }) {
    return { status: 200, body: await db.tenant(auth.tenantId, departmentAvailability) };
  },

  async createDepartment({ auth, body, services: { db } }) {
    const created = await db.tenant(auth.tenantId, async (tx) => {
      // Serialised per tenant, so two requests cannot both take the last free slot.
      await lockTenantScope(tx, 'departments.limit');
      const availability = await departmentAvailability(tx);
      if (availability.remaining === 0) {
        throw invalid({ name: [`the tenant's limit of ${availability.limit} departments is reached`] }, 'The department limit is reached.');
      }
      return presentOne(tx, auth, await saveDepartment(tx, auth, body, null));
    });
    return { status: 201, body: created };
  },

  async updateDepartment({ auth, body, params, services: { db } }) {
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      const current = await findDepartment(tx, params.department);
      return presentOne(tx, auth, await saveDepartment(tx, auth, body, current));
    });
    return { status: 200, body: updated };
  },

  /**
   * Hard delete (see the spec): memberships and assignments cascade. Refused (422) while an
   * entity permission names the department: removing the last restriction row of a menu
   * item, form or task template would make it unrestricted.
   */
  async deleteDepartment({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      // The row lock keeps a concurrent delete of the same department from racing the check.
      const [locked] = await tx.select({ id: departments.id }).from(departments).where(eq(departments.id, params.department)).for('update');
      if (!locked) throw notFound('The department');
      await refuseWhileEntityPermissionsNameIt(tx, auth, params.department);
      await tx.delete(departments).where(eq(departments.id, params.department));
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
