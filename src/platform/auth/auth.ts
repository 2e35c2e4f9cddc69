import type { FastifyRequest } from 'fastify';
import type { Database } from '../database/database.ts';
import type { Secrets } from '../secrets/secrets.ts';
import { type Permission } from '../../resources/roles/permissions.ts';
import { forbidden, unauthorized } from '../http/problem.ts';
import { hashToken } from './tokens.ts';

/** Who is calling: resolved from the bearer token alone (decisions §2). */
export interface Auth {
  tenantId: number;
  userId: number;
  tokenId: number;
  permissions: ReadonlySet<Permission>;
  /** The installation's keys, for what answers to this caller must sign (picture URLs). */
  secrets: Secrets;
}

declare module 'fastify' {
  interface FastifyRequest {
    auth: Auth | null;
  }
}

const BEARER = /^Bearer +([A-Za-z0-9._~+/-]{16,512}=*) *$/i;

export function can(auth: Auth, permission: Permission): boolean {
  return auth.permissions.has(permission);
}

export function requirePermission(auth: Auth, permission: Permission): void {
  if (!can(auth, permission)) throw forbidden(`This requires the permission "${permission}".`);
}

/** Bearer token → Auth, in one query through the security-definer `atrium_authenticate`. */
export async function authenticateRequest(db: Database, secrets: Secrets, request: FastifyRequest): Promise<Auth> {
  const match = BEARER.exec(request.headers.authorization ?? '');
  if (!match?.[1]) throw unauthorized();
  const [row] = await db.appSql<{ tenant_id: string; user_id: string; token_id: string; permissions: Permission[] }[]>`
    select tenant_id, user_id, token_id, permissions from atrium_authenticate(${hashToken(match[1])})`;
  if (!row) throw unauthorized('The access token is invalid, expired or revoked.');
  return {
    tenantId: Number(row.tenant_id),
    userId: Number(row.user_id),
    tokenId: Number(row.token_id),
    permissions: new Set(row.permissions),
    secrets,
  };
}

/** The hash of the bearer token `request` presents (long-lived requests re-check it with `stillAuthenticated`). */
export function presentedTokenHash(request: FastifyRequest): Buffer | null {
  const match = BEARER.exec(request.headers.authorization ?? '');
  return match?.[1] ? hashToken(match[1]) : null;
}

/**
 * Which of the token hashes still authenticate (not revoked or expired, user active, not
 * deleted, not marked for logout since), in ONE query, as hex strings.
 */
export async function stillAuthenticated(db: Database, tokenHashes: Buffer[]): Promise<Set<string>> {
  if (tokenHashes.length === 0) return new Set();
  const rows = await db.appSql<{ hash: string }[]>`
    select hash from unnest(${tokenHashes.map((h) => h.toString('hex'))}::text[]) as hash
    where exists (select 1 from atrium_authenticate(decode(hash, 'hex')))`;
  return new Set(rows.map((row) => row.hash));
}
