import { presentedTokenHash, requirePermission } from '../../platform/auth/auth.ts';
import type { Permission } from '../../platform/auth/permissions.ts';
import { hashToken } from '../../platform/auth/tokens.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { coded, invalid, notFound } from '../../platform/http/problem.ts';
import { audit } from '../audit-events/record.ts';
import { holdSession } from '../auth/credentials.ts';
import { assertMayAdminister } from '../users/rules.ts';
import { hasInvisibleCharacter, INVISIBLE_CHARACTER_PROBLEM } from '../roles/names.ts';
import {
  deleteScimToken,
  insertScimToken,
  listScimTokens,
  newScimTokenValue,
  presentScimToken,
  SCIM_TOKEN_LIMIT,
  scimTokenCount,
  scimTokenMinter,
} from './tokens.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';

/**
 * What a minter must hold besides `users.administer`: SCIM reads, filters and writes every
 * user field, so a token is minted only by someone the API shows all of them to (and
 * stops working when they lose one, see atrium_authenticate_scim).
 */
const SCIM_FIELD_PERMISSIONS: Permission[] = ['users.view', 'users.view-personal', 'users.view-administrative'];

export const scimTokenHandlers = {
  async listScimTokens({ auth, services: { db } }) {
    const rows = await db.tenant(auth.tenantId, (tx) => listScimTokens(tx).limit(SCIM_TOKEN_LIMIT));
    return { status: 200, body: rows.map(presentScimToken) };
  },

  async createScimToken(ctx) {
    const { auth, body, services } = ctx;
    for (const permission of SCIM_FIELD_PERMISSIONS) requirePermission(auth, permission);
    const name = body.name.trim();
    // The name labels the token's events in the audit trail, as a role's name labels the role.
    if (hasInvisibleCharacter(name)) throw invalid({ name: [coded('pattern', INVISIBLE_CHARACTER_PROBLEM)] });
    const token = newScimTokenValue();
    const created = await services.db.tenant(auth.tenantId, async (tx) => {
      // The minter's session is held: ended meanwhile (a logout mark, a password change), the token would outlive it.
      await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      // Two concurrent creates must not both pass the count.
      await lockTenantScope(tx, 'scim-tokens');
      if ((await scimTokenCount(tx)) >= SCIM_TOKEN_LIMIT) {
        throw invalid({ name: [coded('limit_reached', `a tenant holds at most ${SCIM_TOKEN_LIMIT} SCIM tokens; delete one first`)] });
      }
      const row = await insertScimToken(tx, auth.tenantId, auth.userId, name, hashToken(token), body.expires_in);
      await audit(tx, ctx, {
        action: 'scim_token.created',
        target: { type: 'scim_token', id: row.id, label: row.name },
        details: { expires_at: row.expiresAt?.toISOString() ?? null },
      });
      return row;
    });
    return { status: 201, body: { ...presentScimToken(created), token } };
  },

  async deleteScimToken(ctx) {
    const { auth, params, services } = ctx;
    await services.db.tenant(auth.tenantId, async (tx) => {
      // The token acts with its minter's authority: a caller who may not administer them (their role lists a
      // permission the caller lacks) may not cut it off either, as they may not mark them for logout (403).
      const minter = await scimTokenMinter(tx, params.scimTokenId);
      if (!minter) throw notFound('The SCIM token');
      assertMayAdminister(auth, minter);
      const row = await deleteScimToken(tx, params.scimTokenId);
      if (!row) throw notFound('The SCIM token');
      await audit(tx, ctx, { action: 'scim_token.revoked', target: { type: 'scim_token', id: row.id, label: row.name } });
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
