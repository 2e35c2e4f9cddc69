/**
 * Checks of a subscription registration beyond the spec's shapes: keys that a push
 * message can actually be encrypted for, and an endpoint outbound requests may reach
 * (https, or http to hosts the operator allow-list admits). A refused endpoint is told
 * apart from a malformed one, never why its host was refused (see the outbound client).
 */
import { createECDH } from 'node:crypto';
import type { FieldErrors } from '../../platform/http/problem.ts';
import type { OutboundClient } from '../../platform/outbound/client.ts';

export interface SubscriptionInput {
  endpoint: string;
  keys: { p256dh: string; auth: string };
}

const BASE64URL = /^[A-Za-z0-9_-]+={0,2}$/;

/** The bytes of a base64url string, or null when it is not one. */
function base64url(value: string): Buffer | null {
  return BASE64URL.test(value) ? Buffer.from(value.replace(/=+$/, ''), 'base64url') : null;
}

/** Used only to check that a public key is a point on P-256 (computeSecret rejects others). */
const probe = createECDH('prime256v1');
probe.generateKeys();

/** The p256dh key: 65 bytes, uncompressed (0x04 …), on the P-256 curve. */
export function p256dhProblem(value: string): string | null {
  const bytes = base64url(value);
  if (!bytes || bytes.length !== 65 || bytes[0] !== 0x04) return 'must be the base64url encoding of a 65-byte uncompressed P-256 public key';
  try {
    probe.computeSecret(bytes);
    return null;
  } catch {
    return 'is not a point on the P-256 curve';
  }
}

/** The auth secret: 16 bytes (RFC 8291 §3.2). */
export function authSecretProblem(value: string): string | null {
  const bytes = base64url(value);
  return bytes && bytes.length === 16 ? null : 'must be the base64url encoding of a 16-byte authentication secret';
}

/** https to a reachable address; http only where every address is allow-listed. */
export async function endpointProblem(outbound: OutboundClient, endpoint: string): Promise<string | null> {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return 'must be an absolute https URL';
  }
  if (url.protocol === 'https:') return outbound.destinationProblem(endpoint);
  if (url.protocol === 'http:') {
    const problem = await outbound.destinationProblem(endpoint, { allowListedOnly: true });
    return problem === null ? null : 'must be an https URL (plain http only to destinations the operator admits)';
  }
  return 'must be an https URL';
}

export async function subscriptionErrors(outbound: OutboundClient, input: SubscriptionInput): Promise<FieldErrors> {
  const errors: FieldErrors = {};
  const endpoint = await endpointProblem(outbound, input.endpoint);
  if (endpoint) errors.endpoint = [endpoint];
  const p256dh = p256dhProblem(input.keys.p256dh);
  if (p256dh) errors['keys.p256dh'] = [p256dh];
  const auth = authSecretProblem(input.keys.auth);
  if (auth) errors['keys.auth'] = [auth];
  return errors;
}
