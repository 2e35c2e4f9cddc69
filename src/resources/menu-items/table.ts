import { sql } from 'drizzle-orm';
import { bigint, boolean, check, foreignKey, index, integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { languages } from '../languages/table.ts';

/** Allowed `type` values (documented in openapi/components/menu-items.yaml#/MenuItemType). */
export const MENU_ITEM_TYPES = ['link', 'iframe', 'route'] as const;
export type MenuItemType = (typeof MENU_ITEM_TYPES)[number];

/** Morph alias of menu items in `entity_permissions.entity_type` (docs/permissions.md#entity-permissions). */
export const MENU_ITEM_ENTITY_TYPE = 'menuItem';

/** Additional navigation entries (the spec, schema MenuItem); access restriction lives in `entity_permissions`. */
export const menuItems = pgTable(
  'menu_items',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    langId: text('lang_id').notNull(),
    iconId: integer('icon_id').notNull(),
    menuIdentifier: text('menu_identifier').notNull(),
    type: text('type', { enum: MENU_ITEM_TYPES }).notNull(),
    title: text('title').notNull(),
    /** URL or same-origin path, possibly with `{{user.…}}` placeholders (resolved when read). */
    link: text('link').notNull(),
    allowIframeAccess: boolean('allow_iframe_access').notNull().default(true),
    /** Computed on write from `allow_iframe_access` and the link (`iframeAccess`, ./rules.ts). */
    iframeAccess: boolean('iframe_access').notNull(),
    userConfirmationRequired: boolean('user_confirmation_required').notNull().default(false),
    sortNumber: integer('sort_number').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    deletedAt: timestamp('deleted_at', { withTimezone: true, mode: 'date' }),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    foreignKey({ name: 'menu_items_language_fk', columns: [t.tenantId, t.langId], foreignColumns: [languages.tenantId, languages.id] }),
    index('menu_items_tenant_order_idx').on(t.tenantId, t.sortNumber, t.id),
    check('menu_items_type_known', sql`${t.type} IN ('link', 'iframe', 'route')`),
    tenantIsolation('menu_items'),
  ],
).enableRLS();
