/** SCIM tokens: minting, listing, revoking, and authenticating a request with one. */
import { randomBytes } from 'node:crypto';
import { and, count, desc, eq, sql } from 'drizzle-orm';
import type { Permission } from '../../platform/auth/permissions.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { scimTokens } from './table.ts';

/** What a token's minter must hold for it to work, as `atrium_authenticate_scim` requires (migration `audit-labels-before-insert`). */
const SCIM_TOKEN_PERMISSIONS: readonly Permission[] = ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'];

/** How many tokens a tenant may hold at once: one per identity provider, with room to rotate. */
export const SCIM_TOKEN_LIMIT = 20;

/** A new token value: 256 random bits, prefixed so that it is told apart from access tokens (`atr_`); only its SHA-256 is stored. */
export function newScimTokenValue(): string {
  return `scim_${randomBytes(32).toString('base64url')}`;
}

/** A stored token as the API presents it (never its value or hash). */
export function presentScimToken(row: Pick<typeof scimTokens.$inferSelect, 'id' | 'name' | 'expiresAt' | 'lastUsedAt' | 'createdAt'>) {
  return {
    id: row.id,
    name: row.name,
    expires_at: rfc3339(row.expiresAt),
    last_used_at: rfc3339(row.lastUsedAt),
    created_at: rfc3339(row.createdAt)!,
  };
}

const listed = {
  id: scimTokens.id,
  name: scimTokens.name,
  expiresAt: scimTokens.expiresAt,
  lastUsedAt: scimTokens.lastUsedAt,
  createdAt: scimTokens.createdAt,
};

/** The tenant's tokens, newest first. */
export function listScimTokens(tx: Tx) {
  return tx.select(listed).from(scimTokens).orderBy(desc(scimTokens.createdAt), desc(scimTokens.id));
}

/** How many tokens the tenant holds. */
export async function scimTokenCount(tx: Tx): Promise<number> {
  const [row] = await tx.select({ n: count() }).from(scimTokens);
  return row?.n ?? 0;
}

/** Stores a token (its hash) minted by `userId`; answers the stored record. */
export async function insertScimToken(tx: Tx, tenantId: number, userId: number, name: string, tokenHash: Buffer, expiresIn: number | undefined) {
  const [row] = await tx
    .insert(scimTokens)
    .values({
      tenantId,
      userId,
      name,
      tokenHash,
      expiresAt: expiresIn === undefined ? null : (sql`clock_timestamp() + make_interval(secs => ${expiresIn})` as never),
    })
    .returning(listed);
  return row!;
}

/**
 * Who minted the token `id` and what their role lists (active or not), or undefined when
 * there is no such token: a token acts with its minter's authority, so revoking it is
 * judged as administering them is.
 */
export async function scimTokenMinter(tx: Tx, id: number): Promise<{ id: number; grantable: string[] } | undefined> {
  const [row] = await tx
    .select({ id: users.id, grantable: roles.permissions })
    .from(scimTokens)
    .innerJoin(users, and(eq(users.tenantId, scimTokens.tenantId), eq(users.id, scimTokens.userId)))
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .where(eq(scimTokens.id, id));
  return row;
}

/** Deletes the token; answers the deleted record, or undefined when there is none. */
export async function deleteScimToken(tx: Tx, id: number) {
  const [row] = await tx.delete(scimTokens).where(eq(scimTokens.id, id)).returning(listed);
  return row;
}

/** Who a SCIM request acts as: the token, in its tenant, with the permissions of the administrator who minted it. */
export interface ScimPrincipal {
  tenantId: number;
  tokenId: number;
  permissions: ReadonlySet<Permission>;
  /** The use last recorded: as the look-up read it, or as this process recorded it since (`recordScimTokenUse`). */
  lastUsedAt: Date | null;
  /** The token's name as the look-up read it: the actor's label in the audit trail. */
  tokenName: string;
}

/** The principal the token (its hash) yields now (null: none), in one query through the security-definer `atrium_authenticate_scim`. */
export async function lookUpScimToken(db: Database, tokenHash: Buffer): Promise<ScimPrincipal | null> {
  const [row] = await db.read(
    () => db.appSql<{ tenant_id: string; token_id: string; permissions: Permission[]; last_used_at: Date | string | null; name: string }[]>`
      select tenant_id, token_id, permissions, last_used_at, name from atrium_authenticate_scim(${tokenHash})`,
  );
  if (!row) return null;
  return {
    tenantId: Number(row.tenant_id),
    tokenId: Number(row.token_id),
    permissions: new Set(row.permissions),
    lastUsedAt: row.last_used_at === null ? null : new Date(row.last_used_at),
    tokenName: row.name,
  };
}

/**
 * Whether the token still authenticates now, judged in the write's transaction by a
 * statement of its own (so it reads what committed since the look-up), as
 * `atrium_authenticate_scim` judges it: not expired, its minter active, not deleted, not
 * marked for logout since it was minted, with an active role holding what a token needs.
 * Read as `atrium_app`, under row-level security: on Citus a transaction that wrote a
 * tenant's shards (the token's use) reaches them as one role only. A write that waited
 * (for a user's row, the administration lock, the password's hash) asks it before it
 * writes, so a token ended meanwhile writes nothing (its lifetime too: judged by the clock,
 * `clock_timestamp()`, not by the transaction's start, `now()`). The write's own changes
 * are not made yet then: one that deactivates the minter is not refused by it. Answers the minter's
 * permissions as they stand now (null: the token ended), for a write that needs one beyond
 * those every token needs (a group's, `departments.manage`).
 */
export async function stillAuthenticates(tx: Tx, principal: ScimPrincipal): Promise<ReadonlySet<Permission> | null> {
  const rows = await tx.execute<{ permissions: Permission[] }>(sql`
    select r.permissions
    from scim_tokens t
    join users u on u.tenant_id = t.tenant_id and u.id = t.user_id
    join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
    where t.tenant_id = ${principal.tenantId} and t.id = ${principal.tokenId}
      and (t.expires_at is null or t.expires_at > clock_timestamp())
      and u.active and u.deleted_at is null
      and (u.logout_marked_at is null or t.created_at > u.logout_marked_at)
      and r.active and r.permissions @> ${`{${SCIM_TOKEN_PERMISSIONS.join(',')}}`}::text[]`);
  return rows[0] ? new Set(rows[0].permissions) : null;
}

/**
 * Whether the token still exists, holding it (`FOR KEY SHARE`) until the transaction ends:
 * a write taken on the token's look-up must not commit after the token's revocation. A
 * revocation committed since the look-up refuses the write; one under way waits for it.
 * Named by its tenant too: Citus locks rows only in a statement that names its shard.
 */
export async function holdScimToken(tx: Tx, principal: ScimPrincipal): Promise<boolean> {
  const [held] = await tx
    .select({ id: scimTokens.id })
    .from(scimTokens)
    .where(and(eq(scimTokens.tenantId, principal.tenantId), eq(scimTokens.id, principal.tokenId)))
    .for('key share');
  return held !== undefined;
}

/** How stale `last_used_at` may get: a use is recorded at most once a minute, so that a sync costs no write per request. */
const LAST_USE_RESOLUTION_MS = 60_000;

/**
 * Records the use of the token in the request's transaction, unless one was recorded in the
 * last minute. The principal carries the new stamp, so that the requests that take it from
 * the last second's look-ups (`RecentPrincipals`) write nothing within the minute either
 * (should the transaction roll back, the look-up made a second later reads the stamp as stored).
 */
export async function recordScimTokenUse(tx: Tx, principal: ScimPrincipal): Promise<void> {
  const now = Date.now();
  if (principal.lastUsedAt && now - principal.lastUsedAt.getTime() < LAST_USE_RESOLUTION_MS) return;
  principal.lastUsedAt = new Date(now);
  // Citus refuses a volatile function among an UPDATE's values, not one evaluated once per statement.
  await tx
    .update(scimTokens)
    .set({ lastUsedAt: sql`(select clock_timestamp())` })
    .where(and(eq(scimTokens.tenantId, principal.tenantId), eq(scimTokens.id, principal.tokenId)));
}
