/** Every background job. Workers start for all of them (ATRIUM_ROLE worker or all). */
import { purgeExpiredTokens } from './resources/auth/purge-expired-tokens.job.ts';
import type { JobDefinition } from './platform/jobs/jobs.ts';
import { deliverPendingWebhooks } from './resources/automations/deliver-pending.job.ts';
import { deliverWebhook } from './resources/automations/deliver-webhook.job.ts';
import { sendPushJob } from './resources/push/send-push.job.ts';
import { deliverPendingNotifications } from './resources/notifications/deliver-pending.job.ts';
import { emailNotifications } from './resources/notifications/email.job.ts';
import { deliverNotifications } from './resources/notifications/deliver.job.ts';

export const jobDefinitions: JobDefinition<never>[] = [
  purgeExpiredTokens as JobDefinition<never>,
  deliverWebhook as JobDefinition<never>,
  deliverPendingWebhooks as JobDefinition<never>,
  deliverNotifications as JobDefinition<never>,
  emailNotifications as JobDefinition<never>,
  deliverPendingNotifications as JobDefinition<never>,
  sendPushJob as JobDefinition<never>,
];
