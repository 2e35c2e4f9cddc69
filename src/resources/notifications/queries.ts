import { eq, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { users } from '../users/table.ts';
import { announceStoredBatch } from './channel.ts';
import { notificationDispatches, notifications } from './table.ts';

/** A recorded dispatch, as its delivery job names it. */
export interface Dispatch {
  tenantId: number;
  dispatchId: string;
}

const idArray = (ids: number[]) => `{${ids.map((id) => Math.trunc(id)).join(',')}}`;

/**
 * Stores the next batch of a dispatch's notifications: recipients (direct users ∪
 * department members, each once; group accounts, inactive and deleted users skipped)
 * with an id above `after`, at most `batchSize`, in ONE `INSERT … SELECT`. The unique key
 * (tenant, dispatch, recipient) makes a retried batch store nothing twice. When it stored
 * any, it notifies NOTIFICATIONS_CHANNEL (live streams). Returns the
 * highest recipient id of the batch (null when none is left) and how many were stored.
 */
export async function storeNotificationBatch(
  tx: Tx,
  dispatch: typeof notificationDispatches.$inferSelect,
  after: number,
  batchSize: number,
): Promise<{ last: number | null; stored: number }> {
  const [row] = await tx.execute<{ last: string | null; stored: number }>(sql`
    with recipients as (
      select u.id from ${users} u
      where u.id > ${after}
        and u.active and u.deleted_at is null and not u.group_account
        and (u.id = any(${idArray(dispatch.userIds)}::bigint[])
             or exists (select 1 from department_users du
                        where du.tenant_id = u.tenant_id and du.user_id = u.id
                          and du.department_id = any(${idArray(dispatch.departmentIds)}::bigint[])))
      order by u.id
      limit ${batchSize}
    ), stored as (
      insert into ${notifications} (tenant_id, dispatch_id, type, notifiable_type, notifiable_id, targetable_type, targetable_id, data)
      select ${dispatch.tenantId}, ${dispatch.id}::uuid, ${dispatch.type}, 'user', r.id, ${dispatch.targetableType}, ${dispatch.targetableId}::bigint,
             ${JSON.stringify(dispatch.data)}::jsonb
      from recipients r
      on conflict (tenant_id, dispatch_id, notifiable_id) do nothing
      returning 1
    )
    select (select max(id) from recipients) as last, (select count(*)::int from stored) as stored`);
  const last = row?.last === null || row?.last === undefined ? null : Number(row.last);
  if (last !== null && (row?.stored ?? 0) > 0) {
    // Live streams (stream.ts) of every API process hear of the batch when this
    // transaction commits (NOTIFY is transactional); the payload names the batch only.
    await announceStoredBatch(tx, { tenant_id: dispatch.tenantId, dispatch_id: dispatch.id, after, last });
  }
  return { last, stored: row?.stored ?? 0 };
}

export async function findDispatch(tx: Tx, dispatchId: string) {
  const [dispatch] = await tx.select().from(notificationDispatches).where(eq(notificationDispatches.id, dispatchId));
  return dispatch;
}
