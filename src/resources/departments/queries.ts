import { and, asc, count, eq, getTableColumns, not, sql } from 'drizzle-orm';
import { can, type Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { tenants } from '../../platform/database/tenancy.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { notFound } from '../../platform/http/problem.ts';
import { entityPermissions } from '../entity-permissions/table.ts';
import { administrableBy } from '../forms/rules.ts';
import { MENU_ITEM_ENTITY_TYPE } from '../menu-items/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { departmentAttributeSets, departmentNotificationSettings, departmentUsers, departments } from './table.ts';

const toNumbers = (value: unknown) => ((value as (string | number)[] | null) ?? []).map(Number);

/** Departments with their assigned id lists (loaded in the same query); where, order and limit are the caller's. */
export function departmentRecords(tx: Tx) {
  return tx
    .select({
      ...getTableColumns(departments),
      notificationSettingIds: sql`coalesce((
        select array_agg(s.notification_setting_id order by s.notification_setting_id)
        from ${departmentNotificationSettings} s where s.tenant_id = departments.tenant_id and s.department_id = departments.id), '{}')`.mapWith(toNumbers),
      attributeSetIds: sql`coalesce((
        select array_agg(a.attribute_set_id order by a.sort_number, a.attribute_set_id)
        from ${departmentAttributeSets} a where a.tenant_id = departments.tenant_id and a.department_id = departments.id), '{}')`.mapWith(toNumbers),
    })
    .from(departments);
}

/** A department row with its assigned id lists. */
export type DepartmentRow = Awaited<ReturnType<typeof departmentRecords>>[number];

/** The department, or 404. */
export async function findDepartment(tx: Tx, id: number): Promise<DepartmentRow> {
  const [row] = await departmentRecords(tx).where(eq(departments.id, id));
  if (!row) throw notFound('The department');
  return row;
}

/** The tenant's number of departments and its limit (null: unlimited). */
export async function departmentCountAndLimit(tx: Tx): Promise<{ count: number; limit: number | null }> {
  const [counted] = await tx.select({ n: count() }).from(departments);
  const [tenant] = await tx.select({ limit: tenants.departmentLimit }).from(tenants);
  return { count: counted?.n ?? 0, limit: tenant?.limit ?? null };
}

/** Every department's id and name (for the look-alike rule). */
export function departmentNames(tx: Tx): Promise<{ id: number; name: string }[]> {
  return tx.select({ id: departments.id, name: departments.name }).from(departments);
}

/** What a create or update stores; an assignment list left undefined keeps the current one. */
export interface DepartmentWrite {
  name: string;
  tags: string[];
  attributes: Record<string, unknown>;
  notificationSettingIds?: readonly number[];
  attributeSets?: readonly { id: number; sortNumber: number }[];
}

/**
 * Inserts (`currentId` null) or updates the department and replaces the assignments given;
 * answers its id. An update stores the time of the update in `updated_at` unless `changed`
 * is false: one that changes nothing leaves it as it was (`updateTime`).
 */
export async function saveDepartment(
  tx: Tx,
  author: Pick<Auth, 'tenantId' | 'userId'>,
  write: DepartmentWrite,
  currentId: number | null,
  { changed = true } = {},
): Promise<number> {
  const { tenantId } = author;
  const values = { name: write.name, tags: write.tags, attributes: write.attributes };
  let id: number;
  if (currentId !== null) {
    await tx
      .update(departments)
      .set({ ...values, updatedAt: updateTime(departments.updatedAt, changed) })
      .where(eq(departments.id, currentId));
    id = currentId;
  } else {
    const [created] = await tx
      .insert(departments)
      .values({ ...values, tenantId, userId: author.userId })
      .returning({ id: departments.id });
    id = created!.id;
  }
  if (write.notificationSettingIds) {
    await tx.delete(departmentNotificationSettings).where(eq(departmentNotificationSettings.departmentId, id));
    const unique = [...new Set(write.notificationSettingIds)];
    if (unique.length) {
      await tx.insert(departmentNotificationSettings).values(unique.map((notificationSettingId) => ({ tenantId, departmentId: id, notificationSettingId })));
    }
  }
  if (write.attributeSets) {
    await tx.delete(departmentAttributeSets).where(eq(departmentAttributeSets.departmentId, id));
    if (write.attributeSets.length) {
      await tx
        .insert(departmentAttributeSets)
        .values(write.attributeSets.map((a) => ({ tenantId, departmentId: id, attributeSetId: a.id, sortNumber: a.sortNumber })));
    }
  }
  return id;
}

/** Hard delete: memberships and assignments cascade. */
export async function deleteDepartment(tx: Tx, id: number): Promise<void> {
  await tx.delete(departments).where(eq(departments.id, id));
}

/**
 * The entity permissions naming the department, as `caller` may learn of them: up to
 * `shownLimit` entities the caller may administer (menu items with
 * `menu-items.administer`, the forms and task templates the caller administers), by type
 * and id, and whether any other entity names it. Two queries.
 */
export async function entityPermissionsNaming(
  tx: Tx,
  caller: Auth,
  departmentId: number,
  shownLimit: number,
): Promise<{ shown: { entityType: string; entityId: number }[]; hidden: boolean }> {
  const naming = and(eq(entityPermissions.subjectType, 'department'), eq(entityPermissions.subjectId, departmentId));
  const administrable = sql<boolean>`case
    when ${entityPermissions.entityType} = ${MENU_ITEM_ENTITY_TYPE} then ${sql.raw(can(caller, 'menu-items.administer') ? 'true' : 'false')}
    when ${entityPermissions.entityType} in ('form', 'taskTemplate')
      then ${administrableBy(caller, sql`${entityPermissions.entityType}`, entityPermissions.entityId)}
    else false end`;
  const [shown, [hidden]] = await Promise.all([
    tx
      .select({ entityType: entityPermissions.entityType, entityId: entityPermissions.entityId })
      .from(entityPermissions)
      .where(and(naming, administrable))
      .orderBy(asc(entityPermissions.entityType), asc(entityPermissions.entityId))
      .limit(shownLimit),
    tx.execute<{ any: boolean }>(sql`select exists (select 1 from ${entityPermissions} where ${and(naming, not(administrable))}) as any`),
  ]);
  return { shown, hidden: hidden?.any === true };
}

/** The departments' members (user ids), in no particular order. */
export function departmentMemberships(tx: Tx, departmentIds: number[], limit: number): Promise<{ departmentId: number; userId: number }[]> {
  return tx
    .select({ departmentId: departmentUsers.departmentId, userId: departmentUsers.userId })
    .from(departmentUsers)
    .where(inIdList(departmentUsers.departmentId, departmentIds))
    .limit(limit);
}

/** The notification settings `ids` names, by `sort_number` and id: one query (also for []). */
export function notificationSettingsByIds(tx: Tx, ids: number[]) {
  return tx
    .select()
    .from(notificationSettings)
    .where(inIdList(notificationSettings.id, ids))
    .orderBy(asc(notificationSettings.sortNumber), asc(notificationSettings.id));
}
