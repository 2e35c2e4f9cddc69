/**
 * Live notification streams (issue 8, `GET /api/notifications/stream`): Server-Sent
 * Events to the API process's connected clients. `storeNotificationBatch` notifies
 * NOTIFICATIONS_CHANNEL in the transaction that stores a batch; each API process holds
 * ONE listening connection, and on each notice loads, in one query under the notice's
 * tenant, the batch's notifications of the users connected here, and writes each only to
 * that user's streams. Nothing else is in the notice, so nothing can leak through it.
 *
 * Event ids are `<created_at µs>-<id>`, the list's order, so a reconnecting client's
 * `Last-Event-ID` replays what it missed. Each client's writes run in order on its own
 * chain, and a notification at or before the client's last id is not written twice.
 *
 * Known limit of the replay: `created_at` is the storing transaction's start, so a batch
 * whose transaction began before, but committed after, the client's last event has ids
 * below it. A client connected at its commit gets it live; a client that reconnects
 * after that commit with a later `Last-Event-ID` does not get it replayed (it is in
 * `GET /api/notifications`, and the `count` event is right). Replaying a margin before
 * the last id would instead repeat events the client already has, since a new
 * connection does not know what the old one sent.
 */
import type { ServerResponse } from 'node:http';
import { and, asc, count, desc, eq, getTableColumns, inArray, sql, type SQL } from 'drizzle-orm';
import type { FastifyReply } from 'fastify';
import { stillAuthenticated, type Auth } from '../../platform/auth/auth.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import { ProblemError } from '../../platform/http/problem.ts';
import { present } from '../../platform/result-controls/result-controls.ts';
import { NOTIFICATIONS_CHANNEL, type StoredBatch, type UnreadChange } from './channel.ts';
import { notifications } from './table.ts';
import { notificationView, ownNotifications, unreadNotifications, type NotificationRow } from './view.ts';

declare module '../../platform/services.ts' {
  interface Services {
    /** The process's live notification streams (Server-Sent Events; one LISTEN connection). */
    notificationStreams: NotificationStreams;
  }
}

/** Most notifications a reconnect replays; older ones are in `GET /api/notifications`. */
const REPLAY_LIMIT = 1000;
/** Ids remembered per stream to skip duplicates (more than a replay can hold). */
const SENT_MEMORY = 2 * REPLAY_LIMIT;

interface StreamClient {
  auth: Auth;
  /** The presented access token's hash: re-checked at every heartbeat. */
  tokenHash: string;
  response: ServerResponse;
  /** The latest notification event written (`<µs>-<id>`), or null: where a replay starts. */
  lastEventId: string | null;
  /** Ids of the notifications written recently: none is written twice (replay and live overlap). */
  sent: Set<string>;
  /** Writes in order: replay first, then live events. */
  chain: Promise<void>;
}

interface Logger {
  error(object: unknown, message: string): void;
}

type StreamRow = NotificationRow & { eventId: string };

/** `<created_at in µs since the epoch>-<uuid>`, computed exactly by PostgreSQL. */
const eventIdColumn = sql<string>`((extract(epoch from ${notifications.createdAt}) * 1000000)::bigint)::text || '-' || ${notifications.id}::text`;

/** Whether `value` has the shape of this stream's event ids. */
export const isEventId = (value: string) => /^\d{1,16}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);

/** Orders event ids like (created_at, id). */
function compareEventIds(a: string, b: string): number {
  const [aMicros, ...aRest] = a.split('-');
  const [bMicros, ...bRest] = b.split('-');
  const byTime = BigInt(aMicros!) - BigInt(bMicros!);
  if (byTime !== 0n) return byTime < 0n ? -1 : 1;
  const aId = aRest.join('-').toLowerCase();
  const bId = bRest.join('-').toLowerCase();
  return aId < bId ? -1 : aId > bId ? 1 : 0;
}

/** Notifications stored after event `eventId`. */
function after(eventId: string): SQL {
  const [micros, ...id] = eventId.split('-');
  return sql`(${notifications.createdAt}, ${notifications.id}) > ('epoch'::timestamptz + ${micros}::bigint * interval '1 microsecond', ${id.join('-')}::uuid)`;
}

function selectStreamRows(tx: Tx, where: SQL | undefined) {
  return tx
    .select({ ...getTableColumns(notifications), eventId: eventIdColumn })
    .from(notifications)
    .where(where)
    .orderBy(asc(notifications.createdAt), asc(notifications.id));
}

/** Unread counts of `userIds` (the condition of `GET /api/notifications/count`), in one query. */
async function unreadCounts(tx: Tx, userIds: number[]): Promise<Map<number, number>> {
  const rows = await tx
    .select({ userId: notifications.notifiableId, n: count() })
    .from(notifications)
    .where(and(eq(notifications.notifiableType, 'user'), inArray(notifications.notifiableId, userIds), unreadNotifications()))
    .groupBy(notifications.notifiableId);
  return new Map(rows.map((row) => [row.userId, row.n]));
}

/** Streams one user may hold open in one process; more are refused with 429 (see the spec). */
export const MAX_STREAMS_PER_USER = 10;

const EVENT_STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

/** Whether nothing can be written to the client any more (it left, or the stream was ended). */
function isGone(response: ServerResponse): boolean {
  return response.writableEnded || response.destroyed || !response.socket || response.socket.destroyed;
}

const event = (name: string, data: unknown, id?: string) => `${id ? `id: ${id}\n` : ''}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

export class NotificationStreams {
  /** tenant → user → open streams. */
  private readonly clients = new Map<number, Map<number, Set<StreamClient>>>();
  private listening: Promise<{ unlisten(): Promise<void> }> | null = null;
  private heartbeat: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly db: Database,
    private readonly log: Logger,
    private readonly heartbeatMs: number,
  ) {}

  /**
   * Takes the request over (hijack) and keeps it open as an event stream. The close
   * listener is attached before any wait, and every wait is followed by a check that the
   * client is still there: a client gone meanwhile is never registered.
   */
  async open(auth: Auth, tokenHash: Buffer, reply: FastifyReply, lastEventId: string | undefined): Promise<void> {
    const response = reply.raw;
    const client: StreamClient = { auth, tokenHash: tokenHash.toString('hex'), response, lastEventId: lastEventId ?? null, sent: new Set(), chain: Promise.resolve() };
    response.once('close', () => this.remove(client));
    if (!this.closed) await this.listen();
    // Gone while authenticating or waiting for the listener: nothing to answer, nothing to register.
    if (isGone(response)) {
      reply.hijack();
      return;
    }
    // Shutting down: end at once; the client reconnects to another process.
    if (this.closed) {
      this.startEventStream(reply);
      response.end();
      return;
    }
    // Checked and registered without a wait in between, so concurrent opens cannot exceed it.
    if (this.streamsOf(auth).size >= MAX_STREAMS_PER_USER) {
      throw new ProblemError(429, `At most ${MAX_STREAMS_PER_USER} notification streams per user are open at a time; close one first.`, {
        headers: { 'retry-after': '3' },
      });
    }
    this.startEventStream(reply);
    this.add(client);
    this.enqueue(client, () => this.catchUp(client));
  }

  private startEventStream(reply: FastifyReply): void {
    reply.hijack();
    reply.raw.writeHead(200, EVENT_STREAM_HEADERS);
    reply.raw.write('retry: 3000\n\n');
  }

  /** How many streams are registered in this process (tests, diagnostics). */
  openStreams(): number {
    let open = 0;
    for (const users of this.clients.values()) for (const set of users.values()) open += set.size;
    return open;
  }

  /** Ends every stream (server shutdown) and stops listening. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const users of this.clients.values()) for (const set of users.values()) for (const client of set) client.response.end();
    this.clients.clear();
    const listening = this.listening;
    this.listening = null;
    if (listening) await listening.then((meta) => meta.unlisten()).catch(() => {});
  }

  private streamsOf(auth: Pick<Auth, 'tenantId' | 'userId'>): ReadonlySet<StreamClient> {
    return this.clients.get(auth.tenantId)?.get(auth.userId) ?? new Set();
  }

  private add(client: StreamClient): void {
    const { tenantId, userId } = client.auth;
    let users = this.clients.get(tenantId);
    if (!users) this.clients.set(tenantId, (users = new Map()));
    let set = users.get(userId);
    if (!set) users.set(userId, (set = new Set()));
    set.add(client);
  }

  /** Ends the stream and forgets it (its close event may never come once the socket is gone). */
  private end(client: StreamClient): void {
    this.remove(client);
    if (!client.response.writableEnded) client.response.end();
  }

  private remove(client: StreamClient): void {
    const users = this.clients.get(client.auth.tenantId);
    const set = users?.get(client.auth.userId);
    set?.delete(client);
    if (set?.size === 0) users!.delete(client.auth.userId);
    if (users?.size === 0) this.clients.delete(client.auth.tenantId);
  }

  private enqueue(client: StreamClient, task: () => Promise<void>): void {
    client.chain = client.chain.then(task).catch((error: unknown) => {
      this.log.error({ err: error }, 'notification stream: write failed');
      this.end(client);
    });
  }

  /** One listening connection per process; the heartbeat timer with it. */
  private listen(): Promise<unknown> {
    if (!this.listening) {
      let connected = false;
      this.listening = this.db.ownerSql.listen(
        NOTIFICATIONS_CHANNEL,
        (payload) => {
          const notice = JSON.parse(payload) as StoredBatch | UnreadChange;
          void ('dispatch_id' in notice ? this.onBatch(notice) : this.onUnreadChange(notice)).catch((error: unknown) =>
            this.log.error({ err: error }, 'notification stream: delivering a notice failed'),
          );
        },
        () => {
          // After a reconnect, notices sent meanwhile are lost: replay from each client's last
          // id, to the streams whose sessions are still valid.
          if (connected) {
            void this.endRevoked()
              .catch((error: unknown) => this.log.error({ err: error }, 'notification stream: token check failed'))
              .finally(() => {
                for (const client of this.allClients()) this.enqueue(client, () => this.catchUp(client));
              });
          }
          connected = true;
        },
      );
      this.listening.catch(() => {
        this.listening = null;
      });
    }
    if (!this.heartbeat) {
      this.heartbeat = setInterval(() => {
        for (const client of [...this.allClients()]) {
          if (isGone(client.response)) this.end(client);
          else client.response.write(': heartbeat\n\n');
        }
        void this.endRevoked().catch((error: unknown) => this.log.error({ err: error }, 'notification stream: token check failed'));
      }, this.heartbeatMs);
      this.heartbeat.unref();
    }
    return this.listening;
  }

  /**
   * A stream lives longer than its token may: streams whose token was revoked (logout),
   * expired, or whose user was deactivated, deleted or marked for logout are ended.
   */
  private async endRevoked(): Promise<void> {
    await this.stillValid([...this.allClients()]);
  }

  /**
   * Of `clients`, those whose session still authenticates (one query); the others are
   * ended. Run before anything is written to a stream, so a session that was signed out,
   * marked for logout or whose user was deactivated or deleted receives nothing more,
   * however far away the next heartbeat is.
   */
  private async stillValid(clients: StreamClient[]): Promise<Set<StreamClient>> {
    if (clients.length === 0) return new Set();
    const valid = await stillAuthenticated(this.db, [...new Set(clients.map((client) => client.tokenHash))].map((hash) => Buffer.from(hash, 'hex')));
    const live = new Set<StreamClient>();
    for (const client of clients) {
      if (!valid.has(client.tokenHash) || isGone(client.response)) this.end(client);
      else live.add(client);
    }
    return live;
  }

  private *allClients(): Generator<StreamClient> {
    for (const users of this.clients.values()) for (const set of users.values()) yield* set;
  }

  /**
   * On connect (or listener reconnect): what was stored after the client's last id, then
   * the count. A client without one starts from its newest notification, so that a
   * listener reconnect can replay what it missed.
   */
  private async catchUp(client: StreamClient): Promise<void> {
    const { auth } = client;
    const { rows, counts } = await this.db.tenant(auth.tenantId, async (tx) => {
      if (client.lastEventId === null) {
        const [newest] = await tx
          .select({ eventId: eventIdColumn })
          .from(notifications)
          .where(ownNotifications(auth))
          .orderBy(desc(notifications.createdAt), desc(notifications.id))
          .limit(1);
        client.lastEventId = newest?.eventId ?? '0-00000000-0000-0000-0000-000000000000';
        return { rows: [], counts: await unreadCounts(tx, [auth.userId]) };
      }
      return {
        rows: await selectStreamRows(tx, and(ownNotifications(auth), after(client.lastEventId))).limit(REPLAY_LIMIT),
        counts: await unreadCounts(tx, [auth.userId]),
      };
    });
    await this.write(client, rows, counts.get(auth.userId) ?? 0);
  }

  /** A stored batch: the notifications of the users streaming here, in one query. */
  private async onBatch(batch: StoredBatch): Promise<void> {
    const users = this.clients.get(batch.tenant_id);
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
      for (const client of users.get(userId) ?? []) {
        if (live.has(client)) this.enqueue(client, () => this.write(client, own, counts.get(userId) ?? 0));
      }
    }
  }

  /** Notifications were read elsewhere (or reset): the concerned streams here get the new count. */
  private async onUnreadChange(change: UnreadChange): Promise<void> {
    const users = this.clients.get(change.tenant_id);
    if (!users) return;
    const userIds = change.user_id === null ? [...users.keys()] : users.has(change.user_id) ? [change.user_id] : [];
    if (userIds.length === 0) return;
    const [counts, live] = await Promise.all([
      this.db.tenant(change.tenant_id, (tx) => unreadCounts(tx, userIds)),
      this.stillValid(userIds.flatMap((userId) => [...(users.get(userId) ?? [])])),
    ]);
    for (const userId of userIds) {
      for (const client of users.get(userId) ?? []) if (live.has(client)) this.enqueue(client, () => this.write(client, [], counts.get(userId) ?? 0));
    }
  }

  /**
   * The client's new notifications (each once, in order), then its unread count. Live
   * notices are not filtered by time: a batch whose transaction began earlier may commit
   * after a later one, and must still be shown.
   */
  private async write(client: StreamClient, rows: StreamRow[], unread: number): Promise<void> {
    if (isGone(client.response)) return;
    const fresh = rows.filter((row) => !client.sent.has(row.id));
    if (fresh.length > 0) {
      // No relations, so presenting runs no query; the record is what the notifications view answers.
      const presented = await present(notificationView, null as never, fresh, { selects: null, relations: [] }, client.auth);
      fresh.forEach((row, index) => {
        client.response.write(event('notification', presented[index], row.eventId));
        client.sent.add(row.id);
        if (client.lastEventId === null || compareEventIds(row.eventId, client.lastEventId) > 0) client.lastEventId = row.eventId;
      });
      for (const id of client.sent) {
        if (client.sent.size <= SENT_MEMORY) break;
        client.sent.delete(id);
      }
    }
    client.response.write(event('count', unread));
  }
}
