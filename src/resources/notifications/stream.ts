/**
 * Live notification streams (the spec: operation streamNotifications;
 * docs/notifications.md#live-stream): Server-Sent Events to the API process's connected
 * clients. `storeNotificationBatch` notifies NOTIFICATIONS_CHANNEL in the transaction that
 * stores a batch; each API process holds ONE listening connection, and on each notice
 * loads, in one query under the notice's tenant, the batch's notifications of the users
 * connected here, and writes each only to that user's streams. Nothing else is in the
 * notice, so nothing can leak through it.
 *
 * Event ids (event-ids.ts) follow the list's order, so a reconnecting client's
 * `Last-Event-ID` replays what it missed. Each stream's writes run in order (the
 * registry's chain), and a notification at or before the client's last id is not written twice.
 *
 * Known limit of the replay: `created_at` is the storing transaction's start, so a batch
 * whose transaction began before, but committed after, the client's last event has ids
 * below it. A client connected at its commit gets it live; a client that reconnects
 * after that commit with a later `Last-Event-ID` does not get it replayed (it is in
 * `GET /api/notifications`, and the `count` event is right). Replaying a margin before
 * the last id would instead repeat events the client already has, since a new
 * connection does not know what the old one sent.
 *
 * Here: which events a stream receives and when, and how long it may live. The wire
 * format is platform/http/event-stream.ts, the registry of open streams (caps, ordered
 * writes, heartbeats) platform/streams/registry.ts, the LISTEN connection
 * platform/database/listener.ts.
 */
import { and, eq, inArray } from 'drizzle-orm';
import type { FastifyReply } from 'fastify';
import { stillAuthenticated, type Auth } from '../../platform/auth/auth.ts';
import type { Database } from '../../platform/database/database.ts';
import { ChannelListener } from '../../platform/database/listener.ts';
import { isGone, sseEvent } from '../../platform/http/event-stream.ts';
import { present } from '../../platform/result-controls/result-controls.ts';
import { StreamRegistry, type ErrorLog, type Stream } from '../../platform/streams/registry.ts';
import { NOTIFICATIONS_CHANNEL, type SessionsEnded, type StoredBatch, type UnreadChange } from './channel.ts';
import { compareEventIds, FIRST_EVENT_ID, storedAfter } from './event-ids.ts';
import { newestEventId, selectReplayRows, selectStreamRows, unreadCounts, type StreamRow } from './stream-queries.ts';
import { notifications } from './table.ts';
import { notificationView, ownNotifications } from './view.ts';

declare module '../../platform/services.ts' {
  interface Services {
    /** The process's live notification streams (Server-Sent Events; one LISTEN connection). */
    notificationStreams: NotificationStreams;
  }
}

/** Streams one user may hold open in one process; more are refused with 429 (see the spec). */
export const MAX_STREAMS_PER_USER = 10;
/** Most notifications a reconnect replays; older ones are in `GET /api/notifications`. */
const REPLAY_LIMIT = 1000;
/** Most bytes of notification data a catch-up replays (one notification at least), half what a stream may leave unsent. */
export const REPLAY_BYTES = 2 * 1024 * 1024;
/** Ids remembered per stream to skip duplicates (more than a replay can hold). */
const SENT_MEMORY = 2 * REPLAY_LIMIT;
/** How long a client waits before reconnecting (also the 429's Retry-After). */
const RETRY_MS = 3000;
/**
 * Unsent bytes at which a stream's client counts as not keeping up (docs/notifications.md):
 * several replays of ordinary notifications, which a reading client takes in well before
 * the next heartbeat.
 */
const MAX_UNSENT_BYTES = 4 * 1024 * 1024;

interface NotificationStream extends Stream {
  auth: Auth;
  /** The presented access token's hash: re-checked before writes and at every heartbeat. */
  tokenHash: string;
  /** The latest notification event written (`<µs>-<id>`), or null: where a replay starts. */
  lastEventId: string | null;
  /** Ids of the notifications written recently: none is written twice (replay and live overlap). */
  sent: Set<string>;
}

export class NotificationStreams {
  private readonly streams: StreamRegistry<NotificationStream>;
  private readonly listener: ChannelListener;

  constructor(
    private readonly db: Database,
    private readonly log: ErrorLog,
    heartbeatMs: number,
  ) {
    this.streams = new StreamRegistry({
      kind: 'notification',
      maxPerUser: MAX_STREAMS_PER_USER,
      retryMs: RETRY_MS,
      heartbeatMs,
      maxUnsentBytes: MAX_UNSENT_BYTES,
      log,
      onHeartbeat: () => void this.endRevoked().catch((error: unknown) => this.log.error({ err: error }, 'notification stream: token check failed')),
    });
    this.listener = new ChannelListener(db.listenSql, NOTIFICATIONS_CHANNEL, {
      onNotice: (payload) => {
        const notice = JSON.parse(payload) as StoredBatch | UnreadChange | SessionsEnded;
        const handled =
          'dispatch_id' in notice ? this.onBatch(notice) : 'sessions_ended' in notice ? this.onSessionsEnded(notice) : this.onUnreadChange(notice);
        void handled.catch((error: unknown) => this.log.error({ err: error }, 'notification stream: delivering a notice failed'));
      },
      // Notices sent while the listener was down are lost: replay from each stream's last
      // id, to the streams whose sessions are still valid.
      onReconnect: () => {
        void this.endRevoked()
          .catch((error: unknown) => this.log.error({ err: error }, 'notification stream: token check failed'))
          .finally(() => {
            for (const stream of this.streams.all()) this.streams.enqueue(stream, () => this.catchUp(stream, false));
          });
      },
    });
  }

  /** Takes the request over and keeps it open as the caller's stream; its first events catch up. */
  async open(auth: Auth, tokenHash: Buffer, reply: FastifyReply, lastEventId: string | undefined): Promise<void> {
    const stream: NotificationStream = { auth, tokenHash: tokenHash.toString('hex'), response: reply.raw, lastEventId: lastEventId ?? null, sent: new Set() };
    // The session is judged again once the stream is registered: one ended after the request was authenticated, but
    // before then, sent its notice when no stream was there to end.
    await this.streams.open(reply, stream, { ready: () => this.listener.start(), first: () => this.catchUp(stream, true) });
  }

  /** How many streams are registered in this process (tests, diagnostics). */
  openStreams(): number {
    return this.streams.size();
  }

  /** Ends every stream (server shutdown) and stops listening. */
  async close(): Promise<void> {
    this.streams.close();
    await this.listener.stop();
  }

  /**
   * A stream lives longer than its token may: streams whose token was revoked (logout),
   * expired, or whose user was deactivated, deleted, marked for logout or must change their
   * password are ended.
   */
  private async endRevoked(): Promise<void> {
    await this.stillValid([...this.streams.all()]);
  }

  /**
   * Of `streams`, those whose session still authenticates (one query); the others are
   * ended. Run before anything is written to a stream, so a session that was signed out,
   * marked for logout or whose user was deactivated or deleted receives nothing more,
   * however far away the next heartbeat is.
   */
  private async stillValid(streams: NotificationStream[]): Promise<Set<NotificationStream>> {
    if (streams.length === 0) return new Set();
    const valid = await stillAuthenticated(
      this.db,
      [...new Set(streams.map((stream) => stream.tokenHash))].map((hash) => Buffer.from(hash, 'hex')),
    );
    const live = new Set<NotificationStream>();
    for (const stream of streams) {
      if (!valid.has(stream.tokenHash) || isGone(stream.response)) this.streams.end(stream);
      else live.add(stream);
    }
    return live;
  }

  /**
   * On connect (or listener reconnect): what was stored after the stream's last id, then
   * the count. A stream without one starts from its newest notification, so that a
   * listener reconnect can replay what it missed. With `judge`, the stream's session is
   * judged alongside (a reconnect judged every stream just before): an ended one gets
   * nothing and ends. A replay that reached REPLAY_BYTES ends the stream once written: the
   * client reconnects from its last event and is given the rest, a bounded part at a time.
   */
  private async catchUp(stream: NotificationStream, judge: boolean): Promise<void> {
    const { auth } = stream;
    const [{ rows, full, counts }, live] = await Promise.all([
      this.readCatchUp(stream),
      judge ? this.stillValid([stream]).then((valid) => valid.has(stream)) : true,
    ]);
    if (!live) return;
    await this.write(stream, rows, counts.get(auth.userId) ?? 0);
    if (full) this.streams.end(stream);
  }

  /** What `catchUp` writes: the notifications stored after the stream's last id (`full`: as many as a replay takes), and the unread count. */
  private async readCatchUp(stream: NotificationStream): Promise<{ rows: StreamRow[]; full: boolean; counts: Map<number, number> }> {
    const { auth } = stream;
    return this.db.tenant(auth.tenantId, async (tx) => {
      if (stream.lastEventId === null) {
        stream.lastEventId = (await newestEventId(tx, auth)) ?? FIRST_EVENT_ID;
        return { rows: [], full: false, counts: await unreadCounts(tx, [auth.userId]) };
      }
      const replay = await selectReplayRows(tx, and(ownNotifications(auth), storedAfter(stream.lastEventId)), { rows: REPLAY_LIMIT, bytes: REPLAY_BYTES });
      return { ...replay, counts: await unreadCounts(tx, [auth.userId]) };
    });
  }

  /** A stored batch: the notifications of the users streaming here, in one query. */
  private async onBatch(batch: StoredBatch): Promise<void> {
    const users = this.streams.ofTenant(batch.tenant_id);
    if (!users) return;
    const userIds = [...users.keys()].filter((id) => id > batch.after && id <= batch.last);
    if (userIds.length === 0) return;
    const [{ rows, counts }, live] = await Promise.all([
      this.db.tenant(batch.tenant_id, async (tx) => ({
        rows: await selectStreamRows(
          tx,
          and(eq(notifications.dispatchId, batch.dispatch_id), eq(notifications.notifiableType, 'user'), inArray(notifications.notifiableId, userIds)),
        ),
        counts: await unreadCounts(tx, userIds),
      })),
      this.stillValid(userIds.flatMap((userId) => [...(users.get(userId) ?? [])])),
    ]);
    for (const userId of userIds) {
      const own = rows.filter((row) => row.notifiableId === userId);
      if (own.length === 0) continue;
      for (const stream of users.get(userId) ?? []) {
        if (live.has(stream)) this.streams.enqueue(stream, () => this.write(stream, own, counts.get(userId) ?? 0));
      }
    }
  }

  /**
   * Sessions of a user ended (logout mark, deactivation, deletion, blackout, sign-out,
   * password change): their streams here are checked now, and those whose session no
   * longer authenticates end, without waiting for the heartbeat.
   */
  private async onSessionsEnded(ended: SessionsEnded): Promise<void> {
    const streams = this.streams.ofTenant(ended.tenant_id)?.get(ended.user_id);
    if (!streams || streams.size === 0) return;
    await this.stillValid([...streams]);
  }

  /** Notifications were read elsewhere (or reset): the concerned streams here get the new count. */
  private async onUnreadChange(change: UnreadChange): Promise<void> {
    const users = this.streams.ofTenant(change.tenant_id);
    if (!users) return;
    const userIds = change.user_id === null ? [...users.keys()] : users.has(change.user_id) ? [change.user_id] : [];
    if (userIds.length === 0) return;
    const [counts, live] = await Promise.all([
      this.db.tenant(change.tenant_id, (tx) => unreadCounts(tx, userIds)),
      this.stillValid(userIds.flatMap((userId) => [...(users.get(userId) ?? [])])),
    ]);
    for (const userId of userIds) {
      for (const stream of users.get(userId) ?? []) if (live.has(stream)) this.streams.enqueue(stream, () => this.write(stream, [], counts.get(userId) ?? 0));
    }
  }

  /**
   * The stream's new notifications (each once, in order), then its unread count. Live
   * notices are not filtered by time: a batch whose transaction began earlier may commit
   * after a later one, and must still be shown.
   */
  private async write(stream: NotificationStream, rows: StreamRow[], unread: number): Promise<void> {
    if (isGone(stream.response)) return;
    const fresh = rows.filter((row) => !stream.sent.has(row.id));
    if (fresh.length > 0) {
      // No relations, so presenting runs no query; the record is what the notifications view answers.
      const presented = await present(notificationView, null as never, fresh, { selects: null, relations: [] }, stream.auth);
      fresh.forEach((row, index) => {
        stream.response.write(sseEvent('notification', presented[index], row.eventId));
        stream.sent.add(row.id);
        if (stream.lastEventId === null || compareEventIds(row.eventId, stream.lastEventId) > 0) stream.lastEventId = row.eventId;
      });
      for (const id of stream.sent) {
        if (stream.sent.size <= SENT_MEMORY) break;
        stream.sent.delete(id);
      }
    }
    stream.response.write(sseEvent('count', unread));
  }
}
