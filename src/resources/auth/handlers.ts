import { and, eq, isNull, sql } from 'drizzle-orm';
import { accessTokens } from './table.ts';
import { admitLoginAttempt, clearLoginFailures, loginLimitKeys, withdrawLoginAttempt } from './queries.ts';
import { verifyPassword } from '../../platform/auth/passwords.ts';
import { hashToken, newAccessToken } from '../../platform/auth/tokens.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { unauthorized } from '../../platform/http/problem.ts';
import { users } from '../users/table.ts';

export async function findTenantId(db: Database, slug: string): Promise<number | null> {
  const [row] = await db.appSql<{ id: string | null }[]>`select atrium_find_tenant(${slug}) as id`;
  return row?.id ? Number(row.id) : null;
}

/** Issues an access token for `userId` and stamps `last_login_at` (also used by login tokens). */
export async function issueAccessToken(tx: Tx, tenantId: number, userId: number, ttlSeconds: number) {
  const token = newAccessToken();
  const expiresAt = new Date(Date.now() + ttlSeconds * 1000);
  await tx.insert(accessTokens).values({ tenantId, userId, tokenHash: hashToken(token), expiresAt });
  const [user] = await tx
    .update(users)
    .set({ lastLoginAt: sql`now()` })
    .where(eq(users.id, userId))
    .returning({ requestPasswordChange: users.requestPasswordChange });
  return {
    access_token: token,
    token_type: 'Bearer' as const,
    expires_at: expiresAt.toISOString(),
    password_change_required: user?.requestPasswordChange ?? false,
  };
}

export const authHandlers = {
  async login({ body, request, services: { db, config } }) {
    const tenantId = await findTenantId(db, body.tenant);
    const user = tenantId
      ? await db.tenant(tenantId, async (tx) => {
          const [row] = await tx
            .select({ id: users.id, passwordHash: users.passwordHash, active: users.active })
            .from(users)
            .where(and(eq(users.username, body.username), isNull(users.deletedAt)));
          return row;
        })
      : undefined;
    // Per name, per client address and, for an existing user, per user id (a rename does
    // not reset it). Counted before the password is checked, in one statement: a burst gets
    // no more checks than the limit.
    const keys = loginLimitKeys(config, body.tenant, body.username, request.ip, tenantId && user ? { tenantId, userId: user.id } : undefined);
    const attempt = await admitLoginAttempt(db, config, keys);
    // Always verify (against a dummy hash when there is no user): same answer, same time.
    const passwordOk = await verifyPassword(user?.passwordHash, body.password);
    // A failure stays counted on every key.
    if (!tenantId || !user || !passwordOk || !user.active) throw unauthorized('The tenant, username or password is wrong.');
    const [byName, byAddress, byUser] = keys;
    await clearLoginFailures(db, [byName!, byUser!]);
    await withdrawLoginAttempt(db, attempt, [byAddress!]);
    const answer = await db.tenant(tenantId, (tx) => issueAccessToken(tx, tenantId, user.id, config.accessTokenTtlSeconds));
    return { status: 200, body: answer };
  },

  async logout({ auth, services: { db } }) {
    await db.tenant(auth.tenantId, (tx) =>
      tx.update(accessTokens).set({ revokedAt: sql`now()` }).where(eq(accessTokens.id, auth.tokenId)),
    );
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
