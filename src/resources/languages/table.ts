import { boolean, pgTable, primaryKey, text } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';

/** Languages a tenant offers; `lang_id` of users and menu items refers to `id` (e.g. `en-US`). */
export const languages = pgTable(
  'languages',
  {
    tenantId: tenantIdColumn(),
    id: text('id').notNull(),
    name: text('name').notNull(),
    /** The tenant's system language (default `lang_id` of new menu items). */
    isSystem: boolean('is_system').notNull().default(false),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.id] }), tenantIsolation('languages')],
).enableRLS();
