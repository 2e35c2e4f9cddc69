/** Every background job. Workers start for all of them (ATRIUM_ROLE worker or all). */
import { purgeExpiredTokens } from './platform/auth/purge-expired-tokens.job.ts';
import type { JobDefinition } from './platform/jobs/jobs.ts';
import { deliverWebhook } from './resources/automations/deliver-webhook.job.ts';

export const jobDefinitions: JobDefinition<never>[] = [purgeExpiredTokens as JobDefinition<never>, deliverWebhook as JobDefinition<never>];
