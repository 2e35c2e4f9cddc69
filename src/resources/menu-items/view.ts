import { and, eq, inArray, isNull, not, or, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { emptySubjectLists, isRestricted, loadSubjectLists, namesUser, type SubjectLists } from '../entity-permissions/queries.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { languages } from '../languages/table.ts';
import type { UserRow } from '../users/queries.ts';
import { embeddable, resolveLink } from './link.ts';
import { MENU_ITEM_ENTITY_TYPE, menuItems } from './table.ts';

export type MenuItemRow = typeof menuItems.$inferSelect;
/** A row as presented: with its entity permissions (administration) or its link resolved (user routes). */
export type MenuItemRecord = MenuItemRow & { entityPermissions: SubjectLists };

/** Which routes read: the user routes hide the administration-only fields. */
export interface MenuItemViewer {
  auth: Auth;
  scope: 'user' | 'administration';
}

const administrationOnly = { visibility: 'administrative' } as const;

export const menuItemView = defineView<MenuItemRecord, MenuItemViewer>({
  key: (row) => row.id,
  visible: (viewer, visibility) => visibility === 'public' || viewer.scope === 'administration',
  fields: {
    id: {},
    lang_id: { value: (row) => row.langId },
    icon_id: { value: (row) => row.iconId },
    menu_identifier: { value: (row) => row.menuIdentifier },
    type: {},
    title: {},
    link: {},
    allow_iframe_access: { value: (row) => row.allowIframeAccess },
    iframe_access: { value: (row) => row.iframeAccess },
    user_confirmation_required: { value: (row) => row.userConfirmationRequired },
    sort_number: { value: (row) => row.sortNumber },
    entity_permissions: { ...administrationOnly, value: (row) => row.entityPermissions },
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
    deleted_at: { ...administrationOnly, value: (row) => rfc3339(row.deletedAt) },
  },
  relations: {
    language: {
      empty: null,
      async load(tx, rows) {
        const ids = [...new Set(rows.map((row) => row.langId))];
        const found = await tx.select({ id: languages.id, name: languages.name }).from(languages).where(inArray(languages.id, ids));
        const byId = new Map(found.map((language) => [language.id, language]));
        return new Map(rows.map((row) => [row.id, byId.get(row.langId)]));
      },
    },
  },
});

/**
 * Decisions §5: visible to `userId` when not soft-deleted and either unrestricted or
 * naming the user, the user's role or one of the user's departments.
 */
export function visibleMenuItems(userId: number): SQL {
  return and(
    isNull(menuItems.deletedAt),
    or(not(isRestricted(MENU_ITEM_ENTITY_TYPE, menuItems.id)), namesUser(MENU_ITEM_ENTITY_TYPE, menuItems.id, userId)),
  )!;
}

/** User routes: the link resolved for the caller, and embedding judged on that resolved link. */
export function forCaller(rows: MenuItemRow[], caller: UserRow): MenuItemRecord[] {
  return rows.map((row) => {
    const link = resolveLink(row.link, caller);
    return { ...row, link, iframeAccess: row.iframeAccess && embeddable(link), entityPermissions: emptySubjectLists() };
  });
}

/** Administration routes: the stored template, with the entity permissions (one query). */
export async function forAdministration(tx: Tx, rows: MenuItemRow[]): Promise<MenuItemRecord[]> {
  const lists = await loadSubjectLists(tx, MENU_ITEM_ENTITY_TYPE, rows.map((row) => row.id));
  return rows.map((row) => ({ ...row, entityPermissions: lists.get(row.id) ?? emptySubjectLists() }));
}

export async function findMenuItem(tx: Tx, id: number, where?: SQL): Promise<MenuItemRow | undefined> {
  const [row] = await tx.select().from(menuItems).where(and(eq(menuItems.id, id), where));
  return row;
}
