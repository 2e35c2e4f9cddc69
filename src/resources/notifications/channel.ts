import { sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';

/**
 * The channel of live streams (stream.ts). Payloads: a stored batch (recipients
 * `(after, last]` of a dispatch), or a user whose unread count changed otherwise (read).
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

/** Tells the streams (every process) of a stored batch, on commit; the payload names the batch only. */
export async function announceStoredBatch(tx: Tx, batch: StoredBatch): Promise<void> {
  await tx.execute(sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${JSON.stringify(batch)})`);
}

/** Tells the user's streams (every process) that their unread count changed, on commit. */
export async function announceUnreadChange(tx: Tx, auth: Pick<Auth, 'tenantId' | 'userId'>): Promise<void> {
  const change: UnreadChange = { tenant_id: auth.tenantId, user_id: auth.userId };
  await tx.execute(sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${JSON.stringify(change)})`);
}

/** Tells every stream of the tenant (every process) that unread counts changed, on commit (reset). */
export async function announceTenantUnreadChange(tx: Tx, tenantId: number): Promise<void> {
  const change: UnreadChange = { tenant_id: tenantId, user_id: null };
  await tx.execute(sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${JSON.stringify(change)})`);
}
