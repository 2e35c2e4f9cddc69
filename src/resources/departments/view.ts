import { and, asc, sql, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { containsPattern } from '../../platform/database/text-search.ts';
import { invalid } from '../../platform/http/problem.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { presentGrouped, type Listing } from '../../platform/result-controls/listing.ts';
import { defineView, groupBy } from '../../platform/result-controls/result-controls.ts';
import { urlContextFields } from '../../platform/result-controls/url-context.ts';
import { attributeSetView } from '../attribute-sets/view.ts';
import { notificationSettingView } from '../notification-settings/view.ts';
import { presentUsersById } from '../users/view.ts';
import { attributeSetsByIds } from '../attribute-sets/queries.ts';
import { departmentMemberships, departmentRecords, notificationSettingsByIds, type DepartmentRow } from './queries.ts';
import { departments } from './table.ts';

/**
 * The most memberships the `users` relation shows in one answer; more are refused (422).
 * Each membership is a user in the answer, and departments share members: a few departments
 * of a large tenant would answer millions of users, held in memory at once.
 */
export const MAX_MEMBERS_SHOWN = 50_000;

/**
 * `filter[text]` (docs/departments.md#departments): every word must match; `#word` matches
 * a tag exactly (case-insensitive), any other word a part of the name.
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
    ...urlContextFields<DepartmentRow>('department', 'departments'),
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
        const memberships = await departmentMemberships(
          tx,
          rows.map((r) => r.id),
          MAX_MEMBERS_SHOWN + 1,
        );
        if (memberships.length > MAX_MEMBERS_SHOWN) {
          throw invalid({
            relations: [
              `users: the departments have more than ${MAX_MEMBERS_SHOWN} members in all; ask for fewer departments (limit), or list the members with GET /api/users?filter[department_id]=`,
            ],
          });
        }
        const presented = await presentUsersById(
          tx,
          memberships.map((m) => m.userId),
          viewer,
          { exceptDeleted: true },
        );
        const position = new Map([...presented.keys()].map((id, i) => [id, i]));
        const ordered = memberships.filter((m) => presented.has(m.userId)).sort((a, b) => position.get(a.userId)! - position.get(b.userId)!);
        return groupBy(
          ordered,
          (m) => m.departmentId,
          (m) => presented.get(m.userId),
        );
      },
    },
    notification_settings: {
      empty: [],
      // Each department's settings in the settings' order (sort_number, id).
      async load(tx, rows, viewer) {
        const settings = await notificationSettingsByIds(tx, [...new Set(rows.flatMap((r) => r.notificationSettingIds))]);
        const items = settings.flatMap((setting) =>
          rows.filter((r) => r.notificationSettingIds.includes(setting.id)).map((r) => ({ key: r.id, row: setting })),
        );
        return presentGrouped(notificationSettingView, items, viewer);
      },
    },
    attribute_sets: {
      // The definitions (set names, field keys, types and labels) are administered, and
      // listed, with departments.manage only: the relation needs the same permission. The
      // values a department holds (`attributes`) and its `attribute_set_ids` stay public.
      permission: 'departments.manage',
      empty: [],
      // Each department's sets in its `attribute_set_ids` order.
      async load(tx, rows, viewer) {
        const sets = new Map((await attributeSetsByIds(tx, [...new Set(rows.flatMap((r) => r.attributeSetIds))])).map((set) => [set.id, set]));
        const items = rows.flatMap((r) => r.attributeSetIds.flatMap((id) => (sets.has(id) ? [{ key: r.id, row: sets.get(id)! }] : [])));
        return presentGrouped(attributeSetView, items, viewer);
      },
    },
  },
});

/** Every department of the tenant, by name and id (docs/api-conventions.md#list-order). */
export const departmentListing: Listing<DepartmentRow, Auth, 'text'> = {
  view: departmentView,
  query: departmentRecords,
  tenant: departments.tenantId,
  key: departments.id,
  order: [asc(departments.name), asc(departments.id)],
};
