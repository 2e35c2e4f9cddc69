import { createHash } from 'node:crypto';
import type { Config } from '../../config.ts';
import { clientOf } from '../../platform/http/client-address.ts';

/**
 * Sign-in attempts are counted per account and per client address in PostgreSQL, so every
 * API process sees the same counts (repeated failures → 429 + Retry-After).
 *
 * An attempt is counted BEFORE the credential is checked, in one statement over all its
 * keys that also answers the new counts: of any number of concurrent attempts, at most
 * `max` per key are admitted to a check in a window, the rest are refused with 429 without
 * one. What is left counted are the failed checks: a refused attempt withdraws its count,
 * a successful one withdraws it (client address) or clears the account's count.
 */
export interface LimitKey {
  key: string;
  max: number;
}

/**
 * The per-account count under the name signed in with, shared by every check of the
 * account's password (sign-in, `old_password`); it exists for unknown names too. The key
 * holds the SHA-256 of the tenant and name, not the name: what was typed as a name may be
 * a password typed into the wrong field (docs/security.md#7-logging-and-data-protection).
 */
export function accountLimitKey(config: Config, tenant: string, username: string): LimitKey {
  const name = createHash('sha256').update(`${tenant.toLowerCase()}/${username.toLowerCase()}`).digest('base64url');
  return { key: `account:${name}`, max: config.loginMaxFailures };
}

/**
 * The per-user count of an existing user, counted together with `accountLimitKey` by every
 * check of their password: it follows the user through renames, so renaming oneself does
 * not start a fresh count.
 */
export function userLimitKey(config: Config, tenantId: number, userId: number): LimitKey {
  return { key: `user:${tenantId}/${userId}`, max: config.loginMaxFailures };
}

/** The keys of a password check of `username`: per name, per client address, and per user when the user exists. */
export function loginLimitKeys(config: Config, tenant: string, username: string, ip: string, user?: { tenantId: number; userId: number }): LimitKey[] {
  const keys = [accountLimitKey(config, tenant, username), clientAddressLimitKey(config, ip)];
  if (user) keys.push(userLimitKey(config, user.tenantId, user.userId));
  return keys;
}

/** The per-client-address count, shared by every way of signing in (password, login token). */
export function clientAddressLimitKey(config: Config, ip: string): LimitKey {
  return { key: `ip:${clientOf(ip)}`, max: config.loginMaxFailures * 5 };
}
