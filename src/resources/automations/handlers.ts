import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import type { Services } from '../../platform/services.ts';
import { deliverWebhook } from './deliver-webhook.job.ts';
import { webhookJwks } from './jwt-keys.ts';
import { automations, webhookDeliveries } from './table.ts';
import { automationView, deliveryView, type AutomationRow } from './view.ts';
import { configurationErrors, sealSecrets, type StoredWebhookConfiguration, type WebhookConfiguration } from './webhook-configuration.ts';

async function findAutomation(tx: Tx, id: number): Promise<AutomationRow> {
  const [row] = await tx.select().from(automations).where(eq(automations.id, id));
  if (!row) throw notFound('The automation');
  return row;
}

/**
 * The rules of a configuration beyond the schema that need no stored state, or 422 naming
 * every bad path under `config.` (with `sealed`'s errors). DNS is resolved here, so this
 * runs outside any transaction.
 */
async function checkConfiguration(config: WebhookConfiguration, services: Services, more: FieldErrors = {}): Promise<void> {
  const errors: FieldErrors = { ...(await configurationErrors(config, services.outbound, 'config.')), ...more };
  if (Object.keys(errors).length > 0) throw invalid(errors, 'The webhook configuration is invalid.');
}

/** The configuration ready to store, its secrets sealed against `previous` (422 on a bad mask). */
function storableConfiguration(config: WebhookConfiguration, previous: StoredWebhookConfiguration | null, services: Services): StoredWebhookConfiguration {
  const sealed = sealSecrets(config, previous, services.secrets, 'config.');
  if (Object.keys(sealed.errors).length > 0) throw invalid(sealed.errors, 'The webhook configuration is invalid.');
  return sealed.stored;
}

/** The payload every attempt of one run sends (spec component `WebhookPayload`). */
function webhookPayload(eventId: string, automation: AutomationRow, context: Record<string, unknown>, at: Date): string {
  return JSON.stringify({
    id: eventId,
    type: 'automation.run',
    timestamp: rfc3339(at),
    automation: { id: automation.id, name: automation.name },
    context,
  });
}

export const automationHandlers = {
  async listAutomations({ auth, query, services: { db } }) {
    const controls = readControls(automationView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(automations).where(controls.where).orderBy(asc(automations.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(automationView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getAutomation({ auth, query, params, services: { db } }) {
    const controls = readControls(automationView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) =>
      present(automationView, tx, [await findAutomation(tx, params.automation)], controls, auth),
    );
    return { status: 200, body: body! };
  },

  async createAutomation({ auth, body, services }) {
    const sealed = sealSecrets(body.config, null, services.secrets, 'config.');
    await checkConfiguration(body.config, services, sealed.errors);
    const config = sealed.stored;
    const [answer] = await services.db.tenant(auth.tenantId, async (tx) => {
      const rows = await tx.insert(automations).values({ tenantId: auth.tenantId, name: body.name, actionType: 'webhook', config }).returning();
      return present(automationView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 201, body: answer! };
  },

  async updateAutomation({ auth, params, body, services }) {
    const { db } = services;
    if (body.config) await checkConfiguration(body.config, services);
    // One transaction with the row locked: the masked secrets are sealed against the value
    // this update overwrites, so a concurrent update cannot be lost.
    const [answer] = await db.tenant(auth.tenantId, async (tx) => {
      const [existing] = await tx.select().from(automations).where(eq(automations.id, params.automation)).for('update');
      if (!existing) throw notFound('The automation');
      const config = body.config ? storableConfiguration(body.config, existing.config, services) : undefined;
      const rows = await tx
        .update(automations)
        .set({
          ...(body.name !== undefined ? { name: body.name } : {}),
          ...(config ? { config } : {}),
          updatedAt: sql`now()`,
        })
        .where(eq(automations.id, params.automation))
        .returning();
      return present(automationView, tx, rows, { selects: null, relations: [] }, auth);
    });
    return { status: 200, body: answer! };
  },

  async deleteAutomation({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      const deleted = await tx.delete(automations).where(eq(automations.id, params.automation)).returning({ id: automations.id });
      if (deleted.length === 0) throw notFound('The automation');
    });
    return { status: 204 };
  },

  async runAutomation({ auth, params, body, services: { db, jobs } }) {
    const eventId = `evt_${randomUUID().replace(/-/g, '')}`;
    const [delivery, answer] = await db.tenant(auth.tenantId, async (tx) => {
      const automation = await findAutomation(tx, params.automation);
      const rows = await tx
        .insert(webhookDeliveries)
        .values({
          tenantId: auth.tenantId,
          automationId: automation.id,
          eventId,
          payload: webhookPayload(eventId, automation, body?.context ?? {}, new Date()),
        })
        .returning();
      const [presented] = await present(deliveryView, tx, rows, { selects: null, relations: [] }, auth);
      return [rows[0]!, presented!] as const;
    });
    await jobs.send(deliverWebhook, { tenantId: auth.tenantId, deliveryId: delivery.id, attempt: 1 });
    return { status: 202, body: answer };
  },

  async listAutomationDeliveries({ auth, query, params, services: { db } }) {
    const controls = readControls(deliveryView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      await findAutomation(tx, params.automation);
      const base = tx
        .select()
        .from(webhookDeliveries)
        .where(and(eq(webhookDeliveries.automationId, params.automation), controls.where))
        .orderBy(desc(webhookDeliveries.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(deliveryView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async validateWebhookConfiguration({ body, services }) {
    const errors = await configurationErrors(body, services.outbound);
    if (Object.keys(errors).length > 0) throw invalid(errors, 'The webhook configuration is invalid.');
    return { status: 200, body: { valid: true } };
  },

  async getWebhookJwks({ services: { db } }) {
    return { status: 200, body: await webhookJwks(db), headers: { 'cache-control': 'public, max-age=300' } };
  },
} satisfies Partial<Handlers>;
