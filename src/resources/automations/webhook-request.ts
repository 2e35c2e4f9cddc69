/**
 * What a webhook sends: the payload of a run, and one request from a configuration and a
 * delivery (method, custom headers, the JSON payload, the auth type's headers). Values are
 * used as given: `{{…}}` is sent literally (docs/outbound-delivery.md#webhooks).
 */
import { createHmac, randomUUID } from 'node:crypto';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { OutboundRequest } from '../../platform/outbound/client.ts';
import type { WebhookConfiguration } from './webhook-configuration.ts';

export const USER_AGENT = 'Atrium-Webhooks/1';

/** The payload every attempt of one run sends (the spec, schema `WebhookPayload`). */
export function webhookPayload(eventId: string, automation: { id: number; name: string }, context: Record<string, unknown>, at: Date): string {
  return JSON.stringify({
    id: eventId,
    type: 'automation.run',
    timestamp: rfc3339(at),
    automation: { id: automation.id, name: automation.name },
    context,
  });
}

/**
 * The key of a `whsec_…` secret (Standard Webhooks): the base64 after `whsec_`, 24 to 64
 * bytes; undefined when the rest is not that. Base64 decoding skips what is not base64, so
 * `whsec_!!!` would otherwise be an empty key, with which anyone can sign.
 */
export function whsecKey(secret: string): Buffer | undefined {
  const encoded = secret.slice('whsec_'.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 === 1) return undefined;
  const key = Buffer.from(encoded, 'base64');
  return key.length >= 24 && key.length <= 64 ? key : undefined;
}

/**
 * Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`; the key
 * is the base64 part of a `whsec_…` secret, otherwise the secret's UTF-8 bytes (those of a
 * `whsec_…` secret stored before its form was checked, too: never an empty or cut key).
 */
export function standardWebhookSignature(secret: string, id: string, timestamp: number, body: string): string {
  const key = (secret.startsWith('whsec_') ? whsecKey(secret) : undefined) ?? Buffer.from(secret, 'utf8');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

export interface WebhookDeliveryInput {
  automationId: number;
  eventId: string;
  payload: string;
}

/** Header names are case-insensitive: later sources replace earlier same-named ones. */
class HeaderSet {
  private readonly entries = new Map<string, [string, string]>();
  set(name: string, value: string): void {
    this.entries.set(name.toLowerCase(), [name, value]);
  }
  toObject(): Record<string, string> {
    return Object.fromEntries(this.entries.values());
  }
}

export async function buildWebhookRequest(
  config: WebhookConfiguration,
  delivery: WebhookDeliveryInput,
  signJwt: (claims: { subject: string; audience: string; jti: string }) => Promise<string>,
  now = new Date(),
): Promise<OutboundRequest> {
  const method = config.method ?? 'POST';

  // A GET carries no body (many servers reject one); every other method sends the payload.
  const body = method === 'GET' ? '' : delivery.payload;
  const headers = new HeaderSet();
  headers.set('User-Agent', USER_AGENT);
  if (body !== '') headers.set('Content-Type', 'application/json');
  for (const [name, value] of Object.entries(config.headers)) headers.set(name, value);

  const auth = config.auth;
  switch (auth?.type) {
    case 'basic':
      headers.set('Authorization', `Basic ${Buffer.from(`${auth.basic!.username}:${auth.basic!.password}`, 'utf8').toString('base64')}`);
      break;
    case 'header':
      headers.set(auth.header!.name, auth.header!.value);
      break;
    case 'jwt':
      headers.set('Authorization', `Bearer ${await signJwt({ subject: `automation:${delivery.automationId}`, audience: config.url, jti: randomUUID() })}`);
      break;
    case 'secret': {
      const timestamp = Math.floor(now.getTime() / 1000);
      headers.set('webhook-id', delivery.eventId);
      headers.set('webhook-timestamp', String(timestamp));
      headers.set('webhook-signature', standardWebhookSignature(auth.secret!.secret, delivery.eventId, timestamp, body));
      break;
    }
    default:
      break;
  }
  return { url: config.url, method, headers: headers.toObject(), ...(body !== '' ? { body } : {}) };
}
