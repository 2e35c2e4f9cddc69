import { randomUUID } from 'node:crypto';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import { deliverWebhook } from './deliver-webhook.job.ts';
import { webhookJwks } from './jwt-keys.ts';
import { deleteAutomation, deliveriesOf, findAutomation, insertAutomation, insertDelivery, updateAutomation } from './queries.ts';
import { assertValidConfiguration, configurationErrors } from './rules.ts';
import type { AutomationRow } from './table.ts';
import { automationListing, automationView, deliveryListing, deliveryView } from './view.ts';
import { sealSecrets } from './webhook-configuration.ts';
import { webhookPayload } from './webhook-request.ts';

const AUTOMATION = 'The automation';

async function existingAutomation(tx: Tx, id: number, options: { forUpdate?: boolean; tenantId?: number } = {}): Promise<AutomationRow> {
  const row = await findAutomation(tx, id, options);
  if (!row) throw notFound(AUTOMATION);
  return row;
}

export const automationHandlers = {
  async listAutomations({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, automationListing, query, auth) };
  },

  async getAutomation({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, automationListing, query, auth, (tx) => findAutomation(tx, params.automation), AUTOMATION);
    return { status: 200, body };
  },

  async createAutomation({ auth, body, services: { db, outbound, secrets } }) {
    // Every problem of the configuration in one 422: a bad mask, and the rules beyond the
    // schema (DNS is resolved here, outside any transaction).
    const sealed = sealSecrets(body.config, null, secrets, 'config.');
    assertValidConfiguration({ ...(await configurationErrors(body.config, outbound, 'config.')), ...sealed.errors });
    const [answer] = await db.tenant(auth.tenantId, async (tx) =>
      presentAll(automationView, tx, await insertAutomation(tx, { tenantId: auth.tenantId, name: body.name, config: sealed.stored }), auth),
    );
    return { status: 201, body: answer! };
  },

  async updateAutomation({ auth, params, body, services: { db, outbound, secrets } }) {
    if (body.config) assertValidConfiguration(await configurationErrors(body.config, outbound, 'config.'));
    // One transaction with the row locked: the masked secrets are sealed against the value
    // this update overwrites, so a concurrent update cannot be lost.
    const [answer] = await db.tenant(auth.tenantId, async (tx) => {
      const existing = await existingAutomation(tx, params.automation, { forUpdate: true, tenantId: auth.tenantId });
      const sealed = body.config ? sealSecrets(body.config, existing.config, secrets, 'config.') : undefined;
      if (sealed) assertValidConfiguration(sealed.errors);
      return presentAll(automationView, tx, await updateAutomation(tx, params.automation, { name: body.name, config: sealed?.stored }), auth);
    });
    return { status: 200, body: answer! };
  },

  async deleteAutomation({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      if (!(await deleteAutomation(tx, params.automation))) throw notFound(AUTOMATION);
    });
    return { status: 204 };
  },

  async runAutomation({ auth, params, body, services: { db, jobs } }) {
    const eventId = `evt_${randomUUID().replace(/-/g, '')}`;
    const [delivery, answer] = await db.tenant(auth.tenantId, async (tx) => {
      const automation = await existingAutomation(tx, params.automation);
      const rows = await insertDelivery(tx, {
        tenantId: auth.tenantId,
        automationId: automation.id,
        eventId,
        payload: webhookPayload(eventId, automation, body?.context ?? {}, new Date()),
      });
      const [presented] = await presentAll(deliveryView, tx, rows, auth);
      return [rows[0]!, presented!] as const;
    });
    await jobs.send(deliverWebhook, { tenantId: auth.tenantId, deliveryId: delivery.id, attempt: 1 });
    return { status: 202, body: answer };
  },

  async listAutomationDeliveries({ auth, query, params, services: { db } }) {
    const body = await listRecords(db, auth.tenantId, deliveryListing, query, auth, {
      where: deliveriesOf(params.automation),
      before: (tx) => existingAutomation(tx, params.automation),
    });
    return { status: 200, body };
  },

  async validateWebhookConfiguration({ body, services: { outbound } }) {
    assertValidConfiguration(await configurationErrors(body, outbound));
    return { status: 200, body: { valid: true } };
  },

  async getWebhookJwks({ services: { db } }) {
    return { status: 200, body: await webhookJwks(db), headers: { 'cache-control': 'public, max-age=300' } };
  },
} satisfies Partial<Handlers>;
