/**
 * How resources write the audit trail (docs/audit.md): `audit(tx, ctx, entry)` inside the
 * change's transaction, with the actor and origin taken from the request (`ctx`: the
 * handler's context), or from a command or job (`commandSource`, `jobSource`).
 */
import type { FastifyRequest } from 'fastify';
import { changesBetween, recordAudit, requestOrigin, type AuditEntry, type AuditSource } from '../../platform/audit/audit.ts';
import type { Changes } from '../../platform/audit/table.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import { checkBeforeCommit, type Tx } from '../../platform/database/database.ts';
import { holdLiveUser } from '../users/queries.ts';
import { accountGone } from '../users/rules.ts';

export { userLabel } from '../../platform/audit/audit.ts';

/** What a handler's context gives the trail: the request and its principal. */
export interface RequestContext {
  request: FastifyRequest;
  auth: Pick<Auth, 'userId' | 'userLabel'>;
}

/** The signed-in user of `ctx` (named as their token's look-up found them), and where the request came from. */
export function requestSource(ctx: RequestContext): AuditSource {
  return { actor: { type: 'user', id: ctx.auth.userId, label: ctx.auth.userLabel }, origin: requestOrigin(ctx.request) };
}

/** An operator at the command line (`atrium <command>`). */
export const commandSource = (command: string): AuditSource => ({ actor: { type: 'command_line', id: null, label: null }, origin: { command } });

/** Atrium itself, in the job `job`. */
export const jobSource = (job: string): AuditSource => ({ actor: { type: 'system', id: null, label: null }, origin: { job } });

/**
 * Records one audit event in `tx`: by the request's user (`ctx`), or by `source`. A
 * request's user is held until the change commits (`holdLiveUser`): a blackout of them that
 * committed while the request ran (it waited for a lock) ends the request (401), so that
 * no event naming the person commits after their trail was erased (docs/audit.md#erasure).
 * It is the change's last write of the user's rows: a row of theirs locked after it (their
 * submission, subscription, token) would wait for a blackout that waits for the hold.
 * The hold leaves with the event and is judged before the commit (`checkBeforeCommit`):
 * no round trip of its own when the handler reads after it.
 */
export async function audit(tx: Tx, by: RequestContext | AuditSource, entry: AuditEntry): Promise<void> {
  if (!('request' in by)) return recordAudit(tx, by, entry);
  await recordAudit(tx, requestSource(by), entry);
  await checkBeforeCommit(tx, holdLiveUser(tx, by.auth.userId), (held) => (held ? undefined : accountGone()));
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
