import { and, eq, isNull, sql, type SQL } from 'drizzle-orm';
import type { Permission } from '../../platform/auth/permissions.ts';
import { setTenant, type Database, type Tx } from '../../platform/database/database.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import { recordAudit, type AuditOrigin } from '../../platform/audit/audit.ts';
import { userLabel } from '../audit-events/record.ts';
import { issueAccessToken } from '../auth/queries.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { userLoginTokens } from './table.ts';

export type LoginTokenRow = typeof userLoginTokens.$inferSelect;

/** A user a token could sign in, with every permission their role lists. */
export interface TokenTarget {
  id: number;
  active: boolean;
  deletedAt: Date | null;
  permissions: string[];
}

/**
 * Users with every permission their role lists, active or not (an inactive role can be
 * reactivated at any time, and then grants all of them), by a condition.
 */
function tokenTargets(tx: Tx, where: SQL): Promise<TokenTarget[]> {
  return tx
    .select({
      id: users.id,
      active: users.active,
      deletedAt: users.deletedAt,
      permissions: roles.permissions,
    })
    .from(users)
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .where(where);
}

/** The user `id` as a token target, or undefined. */
export async function tokenTarget(tx: Tx, id: number): Promise<TokenTarget | undefined> {
  const [target] = await tokenTargets(tx, eq(users.id, id));
  return target;
}

/**
 * The user `id` as a token target, read once their row is held (`FOR SHARE`, by a statement
 * of its own) until the transaction ends, or undefined. A write that changes what a token
 * for them may be (a new role, a deactivation, a deletion) locks that row before it revokes
 * their pending tokens: one committed meanwhile is read here, one after waits and then
 * revokes the token made here.
 */
export async function heldTokenTarget(tx: Tx, id: number): Promise<TokenTarget | undefined> {
  await lockRecord(tx, users, id, 'share');
  return tokenTarget(tx, id);
}

/**
 * The creator's permissions as their role grants them now (none while it is inactive), the
 * role's row held (`share`): a role update deactivating it or taking a permission, which
 * revokes the tokens its holders created, either committed before and is read here, or
 * waits for this transaction and then revokes the token it made with the others.
 */
export async function heldCreatorPermissions(tx: Tx, creator: { tenantId: number; userId: number }): Promise<ReadonlySet<Permission>> {
  // Naming the tenant: Citus locks rows only in a statement that names its shard.
  const [role] = await tx
    .select({ active: roles.active, permissions: roles.permissions })
    .from(roles)
    .innerJoin(users, and(eq(users.tenantId, roles.tenantId), eq(users.roleId, roles.id)))
    .where(and(eq(roles.tenantId, creator.tenantId), eq(users.id, creator.userId)))
    .for('share', { of: roles });
  return new Set(role?.active ? (role.permissions as Permission[]) : []);
}

/** The users whose e-mail address is `email` (compared case-insensitively), as token targets. */
export function tokenTargetsWithEmail(tx: Tx, email: string): Promise<TokenTarget[]> {
  return tokenTargets(tx, sql`lower(${users.email}) = lower(${email})`);
}

/** Stores a token of `creator` signing in `loginUserId` (its hash only), valid for `expiresIn` seconds. */
export async function insertLoginToken(
  tx: Tx,
  creator: { tenantId: number; userId: number },
  loginUserId: number,
  tokenHash: Buffer,
  expiresIn: number,
): Promise<LoginTokenRow> {
  const [row] = await tx
    .insert(userLoginTokens)
    .values({
      tenantId: creator.tenantId,
      userId: creator.userId,
      loginUserId,
      tokenHash,
      expiresAt: sql`clock_timestamp() + make_interval(secs => ${expiresIn})`,
    })
    .returning();
  return row!;
}

/**
 * Soft-deletes the token; an already used or deleted one keeps its deletion time.
 * Undefined when there is none; `changed` false when it was deleted already. The update
 * takes only a token not deleted (of two concurrent deletes, the second finds it deleted),
 * and only when it takes none is the token looked for: Citus refuses `now()` in
 * `RETURNING`, which told the two apart in one statement.
 */
export async function softDeleteLoginToken(tx: Tx, uuid: string): Promise<{ changed: boolean } | undefined> {
  const [deleted] = await tx
    .update(userLoginTokens)
    .set({ deletedAt: sql`now()` })
    .where(and(eq(userLoginTokens.uuid, uuid), isNull(userLoginTokens.deletedAt)))
    .returning({ id: userLoginTokens.id });
  if (deleted) return { changed: true };
  const [kept] = await tx.select({ id: userLoginTokens.id }).from(userLoginTokens).where(eq(userLoginTokens.uuid, uuid));
  return kept ? { changed: false } : undefined;
}

/**
 * Consumes the token whose value hashes to `tokenHash` and signs its user in, in one
 * transaction: the token's tenant is looked up (security definer, reading only) and set,
 * then `atrium_consume_login_token` marks the token used under row-level security
 * (atomically, see migration `login-token-consumption`), its user's row locked first, and
 * the access token is issued.
 * Both writes are `atrium_app`'s: Citus refuses a second role on shards the first one
 * wrote in the transaction. If issuing fails, the token stays unused. Null when the token
 * does not sign in.
 */
export async function consumeLoginToken(db: Database, tokenHash: Buffer, ttlSeconds: number, origin: AuditOrigin) {
  return db.transaction(async (tx) => {
    const [found] = await tx.execute<{ tenant_id: string | null }>(sql`select atrium_login_token_tenant(${tokenHash}) as tenant_id`);
    if (!found?.tenant_id) return null;
    const tenantId = Number(found.tenant_id);
    await setTenant(tx, tenantId);
    // The user's row first, as every write that ends the user's sessions takes it before
    // revoking their pending tokens: one lock order, no deadlock. Such a write committed
    // meanwhile is seen by the consumption, which then finds nothing to consume.
    await tx.execute(sql`
      select u.id from users u join user_login_tokens t on t.tenant_id = u.tenant_id and t.login_user_id = u.id
      where u.tenant_id = ${tenantId} and t.token_hash = ${tokenHash}
      for no key update of u`);
    const [consumed] = await tx.execute<{ login_user_id: string; first_name: string | null; last_name: string | null; username: string }>(
      sql`select login_user_id, first_name, last_name, username from atrium_consume_login_token(${tokenHash})`,
    );
    if (!consumed) return null;
    const loginUserId = Number(consumed.login_user_id);
    const label = userLabel({ firstName: consumed.first_name, lastName: consumed.last_name, username: consumed.username });
    const [token] = await tx.select({ uuid: userLoginTokens.uuid }).from(userLoginTokens).where(eq(userLoginTokens.tokenHash, tokenHash));
    // Signed in by the token: the user it signs in acts.
    await recordAudit(
      tx,
      { actor: { type: 'user', id: loginUserId, label }, origin },
      { action: 'login_token.consumed', target: { type: 'login_token', id: token?.uuid ?? null, label: null } },
    );
    return issueAccessToken(tx, tenantId, loginUserId, ttlSeconds);
  });
}
