/**
 * How resources write the audit trail (docs/audit.md): `audit(tx, ctx, entry)` inside the
 * change's transaction, with the actor and origin taken from the request (`ctx`: the
 * handler's context), or from a command or job (`commandSource`, `jobSource`).
 */
import { sql, type SQL } from 'drizzle-orm';
import type { FastifyRequest } from 'fastify';
import { changesBetween, recordAudit, requestOrigin, type AuditEntry, type AuditSource } from '../../platform/audit/audit.ts';
import type { Changes } from '../../platform/audit/table.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { users } from '../users/table.ts';

/** A user's label in the trail: their full name, or their username when they have none. */
export function userLabel(user: { firstName: string | null; lastName: string | null; username: string }): string {
  const name = [user.firstName, user.lastName].filter((part) => part !== null && part.trim() !== '').join(' ');
  return name === '' ? user.username : name;
}

/** `userLabel` of the user `userId`, as a subquery the event's insert evaluates (no round trip of its own). */
export function userLabelOf(userId: number): SQL {
  return sql`(select coalesce(nullif(concat_ws(' ', nullif(trim(${users.firstName}), ''), nullif(trim(${users.lastName}), '')), ''), ${users.username})
    from ${users} where ${users.id} = ${userId})`;
}

/** What a handler's context gives the trail: the request and its principal. */
export interface RequestContext {
  request: FastifyRequest;
  auth: Pick<Auth, 'userId'>;
}

/** The signed-in user of `ctx`, and where the request came from. */
export function requestSource(ctx: RequestContext): AuditSource {
  return { actor: { type: 'user', id: ctx.auth.userId, label: userLabelOf(ctx.auth.userId) }, origin: requestOrigin(ctx.request) };
}

/** An operator at the command line (`atrium <command>`). */
export const commandSource = (command: string): AuditSource => ({ actor: { type: 'command_line', id: null, label: null }, origin: { command } });

/** Atrium itself, in the job `job`. */
export const jobSource = (job: string): AuditSource => ({ actor: { type: 'system', id: null, label: null }, origin: { job } });

/** Records one audit event in `tx`: by the request's user (`ctx`), or by `source`. */
export async function audit(tx: Tx, by: RequestContext | AuditSource, entry: AuditEntry): Promise<void> {
  await recordAudit(tx, 'request' in by ? requestSource(by) : by, entry);
}

/** Bookkeeping fields every record carries: a change is what the caller changed, not when. */
const BOOKKEEPING = new Set(['created_at', 'updated_at', 'deleted_at']);

/**
 * `changesBetween` of two records as the API presents them (null: none), leaving out the
 * bookkeeping timestamps. For resources whose write answers its presented record.
 */
export function recordChanges(before: Readonly<Record<string, unknown>> | null, after: Readonly<Record<string, unknown>> | null): Changes {
  const fields = (record: Readonly<Record<string, unknown>> | null) =>
    record && Object.fromEntries(Object.entries(record).filter(([key]) => !BOOKKEEPING.has(key)));
  return changesBetween(fields(before), fields(after));
}
