import { and, eq, isNull, ne, sql } from 'drizzle-orm';
import type { Config } from '../../config.ts';
import { tenants } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import { accountLimitKey, userLimitKey } from './rules.ts';
import { admitLoginAttempt, withdrawLoginAttempt } from './queries.ts';
import { verifyPassword } from '../../platform/auth/passwords.ts';
import { accessTokens } from './table.ts';
import { announceSessionsEnded } from '../notifications/channel.ts';

/**
 * Checks `password` against the caller's own stored password (`old_password` of a password
 * change). Every check is a guess at the account's password, so it is counted like a
 * sign-in on the account's failure counts — under the current username and under the user
 * id, which a rename does not change — before verifying: beyond the limit it throws 429
 * with `Retry-After` (and sign-in is refused too); a correct password withdraws its count.
 */
export async function verifyOwnPassword(db: Database, config: Config, auth: Auth, password: string): Promise<boolean> {
  const account = await db.tenant(auth.tenantId, async (tx) => {
    const [row] = await tx
      .select({ username: users.username, passwordHash: users.passwordHash, tenant: tenants.slug })
      .from(users)
      .innerJoin(tenants, eq(tenants.id, users.tenantId))
      .where(eq(users.id, auth.userId));
    return row;
  });
  if (!account) return false;
  const keys = [accountLimitKey(config, account.tenant, account.username), userLimitKey(config, auth.tenantId, auth.userId)];
  const attempt = await admitLoginAttempt(db, config, keys);
  const matches = await verifyPassword(account.passwordHash, password);
  if (matches) await withdrawLoginAttempt(db, attempt);
  return matches;
}

/**
 * After `userId`'s password was changed in `tx`: a change of one's own password ends every
 * other session of the user (the access token used for the change keeps working) and
 * clears `request_password_change`; a reset of another user's password ends all of that
 * user's sessions. Their streams end on commit.
 */
export async function endSessionsAfterPasswordChange(tx: Tx, auth: Auth, userId: number): Promise<void> {
  const own = userId === auth.userId;
  await tx
    .update(accessTokens)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(accessTokens.userId, userId), isNull(accessTokens.revokedAt), own ? ne(accessTokens.id, auth.tokenId) : undefined));
  await announceSessionsEnded(tx, { tenantId: auth.tenantId, userId });
  if (own) await tx.update(users).set({ requestPasswordChange: false }).where(eq(users.id, userId));
}
