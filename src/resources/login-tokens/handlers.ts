import { presentedTokenHash, requirePermission, type Auth } from '../../platform/auth/auth.ts';
import { hashToken } from '../../platform/auth/tokens.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound, unauthorized } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import type { Secrets } from '../../platform/secrets/secrets.ts';
import { changesBetween, requestOrigin } from '../../platform/audit/audit.ts';
import { audit, type RequestContext } from '../audit-events/record.ts';
import { holdSession } from '../auth/credentials.ts';
import { admitLoginAttempt, withdrawLoginAttempt } from '../auth/queries.ts';
import { clientAddressLimitKey } from '../auth/rules.ts';
import {
  consumeLoginToken,
  heldCreatorPermissions,
  heldTokenTarget,
  insertLoginToken,
  softDeleteLoginToken,
  tokenTarget,
  tokenTargetsWithEmail,
  type TokenTarget,
} from './queries.ts';
import { refuseUnlessSignInHeld, requireEmailLookup, soleActiveUser, unusableTarget } from './rules.ts';
import { isSignedLoginTokenValue, newLoginTokenValue } from './token-value.ts';
import { loginTokenListing, loginTokenView } from './view.ts';

/** Stores a new token for `target` (hash only) and answers the record plus the value, once. */
async function createLoginToken(tx: Tx, ctx: RequestContext & { auth: Auth }, secrets: Secrets, target: TokenTarget, field: string, expiresIn: number) {
  const { auth } = ctx;
  // The creator's session is held: ended meanwhile (a logout mark, a password change), this token would outlive it.
  await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
  // The user it signs in is judged as held: a new role or a deactivation committed since the look-up is seen.
  const held = await heldTokenTarget(tx, target.id);
  if (!held || !soleActiveUser([held])) throw unusableTarget(field);
  // So is the creator's authority: a role update since the request was authenticated (a permission taken) is seen.
  const creator: Auth = { ...auth, permissions: await heldCreatorPermissions(tx, auth) };
  requirePermission(creator, 'login-tokens.administer');
  if (field === 'email') requireEmailLookup(creator);
  await refuseUnlessSignInHeld(tx, creator, held, field);
  const token = newLoginTokenValue(secrets);
  const row = await insertLoginToken(tx, auth, target.id, hashToken(token), expiresIn);
  // The value is a credential: the trail names the token by its uuid only.
  await audit(tx, ctx, {
    action: 'login_token.created',
    target: { type: 'login_token', id: row.uuid, label: null },
    changes: changesBetween(null, { login_user_id: row.loginUserId, expires_at: row.expiresAt }),
  });
  const [record] = await presentAll(loginTokenView, tx, [row], auth);
  return { ...record!, token };
}

export const loginTokenHandlers = {
  async listUserLoginTokens({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, loginTokenListing, query, auth) };
  },

  async getUserLoginToken({ auth, query, params, services: { db } }) {
    const body = await showRecord(db, auth.tenantId, loginTokenListing, query, auth, { key: params.userLoginToken }, 'The login token');
    return { status: 200, body };
  },

  async createUserLoginToken(ctx) {
    const {
      auth,
      body,
      services: { db, secrets },
    } = ctx;
    // The non-e-mail create signs in the creator; a body `user_id` is ignored.
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const self = await tokenTarget(tx, auth.userId);
      if (!self) throw notFound('The user');
      return createLoginToken(tx, ctx, secrets, self, 'user_id', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async createUserLoginTokenForEmail(ctx) {
    const {
      auth,
      body,
      services: { db, secrets },
    } = ctx;
    requireEmailLookup(auth);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const target = soleActiveUser(await tokenTargetsWithEmail(tx, body.email));
      if (!target) throw unusableTarget('email');
      return createLoginToken(tx, ctx, secrets, target, 'email', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async deleteUserLoginToken(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // An already used or deleted token keeps its deletion time: nothing changes.
      const deleted = await softDeleteLoginToken(tx, params.userLoginToken);
      if (!deleted) throw notFound('The login token');
      if (deleted.changed) await audit(tx, ctx, { action: 'login_token.deleted', target: { type: 'login_token', id: params.userLoginToken, label: null } });
    });
    return { status: 204 };
  },

  async loginWithToken({ body, request, services: { db, config, secrets } }) {
    const addressKey = clientAddressLimitKey(config, request.ip);
    // Counted before the token is looked at (429 beyond the limit); a success withdraws it.
    const attempt = await admitLoginAttempt(db, config, [addressKey]);
    // A value without this instance's signature never reaches the database.
    const answer = isSignedLoginTokenValue(secrets, body.token)
      ? await consumeLoginToken(db, hashToken(body.token), config.accessTokenTtlSeconds, requestOrigin(request))
      : null;
    if (!answer) throw unauthorized('The login token is invalid, expired or already used.', 'login_token_invalid');
    await withdrawLoginAttempt(db, attempt);
    return { status: 200, body: answer };
  },
} satisfies Partial<Handlers>;
