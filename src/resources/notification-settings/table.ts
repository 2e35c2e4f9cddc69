import { bigint, integer, pgTable, text, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';

export const notificationSettings = pgTable(
  'notification_settings',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    key: text('key').notNull(),
    sortNumber: integer('sort_number').notNull(),
  },
  (t) => [
    unique('notification_settings_tenant_id_id_key').on(t.tenantId, t.id),
    unique('notification_settings_tenant_id_key_key').on(t.tenantId, t.key),
    tenantIsolation('notification_settings'),
  ],
).enableRLS();
