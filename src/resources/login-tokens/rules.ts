/**
 * The rules of login tokens: who may be signed in by a token, and what a token's state is
 * (the spec, operationId createUserLoginTokenForEmail and schema UserLoginToken;
 * docs/permissions.md#the-no-escalation-rule).
 */
import { requirePermission, type Auth } from '../../platform/auth/auth.ts';
import { permissionsLacking } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { coded, invalid } from '../../platform/http/problem.ts';
import { usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import type { LoginTokenRow, TokenTarget } from './queries.ts';

/**
 * The e-mail create refuses every unusable address with this one answer, whatever the
 * reason (no such address, inactive, deleted or shared by several users, or a user holding
 * a permission or an entity right the caller lacks): it reveals neither whether the
 * address exists nor what its owner may do.
 */
export const UNUSABLE_EMAIL = 'does not name exactly one active user whose every permission and entity right you hold';

/** The refusal of a token for a user it may not sign in, on `field`. */
export const unusableTarget = (field: string) => invalid({ [field]: [coded('not_eligible', UNUSABLE_EMAIL)] }, 'No login token can be created for this user.');

/**
 * Resolving an address to a user reads a personal field: without the permission to see
 * e-mail addresses, even a 201 would tell whose address it is (403 before any lookup).
 */
export function requireEmailLookup(auth: Auth): void {
  requirePermission(auth, 'users.view-personal');
}

/** The one active, not deleted user among `candidates`, or null (none, or several). */
export function soleActiveUser(candidates: readonly TokenTarget[]): TokenTarget | null {
  const usable = candidates.filter((user) => user.active && !user.deletedAt);
  return usable.length === 1 ? usable[0]! : null;
}

/**
 * No escalation: a token may not sign in a user holding a permission, or a right through
 * entity permissions, that its creator lacks (both checked again when the token is used,
 * by `atrium_consume_login_token`). 422 on `field` otherwise; the entity rights are looked
 * up (one query) only when the permissions pass.
 */
export async function refuseUnlessSignInHeld(tx: Tx, creator: Auth, target: TokenTarget, field: string): Promise<void> {
  if (permissionsLacking(creator, target.permissions).length > 0 || (await usersHoldingRightsBeyond(tx, creator, [target.id])).size > 0) {
    throw unusableTarget(field);
  }
}

/** used → deleted → expired → active: the first that applies (a used token is also deleted). */
export function loginTokenState(row: Pick<LoginTokenRow, 'usedAt' | 'deletedAt' | 'expiresAt'>, now = new Date()): 'active' | 'used' | 'deleted' | 'expired' {
  if (row.usedAt) return 'used';
  if (row.deletedAt) return 'deleted';
  if (row.expiresAt <= now) return 'expired';
  return 'active';
}
