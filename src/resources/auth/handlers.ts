import { requestOrigin } from '../../platform/audit/audit.ts';
import { checkPassword, matchedHashes, signInShare } from '../../platform/auth/passwords.ts';
import { errorLogFields } from '../../platform/http/error-handler.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { unauthorized } from '../../platform/http/problem.ts';
import { audit, userLabel } from '../audit-events/record.ts';
import {
  admitLoginAttempt,
  clearLoginFailures,
  findSignInUser,
  findTenantId,
  issueAccessToken,
  renewPasswordHash,
  revokeAccessToken,
  stillSignsIn,
  withdrawLoginAttempt,
} from './queries.ts';
import { loginLimitKeys } from './rules.ts';

/** One answer for every refused sign-in: which part was wrong is not told. */
const credentialsInvalid = () => unauthorized('The tenant, username or password is wrong.', 'credentials_invalid');

export const authHandlers = {
  async login({ body, request, services: { db, config } }) {
    const tenantId = await findTenantId(db, body.tenant);
    const user = tenantId ? await findSignInUser(db, tenantId, body.username) : undefined;
    // Per name, per client address and, for an existing user, per user id (a rename does
    // not reset it). Counted before the password is checked, in one statement: a burst gets
    // no more checks than the limit.
    const keys = loginLimitKeys(config, body.tenant, body.username, request.ip, tenantId && user ? { tenantId, userId: user.id } : undefined);
    const attempt = await admitLoginAttempt(db, config, keys);
    // Always verify (against a dummy hash when there is no user): same answer, same time.
    const check = await checkPassword(user?.passwordHash, body.password, signInShare(body.tenant));
    // A failure stays counted on every key.
    if (!tenantId || !user || check === 'wrong' || !user.active) throw credentialsInvalid();
    const [byName, byAddress, byUser] = keys;
    await clearLoginFailures(db, [byName!, byUser!]);
    await withdrawLoginAttempt(db, attempt, [byAddress!]);
    // A hash made at another cost, or of the password as typed, is replaced (below); one that cannot be made leaves it.
    const hashes = await matchedHashes(user.passwordHash!, body.password, check, tenantId, (error) =>
      request.log.warn(errorLogFields(error), 'password hash not renewed'),
    );
    const answer = await db.tenant(tenantId, async (tx) => {
      // The password checked above may have changed since (`stillSignsIn`).
      if (!(await stillSignsIn(tx, user.id, hashes))) throw credentialsInvalid();
      if (hashes.length === 2) await renewPasswordHash(tx, user.id, ...hashes);
      // A session begun: the user signing in acts. The token's value is a credential and
      // stays out of the trail; a refused sign-in is counted above, not recorded.
      const label = userLabel(user);
      await audit(
        tx,
        { actor: { type: 'user', id: user.id, label }, origin: requestOrigin(request) },
        { action: 'access_token.created', target: { type: 'user', id: user.id, label }, details: { expires_in: config.accessTokenTtlSeconds } },
      );
      return issueAccessToken(tx, tenantId, user.id, config.accessTokenTtlSeconds);
    });
    return { status: 200, body: answer };
  },

  async logout(ctx) {
    const {
      auth,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // A token revoked meanwhile (a concurrent sign-out) changes nothing: no event.
      if (await revokeAccessToken(tx, auth.tenantId, auth.tokenId)) {
        await audit(tx, ctx, { action: 'access_token.revoked', target: { type: 'user', id: auth.userId, label: null } });
      }
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
