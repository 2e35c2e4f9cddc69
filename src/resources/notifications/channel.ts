import { sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';

/**
 * The channel of live streams (stream.ts). Payloads: a stored batch (recipients
 * `(after, last]` of a dispatch), a user whose unread count changed otherwise (read), or
 * a user some of whose sessions ended (their streams are checked at once).
 */
export const NOTIFICATIONS_CHANNEL = 'atrium_notifications';
export interface StoredBatch {
  tenant_id: number;
  dispatch_id: string;
  after: number;
  last: number;
}
export interface UnreadChange {
  tenant_id: number;
  /** null: every user of the tenant (a reset). */
  user_id: number | null;
}

export interface SessionsEnded {
  tenant_id: number;
  user_id: number;
  sessions_ended: true;
}

/** Sends `notice` on the channel in `tx`: PostgreSQL delivers it on commit, and not at all on rollback. */
async function announce(tx: Tx, notice: StoredBatch | UnreadChange | SessionsEnded): Promise<void> {
  await tx.execute(sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${JSON.stringify(notice)})`);
}

/** Tells the streams (every process) of a stored batch, on commit; the payload names the batch only. */
export async function announceStoredBatch(tx: Tx, batch: StoredBatch): Promise<void> {
  await announce(tx, batch);
}

/** Tells the user's streams (every process) that their unread count changed, on commit. */
export async function announceUnreadChange(tx: Tx, auth: Pick<Auth, 'tenantId' | 'userId'>): Promise<void> {
  await announce(tx, { tenant_id: auth.tenantId, user_id: auth.userId });
}

/** Tells every stream of the tenant (every process) that unread counts changed, on commit (reset). */
export async function announceTenantUnreadChange(tx: Tx, tenantId: number): Promise<void> {
  await announce(tx, { tenant_id: tenantId, user_id: null });
}

/**
 * Tells the user's streams (every process) that sessions of theirs ended in `tx` (a logout
 * mark, deactivation, deletion, blackout, sign-out, password change, or a password change
 * required of them, which leaves a session no stream), on commit: each
 * process checks those streams' sessions then and ends the ones that no longer
 * authenticate, instead of waiting for the next heartbeat. Identical notices of one
 * transaction are delivered once.
 */
export async function announceSessionsEnded(tx: Tx, auth: Pick<Auth, 'tenantId' | 'userId'>): Promise<void> {
  await announce(tx, { tenant_id: auth.tenantId, user_id: auth.userId, sessions_ended: true });
}
