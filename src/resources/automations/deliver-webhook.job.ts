/**
 * Delivery of an automation's webhook: one job run is one attempt, claimed by its number
 * first, so a duplicated or late job sends nothing. The outcome and the backoff follow the
 * shared delivery rules (docs/outbound-delivery.md#delivery-outcomes,
 * docs/outbound-delivery.md#backoff-and-retry-after) with `WEBHOOK_MAX_ATTEMPTS` and
 * `WEBHOOK_RETRY_DELAY_MS`; every attempt is recorded (the spec, schema `WebhookDelivery`;
 * docs/outbound-delivery.md#webhooks).
 */
import { OUTBOUND_CONCURRENCY } from '../../platform/outbound/client.ts';
import { defineJob } from '../../platform/jobs/define.ts';
import { attemptDelivery, nextState, type DeliveryOutcome } from '../../platform/outbound/delivery-outcome.ts';
import type { Services } from '../../platform/services.ts';
import { signWebhookJwt } from './jwt-keys.ts';
import { claimAttempt, findDeliveryWithAutomation, queuePriority, reclaimInterruptedAttempt, recordAttempt, waitingDeliveries } from './queries.ts';
import { unsealSecrets, type WebhookConfiguration } from './webhook-configuration.ts';
import { buildWebhookRequest } from './webhook-request.ts';

export interface DeliverWebhookData {
  tenantId: number;
  deliveryId: number;
  /** The attempt this job makes; a job whose attempt was already claimed does nothing. */
  attempt: number;
}

/** The outcome of an attempt that could not be made: its stored secrets do not decrypt. */
const UNDECRYPTABLE: DeliveryOutcome = {
  verdict: 'failed',
  responseStatus: null,
  durationMs: null,
  error: 'a stored secret cannot be decrypted (was ATRIUM_SECRET_KEY changed?)',
};

export const deliverWebhook = defineJob<DeliverWebhookData>({
  name: 'automations.deliver-webhook',
  // pg-boss retries only cover failures of Atrium itself (database down); HTTP outcomes
  // are attempts of their own, scheduled below with millisecond backoff. One job per fetch:
  // a failing job must not make pg-boss re-run the others of a batch.
  queue: { retryLimit: 3, retryDelay: 5, retryBackoff: true },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  // Each waits on a receiver up to OUTBOUND_TIMEOUT_MS: one tenant's that hangs holds one worker, not the process's deliveries.
  concurrency: OUTBOUND_CONCURRENCY,
  async handle(data, services, run) {
    await deliverOnce(services, data, run.retried);
  },
});

function plainConfiguration(stored: WebhookConfiguration, services: Services): WebhookConfiguration | null {
  try {
    return unsealSecrets(stored, services.secrets);
  } catch {
    return null;
  }
}

async function deliverOnce(services: Services, { tenantId, deliveryId, attempt }: DeliverWebhookData, retried: boolean): Promise<void> {
  const { db, outbound, config, jobs } = services;
  // The claim's lease: past the longest the request can take.
  const leaseSeconds = Math.ceil(config.outboundTimeoutMs / 1000) + 60;
  // Already made or being made (a duplicated job), already final, or deleted: nothing to do.
  // Except when this job's own earlier run claimed the attempt and was lost before
  // recording it (its worker died): then this run makes the attempt again, at once.
  const claimed = await db.tenant(
    tenantId,
    async (tx) =>
      (await claimAttempt(tx, deliveryId, attempt, leaseSeconds)) || (retried && (await reclaimInterruptedAttempt(tx, deliveryId, attempt, leaseSeconds))),
  );
  if (!claimed) return;
  const found = await db.tenant(tenantId, (tx) => findDeliveryWithAutomation(tx, deliveryId));
  if (!found) return; // deleted with its automation meanwhile
  const { delivery, automation } = found;
  const startedAt = new Date();

  const plain = plainConfiguration(automation.config, services);
  let outcome = UNDECRYPTABLE;
  if (plain) {
    const request = await buildWebhookRequest(
      plain,
      { automationId: automation.id, eventId: delivery.eventId, payload: delivery.payload },
      (claims) => signWebhookJwt(db, claims),
      startedAt,
    );
    outcome = await attemptDelivery(outbound, request);
  }
  services.metrics.deliveries.inc({ channel: 'webhook', outcome: outcome.verdict });

  const next = nextState(outcome, attempt, { maxAttempts: config.webhookMaxAttempts, retryDelayMs: config.webhookRetryDelayMs }, new Date());
  const [recorded, waiting] = await db.tenant(tenantId, (tx) =>
    Promise.all([recordAttempt(tx, { tenantId, deliveryId, number: attempt, startedAt }, outcome, next), next.retryAt ? waitingDeliveries(tx, tenantId) : 0]),
  );
  // Deleted with its automation while the attempt was made: nothing more to do. A retry queues behind the tenant's deliveries
  // waiting now (this one, its attempt just made, is not among them).
  if (recorded && next.retryAt) {
    await jobs.send(
      deliverWebhook,
      { tenantId, deliveryId, attempt: attempt + 1 },
      { startAfter: next.retryAt, priority: queuePriority(waiting, next.retryAt.getTime()) },
    );
  }
}
