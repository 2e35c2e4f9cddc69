/** Reads and writes of notifications and their dispatches (docs/notifications.md). */
import { and, count, eq, isNull, lt, lte, ne, or, sql, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Db, Tx } from '../../platform/database/database.ts';
import { missingIds } from '../../platform/database/existence.ts';
import { idArray } from '../../platform/database/id-list.ts';
import { prepared } from '../../platform/database/prepared.ts';
import { requiredTenant } from '../../platform/database/tenancy.ts';
import { departmentNotificationSettings, departments, departmentUsers } from '../departments/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { users } from '../users/table.ts';
import { announceStoredBatch, announceUnreadChange } from './channel.ts';
import { notificationSettingKey, readStateChange, type ReadState } from './rules.ts';
import { notificationDispatches, notifications, notificationUnreadCounts, type NotificationData } from './table.ts';
import { ownNotifications, unreadNotifications } from './view.ts';
import { presentContents } from './contents.ts';

/** A recorded dispatch, as its delivery job names it. */
export interface Dispatch {
  tenantId: number;
  dispatchId: string;
}

export type DispatchRow = typeof notificationDispatches.$inferSelect;

/**
 * The ids of `userIds` that name no user of the tenant (or a deleted one), and of
 * `departmentIds` that name no department of the tenant. One query per non-empty list,
 * run in parallel.
 */
export async function missingRecipients(tx: Tx, userIds: number[], departmentIds: number[]): Promise<{ users: Set<number>; departments: Set<number> }> {
  const [missingUsers, missingDepartments] = await Promise.all([
    missingIds(tx, users, userIds, isNull(users.deletedAt)),
    missingIds(tx, departments, departmentIds),
  ]);
  return { users: missingUsers, departments: missingDepartments };
}

/** Records a dispatch in the transaction's tenant (ids deduplicated); nothing is delivered yet. */
export async function recordDispatch(
  tx: Tx,
  values: {
    type: string;
    targetable: { type: string; id: number } | null;
    data: NotificationData;
    userIds: number[];
    departmentIds: number[];
    createdBy: number | null;
  },
): Promise<Dispatch> {
  const [dispatch] = await tx
    .insert(notificationDispatches)
    .values({
      tenantId: requiredTenant,
      type: values.type,
      targetableType: values.targetable?.type ?? null,
      targetableId: values.targetable?.id ?? null,
      data: values.data,
      userIds: [...new Set(values.userIds)],
      departmentIds: [...new Set(values.departmentIds)],
      createdBy: values.createdBy,
    })
    .returning({ id: notificationDispatches.id, tenantId: notificationDispatches.tenantId });
  return { tenantId: dispatch!.tenantId, dispatchId: dispatch!.id };
}

export async function findDispatch(tx: Tx, dispatchId: string): Promise<DispatchRow | undefined> {
  const [dispatch] = await tx.select().from(notificationDispatches).where(eq(notificationDispatches.id, dispatchId));
  return dispatch;
}

/**
 * Whether recipient `u`'s departments decline the dispatch's notification setting (the
 * CTE `setting`; docs/notifications.md#notification-settings): the tenant has the setting,
 * `u` belongs to at least one department, and none of them has it assigned. A type
 * without a setting, or a tenant without it, declines nobody; neither do users outside
 * every department, who have no department choice to follow.
 */
const settingDeclines = sql`(
  exists (select 1 from setting)
  and exists (select 1 from department_users du where du.tenant_id = u.tenant_id and du.user_id = u.id)
  and not exists (select 1 from department_users du
                  join ${departmentNotificationSettings} dns
                    on dns.tenant_id = du.tenant_id and dns.department_id = du.department_id
                  where du.tenant_id = u.tenant_id and du.user_id = u.id
                    and dns.notification_setting_id in (select id from setting)))`;

/** The dispatch by its id and its tenant: Citus routes (and locks rows of) only a statement that names the tenant. */
const dispatchNamed = (dispatch: Pick<DispatchRow, 'tenantId' | 'id'>) =>
  and(eq(notificationDispatches.tenantId, dispatch.tenantId), eq(notificationDispatches.id, dispatch.id));

/**
 * Stores the next batch of a dispatch's notifications: recipients (direct users ∪
 * department members, each once; group accounts, inactive and deleted users skipped, and
 * those whose departments leave out the type's notification setting, `settingDeclines`)
 * with an id above `after`, at most `batchSize`, in ONE `INSERT … SELECT`. The unique key
 * (tenant, dispatch, recipient) makes a retried batch store nothing twice. When it stored
 * any, it notifies NOTIFICATIONS_CHANNEL (live streams). Returns the
 * highest recipient id of the batch (null when none is left, or a reset deleted the
 * dispatch) and how many were stored.
 */
export async function storeNotificationBatch(
  tx: Tx,
  dispatch: DispatchRow,
  after: number,
  batchSize: number,
): Promise<{ last: number | null; stored: number }> {
  // The dispatch is held until the batch commits (named by its tenant: Citus locks rows only in a statement that names
  // its shard). A reset deletes the dispatches before the notifications, so one under way waits for the batch and then
  // deletes it too; a dispatch a reset deleted first stores nothing more, and its delivery ends.
  const [held] = await tx.select({ id: notificationDispatches.id }).from(notificationDispatches).where(dispatchNamed(dispatch)).for('key share');
  if (!held) return { last: null, stored: 0 };
  const [row] = await tx.execute<{ last: string | null; stored: number }>(sql`
    with setting as (
      select s.id from ${notificationSettings} s
      where s.tenant_id = ${dispatch.tenantId} and s.key = ${notificationSettingKey(dispatch.type)}::text
    ), recipients as (
      select u.id from ${users} u
      where u.id > ${after}
        and u.active and u.deleted_at is null and not u.group_account
        and (u.id = any(${idArray(dispatch.userIds)}::bigint[])
             or exists (select 1 from department_users du
                        where du.tenant_id = u.tenant_id and du.user_id = u.id
                          and du.department_id = any(${idArray(dispatch.departmentIds)}::bigint[])))
        and not ${settingDeclines}
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

/**
 * How far push jobs of the dispatch are queued, its row locked until the transaction ends
 * (named by its tenant: Citus locks rows only in a statement that names its shard), so that
 * two runs of its delivery queue each batch's push job once; undefined when a reset deleted it.
 */
export async function holdPushedThrough(tx: Tx, dispatch: Pick<DispatchRow, 'tenantId' | 'id'>): Promise<number | undefined> {
  const [row] = await tx
    .select({ pushedThrough: notificationDispatches.pushedThrough })
    .from(notificationDispatches)
    .where(dispatchNamed(dispatch))
    .for('no key update');
  return row?.pushedThrough;
}

/** Remembers that push jobs are queued for the dispatch's recipients up to user id `last`. */
export async function recordPushedThrough(tx: Tx, dispatch: Pick<DispatchRow, 'tenantId' | 'id'>, last: number): Promise<void> {
  await tx.update(notificationDispatches).set({ pushedThrough: last }).where(dispatchNamed(dispatch));
}

/** Marks a dispatch delivered: every batch is stored. */
export async function markDispatchDelivered(tx: Tx, dispatch: Pick<DispatchRow, 'tenantId' | 'id'>): Promise<void> {
  await tx
    .update(notificationDispatches)
    .set({ deliveredAt: sql`now()` })
    .where(dispatchNamed(dispatch));
}

/**
 * Dispatches of every tenant still undelivered two minutes after they were recorded, at
 * most 100. Maintenance across tenants: run on the owner pool, not in a tenant transaction.
 */
export function undeliveredDispatches(owner: Db): Promise<Dispatch[]> {
  return owner
    .select({ tenantId: notificationDispatches.tenantId, dispatchId: notificationDispatches.id })
    .from(notificationDispatches)
    .where(and(isNull(notificationDispatches.deliveredAt), lt(notificationDispatches.createdAt, sql`now() - interval '2 minutes'`)))
    .limit(100);
}

/**
 * The dispatch's notifications still without an e-mail copy whose recipient wants one, has
 * an address, and still receives notifications (personal, active, not deleted), judged
 * when the job runs: a retry long after the notification was stored sends nothing to
 * someone deactivated or deleted meanwhile. Every copy shares one object of the contents,
 * read once: each notification of the dispatch holds them (up to 64 KiB of HTML, several
 * times that once sanitized), and 5000 copies read with each would take gigabytes.
 */
export async function pendingEmailCopies(tx: Tx, dispatchId: string) {
  const copies = await tx
    .select({ id: notifications.id, tenantId: notifications.tenantId, email: users.email, firstName: users.firstName, lastName: users.lastName })
    .from(notifications)
    .innerJoin(users, and(eq(users.tenantId, notifications.tenantId), eq(users.id, notifications.notifiableId)))
    .where(
      and(
        eq(notifications.dispatchId, dispatchId),
        isNull(notifications.emailedAt),
        eq(users.wantsEmailNotifications, true),
        ne(users.email, ''),
        eq(users.active, true),
        isNull(users.deletedAt),
        eq(users.groupAccount, false),
      ),
    )
    // A fixed order: a retry meets the copies in the order the first attempt did.
    .orderBy(notifications.id);
  if (copies.length === 0) return [];
  // A copy whose notification was deleted since (a reset) is owed no more; the others are.
  const { present, contents } = await presentContents(
    tx,
    copies[0]!.tenantId,
    copies.map((copy) => copy.id),
  );
  const data = contents.get(dispatchId);
  if (data === undefined) return [];
  return copies.filter((copy) => present.has(copy.id)).map((copy) => ({ ...copy, data }));
}

/**
 * Claims the e-mail copy of notification `notificationId` for the run `claim` of the e-mail
 * job, for `seconds` (past the longest its sending can take): only while it is unsent and
 * no other run's claim holds. `claimed`: this run may send it; `sent`: it needs no sending
 * (sent meanwhile, or its notification deleted); `held`: another run's claim holds it until
 * `until`, and a later run sends it if that one does not.
 */
export async function claimEmailCopy(
  tx: Tx,
  notificationId: string,
  claim: string,
  seconds: number,
): Promise<{ state: 'claimed' | 'sent' } | { state: 'held'; until: Date }> {
  const owed = and(eq(notifications.id, notificationId), isNull(notifications.emailedAt));
  const claimed = await tx
    .update(notifications)
    .set({ emailClaim: claim, emailClaimedUntil: sql`now() + make_interval(secs => ${seconds})` })
    .where(and(owed, or(isNull(notifications.emailClaimedUntil), lte(notifications.emailClaimedUntil, sql`now()`))))
    .returning({ id: notifications.id });
  if (claimed.length > 0) return { state: 'claimed' };
  const [held] = await tx.select({ until: notifications.emailClaimedUntil }).from(notifications).where(owed);
  // Owed but not claimable: a claim holds it (read after the update, so the claim may have lapsed since; then `until`
  // is already past, and the follow-up run starts at once).
  return held ? { state: 'held', until: held.until ?? new Date() } : { state: 'sent' };
}

/** Takes back the run `claim`'s claim on a copy it did not send (the server refused it, or the run failed), if it still holds it. */
export async function releaseEmailCopy(tx: Tx, notificationId: string, claim: string): Promise<void> {
  await tx
    .update(notifications)
    .set({ emailClaim: null, emailClaimedUntil: null })
    .where(and(eq(notifications.id, notificationId), eq(notifications.emailClaim, claim), isNull(notifications.emailedAt)));
}

/** Marks a notification's e-mail copy sent, which ends any claim on it. */
export async function markEmailed(tx: Tx, notificationId: string): Promise<void> {
  await tx
    .update(notifications)
    .set({ emailedAt: sql`now()`, emailClaim: null, emailClaimedUntil: null })
    .where(eq(notifications.id, notificationId));
}

/**
 * How many of the caller's notifications matching `where` are unread: without `where`, the
 * count the triggers keep (`notificationUnreadCounts`; no row while they never had one);
 * with it, counted (served by the partial index `notifications_unread_idx`). One statement.
 */
export async function unreadCount(tx: Tx, auth: Auth, where: SQL | undefined): Promise<number> {
  const [row] = where
    ? await tx
        .select({ n: count() })
        .from(notifications)
        .where(and(ownNotifications(auth), unreadNotifications(), where))
    : await prepared(tx, unreadCount, 'kept', (tx) =>
        tx
          .select({ n: notificationUnreadCounts.unread })
          .from(notificationUnreadCounts)
          .where(eq(notificationUnreadCounts.userId, sql.placeholder('userId')))
          .prepare('unread_count'),
      ).execute({ userId: auth.userId });
  return row?.n ?? 0;
}

/**
 * The caller's notifications matching `where` take the read state; only those it changes
 * are touched (`readStateChange`). When some became read, the caller's streams get the
 * new count. Returns how many changed.
 */
async function applyReadState(tx: Tx, auth: Auth, where: SQL | undefined, state: ReadState): Promise<number> {
  const change = readStateChange(state);
  const changed = await tx
    .update(notifications)
    .set(change.set)
    .where(and(ownNotifications(auth), where, change.changes))
    .returning({ id: notifications.id });
  if (changed.length > 0 && state.readAt) await announceUnreadChange(tx, auth);
  return changed.length;
}

/**
 * Bulk update of the caller's notifications (docs/notifications.md#recipients): only the
 * unread ones matching `where` change. Returns how many changed.
 */
export function markOwnNotifications(tx: Tx, auth: Auth, where: SQL | undefined, state: ReadState): Promise<number> {
  return applyReadState(tx, auth, and(where, isNull(notifications.readAt)), state);
}

/** One of the caller's notifications takes the read state, read or not (an already read or seen record keeps its times). */
export function markOwnNotification(tx: Tx, auth: Auth, notificationId: string, state: ReadState): Promise<number> {
  return applyReadState(tx, auth, eq(notifications.id, notificationId), state);
}

/**
 * Deletes every notification and every pending dispatch of the transaction's tenant. The
 * dispatches go first: a batch being stored holds its dispatch (`storeNotificationBatch`), so
 * the delete waits for it, and the notifications' delete after it takes that batch along.
 */
export async function deleteTenantNotifications(tx: Tx): Promise<void> {
  await tx.delete(notificationDispatches);
  await tx.delete(notifications);
}

/**
 * How many users a dispatch reaches as sent: the users named and the members of the
 * departments named, each once, deleted users left out (departments' notification
 * settings may still decline some at delivery). One query; for the audit trail. The
 * membership subquery pairs `tenant_id`: Citus refuses a correlated subquery that does not.
 */
export async function countRecipients(tx: Tx, userIds: readonly number[], departmentIds: readonly number[]): Promise<number> {
  const [row] = await tx.execute<{ count: number }>(sql`
    select count(*)::int as count from ${users} u
    where u.deleted_at is null and (u.id = any(${`{${userIds.join(',')}}`}::bigint[])
      or exists (select 1 from ${departmentUsers} m where m.tenant_id = u.tenant_id and m.user_id = u.id and m.department_id = any(${`{${departmentIds.join(',')}}`}::bigint[])))`);
  return row?.count ?? 0;
}
