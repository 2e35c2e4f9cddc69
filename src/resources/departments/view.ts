import { and, asc, eq, getTableColumns, inArray, sql, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { containsPattern } from '../../platform/database/text-search.ts';
import { defineView, groupBy, present } from '../../platform/result-controls/result-controls.ts';
import { attributeSetView } from '../attribute-sets/view.ts';
import { attributeSets } from '../attribute-sets/table.ts';
import { notificationSettingView } from '../notification-settings/view.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { presentUsersById } from '../users/view.ts';
import { departmentAttributeSets, departmentNotificationSettings, departmentUsers, departments } from './table.ts';

/** A department row with its assigned id lists (loaded in the same query). */
export type DepartmentRow = typeof departments.$inferSelect & { notificationSettingIds: number[]; attributeSetIds: number[] };

const toNumbers = (value: unknown) => ((value as (string | number)[] | null) ?? []).map(Number);

/** Departments matching `where`, ordered by name and id, with their id lists: one query. */
export async function selectDepartments(tx: Tx, where: SQL | undefined, limit?: number): Promise<DepartmentRow[]> {
  const query = tx
    .select({
      ...getTableColumns(departments),
      notificationSettingIds: sql`coalesce((
        select array_agg(s.notification_setting_id order by s.notification_setting_id)
        from ${departmentNotificationSettings} s where s.department_id = ${departments.id}), '{}')`.mapWith(toNumbers),
      attributeSetIds: sql`coalesce((
        select array_agg(a.attribute_set_id order by a.sort_number, a.attribute_set_id)
        from ${departmentAttributeSets} a where a.department_id = ${departments.id}), '{}')`.mapWith(toNumbers),
    })
    .from(departments)
    .where(where)
    .orderBy(asc(departments.name), asc(departments.id));
  return (limit ? await query.limit(limit) : await query) as DepartmentRow[];
}


/**
 * `filter[text]` (decisions §4): every word must match; `#word` matches a tag exactly
 * (case-insensitive), any other word a part of the name.
 */
export function departmentTextFilter(text: string): SQL | undefined {
  const words = text.split(/\s+/).filter((word) => word.length > 0 && word !== '#');
  const conditions = words.map((word) =>
    word.startsWith('#')
      ? sql`exists (select 1 from unnest(${departments.tags}) as tag where lower(tag) = lower(${word.slice(1)}))`
      : sql`${departments.name} ilike ${containsPattern(word)}`,
  );
  return conditions.length > 0 ? and(...conditions) : undefined;
}

export const departmentView = defineView<DepartmentRow, Auth, 'text'>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    user_id: { value: (r) => r.userId },
    tags: {},
    notification_setting_ids: { value: (r) => r.notificationSettingIds },
    attribute_set_ids: { value: (r) => r.attributeSetIds },
    attributes: {},
    created_at: { value: (r) => rfc3339(r.createdAt) },
    updated_at: { value: (r) => rfc3339(r.updatedAt) },
  },
  filters: {
    text: (value: string) => departmentTextFilter(value),
  },
  relations: {
    users: {
      // Members are users: listing them needs what listing users needs.
      permission: 'users.view',
      empty: [],
      // The members (not deleted), in the users' list order, shown as the caller may see users.
      async load(tx, rows, viewer) {
        const memberships = await tx
          .select({ departmentId: departmentUsers.departmentId, userId: departmentUsers.userId })
          .from(departmentUsers)
          .where(inArray(departmentUsers.departmentId, rows.map((r) => r.id)));
        const presented = await presentUsersById(tx, memberships.map((m) => m.userId), viewer, { exceptDeleted: true });
        const position = new Map([...presented.keys()].map((id, i) => [id, i]));
        const ordered = memberships
          .filter((m) => presented.has(m.userId))
          .sort((a, b) => position.get(a.userId)! - position.get(b.userId)!);
        return groupBy(ordered, (m) => m.departmentId, (m) => presented.get(m.userId));
      },
    },
    notification_settings: {
      empty: [],
      async load(tx, rows, viewer) {
        const found = await tx
          .select({ departmentId: departmentNotificationSettings.departmentId, setting: notificationSettings })
          .from(departmentNotificationSettings)
          .innerJoin(notificationSettings, eq(notificationSettings.id, departmentNotificationSettings.notificationSettingId))
          .where(inArray(departmentNotificationSettings.departmentId, rows.map((r) => r.id)))
          .orderBy(asc(notificationSettings.sortNumber), asc(notificationSettings.id));
        const presented = await present(notificationSettingView, tx, found.map((f) => f.setting), { selects: null, relations: [] }, viewer);
        return groupBy(found.map((f, i) => [f.departmentId, presented[i]] as const), ([id]) => id, ([, shown]) => shown);
      },
    },
    attribute_sets: {
      // The definitions (set names, field keys, types and labels) are administered, and
      // listed, with departments.manage only: the relation needs the same permission. The
      // values a department holds (`attributes`) and its `attribute_set_ids` stay public.
      permission: 'departments.manage',
      empty: [],
      async load(tx, rows, viewer) {
        const found = await tx
          .select({ departmentId: departmentAttributeSets.departmentId, set: attributeSets })
          .from(departmentAttributeSets)
          .innerJoin(attributeSets, eq(attributeSets.id, departmentAttributeSets.attributeSetId))
          .where(inArray(departmentAttributeSets.departmentId, rows.map((r) => r.id)))
          .orderBy(asc(departmentAttributeSets.sortNumber), asc(attributeSets.id));
        const presented = await present(attributeSetView, tx, found.map((f) => f.set), { selects: null, relations: [] }, viewer);
        return groupBy(found.map((f, i) => [f.departmentId, presented[i]] as const), ([id]) => id, ([, shown]) => shown);
      },
    },
  },
});

