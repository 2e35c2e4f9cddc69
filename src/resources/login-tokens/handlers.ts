import { and, desc, eq, sql, type SQL } from 'drizzle-orm';
import { requirePermission, type Auth } from '../../platform/auth/auth.ts';
import { clientAddressLimitKey } from '../auth/rules.ts';
import { admitLoginAttempt, issueAccessToken, withdrawLoginAttempt } from '../auth/queries.ts';
import { hashToken } from '../../platform/auth/tokens.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import { usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { invalid, notFound, unauthorized } from '../../platform/http/problem.ts';
import { present, readControls } from '../../platform/result-controls/result-controls.ts';
import type { Services } from '../../platform/services.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { userLoginTokens } from './table.ts';
import { isSignedLoginTokenValue, newLoginTokenValue } from './token-value.ts';
import { loginTokenView, type LoginTokenRow } from './view.ts';

interface TokenTarget {
  id: number;
  active: boolean;
  deletedAt: Date | null;
  permissions: string[];
}

/**
 * Users with every permission their role lists, active or not (an inactive role can be
 * reactivated at any time, and then grants all of them), by a condition.
 */
function targets(tx: Tx, where: SQL) {
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

/** The one active, not deleted user among `candidates`, or null (none, or several). */
function soleActiveUser(candidates: TokenTarget[]): TokenTarget | null {
  const usable = candidates.filter((user) => user.active && !user.deletedAt);
  return usable.length === 1 ? usable[0]! : null;
}

/**
 * The e-mail create refuses every unusable address with this one answer, whatever the
 * reason (no such address, inactive, deleted or shared by several users, or a user holding
 * a permission or an entity right the caller lacks): it reveals neither whether the
 * address exists nor what its owner may do.
 */
const UNUSABLE_EMAIL = 'does not name exactly one active user whose every permission and entity right you hold';

/** Stores a new token for `target` (hash only) and answers the record plus the value, once. */
async function createLoginToken(tx: Tx, auth: Auth, services: Services, target: TokenTarget, field: string, expiresIn: number) {
  // No escalation: a token may not sign in a user holding a permission, or a right through
  // entity permissions, that its creator lacks (both checked again when the token is used,
  // see `atrium_consume_login_token`).
  if (permissionsLacking(auth, target.permissions).length > 0 || (await usersHoldingRightsBeyond(tx, auth, [target.id])).size > 0) {
    throw invalid({ [field]: [UNUSABLE_EMAIL] }, 'No login token can be created for this user.');
  }
  const token = newLoginTokenValue(services.secrets);
  const [row] = await tx
    .insert(userLoginTokens)
    .values({
      tenantId: auth.tenantId,
      userId: auth.userId,
      loginUserId: target.id,
      tokenHash: hashToken(token),
      expiresAt: sql`clock_timestamp() + make_interval(secs => ${expiresIn})`,
    })
    .returning();
  const [record] = await present(loginTokenView, tx, [row!], { selects: null, relations: [] }, auth);
  return { ...(record as { uuid: string; user_id: number; login_user_id: number; expires_at: string }), token };
}

async function findLoginToken(tx: Tx, uuid: string): Promise<LoginTokenRow> {
  const [row] = await tx.select().from(userLoginTokens).where(eq(userLoginTokens.uuid, uuid));
  if (!row) throw notFound('The login token');
  return row;
}

/**
 * Consumes the token whose value hashes to `tokenHash` and signs its user in, in one
 * transaction: the security-definer function marks the token used (atomically, see
 * migration `login-token-consumption`), then the access token is issued in the token's
 * tenant. If issuing fails, the token stays unused.
 */
async function consumeLoginToken(db: Database, tokenHash: Buffer, ttlSeconds: number) {
  return db.app.transaction(async (tx) => {
    const [consumed] = await tx.execute<{ tenant_id: string; login_user_id: string }>(
      sql`select tenant_id, login_user_id from atrium_consume_login_token(${tokenHash})`,
    );
    if (!consumed) return null;
    const tenantId = Number(consumed.tenant_id);
    await tx.execute(sql`select set_config('atrium.tenant_id', ${String(tenantId)}, true)`);
    return issueAccessToken(tx, tenantId, Number(consumed.login_user_id), ttlSeconds);
  });
}

export const loginTokenHandlers = {
  async listUserLoginTokens({ auth, query, services: { db } }) {
    const controls = readControls(loginTokenView, query, auth);
    const body = await db.tenant(auth.tenantId, async (tx) => {
      const base = tx.select().from(userLoginTokens).where(controls.where).orderBy(desc(userLoginTokens.createdAt), desc(userLoginTokens.id));
      const rows = controls.limit ? await base.limit(controls.limit) : await base;
      return present(loginTokenView, tx, rows, controls, auth);
    });
    return { status: 200, body };
  },

  async getUserLoginToken({ auth, query, params, services: { db } }) {
    const controls = readControls(loginTokenView, query, auth);
    const [body] = await db.tenant(auth.tenantId, async (tx) => present(loginTokenView, tx, [await findLoginToken(tx, params.userLoginToken)], controls, auth));
    return { status: 200, body: body! };
  },

  async createUserLoginToken({ auth, body, services }) {
    // The non-e-mail create signs in the creator; a body `user_id` is ignored.
    const created = await services.db.tenant(auth.tenantId, async (tx) => {
      const [self] = await targets(tx, eq(users.id, auth.userId));
      if (!self) throw notFound('The user');
      return createLoginToken(tx, auth, services, self, 'user_id', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async createUserLoginTokenForEmail({ auth, body, services }) {
    // Resolving an address to a user reads a personal field: without the permission to see
    // e-mail addresses, even a 201 would tell whose address it is.
    requirePermission(auth, 'users.view-personal');
    const created = await services.db.tenant(auth.tenantId, async (tx) => {
      const target = soleActiveUser(await targets(tx, sql`lower(${users.email}) = lower(${body.email})`));
      if (!target) throw invalid({ email: [UNUSABLE_EMAIL] }, 'No login token can be created for this user.');
      return createLoginToken(tx, auth, services, target, 'email', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async deleteUserLoginToken({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      // An already used or deleted token keeps its deletion time: nothing changes.
      const [row] = await tx
        .update(userLoginTokens)
        .set({ deletedAt: sql`coalesce(${userLoginTokens.deletedAt}, now())` })
        .where(eq(userLoginTokens.uuid, params.userLoginToken))
        .returning({ id: userLoginTokens.id });
      if (!row) throw notFound('The login token');
    });
    return { status: 204 };
  },

  async loginWithToken({ body, request, services: { db, config, secrets } }) {
    const addressKey = clientAddressLimitKey(config, request.ip);
    // Counted before the token is looked at (429 beyond the limit); a success withdraws it.
    const attempt = await admitLoginAttempt(db, config, [addressKey]);
    // A value without this instance's signature never reaches the database.
    const answer = isSignedLoginTokenValue(secrets, body.token)
      ? await consumeLoginToken(db, hashToken(body.token), config.accessTokenTtlSeconds)
      : null;
    if (!answer) throw unauthorized('The login token is invalid, expired or already used.');
    await withdrawLoginAttempt(db, attempt);
    return { status: 200, body: answer };
  },
} satisfies Partial<Handlers>;
