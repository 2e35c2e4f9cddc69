import { and, count, eq, sql } from 'drizzle-orm';
import { transactionTenant, type Tx } from '../../platform/database/database.ts';
import { updateTime } from '../../platform/database/update-time.ts';
import { presentContents } from '../notifications/contents.ts';
import type { NotificationData } from '../notifications/table.ts';
import { users } from '../users/table.ts';
import type { PushDelivery, PushSettlement, SubscriptionInput } from './rules.ts';
import { pushSubscriptions } from './table.ts';

/** Whether the caller is a group account (undefined when the caller's row is gone). */
export async function callerAccount(tx: Tx, userId: number): Promise<{ groupAccount: boolean } | undefined> {
  const [caller] = await tx.select({ groupAccount: users.groupAccount }).from(users).where(eq(users.id, userId));
  return caller;
}

/**
 * What the user holds. Counted under the lock of the user's row that the registration
 * holds (`holdSession`, `update`): the user's registrations then run one at a time, so
 * concurrent ones cannot pass the cap together.
 */
export async function heldSubscriptions(tx: Tx, userId: number, endpoint: string): Promise<{ count: number; holdsEndpoint: boolean }> {
  const [held] = await tx
    .select({ count: count(), holdsEndpoint: sql<boolean>`coalesce(bool_or(${pushSubscriptions.endpoint} = ${endpoint}), false)` })
    .from(pushSubscriptions)
    .where(eq(pushSubscriptions.userId, userId));
  return held!;
}

/**
 * Stores the user's subscription, or updates it (keys, user agent; the last failure is
 * cleared) when the tenant has the endpoint already and it is the user's own. Answers no
 * row when another user holds the endpoint, whose record is left as it is.
 */
export function saveSubscription(tx: Tx, owner: { tenantId: number; userId: number }, input: SubscriptionInput, userAgent: string | null) {
  return tx
    .insert(pushSubscriptions)
    .values({ tenantId: owner.tenantId, userId: owner.userId, endpoint: input.endpoint, p256dh: input.keys.p256dh, auth: input.keys.auth, userAgent })
    .onConflictDoUpdate({
      target: [pushSubscriptions.tenantId, pushSubscriptions.endpoint],
      set: {
        p256dh: input.keys.p256dh,
        auth: input.keys.auth,
        userAgent,
        lastFailureStatus: null,
        lastFailure: null,
        lastFailureAt: null,
        // The inserted row's own time (its default): Citus refuses a function that is not immutable in DO UPDATE SET.
        // The subscription sent again as it is stored (a browser does on every page load) changes nothing: updated_at
        // stays, as after any write that changes nothing (`updateTime`).
        updatedAt: updateTime(
          pushSubscriptions.updatedAt,
          sql`(${pushSubscriptions.p256dh}, ${pushSubscriptions.auth}, ${pushSubscriptions.userAgent}, ${pushSubscriptions.lastFailureStatus},
            ${pushSubscriptions.lastFailure}, ${pushSubscriptions.lastFailureAt}) is distinct from (excluded.p256dh, excluded.auth, excluded.user_agent, null, null, null)`,
          sql`excluded.updated_at`,
        ),
      },
      setWhere: eq(pushSubscriptions.userId, owner.userId),
    })
    .returning();
}

/** Deletes the user's own subscription `id`; whether there was one. */
export async function deleteOwnSubscription(tx: Tx, userId: number, id: number): Promise<boolean> {
  const deleted = await tx
    .delete(pushSubscriptions)
    .where(and(eq(pushSubscriptions.id, id), eq(pushSubscriptions.userId, userId)))
    .returning({ id: pushSubscriptions.id });
  return deleted.length > 0;
}

/**
 * Deletes all of the user's subscriptions (a leaver cut off, a blackout), locked in id
 * order first as a delivery's settlement locks them (`recordOutcomes`): a delivery and a
 * deprovisioning of one user wait for each other instead of deadlocking.
 */
export async function deleteUserSubscriptions(tx: Tx, userId: number): Promise<void> {
  await tx.execute(sql`select id from push_subscriptions where tenant_id = ${transactionTenant(tx)!} and user_id = ${userId} order by id for update`);
  await tx.delete(pushSubscriptions).where(eq(pushSubscriptions.userId, userId));
}

/** The recipients `(afterUserId, lastUserId]` of one stored batch of a dispatch. */
export interface BatchRecipients {
  dispatchId: string;
  afterUserId: number;
  lastUserId: number;
}

/** One message to send, with what it is encrypted for. */
export interface PushMessage extends PushDelivery {
  /** The user the notification is for. */
  recipientId: number;
  endpoint: string;
  p256dh: string;
  auth: string;
  data: NotificationData;
}

/**
 * The messages of a batch or of a retry, in TWO queries whatever the number of recipients:
 * each notification × each subscription of its recipient, recipients still personal,
 * active and not deleted; then the contents, once per dispatch. Every notification of a
 * dispatch holds the dispatch's contents (up to 64 KiB of HTML, several times that once
 * sanitized): read with each message, a batch of 5000 recipients would hold 5000 copies.
 * A message whose notification was deleted between the two (a reset) is left out; the
 * others of its dispatch are not.
 * With `limit`, a batch's first `limit` messages only, in recipient order.
 */
export async function loadMessages(tx: Tx, which: BatchRecipients | { deliveries: readonly PushDelivery[] }, limit?: number): Promise<PushMessage[]> {
  const selection =
    'deliveries' in which
      ? sql`(s.id, n.id) in (select * from unnest(${`{${which.deliveries.map((d) => Math.trunc(d.subscriptionId)).join(',')}}`}::bigint[],
                                                   ${`{${which.deliveries.map((d) => d.notificationId).join(',')}}`}::uuid[]))`
      : sql`n.dispatch_id = ${which.dispatchId}::uuid and n.notifiable_id > ${which.afterUserId} and n.notifiable_id <= ${which.lastUserId}`;
  const rows = await tx.execute<{
    tenant_id: string;
    subscription_id: string;
    notification_id: string;
    recipient_id: string;
    dispatch_id: string;
    endpoint: string;
    p256dh: string;
    auth: string;
  }>(sql`
    select n.tenant_id, s.id as subscription_id, n.id as notification_id, n.notifiable_id as recipient_id, n.dispatch_id, s.endpoint, s.p256dh, s.auth
    from notifications n
    join users u on u.tenant_id = n.tenant_id and u.id = n.notifiable_id
    join push_subscriptions s on s.tenant_id = n.tenant_id and s.user_id = n.notifiable_id
    where n.notifiable_type = 'user' and u.active and u.deleted_at is null and not u.group_account
      and ${selection}
    ${limit === undefined ? sql`` : sql`order by n.notifiable_id, s.id limit ${limit}`}`);
  if (rows.length === 0) return [];
  // The rows' tenant is the transaction's (row-level security).
  const { present, contents } = await presentContents(
    tx,
    rows[0]!.tenant_id,
    rows.map((row) => row.notification_id),
  );
  return rows
    .filter((row) => present.has(row.notification_id))
    .map((row) => ({
      subscriptionId: Number(row.subscription_id),
      notificationId: row.notification_id,
      recipientId: Number(row.recipient_id),
      endpoint: row.endpoint,
      p256dh: row.p256dh,
      auth: row.auth,
      data: contents.get(row.dispatch_id)!,
    }));
}

/** Applies a settlement: gone subscriptions deleted, failures recorded; at most two statements. */
export async function recordOutcomes(tx: Tx, settlement: Pick<PushSettlement, 'gone' | 'failures'>): Promise<void> {
  const { gone, failures } = settlement;
  // Locked in id order first: two deliveries settling the same subscriptions (two worker
  // processes) would otherwise lock them in the orders their statements meet them, and deadlock.
  const settled = [...gone, ...failures.keys()];
  if (settled.length === 0) return;
  await tx.execute(sql`
    select id from push_subscriptions where tenant_id = ${transactionTenant(tx)!} and id = any(${`{${settled.join(',')}}`}::bigint[])
    order by id for update`);
  if (gone.size > 0) await tx.execute(sql`delete from push_subscriptions where id = any(${`{${[...gone].join(',')}}`}::bigint[])`);
  if (failures.size > 0) {
    await tx.execute(sql`
      update push_subscriptions s
      set last_failure_status = f.status, last_failure = f.error, last_failure_at = now()
      from jsonb_to_recordset(${JSON.stringify([...failures].map(([id, failure]) => ({ id, ...failure })))}::jsonb)
           as f(id bigint, status integer, error text)
      where s.id = f.id`);
  }
}
