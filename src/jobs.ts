/** Every background job. Workers start for all of them (ATRIUM_ROLE worker or all). */
import { purgeExpiredTokens } from './resources/auth/purge-expired-tokens.job.ts';
import type { JobDefinition } from './platform/jobs/jobs.ts';
import { deliverPendingWebhooks, deliverWebhook } from './resources/automations/deliver-webhook.job.ts';
import { sendPushJob } from './resources/push/send-push.job.ts';
import { deliverNotifications, deliverPendingNotifications, emailNotifications } from './resources/notifications/deliver.job.ts';

export const jobDefinitions: JobDefinition<never>[] = [
  purgeExpiredTokens as JobDefinition<never>,
  deliverWebhook as JobDefinition<never>,
  deliverPendingWebhooks as JobDefinition<never>,
  deliverNotifications as JobDefinition<never>,
  emailNotifications as JobDefinition<never>,
  deliverPendingNotifications as JobDefinition<never>,
  sendPushJob as JobDefinition<never>,
];
