import { and, eq, isNull, not, or, sql, type SQL } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { isRestricted, namesUser } from '../entity-permissions/queries.ts';
import { languages } from '../languages/table.ts';
import { MENU_ITEM_ENTITY_TYPE, menuItems } from './table.ts';

export type MenuItemRow = typeof menuItems.$inferSelect;
export type MenuItemValues = Omit<typeof menuItems.$inferInsert, 'id' | 'tenantId' | 'createdAt' | 'updatedAt' | 'deletedAt'>;

/**
 * The items `userId` sees on the user routes: not soft-deleted, and either unrestricted or
 * naming the user, the user's role or one of the user's departments
 * (docs/permissions.md#entity-permissions).
 */
export function visibleMenuItems(userId: number): SQL {
  return and(isNull(menuItems.deletedAt), or(not(isRestricted(MENU_ITEM_ENTITY_TYPE, menuItems.id)), namesUser(MENU_ITEM_ENTITY_TYPE, menuItems.id, userId)))!;
}

/** The item, unless it is soft-deleted (what an update may change). */
export async function findUndeletedMenuItem(tx: Tx, id: number): Promise<MenuItemRow | undefined> {
  const [row] = await tx
    .select()
    .from(menuItems)
    .where(and(eq(menuItems.id, id), isNull(menuItems.deletedAt)));
  return row;
}

/** The language `langId` names, or the tenant's system language when undefined; undefined when there is none. */
export async function menuLanguage(tx: Tx, langId: string | undefined): Promise<string | undefined> {
  const [language] = await tx
    .select({ id: languages.id })
    .from(languages)
    .where(langId === undefined ? eq(languages.isSystem, true) : eq(languages.id, langId))
    .limit(1);
  return language?.id;
}

/**
 * "Last + 1 within the tenant", at most the largest sort number (an item may hold it: the
 * next ones then share it); the lock keeps two concurrent creates from taking one number.
 */
export async function nextSortNumber(tx: Tx): Promise<number> {
  await lockTenantScope(tx, 'menu_items.sort_number');
  const [row] = await tx.select({ next: sql<number>`least(coalesce(max(${menuItems.sortNumber}), 0)::bigint + 1, 2147483647)::int` }).from(menuItems);
  return row!.next;
}

export async function insertMenuItem(tx: Tx, tenantId: number, values: MenuItemValues): Promise<MenuItemRow> {
  const [row] = await tx
    .insert(menuItems)
    .values({ tenantId, ...values })
    .returning();
  return row!;
}

/** Stores `values` on the item, and the time of the update unless it changes nothing (`changed`: `updateTime`). */
export async function updateMenuItem(tx: Tx, id: number, values: MenuItemValues, { changed }: { changed: boolean }): Promise<MenuItemRow> {
  const [row] = await tx
    .update(menuItems)
    .set({ ...values, updatedAt: updateTime(menuItems.updatedAt, changed) })
    .where(eq(menuItems.id, id))
    .returning();
  return row!;
}

/** Soft-deletes the item; false when there is none, or it is deleted already. */
export async function softDeleteMenuItem(tx: Tx, id: number): Promise<boolean> {
  const [row] = await tx
    .update(menuItems)
    .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
    .where(and(eq(menuItems.id, id), isNull(menuItems.deletedAt)))
    .returning({ id: menuItems.id });
  return row !== undefined;
}
