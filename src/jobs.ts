/** Every background job. Workers start for all of them (ATRIUM_ROLE worker or all). */
import { erasePendingAuditTrailsJob, eraseAuditTrailJob } from './platform/audit/erase.job.ts';
import { purgeExpiredAuditEventsJob } from './platform/audit/purge-expired.job.ts';
import { purgeExpiredIdempotencyKeys } from './platform/http/idempotency.ts';
import type { JobDefinition } from './platform/jobs/jobs.ts';
import type { Services } from './platform/services.ts';
import { purgeExpiredTokens } from './resources/auth/purge-expired-tokens.job.ts';
import { deliverPendingWebhooks } from './resources/automations/deliver-pending.job.ts';
import { deliverWebhook } from './resources/automations/deliver-webhook.job.ts';
import { purgeExpiredDeliveriesJob } from './resources/automations/purge-expired.job.ts';
import { deliverPendingNotifications } from './resources/notifications/deliver-pending.job.ts';
import { deliverNotifications } from './resources/notifications/deliver.job.ts';
import { emailNotifications } from './resources/notifications/email.job.ts';
import { purgeExpiredNotificationsJob } from './resources/notifications/purge-expired.job.ts';
import { sendPushJob } from './resources/push/send-push.job.ts';

export const jobDefinitions: readonly JobDefinition<never, Services>[] = [
  purgeExpiredTokens,
  deliverWebhook,
  deliverPendingWebhooks,
  deliverNotifications,
  emailNotifications,
  deliverPendingNotifications,
  sendPushJob,
  purgeExpiredNotificationsJob,
  purgeExpiredDeliveriesJob,
  purgeExpiredIdempotencyKeys,
  purgeExpiredAuditEventsJob,
  eraseAuditTrailJob,
  erasePendingAuditTrailsJob,
];
