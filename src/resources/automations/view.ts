import { asc, eq, inArray } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { automations, webhookDeliveries, webhookDeliveryAttempts, type DeliveryStatus } from './table.ts';
import { maskSecrets } from './webhook-configuration.ts';

export type AutomationRow = typeof automations.$inferSelect;
export type DeliveryRow = typeof webhookDeliveries.$inferSelect;

export const automationView = defineView<AutomationRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    action_type: { value: (row) => row.actionType },
    config: { value: (row) => maskSecrets(row.config) },
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
  },
});

/** Deliveries never show request headers, credentials or the payload. */
export const deliveryView = defineView<DeliveryRow, Auth, 'status'>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    automation_id: { value: (row) => row.automationId },
    event_id: { value: (row) => row.eventId },
    status: {},
    attempts: {},
    response_status: { value: (row) => row.responseStatus },
    duration_ms: { value: (row) => row.durationMs },
    error: {},
    next_attempt_at: { value: (row) => rfc3339(row.nextAttemptAt) },
    created_at: { value: (row) => rfc3339(row.createdAt) },
    completed_at: { value: (row) => rfc3339(row.completedAt) },
  },
  relations: {
    attempt_log: {
      empty: [],
      async load(tx, rows) {
        const found = await tx
          .select()
          .from(webhookDeliveryAttempts)
          .where(
            inArray(
              webhookDeliveryAttempts.deliveryId,
              rows.map((row) => row.id),
            ),
          )
          .orderBy(asc(webhookDeliveryAttempts.deliveryId), asc(webhookDeliveryAttempts.number));
        const byDelivery = new Map<unknown, unknown[]>();
        for (const attempt of found) {
          const list = byDelivery.get(attempt.deliveryId) ?? [];
          list.push({
            number: attempt.number,
            started_at: rfc3339(attempt.startedAt),
            response_status: attempt.responseStatus,
            duration_ms: attempt.durationMs,
            error: attempt.error,
          });
          byDelivery.set(attempt.deliveryId, list);
        }
        return byDelivery;
      },
    },
  },
  filters: {
    status: (value: DeliveryStatus) => eq(webhookDeliveries.status, value),
  },
});
