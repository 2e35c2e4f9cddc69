/**
 * Principals of bearer tokens looked up in the last second, in this process: a safe
 * request (`GET`) whose token was looked up that recently skips the look-up. Any other
 * request that this process answers forgets them all before its answer is sent, so a
 * change made through this process holds for its next request; a change made elsewhere
 * (another process, the command line, a job) holds here within `LIFETIME_MS`
 * (docs/tenancy-and-security.md#access-tokens).
 *
 * A companion (`companion()`) keeps another kind of principal, such as a SCIM token's,
 * under the same rule: clearing any cache of the family clears them all, so the one
 * `clear()` of a write forgets every kind. The platform knows only the access tokens'
 * `Principal`; a resource creates the companion for its own.
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

/** Where a look-up began: `set` keeps its answer only if no `clear` came since, and for a second from then. */
export interface LookUpStart {
  generation: number;
  at: number;
}

/** A cache and its companions: their entries, cleared together, and how often they were. */
interface Family {
  entries: Map<string, unknown>[];
  generation: number;
}

export class RecentPrincipals<P = Principal> {
  private readonly entries = new Map<string, { principal: P; until: number }>();
  private readonly family: Family;

  constructor(family: Family = { entries: [], generation: 0 }) {
    this.family = family;
    family.entries.push(this.entries);
  }

  /**
   * Marks the start of a look-up, to give to `set`. A change answered while the look-up
   * ran (its `clear` came after the look-up read the database) then leaves nothing stale
   * behind, and the answer is kept for a second from when it was asked, not answered.
   */
  start(now = Date.now()): LookUpStart {
    return { generation: this.family.generation, at: now };
  }

  /**
   * The principal of `tokenHash`: from a look-up of the last second, else from `lookUp`
   * (null: none), whose answer is then kept as `set` keeps it.
   */
  async remembered(tokenHash: Buffer, lookUp: () => Promise<P | null>): Promise<P | null> {
    const recent = this.get(tokenHash);
    if (recent) return recent;
    const start = this.start();
    const principal = await lookUp();
    if (principal) this.set(tokenHash, principal, start);
    return principal;
  }

  /** A cache of another kind of principal in this one's family: clearing either clears both. */
  companion<Q>(): RecentPrincipals<Q> {
    return new RecentPrincipals<Q>(this.family);
  }

  get(tokenHash: Buffer, now = Date.now()): P | undefined {
    const key = tokenHash.toString('base64');
    const entry = this.entries.get(key);
    if (entry && entry.until > now) return entry.principal;
    if (entry) this.entries.delete(key);
    return undefined;
  }

  /** Keeps the answer of the look-up that began at `since`, unless the family was cleared since. */
  set(tokenHash: Buffer, principal: P, since: LookUpStart): void {
    if (since.generation !== this.family.generation) return;
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    this.entries.set(tokenHash.toString('base64'), { principal, until: since.at + LIFETIME_MS });
  }

  /** Forgets every look-up, of this cache and of its family, and the answers of look-ups under way. */
  clear(): void {
    this.family.generation++;
    for (const entries of this.family.entries) entries.clear();
  }
}
