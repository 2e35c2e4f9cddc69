import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { Config } from '../../config.ts';
import { hashToken, newAccessToken } from '../../platform/auth/tokens.ts';
import { sendAhead, transactionTenant, type Database, type Tx } from '../../platform/database/database.ts';
import { currentTenant } from '../../platform/database/tenancy.ts';
import { ProblemError } from '../../platform/http/problem.ts';
import { announceSessionsEnded } from '../notifications/channel.ts';
import { users } from '../users/table.ts';
import { accountLimitKey, userLimitKey, type LimitKey } from './rules.ts';
import { accessTokens } from './table.ts';

export async function findTenantId(db: Database, slug: string): Promise<number | null> {
  const [row] = await db.read(() => db.appSql<{ id: string | null }[]>`select atrium_find_tenant(${slug}) as id`);
  return row?.id ? Number(row.id) : null;
}

/** The user who may sign in as `username` in the tenant (not deleted), with what sign-in checks and their names (for the audit trail). */
export async function findSignInUser(db: Database, tenantId: number, username: string) {
  // PostgreSQL stores no NUL in text, so no user has such a name; asking would fail (422)
  // only where the tenant exists, and tell so.
  if (username.includes('\u0000')) return undefined;
  return db.tenant(tenantId, async (tx) => {
    const [row] = await tx
      .select({
        id: users.id,
        passwordHash: users.passwordHash,
        active: users.active,
        username: users.username,
        firstName: users.firstName,
        lastName: users.lastName,
      })
      .from(users)
      .where(and(eq(users.username, username), isNull(users.deletedAt)));
    return row;
  });
}

/**
 * Revokes the access token `tokenId` (sign-out) in `tx`, if it is not revoked yet; its
 * streams end on commit. Answers whether it revoked it.
 */
export async function revokeAccessToken(tx: Tx, tenantId: number, tokenId: number): Promise<boolean> {
  const [revoked] = await tx
    .update(accessTokens)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(accessTokens.id, tokenId), isNull(accessTokens.revokedAt)))
    .returning({ userId: accessTokens.userId });
  if (revoked) await announceSessionsEnded(tx, { tenantId, userId: revoked.userId });
  return revoked !== undefined;
}

/**
 * Whether the user `userId` still signs in with the password whose hash was checked (one of
 * `passwordHashes`: the hash checked, and the one a sign-in renews it to, which another
 * sign-in may have stored meanwhile: `renewedHash`), and may sign in (active, not deleted),
 * locking the user's row until the transaction ends. A password change, deactivation or
 * deletion committed since the check refuses the sign-in; one still under way waits until
 * its token is stored, and then ends that session too. Named by its tenant too: Citus locks
 * rows only in a statement that names its shard.
 */
export async function stillSignsIn(tx: Tx, userId: number, passwordHashes: string[]): Promise<boolean> {
  const [row] = await tx
    .select({ id: users.id })
    .from(users)
    .where(
      and(
        eq(users.tenantId, transactionTenant(tx)!),
        eq(users.id, userId),
        inArray(users.passwordHash, passwordHashes),
        eq(users.active, true),
        isNull(users.deletedAt),
      ),
    )
    .for('no key update');
  return row !== undefined;
}

/**
 * Stores `renewed` as the password hash of the user `userId` in place of `checked`, the hash
 * their password was just checked against (passwords.ts, `renewedHash`), only while the row
 * still holds it: a password changed meanwhile is never written over. Sent ahead
 * (`sendAhead`): nothing waits for its answer. `updated_at` stays: the user's record is
 * unchanged.
 */
export async function renewPasswordHash(tx: Tx, userId: number, checked: string, renewed: string): Promise<void> {
  await sendAhead(
    tx,
    tx
      .update(users)
      .set({ passwordHash: renewed })
      .where(and(eq(users.tenantId, transactionTenant(tx)!), eq(users.id, userId), eq(users.passwordHash, checked))),
  );
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

/** An admitted attempt: the window each key was counted in, to withdraw exactly that count. */
export interface LoginAttempt {
  counted: { key: string; window: string }[];
}

interface CountedRow {
  key: string;
  failures: number;
  remaining: number;
  window_id: string;
}

/**
 * Counts one attempt on every key, atomically (one INSERT … ON CONFLICT DO UPDATE: the row
 * lock orders concurrent attempts), and throws 429 with `Retry-After` when any key is now
 * over its limit (withdrawing this attempt's counts first). Otherwise the caller checks the
 * credential and, on success, withdraws or clears the count.
 */
export async function admitLoginAttempt(db: Database, config: Config, keys: LimitKey[]): Promise<LoginAttempt> {
  const window = config.loginFailureWindowSeconds;
  const rows = await db.appSql<CountedRow[]>`
    insert into login_failures as f (key, failures, window_started_at)
    select key, 1, now() from unnest(${keys.map((k) => k.key)}::text[]) as k(key) order by key
    on conflict (key) do update set
      failures = case when f.window_started_at + make_interval(secs => ${window}) <= now() then 1 else f.failures + 1 end,
      window_started_at = case when f.window_started_at + make_interval(secs => ${window}) <= now() then now() else f.window_started_at end
    returning f.key, f.failures,
      ceil(extract(epoch from f.window_started_at + make_interval(secs => ${window}) - now()))::int as remaining,
      (extract(epoch from f.window_started_at) * 1000000)::bigint::text as window_id`;
  const attempt: LoginAttempt = { counted: rows.map((row) => ({ key: row.key, window: row.window_id })) };
  let wait = 0;
  for (const row of rows) {
    const max = keys.find((k) => k.key === row.key)?.max ?? Infinity;
    if (row.failures > max) wait = Math.max(wait, row.remaining, 1);
  }
  if (wait > 0) {
    await withdrawLoginAttempt(db, attempt);
    throw new ProblemError(429, 'Too many failed sign-ins. Try again later.', { code: 'sign_in_throttled', headers: { 'Retry-After': String(wait) } });
  }
  return attempt;
}

/** Takes the attempt's count back from `keys` (default: all it was counted on), if their window is still the same. */
export async function withdrawLoginAttempt(db: Database, attempt: LoginAttempt, keys?: LimitKey[]): Promise<void> {
  const counted = keys ? attempt.counted.filter((c) => keys.some((k) => k.key === c.key)) : attempt.counted;
  if (counted.length === 0) return;
  await db.appSql`
    with locked as (select key from login_failures where key = any(${counted.map((c) => c.key)}::text[]) order by key for update)
    update login_failures as f set failures = f.failures - 1
    from unnest(${counted.map((c) => c.key)}::text[], ${counted.map((c) => c.window)}::bigint[]) as c(key, window_id), locked
    where f.key = c.key and locked.key = f.key
      and (extract(epoch from f.window_started_at) * 1000000)::bigint = c.window_id and f.failures > 0`;
}

/** A successful sign-in: the account's counts (per name, per user) start over. */
export async function clearLoginFailures(db: Database, keys: LimitKey[]): Promise<void> {
  await db.appSql`
    with locked as (select key from login_failures where key = any(${keys.map((k) => k.key)}::text[]) order by key for update)
    delete from login_failures as f using locked where f.key = locked.key`;
}

/**
 * Forgets the sign-in counts of a user in the transaction's tenant, under their username
 * and their id (blackout leaves nothing that names the person, nor a count tied to them).
 */
export async function forgetAccountFailures(tx: Tx, config: Config, user: { id: number; username: string }): Promise<void> {
  const [tenant] = await tx.execute<{ id: string; slug: string }>(sql`select id, slug from tenants where id = ${currentTenant}`);
  if (!tenant) return;
  const byName = accountLimitKey(config, tenant.slug, user.username).key;
  const byUser = userLimitKey(config, Number(tenant.id), user.id).key;
  await tx.execute(sql`
    with locked as (select key from login_failures where key in (${byName}, ${byUser}) order by key for update)
    delete from login_failures as f using locked where f.key = locked.key`);
}
