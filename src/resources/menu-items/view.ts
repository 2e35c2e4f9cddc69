import { asc, inArray } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { notFound } from '../../platform/http/problem.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { emptySubjectLists, loadSubjectLists, type SubjectLists } from '../entity-permissions/queries.ts';
import { languages } from '../languages/table.ts';
import { findUser } from '../users/queries.ts';
import { visibleMenuItems, type MenuItemRow } from './queries.ts';
import { embeddable, resolveLink } from './rules.ts';
import { MENU_ITEM_ENTITY_TYPE, menuItems } from './table.ts';

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

/** User routes: the link resolved for the caller (one query), and embedding judged on that resolved link. */
async function forCaller(tx: Tx, rows: MenuItemRow[], auth: Auth): Promise<MenuItemRecord[]> {
  const caller = await findUser(tx, auth.userId);
  if (!caller) throw notFound('The user');
  return rows.map((row) => {
    const link = resolveLink(row.link, caller);
    return { ...row, link, iframeAccess: row.iframeAccess && embeddable(link), entityPermissions: emptySubjectLists() };
  });
}

/** Administration routes: the stored template, with the entity permissions (one query). */
async function forAdministration(tx: Tx, rows: MenuItemRow[]): Promise<MenuItemRecord[]> {
  const lists = await loadSubjectLists(
    tx,
    MENU_ITEM_ENTITY_TYPE,
    rows.map((row) => row.id),
  );
  return rows.map((row) => ({ ...row, entityPermissions: lists.get(row.id) ?? emptySubjectLists() }));
}

/**
 * Both routes' items, by `sort_number` and id: the user routes show the items the caller
 * sees (`visibleMenuItems`) with their links resolved for the caller; the administration
 * routes every item, deleted ones too, with its entity permissions. One query for the
 * items and one to shape them, whatever their number.
 */
export const menuItemListing: Listing<MenuItemRow, MenuItemViewer, never, MenuItemRecord> = {
  view: menuItemView,
  query: (tx) => tx.select().from(menuItems),
  tenant: menuItems.tenantId,
  key: menuItems.id,
  scope: (viewer) => (viewer.scope === 'user' ? visibleMenuItems(viewer.auth.userId) : undefined),
  order: [asc(menuItems.sortNumber), asc(menuItems.id)],
  shape: (tx, rows, viewer) => (viewer.scope === 'user' ? forCaller(tx, rows, viewer.auth) : forAdministration(tx, rows)),
};
