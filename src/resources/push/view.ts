import { asc, eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { pushSubscriptions } from './table.ts';

/** The keys are the subscription's secrets: never answered. */
export const pushSubscriptionView = defineView<typeof pushSubscriptions.$inferSelect, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    endpoint: {},
    user_agent: { value: (row) => row.userAgent },
    last_failure_status: { value: (row) => row.lastFailureStatus },
    last_failure: { value: (row) => row.lastFailure },
    last_failure_at: { value: (row) => rfc3339(row.lastFailureAt) },
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
  },
});

/** Only the caller's own subscriptions, by id (the spec, operationId listPushSubscriptions). */
export const pushSubscriptionListing: Listing<typeof pushSubscriptions.$inferSelect, Auth> = {
  view: pushSubscriptionView,
  query: (tx) => tx.select().from(pushSubscriptions),
  tenant: pushSubscriptions.tenantId,
  scope: (auth) => eq(pushSubscriptions.userId, auth.userId),
  order: [asc(pushSubscriptions.id)],
};
