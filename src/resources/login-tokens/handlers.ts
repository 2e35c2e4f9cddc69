import type { Auth } from '../../platform/auth/auth.ts';
import { hashToken } from '../../platform/auth/tokens.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound, unauthorized } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord } from '../../platform/result-controls/listing.ts';
import type { Secrets } from '../../platform/secrets/secrets.ts';
import { admitLoginAttempt, withdrawLoginAttempt } from '../auth/queries.ts';
import { clientAddressLimitKey } from '../auth/rules.ts';
import { consumeLoginToken, insertLoginToken, softDeleteLoginToken, tokenTarget, tokenTargetsWithEmail, type TokenTarget } from './queries.ts';
import { refuseUnlessSignInHeld, requireEmailLookup, soleActiveUser, unusableTarget } from './rules.ts';
import { isSignedLoginTokenValue, newLoginTokenValue } from './token-value.ts';
import { loginTokenListing, loginTokenView } from './view.ts';

/** Stores a new token for `target` (hash only) and answers the record plus the value, once. */
async function createLoginToken(tx: Tx, auth: Auth, secrets: Secrets, target: TokenTarget, field: string, expiresIn: number) {
  await refuseUnlessSignInHeld(tx, auth, target, field);
  const token = newLoginTokenValue(secrets);
  const [record] = await presentAll(loginTokenView, tx, [await insertLoginToken(tx, auth, target.id, hashToken(token), expiresIn)], auth);
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

  async createUserLoginToken({ auth, body, services: { db, secrets } }) {
    // The non-e-mail create signs in the creator; a body `user_id` is ignored.
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const self = await tokenTarget(tx, auth.userId);
      if (!self) throw notFound('The user');
      return createLoginToken(tx, auth, secrets, self, 'user_id', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async createUserLoginTokenForEmail({ auth, body, services: { db, secrets } }) {
    requireEmailLookup(auth);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const target = soleActiveUser(await tokenTargetsWithEmail(tx, body.email));
      if (!target) throw unusableTarget('email');
      return createLoginToken(tx, auth, secrets, target, 'email', body.expires_in);
    });
    return { status: 201, body: created };
  },

  async deleteUserLoginToken({ auth, params, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      // An already used or deleted token keeps its deletion time: nothing changes.
      if (!(await softDeleteLoginToken(tx, params.userLoginToken))) throw notFound('The login token');
    });
    return { status: 204 };
  },

  async loginWithToken({ body, request, services: { db, config, secrets } }) {
    const addressKey = clientAddressLimitKey(config, request.ip);
    // Counted before the token is looked at (429 beyond the limit); a success withdraws it.
    const attempt = await admitLoginAttempt(db, config, [addressKey]);
    // A value without this instance's signature never reaches the database.
    const answer = isSignedLoginTokenValue(secrets, body.token) ? await consumeLoginToken(db, hashToken(body.token), config.accessTokenTtlSeconds) : null;
    if (!answer) throw unauthorized('The login token is invalid, expired or already used.', 'login_token_invalid');
    await withdrawLoginAttempt(db, attempt);
    return { status: 200, body: answer };
  },
} satisfies Partial<Handlers>;
