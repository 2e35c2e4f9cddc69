import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { audit, recordChanges } from '../audit-events/record.ts';
import { deleteSubjectLists, replaceSubjectLists, storedSubjectLists } from '../entity-permissions/queries.ts';
import { findUndeletedMenuItem, insertMenuItem, nextSortNumber, softDeleteMenuItem, updateMenuItem, type MenuItemRow } from './queries.ts';
import { iframeAccess, sameSubjects, validateMenuItemDraft } from './rules.ts';
import { MENU_ITEM_ENTITY_TYPE, menuItems } from './table.ts';
import { menuItemListing, menuItemView, type MenuItemViewer } from './view.ts';

const userScope = (auth: Auth): MenuItemViewer => ({ auth, scope: 'user' });
const administrationScope = (auth: Auth): MenuItemViewer => ({ auth, scope: 'administration' });

/** An item just written, as the administration routes show it (every field, no relations). */
async function presentForAdministration(tx: Tx, auth: Auth, row: MenuItemRow) {
  const viewer = administrationScope(auth);
  const [record] = await presentAll(menuItemView, tx, await menuItemListing.shape(tx, [row], viewer), viewer);
  return record!;
}

/** A menu item as the audit trail names it. */
const menuItemTarget = (row: MenuItemRow) => ({ type: 'menu_item', id: row.id, label: row.title });

export const menuItemHandlers = {
  async listMenuItems({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, menuItemListing, query, userScope(auth)) };
  },

  async getMenuItem({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, menuItemListing, query, userScope(auth), { key: params.menuItem }, 'The menu item');
    return { status: 200, body };
  },

  async listAdministeredMenuItems({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, menuItemListing, query, administrationScope(auth)) };
  },

  async getAdministeredMenuItem({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, menuItemListing, query, administrationScope(auth), { key: params.menuItem }, 'The menu item');
    return { status: 200, body };
  },

  async createMenuItem(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const langId = await validateMenuItemDraft(tx, auth, {
        type: body.type,
        link: body.link,
        langId: body.lang_id,
        entityPermissions: body.entity_permissions,
        newLink: true,
        newType: true,
        newAudience: false,
      });
      const allowIframeAccess = body.allow_iframe_access ?? true;
      const row = await insertMenuItem(tx, auth.tenantId, {
        langId,
        iconId: body.icon_id,
        menuIdentifier: body.menu_identifier,
        type: body.type,
        title: body.title,
        link: body.link,
        allowIframeAccess,
        iframeAccess: iframeAccess(allowIframeAccess, body.link),
        userConfirmationRequired: body.user_confirmation_required ?? false,
        sortNumber: body.sort_number ?? (await nextSortNumber(tx)),
      });
      if (body.entity_permissions) await replaceSubjectLists(tx, auth.tenantId, MENU_ITEM_ENTITY_TYPE, row.id, body.entity_permissions);
      const record = await presentForAdministration(tx, auth, row);
      await audit(tx, ctx, { action: 'menu_item.created', target: menuItemTarget(row), changes: recordChanges(null, record) });
      return record;
    });
    return { status: 201, body: created };
  },

  async updateMenuItem(ctx) {
    const {
      auth,
      params,
      body,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      // A concurrent update or delete of the item waits, or is waited for: no change is
      // lost, and an item deleted meanwhile is not found.
      const current = (await lockRecord(tx, menuItems, params.menuItem)) ? await findUndeletedMenuItem(tx, params.menuItem) : undefined;
      if (!current) throw notFound('The menu item');
      const viewer = administrationScope(auth);
      const [shown] = await menuItemListing.shape(tx, [current], viewer);
      const type = body.type ?? current.type;
      const link = body.link ?? current.link;
      const allowIframeAccess = body.allow_iframe_access ?? current.allowIframeAccess;
      const sent = body.entity_permissions;
      const stored = shown!.entityPermissions;
      const newAudience = sent !== undefined && !sameSubjects(sent, stored);
      const langId = await validateMenuItemDraft(tx, auth, {
        type,
        link,
        langId: body.lang_id ?? current.langId,
        entityPermissions: body.entity_permissions,
        storedEntityPermissions: stored,
        newLink: link !== current.link,
        newType: type !== current.type,
        newAudience,
      });
      const values = {
        langId,
        iconId: body.icon_id ?? current.iconId,
        menuIdentifier: body.menu_identifier ?? current.menuIdentifier,
        type,
        title: body.title ?? current.title,
        link,
        allowIframeAccess,
        // Recalculated whenever the link or the iframe preference changes (the spec, schema MenuItem).
        iframeAccess: iframeAccess(allowIframeAccess, link),
        userConfirmationRequired: body.user_confirmation_required ?? current.userConfirmationRequired,
        sortNumber: body.sort_number ?? current.sortNumber,
      };
      // Judged before the write, on the item as the administration routes answer it: one that changes nothing (the
      // item sent back as it was read) leaves updated_at as it was (the spec, operationId updateMenuItem).
      const entityPermissions = sent ? storedSubjectLists(sent) : stored;
      const [before, after] = await presentAll(menuItemView, null, [shown!, { ...shown!, ...values, entityPermissions }], viewer);
      const changes = recordChanges(before!, after!);
      const row = await updateMenuItem(tx, current.id, values, { changed: Object.keys(changes).length > 0 });
      if (body.entity_permissions) await replaceSubjectLists(tx, auth.tenantId, MENU_ITEM_ENTITY_TYPE, current.id, body.entity_permissions);
      const record = await presentForAdministration(tx, auth, row);
      if (Object.keys(changes).length > 0) await audit(tx, ctx, { action: 'menu_item.updated', target: menuItemTarget(row), changes });
      return record;
    });
    return { status: 200, body: updated };
  },

  async deleteMenuItem(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // Locked before it is read, as an update takes it: the event names the item as a write committed meanwhile left it.
      const current = (await lockRecord(tx, menuItems, params.menuItem)) ? await findUndeletedMenuItem(tx, params.menuItem) : undefined;
      if (!current || !(await softDeleteMenuItem(tx, params.menuItem))) throw notFound('The menu item');
      // A deleted item is shown to no one, so its restriction grants nothing any more. Kept, its rows would still count
      // as rights (a new membership, a password set), and keep the departments they name from being deleted for good:
      // a deleted item cannot be updated to name them out.
      await deleteSubjectLists(tx, MENU_ITEM_ENTITY_TYPE, current.id);
      await audit(tx, ctx, { action: 'menu_item.deleted', target: menuItemTarget(current) });
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
