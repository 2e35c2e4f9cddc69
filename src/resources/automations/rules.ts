/**
 * The rules a webhook configuration must meet beyond its schema (the spec, schema
 * `WebhookConfiguration`; docs/outbound-delivery.md#webhooks).
 */
import { coded, invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { NOT_AN_ALLOWED_DESTINATION, type OutboundClient } from '../../platform/outbound/client.ts';
import type { WebhookConfiguration } from './webhook-configuration.ts';
import { whsecKey } from './webhook-request.ts';

/** Headers Atrium frames itself; a configured value would corrupt or smuggle requests. */
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'te', 'trailer', 'expect']);
export const isReservedHeader = (name: string) => RESERVED_HEADERS.has(name.toLowerCase()) || name.toLowerCase().startsWith('proxy-');

/**
 * The rules beyond the schema: `url` must be a valid active URL (http/https, host resolves
 * to reachable addresses), custom headers may not be framing headers, and a `whsec_…`
 * signing secret must hold a key. Paths are
 * prefixed with `prefix` (`config.` when the configuration is nested). Resolves the host
 * (DNS), so it runs outside any transaction.
 */
export async function configurationErrors(config: WebhookConfiguration, outbound: OutboundClient, prefix = ''): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  const urlProblem = await outbound.destinationProblem(config.url);
  if (urlProblem) errors[`${prefix}url`] = [coded(urlProblem === NOT_AN_ALLOWED_DESTINATION ? 'destination_not_allowed' : 'format', urlProblem)];
  for (const name of Object.keys(config.headers)) {
    if (isReservedHeader(name)) errors[`${prefix}headers.${name}`] = [coded('reserved', 'is set by Atrium and cannot be configured')];
  }
  if (config.auth?.type === 'header' && config.auth.header && isReservedHeader(config.auth.header.name)) {
    errors[`${prefix}auth.header.name`] = [coded('reserved', 'is set by Atrium and cannot be configured')];
  }
  const secret = config.auth?.type === 'secret' ? config.auth.secret?.secret : undefined;
  if (secret?.startsWith('whsec_') && !whsecKey(secret)) {
    errors[`${prefix}auth.secret.secret`] = [coded('format', 'must be whsec_ followed by the base64 of a 24 to 64 byte key')];
  }
  return errors;
}

/** A 422 naming every path of `errors`, when there is any. */
export function assertValidConfiguration(errors: FieldErrors): void {
  if (Object.keys(errors).length > 0) throw invalid(errors, 'The webhook configuration is invalid.');
}

/**
 * The path (dotted, as a field error's) of the first number in `value` that JSON has no text
 * for: a number too large for a double (`1e400`) is read as Infinity, and would be sent on as
 * `null`. undefined when there is none.
 */
export function infiniteNumberPath(value: unknown, path: string): string | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : path;
  if (value === null || typeof value !== 'object') return undefined;
  for (const [key, item] of Object.entries(value)) {
    const found = infiniteNumberPath(item, `${path}.${key}`);
    if (found !== undefined) return found;
  }
  return undefined;
}
