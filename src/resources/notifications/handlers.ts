import { eq, type SQL } from 'drizzle-orm';
import { changesBetween } from '../../platform/audit/audit.ts';
import type { Changes } from '../../platform/audit/table.ts';
import { presentedTokenHash, type Auth } from '../../platform/auth/auth.ts';
import { notificationDatetime } from '../../platform/http/datetime.ts';
import { EVENT_STREAM_HEADERS } from '../../platform/http/event-stream.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound, ProblemError } from '../../platform/http/problem.ts';
import { listRecords, selectRecords, showRecord } from '../../platform/result-controls/listing.ts';
import { readControls } from '../../platform/result-controls/result-controls.ts';
import { onlyStatement, type Tx } from '../../platform/database/database.ts';
import { audit, type RequestContext } from '../audit-events/record.ts';
import { holdSession } from '../auth/credentials.ts';
import { announceTenantUnreadChange } from './channel.ts';
import { isEventId } from './event-ids.ts';
import { notify, queueDelivery, type NotifyInput } from './notify.ts';
import { countRecipients, deleteTenantNotifications, markOwnNotification, markOwnNotifications, unreadCount } from './queries.ts';
import { CUSTOM_NOTIFICATION, readState, TYPED_NOTIFICATIONS, type ReadState, type ReadStateInput, type TypedNotification } from './rules.ts';
import { notifications } from './table.ts';
import { byTarget, byType, notificationListing, notificationView } from './view.ts';

/** The envelope of notification write answers (docs/api-conventions.md#status-codes). */
const envelope = <T>(data: T) => ({ status: 'success' as const, data });

// The bodies' schemas say "user_ids or department_ids" with `anyOf: [{required}]`, which
// openapi-typescript types as `unknown`; Ajv has validated them against these shapes.
interface RecipientsInput {
  user_ids?: number[];
  department_ids?: number[];
}
interface GenericInput extends RecipientsInput {
  title: string;
  body: string;
  url: string;
}
interface TypedInput extends GenericInput {
  type: TypedNotification;
  targetable_id: number;
}
interface BulkInput extends ReadStateInput {
  filter?: Record<string, unknown>;
}

const NOTIFICATION = 'The notification';

/**
 * Records a dispatch and its one audit event (`notification.sent`: one per fan-out, never
 * one per recipient) with the number of users it reaches. The sender's session is held
 * first: one ended before then sends nothing (401), and an end under way waits for it.
 */
async function sendAudited(tx: Tx, ctx: RequestContext & { auth: Auth }, input: NotifyInput) {
  await holdSession(tx, ctx.auth, presentedTokenHash(ctx.request)!);
  const dispatch = await notify(tx, input);
  const userIds = input.recipients.userIds ?? [];
  const departmentIds = input.recipients.departmentIds ?? [];
  await audit(tx, ctx, {
    action: 'notification.sent',
    target: { type: 'notification_dispatch', id: dispatch.dispatchId, label: input.data.title },
    details: {
      type: input.type,
      user_ids: userIds,
      department_ids: departmentIds,
      recipient_count: await countRecipients(tx, userIds, departmentIds),
    },
  });
  return dispatch;
}

/**
 * What a read state changed on each notification it took. It takes only records that lack
 * the time it sets (`readStateChange`), so `from` is null. A read also sets `seen_at` where
 * not yet seen; its event names `read_at` only.
 */
function readStateChanges(state: ReadState): Changes {
  // As the API shows the times (`YYYY-MM-DD HH:MM:SS`).
  return state.readAt
    ? changesBetween({ read_at: null }, { read_at: notificationDatetime(state.readAt) })
    : changesBetween({ seen_at: null }, { seen_at: notificationDatetime(state.seenAt) });
}

/**
 * A bulk read-state change of the caller's notifications and its one event
 * (`notifications.read` or `.seen`, with `details.count`, never one per notification);
 * none when no notification changed. Answers how many changed.
 */
async function markOwnNotificationsAudited(
  tx: Tx,
  ctx: RequestContext & { auth: Auth },
  where: SQL | undefined,
  state: ReadState,
  details: Record<string, unknown>,
) {
  const count = await markOwnNotifications(tx, ctx.auth, where, state);
  if (count > 0) {
    await audit(tx, ctx, {
      action: state.readAt ? 'notifications.read' : 'notifications.seen',
      target: { type: 'user', id: ctx.auth.userId, label: null },
      changes: readStateChanges(state),
      details: { count, ...details },
    });
  }
  return count;
}

export const notificationHandlers = {
  async listNotifications({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, notificationListing, query, auth) };
  },

  /** Served by the partial index on unread notifications (see table.ts and the benchmark). */
  async countNotifications({ auth, query, services: { db } }) {
    const controls = readControls(notificationView, { filter: query.filter }, auth);
    return { status: 200, body: await db.tenant(auth.tenantId, (tx) => onlyStatement(tx, () => unreadCount(tx, auth, controls.where))) };
  },

  async listNotificationsByType({ auth, query, params, services: { db } }) {
    const where = byType(params.targetableType);
    return { status: 200, body: await listRecords(db, auth.tenantId, notificationListing, query, auth, { where }) };
  },

  async listNotificationsByTarget({ auth, query, params, services: { db } }) {
    const where = byTarget(params.targetableType, params.targetableId);
    return { status: 200, body: await listRecords(db, auth.tenantId, notificationListing, query, auth, { where }) };
  },

  async getNotification({ auth, query, params, services: { db } }) {
    return { status: 200, body: await showRecord(db, auth.tenantId, notificationListing, query, auth, { key: params.notification }, NOTIFICATION) };
  },

  async createNotification(ctx) {
    const {
      auth,
      body,
      services: { db, jobs },
    } = ctx;
    const input = body as GenericInput;
    const dispatch = await db.tenant(auth.tenantId, (tx) =>
      sendAudited(tx, ctx, {
        recipients: { userIds: input.user_ids, departmentIds: input.department_ids },
        type: CUSTOM_NOTIFICATION,
        data: { title: input.title, body: input.body, url: input.url },
        createdBy: auth.userId,
      }),
    );
    await queueDelivery(jobs, dispatch);
    return { status: 202, body: envelope(null) };
  },

  async createTypedNotification(ctx) {
    const {
      auth,
      body,
      services: { db, jobs },
    } = ctx;
    const input = body as TypedInput;
    const dispatch = await db.tenant(auth.tenantId, (tx) =>
      sendAudited(tx, ctx, {
        recipients: { userIds: input.user_ids, departmentIds: input.department_ids },
        type: input.type,
        targetable: { type: TYPED_NOTIFICATIONS[input.type], id: input.targetable_id },
        data: { title: input.title, body: input.body, url: input.url },
        createdBy: auth.userId,
      }),
    );
    await queueDelivery(jobs, dispatch);
    return { status: 202, body: envelope(null) };
  },

  async updateNotifications(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const input = body as BulkInput;
    const state = readState(input);
    const controls = readControls(notificationView, { filter: input.filter }, auth);
    const details = input.filter === undefined ? {} : { filter: input.filter };
    return { status: 200, body: envelope(await db.tenant(auth.tenantId, (tx) => markOwnNotificationsAudited(tx, ctx, controls.where, state, details))) };
  },

  async updateNotificationsByType(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const state = readState(body as ReadStateInput);
    const where = byType(params.targetableType);
    const details = { targetable_type: params.targetableType };
    return { status: 200, body: envelope(await db.tenant(auth.tenantId, (tx) => markOwnNotificationsAudited(tx, ctx, where, state, details))) };
  },

  async updateNotificationsByTarget(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const state = readState(body as ReadStateInput);
    const where = byTarget(params.targetableType, params.targetableId);
    const details = { targetable_type: params.targetableType, targetable_id: params.targetableId };
    return { status: 200, body: envelope(await db.tenant(auth.tenantId, (tx) => markOwnNotificationsAudited(tx, ctx, where, state, details))) };
  },

  async updateNotification(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const state = readState(body as ReadStateInput);
    const [updated] = await db.tenant(auth.tenantId, async (tx) => {
      // An already read (or seen) record keeps its times, and records no event; the answer is the record either way.
      const changed = await markOwnNotification(tx, auth, params.notification, state);
      const records = await selectRecords(tx, notificationListing, auth, { where: eq(notifications.id, params.notification) });
      if (changed > 0) {
        const title = (records[0]?.data as { title?: unknown } | undefined)?.title;
        await audit(tx, ctx, {
          action: state.readAt ? 'notification.read' : 'notification.seen',
          target: { type: 'notification', id: params.notification, label: typeof title === 'string' ? title : null },
          changes: readStateChanges(state),
        });
      }
      return records;
    });
    if (!updated) throw notFound(NOTIFICATION);
    return { status: 200, body: envelope(updated) };
  },

  /** Server-Sent Events of the caller's new notifications and unread count (operation streamNotifications; stream.ts). */
  async streamNotifications({ auth, request, reply, services: { notificationStreams } }) {
    // Fastify answers HEAD with the GET handler: the head of a stream, but no stream is opened.
    if (request.method === 'HEAD') return { status: 200, headers: { ...EVENT_STREAM_HEADERS }, body: '' };
    const lastEventId = request.headers['last-event-id'];
    if (lastEventId !== undefined && (typeof lastEventId !== 'string' || !isEventId(lastEventId))) {
      throw new ProblemError(400, 'Last-Event-ID must be the id of an event of this stream.');
    }
    // Authenticated, so the header holds a bearer token.
    await notificationStreams.open(auth, presentedTokenHash(request)!, reply, lastEventId);
    // The reply is hijacked: the platform sends nothing for it (see registerOperations).
    return { status: 200, body: '' };
  },

  /** Every notification of the tenant and every pending delivery; settings stay (docs/notifications.md#recipients). */
  async resetNotifications(ctx) {
    const {
      auth,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // The session is held before the rows are: one ended meanwhile deletes nothing (401), an end under way waits.
      await holdSession(tx, auth, presentedTokenHash(ctx.request)!);
      await deleteTenantNotifications(tx);
      await audit(tx, ctx, { action: 'notifications.reset', target: { type: 'tenant', id: auth.tenantId, label: null } });
      // Open streams of the tenant learn their count is now 0.
      await announceTenantUnreadChange(tx, auth.tenantId);
    });
    return { status: 200, body: envelope(null) };
  },
} satisfies Partial<Handlers>;
