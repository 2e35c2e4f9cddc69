import { and, eq, isNull, ne, sql } from 'drizzle-orm';
import type { Config } from '../../config.ts';
import { tenants } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';
import { transactionTenant, type Database, type Tx } from '../../platform/database/database.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import { unauthorized } from '../../platform/http/problem.ts';
import { accountLimitKey, userLimitKey } from './rules.ts';
import { admitLoginAttempt, withdrawLoginAttempt } from './queries.ts';
import { checkPassword, matchedHashes } from '../../platform/auth/passwords.ts';
import { accessTokens } from './table.ts';
import { announceSessionsEnded } from '../notifications/channel.ts';

/**
 * Checks `password` against the caller's own stored password (`old_password` of a password
 * change). Every check is a guess at the account's password, so it is counted like a
 * sign-in on the account's failure counts — under the current username and under the user
 * id, which a rename does not change — before verifying: beyond the limit it throws 429
 * with `Retry-After` (and sign-in is refused too); a correct password withdraws its count.
 * Answers the stored hashes the password is known to match (null: none): the hash checked,
 * and, when that one is outdated, the hash a sign-in renews it to (`matchedHashes`), which a
 * sign-in of the same user may store meanwhile. This check renews nothing: the password is
 * being replaced.
 */
export async function verifyOwnPassword(db: Database, config: Config, auth: Auth, password: string): Promise<string[] | null> {
  const account = await db.tenant(auth.tenantId, async (tx) => {
    const [row] = await tx
      .select({ username: users.username, passwordHash: users.passwordHash, tenant: tenants.slug })
      .from(users)
      .innerJoin(tenants, eq(tenants.id, users.tenantId))
      .where(eq(users.id, auth.userId));
    return row;
  });
  if (!account) return null;
  const keys = [accountLimitKey(config, account.tenant, account.username), userLimitKey(config, auth.tenantId, auth.userId)];
  const attempt = await admitLoginAttempt(db, config, keys);
  const check = await checkPassword(account.passwordHash, password, auth.tenantId);
  if (check === 'wrong') return null;
  await withdrawLoginAttempt(db, attempt);
  return matchedHashes(account.passwordHash!, password, check, auth.tenantId);
}

/** The refusal of a write whose session was ended (a logout mark, a password change, a deactivation, a deletion) while it ran. */
export const sessionEnded = () => unauthorized('The session ended while the request ran.', 'token_invalid');

/**
 * Holds the caller's session for the rest of `tx`, for a write that hands out what the
 * end of a session must take back (a login or SCIM token, a push subscription) or that
 * changes the password. The caller's user row is locked (`share`, or `update` to
 * serialize the caller's own writes too), so whatever ends their sessions — a logout
 * mark, a password change, a deactivation, a deletion, each of which locks that row
 * first — either commits before this transaction goes on, or waits for it and then takes
 * back what it wrote. The session is judged again once the lock is held (a statement of
 * its own, so it reads what such an end committed): 401 when its access token
 * (`tokenHash`) no longer authenticates. Answers the password hash the row holds now (null: none).
 */
export async function holdSession(tx: Tx, auth: Auth, tokenHash: Buffer, strength: 'share' | 'update' = 'share'): Promise<string | null> {
  // Naming the tenant: Citus locks rows only in a statement that names its shard.
  const tenantId = transactionTenant(tx) ?? auth.tenantId;
  const [[row], [session]] = await Promise.all([
    tx
      .select({ passwordHash: users.passwordHash })
      .from(users)
      .where(and(eq(users.tenantId, tenantId), eq(users.id, auth.userId)))
      .for(strength),
    tx.execute<{ held: boolean }>(sql`select true as held from atrium_authenticate(${tokenHash}) where user_id = ${auth.userId}`),
  ]);
  if (!row || !session) throw sessionEnded();
  return row.passwordHash;
}

/**
 * After `userId`'s password was changed in `tx`: a change of one's own password ends every
 * other session of the user (the access token used for the change keeps working) and
 * clears `request_password_change`; a reset of another user's password ends all of that
 * user's sessions. Their streams end on commit. A change by a SCIM token (`auth` names only
 * the tenant: the token is no user) is a reset. Neither marks the user for logout, so the
 * SCIM tokens the user minted keep working (docs/scim.md).
 */
export async function endSessionsAfterPasswordChange(
  tx: Tx,
  auth: Pick<Auth, 'tenantId'> & Partial<Pick<Auth, 'userId' | 'tokenId'>>,
  userId: number,
): Promise<void> {
  const own = userId === auth.userId;
  await tx
    .update(accessTokens)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(accessTokens.userId, userId), isNull(accessTokens.revokedAt), own ? ne(accessTokens.id, auth.tokenId!) : undefined));
  await announceSessionsEnded(tx, { tenantId: auth.tenantId, userId });
  if (own) await tx.update(users).set({ requestPasswordChange: false }).where(eq(users.id, userId));
}
