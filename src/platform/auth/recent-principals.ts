/**
 * Principals of bearer tokens looked up in the last second, in this process: a safe
 * request (`GET`) whose token was looked up that recently skips the look-up. Any other
 * request that this process answers forgets them all before its answer is sent, so a
 * change made through this process holds for its next request; a change made elsewhere
 * (another process, the command line, a job) holds here within `LIFETIME_MS`
 * (docs/tenancy-and-security.md#access-tokens).
 */
import type { Permission } from './permissions.ts';

/** What `atrium_authenticate` answers for a token. */
export interface Principal {
  tenantId: number;
  userId: number;
  tokenId: number;
  permissions: readonly Permission[];
  passwordChangeRequired: boolean;
  /** The user's label in the audit trail (full name, else username) when the token was looked up. */
  userLabel: string;
}

const LIFETIME_MS = 1_000;
/** Entries expire by themselves; this bound only keeps memory small. */
const MAX_ENTRIES = 10_000;

export class RecentPrincipals {
  private readonly entries = new Map<string, { principal: Principal; until: number }>();

  get(tokenHash: Buffer, now = Date.now()): Principal | undefined {
    const key = tokenHash.toString('base64');
    const entry = this.entries.get(key);
    if (entry && entry.until > now) return entry.principal;
    if (entry) this.entries.delete(key);
    return undefined;
  }

  set(tokenHash: Buffer, principal: Principal, now = Date.now()): void {
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    this.entries.set(tokenHash.toString('base64'), { principal, until: now + LIFETIME_MS });
  }

  clear(): void {
    this.entries.clear();
  }
}
