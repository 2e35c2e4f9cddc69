import { createHash, randomBytes } from 'node:crypto';

/** Opaque access tokens: 256 random bits; only their SHA-256 is stored (docs/tenancy-and-security.md#access-tokens). */
export function newAccessToken(): string {
  return `atr_${randomBytes(32).toString('base64url')}`;
}

export function hashToken(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}
