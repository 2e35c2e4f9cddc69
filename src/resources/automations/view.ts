import { asc, desc, eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView, groupBy } from '../../platform/result-controls/result-controls.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { automations, webhookDeliveries, webhookDeliveryAttempts, type AutomationRow, type DeliveryRow, type DeliveryStatus } from './table.ts';
import { answeredConfiguration } from './webhook-configuration.ts';

export const automationView = defineView<AutomationRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    action_type: { value: (row) => row.actionType },
    config: { value: (row) => answeredConfiguration(row.config) },
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
  },
});

/** Automations in `id` order (the spec, operationIds listAutomations and getAutomation). */
export const automationListing: Listing<AutomationRow, Auth> = {
  view: automationView,
  query: (tx) => tx.select().from(automations),
  tenant: automations.tenantId,
  order: [asc(automations.id)],
};

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
            inIdList(
              webhookDeliveryAttempts.deliveryId,
              rows.map((row) => row.id),
            ),
          )
          .orderBy(asc(webhookDeliveryAttempts.deliveryId), asc(webhookDeliveryAttempts.number));
        return groupBy(
          found,
          (attempt) => attempt.deliveryId,
          (attempt) => ({
            number: attempt.number,
            started_at: rfc3339(attempt.startedAt),
            response_status: attempt.responseStatus,
            duration_ms: attempt.durationMs,
            error: attempt.error,
          }),
        );
      },
    },
  },
  filters: {
    status: (value: DeliveryStatus) => eq(webhookDeliveries.status, value),
  },
});

/** Deliveries newest first (the spec, operationId listAutomationDeliveries); the handler narrows them to one automation with `deliveriesOf`. */
export const deliveryListing: Listing<DeliveryRow, Auth, 'status'> = {
  view: deliveryView,
  query: (tx) => tx.select().from(webhookDeliveries),
  tenant: webhookDeliveries.tenantId,
  order: [desc(webhookDeliveries.id)],
};
