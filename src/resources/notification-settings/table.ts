import { bigint, integer, pgTable, primaryKey, text, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';

export const notificationSettings = pgTable(
  'notification_settings',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    key: text('key').notNull(),
    sortNumber: integer('sort_number').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('notification_settings_tenant_id_key_key').on(t.tenantId, t.key),
    tenantIsolation('notification_settings'),
  ],
).enableRLS();
