import { sql } from 'drizzle-orm';
import { bigint, check, foreignKey, index, integer, jsonb, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import type { StoredWebhookConfiguration } from './webhook-configuration.ts';

export const DELIVERY_STATUSES = ['pending', 'retrying', 'succeeded', 'failed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** An automation with its webhook action; secrets inside `config` are encrypted. */
export const automations = pgTable(
  'automations',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    actionType: text('action_type').notNull().default('webhook'),
    config: jsonb('config').$type<StoredWebhookConfiguration>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    check('automations_action_type_known', sql`${t.actionType} IN ('webhook')`),
    tenantIsolation('automations'),
  ],
).enableRLS();

export type AutomationRow = typeof automations.$inferSelect;

/** One run of an automation's webhook; `payload` is the exact body every attempt sends. */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    automationId: bigint('automation_id', { mode: 'number' }).notNull(),
    eventId: text('event_id').notNull(),
    payload: text('payload').notNull(),
    status: text('status', { enum: DELIVERY_STATUSES }).notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    responseStatus: integer('response_status'),
    durationMs: integer('duration_ms'),
    error: text('error'),
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    completedAt: timestamp('completed_at', { withTimezone: true, mode: 'date' }),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('webhook_deliveries_tenant_id_event_id_key').on(t.tenantId, t.eventId),
    foreignKey({
      name: 'webhook_deliveries_automation_fk',
      columns: [t.tenantId, t.automationId],
      foreignColumns: [automations.tenantId, automations.id],
    }).onDelete('cascade'),
    index('webhook_deliveries_automation_idx').on(t.tenantId, t.automationId, t.id),
    // A tenant's deliveries still to be made, counted for the place of its next one in the queue (`waitingDeliveries`).
    index('webhook_deliveries_open_idx')
      .on(t.tenantId)
      .where(sql`${t.status} IN ('pending', 'retrying')`),
    check('webhook_deliveries_status_known', sql`${t.status} IN ('pending', 'retrying', 'succeeded', 'failed')`),
    // The retention purge (purge-expired.job.ts) finds finished deliveries by age.
    index('webhook_deliveries_completed_idx')
      .on(t.completedAt)
      .where(sql`${t.completedAt} IS NOT NULL`),
    tenantIsolation('webhook_deliveries'),
  ],
).enableRLS();

export type DeliveryRow = typeof webhookDeliveries.$inferSelect;

/** Every attempt of a delivery, as it happened. */
export const webhookDeliveryAttempts = pgTable(
  'webhook_delivery_attempts',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    deliveryId: bigint('delivery_id', { mode: 'number' }).notNull(),
    number: integer('number').notNull(),
    startedAt: timestamp('started_at', { withTimezone: true, mode: 'date' }).notNull(),
    responseStatus: integer('response_status'),
    durationMs: integer('duration_ms'),
    error: text('error'),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('webhook_delivery_attempts_delivery_number_key').on(t.tenantId, t.deliveryId, t.number),
    foreignKey({
      name: 'webhook_delivery_attempts_delivery_fk',
      columns: [t.tenantId, t.deliveryId],
      foreignColumns: [webhookDeliveries.tenantId, webhookDeliveries.id],
    }).onDelete('cascade'),
    tenantIsolation('webhook_delivery_attempts'),
  ],
).enableRLS();
