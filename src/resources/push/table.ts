import { bigint, foreignKey, index, integer, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/**
 * A browser's (or PWA's) Web Push subscription: where the push service accepts
 * messages for it (`endpoint`), and the keys messages are encrypted for (RFC 8291).
 * One endpoint is one browser profile, so it is unique per tenant: registering it again
 * (even as another user who signed in on that browser) updates the one record.
 */
export const pushSubscriptions = pgTable(
  'push_subscriptions',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    endpoint: text('endpoint').notNull(),
    p256dh: text('p256dh').notNull(),
    auth: text('auth').notNull(),
    userAgent: text('user_agent'),
    /** The last push the service refused without a retry (other 4xx), or that ran out of retries. */
    lastFailureStatus: integer('last_failure_status'),
    lastFailure: text('last_failure'),
    lastFailureAt: timestamp('last_failure_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('push_subscriptions_tenant_id_endpoint_key').on(t.tenantId, t.endpoint),
    foreignKey({ name: 'push_subscriptions_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    // The push job joins a batch's recipients to their subscriptions.
    index('push_subscriptions_user_idx').on(t.tenantId, t.userId),
    tenantIsolation('push_subscriptions'),
  ],
).enableRLS();
