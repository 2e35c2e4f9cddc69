/**
 * Token → principal, remembered per process so that a safe request need not look its
 * token up before it starts. A remembered principal is a guess, never an authority: the
 * request's own tenant transaction looks the token up again in the statement that sets
 * the tenant (`Database.tenant` with a `PrincipalCheck`), and an answer is sent only when
 * that lookup found the same principal. A revocation, logout mark, password change,
 * role or permission change, blackout or deletion committed anywhere, by any process,
 * is therefore seen by the next request that uses the token, in every process; no
 * notification needs to arrive first.
 */
import type { Permission } from './permissions.ts';

/** What `atrium_authenticate` answers for a token. */
export interface Principal {
  tenantId: number;
  userId: number;
  tokenId: number;
  permissions: readonly Permission[];
  passwordChangeRequired: boolean;
}

export function samePrincipal(a: Principal, b: Principal): boolean {
  return (
    a.tenantId === b.tenantId &&
    a.userId === b.userId &&
    a.tokenId === b.tokenId &&
    a.passwordChangeRequired === b.passwordChangeRequired &&
    a.permissions.length === b.permissions.length &&
    a.permissions.every((permission, i) => permission === b.permissions[i])
  );
}

/**
 * A request answered from a remembered principal: the token to look up again and what it
 * is expected to yield. `confirmed` once a lookup in this request found `expected`;
 * `stale` once one found anything else (or nothing).
 */
export interface PrincipalCheck {
  tokenHash: Buffer;
  expected: Principal;
  confirmed: boolean;
  stale: boolean;
}

/** Entries are checked on every use; these bounds only keep memory small. */
const MAX_ENTRIES = 10_000;
const ENTRY_LIFETIME_MS = 60_000;

export class PrincipalCache {
  private readonly entries = new Map<string, { principal: Principal; storedAt: number }>();

  get(tokenHash: Buffer, now = Date.now()): Principal | undefined {
    const key = tokenHash.toString('base64');
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (now - entry.storedAt >= ENTRY_LIFETIME_MS) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.principal;
  }

  set(tokenHash: Buffer, principal: Principal, now = Date.now()): void {
    const key = tokenHash.toString('base64');
    this.entries.delete(key);
    // Map iteration follows insertion: the first key is the oldest entry.
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { principal, storedAt: now });
  }

  delete(tokenHash: Buffer): void {
    this.entries.delete(tokenHash.toString('base64'));
  }

  get size(): number {
    return this.entries.size;
  }
}
