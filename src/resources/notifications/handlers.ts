import { and, count, desc, eq, isNull, type SQL } from 'drizzle-orm';
import { presentedTokenHash, type Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { notFound, ProblemError } from '../../platform/http/problem.ts';
import { present, readControls, type Controls } from '../../platform/result-controls/result-controls.ts';
import { CUSTOM_NOTIFICATION, notify, queueDelivery, TYPED_NOTIFICATIONS } from './notify.ts';
import { announceTenantUnreadChange, announceUnreadChange } from './channel.ts';
import { isEventId } from './stream.ts';
import { markNotifications, readState, readStateChange, type ReadStateInput } from './read-state.ts';
import { notificationDispatches, notifications } from './table.ts';
import { notificationView, ownNotifications, unreadNotifications } from './view.ts';

/** The document's envelope of notification write endpoints (decisions §3). */
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
  type: keyof typeof TYPED_NOTIFICATIONS;
  targetable_id: number;
}
interface BulkInput extends ReadStateInput {
  filter?: Record<string, unknown>;
}

/** The caller's notifications matching `where`, newest first, shaped by the controls. */
async function listOwn(tx: Tx, auth: Auth, where: SQL | undefined, controls: Pick<Controls, 'selects' | 'relations' | 'limit'>) {
  const base = tx
    .select()
    .from(notifications)
    .where(and(ownNotifications(auth), where))
    .orderBy(desc(notifications.createdAt), desc(notifications.id));
  const rows = controls.limit ? await base.limit(controls.limit) : await base;
  return present(notificationView, tx, rows, controls, auth);
}

/** Marks the caller's notifications; when some became read, the caller's streams get the new count. */
async function markOwn(tx: Tx, auth: Auth, where: SQL | undefined, state: ReturnType<typeof readState>): Promise<number> {
  const changed = await markNotifications(tx, where, state);
  if (changed > 0 && state.readAt) await announceUnreadChange(tx, auth);
  return changed;
}

const byType = (targetableType: string) => eq(notifications.targetableType, targetableType);
const byTarget = (targetableType: string, targetableId: number) =>
  and(eq(notifications.targetableType, targetableType), eq(notifications.targetableId, targetableId));

export const notificationHandlers = {
  async listNotifications({ auth, query, services: { db } }) {
    const controls = readControls(notificationView, query, auth);
    return { status: 200, body: await db.tenant(auth.tenantId, (tx) => listOwn(tx, auth, controls.where, controls)) };
  },

  /** Served by the partial index on unread notifications (see table.ts and the benchmark). */
  async countNotifications({ auth, query, services: { db } }) {
    const controls = readControls(notificationView, { filter: query.filter }, auth);
    const [row] = await db.tenant(auth.tenantId, (tx) =>
      tx
        .select({ n: count() })
        .from(notifications)
        .where(and(ownNotifications(auth), unreadNotifications(), controls.where)),
    );
    return { status: 200, body: row?.n ?? 0 };
  },

  async listNotificationsByType({ auth, query, params, services: { db } }) {
    const controls = readControls(notificationView, query, auth);
    return { status: 200, body: await db.tenant(auth.tenantId, (tx) => listOwn(tx, auth, byType(params.targetableType), controls)) };
  },

  async listNotificationsByTarget({ auth, query, params, services: { db } }) {
    const controls = readControls(notificationView, query, auth);
    const where = byTarget(params.targetableType, params.targetableId);
    return { status: 200, body: await db.tenant(auth.tenantId, (tx) => listOwn(tx, auth, where, controls)) };
  },

  async getNotification({ auth, query, params, services: { db } }) {
    const controls = readControls(notificationView, query, auth);
    const [body] = await db.tenant(auth.tenantId, (tx) => listOwn(tx, auth, eq(notifications.id, params.notification), controls));
    if (!body) throw notFound('The notification');
    return { status: 200, body };
  },

  async createNotification({ auth, body, services: { db, jobs } }) {
    const input = body as GenericInput;
    const dispatch = await db.tenant(auth.tenantId, (tx) =>
      notify(tx, {
        recipients: { userIds: input.user_ids, departmentIds: input.department_ids },
        type: CUSTOM_NOTIFICATION,
        data: { title: input.title, body: input.body, url: input.url },
        createdBy: auth.userId,
      }),
    );
    await queueDelivery(jobs, dispatch);
    return { status: 202, body: envelope(null) };
  },

  async createTypedNotification({ auth, body, services: { db, jobs } }) {
    const input = body as TypedInput;
    const dispatch = await db.tenant(auth.tenantId, (tx) =>
      notify(tx, {
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

  async updateNotifications({ auth, body, services: { db } }) {
    const input = body as BulkInput;
    const state = readState(input);
    const controls = readControls(notificationView, { filter: input.filter }, auth);
    const changed = await db.tenant(auth.tenantId, (tx) => markOwn(tx, auth, and(ownNotifications(auth), controls.where), state));
    return { status: 200, body: envelope(changed) };
  },

  async updateNotificationsByType({ auth, body, params, services: { db } }) {
    const state = readState(body as ReadStateInput);
    const where = and(ownNotifications(auth), byType(params.targetableType));
    return { status: 200, body: envelope(await db.tenant(auth.tenantId, (tx) => markOwn(tx, auth, where, state))) };
  },

  async updateNotificationsByTarget({ auth, body, params, services: { db } }) {
    const state = readState(body as ReadStateInput);
    const where = and(ownNotifications(auth), byTarget(params.targetableType, params.targetableId));
    return { status: 200, body: envelope(await db.tenant(auth.tenantId, (tx) => markOwn(tx, auth, where, state))) };
  },

  async updateNotification({ auth, body, params, services: { db } }) {
    const change = readStateChange(readState(body as ReadStateInput));
    const [updated] = await db.tenant(auth.tenantId, async (tx) => {
      // An already read (or seen) record keeps its times; the answer is the record either way.
      const changed = await tx
        .update(notifications)
        .set(change.set)
        .where(and(ownNotifications(auth), eq(notifications.id, params.notification), change.changes))
        .returning({ id: notifications.id });
      if (changed.length > 0 && 'readAt' in change.set) await announceUnreadChange(tx, auth);
      return listOwn(tx, auth, eq(notifications.id, params.notification), { selects: null, relations: [], limit: undefined });
    });
    if (!updated) throw notFound('The notification');
    return { status: 200, body: envelope(updated) };
  },

  /** Issue 8: Server-Sent Events of the caller's new notifications and unread count (stream.ts). */
  async streamNotifications({ auth, request, reply, services: { notificationStreams } }) {
    // Fastify answers HEAD with the GET handler: the headers of a stream, but no stream is opened.
    if (request.method === 'HEAD') return { status: 200, headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform' }, body: '' };
    const lastEventId = request.headers['last-event-id'];
    if (lastEventId !== undefined && (typeof lastEventId !== 'string' || !isEventId(lastEventId))) {
      throw new ProblemError(400, 'Last-Event-ID must be the id of an event of this stream.');
    }
    // Authenticated, so the header holds a bearer token.
    await notificationStreams.open(auth, presentedTokenHash(request)!, reply, lastEventId);
    // The reply is hijacked: the platform sends nothing for it (see registerOperations).
    return { status: 200, body: '' };
  },

  /** Seed rule 4: every notification of the tenant (and pending deliveries); settings stay. */
  async resetNotifications({ auth, services: { db } }) {
    await db.tenant(auth.tenantId, async (tx) => {
      await tx.delete(notifications);
      await tx.delete(notificationDispatches);
      // Open streams of the tenant learn their count is now 0.
      await announceTenantUnreadChange(tx, auth.tenantId);
    });
    return { status: 200, body: envelope(null) };
  },
} satisfies Partial<Handlers>;
