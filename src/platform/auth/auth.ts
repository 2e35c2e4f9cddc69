import type { FastifyRequest } from 'fastify';
import { userLabel } from '../audit/audit.ts';
import type { Database } from '../database/database.ts';
import type { Secrets } from '../secrets/secrets.ts';
import { type Permission } from './permissions.ts';
import type { Principal, RecentPrincipals } from './recent-principals.ts';
import { forbidden, unauthorized } from '../http/problem.ts';
import { isTextInteger } from '../http/validation.ts';
import { hashToken } from './tokens.ts';

/** Who is calling: resolved from the bearer token alone. */
export interface Auth {
  tenantId: number;
  userId: number;
  tokenId: number;
  permissions: ReadonlySet<Permission>;
  /** The user must change their password (`request_password_change`): the session is restricted until then. */
  passwordChangeRequired: boolean;
  /**
   * The user's label in the audit trail (full name, else username), read with the token:
   * the events of this request name them so. Up to a second old (`RecentPrincipals`).
   */
  userLabel: string;
  /** The installation's keys, for what answers to this caller must sign (picture URLs). */
  secrets: Secrets;
}

declare module 'fastify' {
  interface FastifyRequest {
    auth: Auth | null;
  }
  interface FastifyContextConfig {
    /** The spec operation a route serves (set by the operation binding). */
    operationId?: string;
  }
}

const BEARER = /^Bearer +([A-Za-z0-9._~+/-]{16,512}=*) *$/i;

/** Who a permission rule judges: enough of `Auth` to test the rules without a session. */
export type Caller = Pick<Auth, 'userId' | 'permissions'>;

export function can(auth: Pick<Auth, 'permissions'>, permission: Permission): boolean {
  return auth.permissions.has(permission);
}

export function requirePermission(auth: Pick<Auth, 'permissions'>, permission: Permission): void {
  if (!can(auth, permission)) throw forbidden(`This requires the permission "${permission}".`, 'permission_missing');
}

/**
 * Self or permission: a caller acting on their own user (`userId` is theirs) needs no
 * permission, anyone else needs `permission` (403 as `requirePermission`). The
 * `unless-self` form of `x-permission` (docs/api-conventions.md#x-permission-string-and-unless-self-forms).
 */
export function requirePermissionUnlessSelf(auth: Caller, permission: Permission, userId: number): void {
  if (userId !== auth.userId) requirePermission(auth, permission);
}

/**
 * What a session may still do while its user must change their password: change it
 * (`updateUser` on oneself, whose handler then accepts only the password keys, see
 * `restrictedSelfUpdateErrors`), read oneself, sign out. `self` operations only on the
 * caller's own `{user}`. A list of its own, not the operations whose `x-permission` has
 * the `unless-self` form: of those, marking oneself for logout stays refused, and the
 * picture routes, which read the token themselves, carry no `x-permission`.
 */
const WHILE_PASSWORD_CHANGE_REQUIRED: Record<string, 'any' | 'self'> = {
  logout: 'any',
  getCurrentUser: 'any',
  getUser: 'self',
  updateUser: 'self',
  getProfilePicture: 'self',
  getProfilePictureNamed: 'self',
};

/**
 * The user id the path's `{user}` names (undefined: none, or no id). Read before validation
 * (authentication of most operations) it is text, read as validation will read it (`012` is
 * 12); read after it (the picture routes authenticate in their handler) it is a number.
 */
function pathUserId(request: FastifyRequest): number | undefined {
  const user = (request.params as Record<string, unknown> | undefined)?.user;
  if (typeof user === 'number') return user;
  return typeof user === 'string' && isTextInteger(user) ? Number(user) : undefined;
}

/** Refuses (403) every operation but those above while `auth`'s user must change their password. */
function assertSessionMayUse(auth: Auth, request: FastifyRequest): void {
  if (!auth.passwordChangeRequired) return;
  const allowed = WHILE_PASSWORD_CHANGE_REQUIRED[request.routeOptions.config?.operationId ?? ''];
  if (allowed === 'any' || (allowed === 'self' && pathUserId(request) === auth.userId)) return;
  throw forbidden(
    'Your password must be changed first: until then this session may only change your own password ' +
      '(PUT /api/users/{your id} with password and old_password), read your own user and picture, and sign out.',
    'password_change_required',
  );
}

/** A row of `atrium_authenticate`. */
interface PrincipalRow {
  tenant_id: string;
  user_id: string;
  token_id: string;
  permissions: Permission[] | null;
  password_change_required: boolean;
  first_name: string | null;
  last_name: string | null;
  username: string;
}

/** The principal `tokenHash` yields now (null: none), in one query through the security-definer `atrium_authenticate`. */
export async function lookUpPrincipal(db: Database, tokenHash: Buffer): Promise<Principal | null> {
  // atrium_authenticate only reads: safe to repeat on a fresh connection.
  const [row] = await db.read(
    () => db.appSql<PrincipalRow[]>`
    select tenant_id, user_id, token_id, permissions, password_change_required, first_name, last_name, username
    from atrium_authenticate(${tokenHash})`,
  );
  if (!row) return null;
  return {
    tenantId: Number(row.tenant_id),
    userId: Number(row.user_id),
    tokenId: Number(row.token_id),
    permissions: row.permissions ?? [],
    passwordChangeRequired: row.password_change_required === true,
    userLabel: userLabel({ firstName: row.first_name, lastName: row.last_name, username: row.username }),
  };
}

/**
 * Bearer token → Auth, in one query through the security-definer `atrium_authenticate`,
 * which also says whether the user must change their password; such a session is
 * restricted here, for every operation (`assertSessionMayUse`). A safe request given
 * `recent` may take the principal from a look-up of the last second in this process: a
 * revocation, logout mark, deactivation or permission change committed by another process
 * holds here within a second, one made through this process at once (recent-principals.ts).
 */
export async function authenticateRequest(db: Database, secrets: Secrets, request: FastifyRequest, recent?: RecentPrincipals): Promise<Auth> {
  const tokenHash = presentedTokenHash(request);
  if (!tokenHash) throw unauthorized();
  const lookUp = () => lookUpPrincipal(db, tokenHash);
  const principal = await (recent ? recent.remembered(tokenHash, lookUp) : lookUp());
  if (!principal) throw unauthorized('The access token is invalid, expired or revoked.', 'token_invalid');
  const auth: Auth = {
    tenantId: principal.tenantId,
    userId: principal.userId,
    tokenId: principal.tokenId,
    permissions: new Set(principal.permissions),
    passwordChangeRequired: principal.passwordChangeRequired,
    userLabel: principal.userLabel,
    secrets,
  };
  assertSessionMayUse(auth, request);
  return auth;
}

/** The hash of the bearer token `request` presents (long-lived requests re-check it with `stillAuthenticated`). */
export function presentedTokenHash(request: FastifyRequest): Buffer | null {
  const match = BEARER.exec(request.headers.authorization ?? '');
  return match?.[1] ? hashToken(match[1]) : null;
}

/**
 * Which of the token hashes still authenticate (not revoked or expired, user active, not
 * deleted, not marked for logout since) and may still hold a long-lived request, in ONE
 * query, as hex strings. A session whose user must change their password may not: it may
 * only change the password, read its user and sign out (`assertSessionMayUse`).
 */
export async function stillAuthenticated(db: Database, tokenHashes: Buffer[]): Promise<Set<string>> {
  if (tokenHashes.length === 0) return new Set();
  const hashes = tokenHashes.map((h) => h.toString('hex'));
  const rows = await db.read(
    () => db.appSql<{ hash: string }[]>`
    select hash from unnest(${hashes}::text[]) as hash
    where exists (select 1 from atrium_authenticate(decode(hash, 'hex')) where not password_change_required)`,
  );
  return new Set(rows.map((row) => row.hash));
}
