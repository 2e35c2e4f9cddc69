import { randomUUID } from 'node:crypto';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { SECRET_CHANGED } from '../../platform/audit/audit.ts';
import { audit, recordChanges } from '../audit-events/record.ts';
import { deliverWebhook } from './deliver-webhook.job.ts';
import { webhookJwks } from './jwt-keys.ts';
import {
  deleteAutomation,
  deliveriesOf,
  findAutomation,
  insertAutomation,
  insertDelivery,
  queuePriority,
  updateAutomation,
  waitingDeliveries,
} from './queries.ts';
import { assertValidConfiguration, configurationErrors, infiniteNumberPath } from './rules.ts';
import type { AutomationRow } from './table.ts';
import { automationListing, automationView, deliveryListing, deliveryView } from './view.ts';
import { sealSecrets, secretsChanged } from './webhook-configuration.ts';
import { webhookPayload } from './webhook-request.ts';

const AUTOMATION = 'The automation';

async function existingAutomation(tx: Tx, id: number, options: { lock?: 'update' | 'key share'; tenantId?: number } = {}): Promise<AutomationRow> {
  const row = await findAutomation(tx, id, options);
  if (!row) throw notFound(AUTOMATION);
  return row;
}

/** An automation as the audit trail names it. */
const automationTarget = (record: Record<string, unknown>) => ({ type: 'automation', id: record.id as number, label: record.name as string });

export const automationHandlers = {
  async listAutomations({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, automationListing, query, auth) };
  },

  async getAutomation({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, automationListing, query, auth, (tx) => findAutomation(tx, params.automation), AUTOMATION);
    return { status: 200, body };
  },

  async createAutomation(ctx) {
    const {
      auth,
      body,
      services: { db, outbound, secrets },
    } = ctx;
    // Every problem of the configuration in one 422: a bad mask, and the rules beyond the
    // schema (DNS is resolved here, outside any transaction).
    const sealed = sealSecrets(body.config, null, secrets, 'config.');
    assertValidConfiguration({ ...(await configurationErrors(body.config, outbound, 'config.')), ...sealed.errors });
    const [answer] = await db.tenant(auth.tenantId, async (tx) => {
      const presented = await presentAll(
        automationView,
        tx,
        await insertAutomation(tx, { tenantId: auth.tenantId, name: body.name, config: sealed.stored }),
        auth,
      );
      // The presented record masks the webhook's secrets: the trail holds what the API shows.
      await audit(tx, ctx, { action: 'automation.created', target: automationTarget(presented[0]!), changes: recordChanges(null, presented[0]!) });
      return presented;
    });
    return { status: 201, body: answer! };
  },

  async updateAutomation(ctx) {
    const {
      auth,
      params,
      body,
      services: { db, outbound, secrets },
    } = ctx;
    if (body.config) assertValidConfiguration(await configurationErrors(body.config, outbound, 'config.'));
    // One transaction with the row locked: the masked secrets are sealed against the value
    // this update overwrites, so a concurrent update cannot be lost.
    const [answer] = await db.tenant(auth.tenantId, async (tx) => {
      const existing = await existingAutomation(tx, params.automation, { lock: 'update', tenantId: auth.tenantId });
      const sealed = body.config ? sealSecrets(body.config, existing.config, secrets, 'config.') : undefined;
      if (sealed) assertValidConfiguration(sealed.errors);
      const next = { name: body.name ?? existing.name, config: sealed?.stored ?? existing.config };
      // Judged before the write: one that changes nothing (the automation sent back as it was read, its secrets
      // masked) leaves updated_at as it was.
      const [before, after] = await presentAll(automationView, null, [existing, { ...existing, ...next }], auth);
      const changes = recordChanges(before!, after!);
      // A changed secret looks the same masked: that the configuration changed is still recorded.
      if (sealed && !changes.config && secretsChanged(sealed.stored, existing.config)) changes.config = SECRET_CHANGED;
      const stored = await updateAutomation(tx, params.automation, { name: body.name, config: sealed?.stored }, { changed: Object.keys(changes).length > 0 });
      const presented = await presentAll(automationView, tx, stored, auth);
      if (Object.keys(changes).length > 0) await audit(tx, ctx, { action: 'automation.updated', target: automationTarget(presented[0]!), changes });
      return presented;
    });
    return { status: 200, body: answer! };
  },

  async deleteAutomation(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // Locked before it is read, as an update takes it: the event names the automation as a write committed meanwhile left it.
      const existing = await findAutomation(tx, params.automation, { lock: 'update', tenantId: auth.tenantId });
      if (!existing || !(await deleteAutomation(tx, params.automation))) throw notFound(AUTOMATION);
      await audit(tx, ctx, { action: 'automation.deleted', target: { type: 'automation', id: existing.id, label: existing.name } });
    });
    return { status: 204 };
  },

  async runAutomation(ctx) {
    const {
      auth,
      params,
      body,
      services: { db, jobs },
    } = ctx;
    const context = body?.context ?? {};
    const infinite = infiniteNumberPath(context, 'context');
    if (infinite !== undefined) throw invalid({ [infinite]: [coded('type', 'must be a finite number: JSON has no value for one this large')] });
    const eventId = `evt_${randomUUID().replace(/-/g, '')}`;
    const [delivery, answer, ahead] = await db.tenant(auth.tenantId, async (tx) => {
      // Held until the delivery is stored: a delete that committed meanwhile is a 404, not a broken reference.
      const automation = await existingAutomation(tx, params.automation, { lock: 'key share', tenantId: auth.tenantId });
      // The tenant's deliveries still waiting, counted before this one joins them (one round trip: sent together).
      const [waiting, rows] = await Promise.all([
        waitingDeliveries(tx, auth.tenantId),
        insertDelivery(tx, {
          tenantId: auth.tenantId,
          automationId: automation.id,
          eventId,
          payload: webhookPayload(eventId, automation, context, new Date()),
        }),
      ]);
      const [presented] = await presentAll(deliveryView, tx, rows, auth);
      await audit(tx, ctx, {
        action: 'automation.run',
        target: { type: 'automation', id: automation.id, label: automation.name },
        details: { event_id: eventId, delivery_id: rows[0]!.id },
      });
      return [rows[0]!, presented!, waiting] as const;
    });
    // Recorded and committed: a failed send leaves it to automations.deliver-pending.
    await jobs.sendCommitted(deliverWebhook, { tenantId: auth.tenantId, deliveryId: delivery.id, attempt: 1 }, { priority: queuePriority(ahead) });
    return { status: 202, body: answer };
  },

  async listAutomationDeliveries({ auth, query, params, services: { db } }) {
    const body = await listRecords(db, auth.tenantId, deliveryListing, query, auth, {
      where: deliveriesOf(params.automation),
      before: (tx) => existingAutomation(tx, params.automation),
    });
    return { status: 200, body };
  },

  async validateWebhookConfiguration({ body, services: { outbound, secrets } }) {
    // Judged as a create would judge it: nothing is stored, so a masked secret has nothing to keep.
    const sealed = sealSecrets(body, null, secrets, '');
    assertValidConfiguration({ ...(await configurationErrors(body, outbound)), ...sealed.errors });
    return { status: 200, body: { valid: true } };
  },

  async getWebhookJwks({ services: { db } }) {
    return { status: 200, body: await webhookJwks(db), headers: { 'cache-control': 'public, max-age=300' } };
  },
} satisfies Partial<Handlers>;
