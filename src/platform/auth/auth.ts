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
