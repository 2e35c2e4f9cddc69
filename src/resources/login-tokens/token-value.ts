import { randomBytes } from 'node:crypto';
import type { Secrets } from '../../platform/secrets/secrets.ts';

/** Key purpose of the signature (src/platform/secrets). */
const PURPOSE = 'login-token';
const SHAPE = /^alt_([A-Za-z0-9_-]{43})\.([A-Za-z0-9_-]{43})$/;

/**
 * A new one-time login token value: 256 random bits and their HMAC under the instance's
 * `login-token` key. The signature lets sign-in refuse forged or mangled values before
 * touching the database; only the SHA-256 of the whole value is stored.
 */
export function newLoginTokenValue(secrets: Secrets): string {
  const nonce = randomBytes(32).toString('base64url');
  return `alt_${nonce}.${secrets.sign(PURPOSE, nonce)}`;
}

/** True when `value` has the shape of a login token and carries this instance's signature. */
export function isSignedLoginTokenValue(secrets: Secrets, value: string): boolean {
  const match = SHAPE.exec(value);
  return match !== null && secrets.verify(PURPOSE, match[1]!, match[2]!);
}
