/**
 * The event streams a process holds open, by tenant and user: how many one user may hold
 * (one more is a 429), each stream's writes in order, heartbeats, and ending them (the
 * client left, the caller ended it, the client reads too slowly, the process shuts down).
 * Knows nothing of what is streamed: the resource decides what each stream receives, and
 * when one must end.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import { isGone, sseComment, startEventStream } from '../http/event-stream.ts';
import { ProblemError } from '../http/problem.ts';

/** What the registry needs of a stream: whose it is, and where it is written. */
export interface Stream {
  auth: { tenantId: number; userId: number };
  response: ServerResponse;
}

export interface ErrorLog {
  error(object: unknown, message: string): void;
  warn(object: unknown, message: string): void;
}

export interface StreamRegistryOptions {
  /** What is streamed ("notification"): names the streams in the 429 detail and in logs. */
  kind: string;
  /** Streams one user may hold open in this process; one more is refused with 429. */
  maxPerUser: number;
  /** How long a client waits before reconnecting (the stream's `retry`, and the 429's Retry-After). */
  retryMs: number;
  /** Interval of the heartbeat comment. */
  heartbeatMs: number;
  /**
   * Bytes a stream may leave unsent (written, not yet taken by the connection) when its
   * next write or heartbeat comes; beyond them its client does not keep up (it stopped
   * reading, or its network is gone without a word) and the stream is ended, so that the
   * process does not hold what it cannot deliver. A client that reconnects is given what
   * it missed from its last event id.
   */
  maxUnsentBytes: number;
  /** Runs at every heartbeat, after the comments are written (e.g. the sessions' re-check). */
  onHeartbeat?: () => void;
  log: ErrorLog;
}

export class StreamRegistry<S extends Stream> {
  /** tenant → user → open streams. */
  private readonly streams = new Map<number, Map<number, Set<S>>>();
  /** Each stream's pending writes, in order. */
  private readonly chains = new WeakMap<S, Promise<void>>();
  private heartbeat: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly options: StreamRegistryOptions) {}

  /**
   * Takes the request over (hijack) and keeps it open as `stream`, whose first write is
   * `first`. The close listener is attached before any wait (`ready`: what must be in place
   * before a stream is served), and every wait is followed by a check that the client is
   * still there: a client gone meanwhile is never registered.
   */
  async open(reply: FastifyReply, stream: S, steps: { ready: () => Promise<unknown>; first: () => Promise<void> }): Promise<void> {
    const { response } = stream;
    response.once('close', () => this.remove(stream));
    if (!this.closed) {
      this.startHeartbeat();
      await steps.ready();
    }
    // Gone while authenticating or waiting: nothing to answer, nothing to register.
    if (isGone(response)) {
      reply.hijack();
      return;
    }
    // Shutting down: end at once; the client reconnects to another process.
    if (this.closed) {
      startEventStream(reply, this.options.retryMs);
      response.end();
      return;
    }
    // Checked and registered without a wait in between, so concurrent opens cannot exceed it.
    const { maxPerUser, kind, retryMs } = this.options;
    if ((this.streams.get(stream.auth.tenantId)?.get(stream.auth.userId)?.size ?? 0) >= maxPerUser) {
      throw new ProblemError(429, `At most ${maxPerUser} ${kind} streams per user are open at a time; close one first.`, {
        code: 'stream_limit_reached',
        headers: { 'retry-after': String(Math.ceil(retryMs / 1000)) },
      });
    }
    startEventStream(reply, retryMs);
    this.add(stream);
    this.enqueue(stream, steps.first);
  }

  /** How many streams are registered (tests, diagnostics). */
  size(): number {
    let open = 0;
    for (const users of this.streams.values()) for (const set of users.values()) open += set.size;
    return open;
  }

  /** Every registered stream. */
  *all(): Generator<S> {
    for (const users of this.streams.values()) for (const set of users.values()) yield* set;
  }

  /** The tenant's streams by user (kept up to date as streams come and go), if it has any. */
  ofTenant(tenantId: number): ReadonlyMap<number, ReadonlySet<S>> | undefined {
    return this.streams.get(tenantId);
  }

  /** Runs `task` after the stream's earlier writes; a failing one ends the stream, and so does a client that does not keep up. */
  enqueue(stream: S, task: () => Promise<void>): void {
    const run = () => (this.lagging(stream) ? undefined : task());
    const chain = (this.chains.get(stream) ?? Promise.resolve()).then(run).catch((error: unknown) => {
      this.options.log.error({ err: error }, `${this.options.kind} stream: write failed`);
      this.end(stream);
    });
    this.chains.set(stream, chain);
  }

  /** Ends the stream and forgets it (its close event may never come once the socket is gone). */
  end(stream: S): void {
    this.remove(stream);
    if (!stream.response.writableEnded) stream.response.end();
  }

  /** Ends every stream and stops the heartbeat (server shutdown); streams opened later end at once. */
  close(): void {
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const stream of this.all()) stream.response.end();
    this.streams.clear();
  }

  /**
   * Whether the stream's client left more than `maxUnsentBytes` unsent; such a stream is
   * ended at once (destroyed: what it holds is released, not flushed) and forgotten.
   */
  private lagging(stream: S): boolean {
    const unsent = stream.response.writableLength;
    if (unsent <= this.options.maxUnsentBytes) return false;
    this.options.log.warn(
      { unsent, tenantId: stream.auth.tenantId, userId: stream.auth.userId },
      `${this.options.kind} stream: the client does not keep up; ended`,
    );
    this.remove(stream);
    stream.response.destroy();
    return true;
  }

  private add(stream: S): void {
    const { tenantId, userId } = stream.auth;
    let users = this.streams.get(tenantId);
    if (!users) this.streams.set(tenantId, (users = new Map<number, Set<S>>()));
    let set = users.get(userId);
    if (!set) users.set(userId, (set = new Set<S>()));
    set.add(stream);
  }

  private remove(stream: S): void {
    const users = this.streams.get(stream.auth.tenantId);
    const set = users?.get(stream.auth.userId);
    set?.delete(stream);
    if (set?.size === 0) users!.delete(stream.auth.userId);
    if (users?.size === 0) this.streams.delete(stream.auth.tenantId);
  }

  /** Started with the first stream: a comment to every stream, gone ones forgotten. */
  private startHeartbeat(): void {
    if (this.heartbeat) return;
    this.heartbeat = setInterval(() => {
      for (const stream of [...this.all()]) {
        if (isGone(stream.response)) this.end(stream);
        else if (!this.lagging(stream)) stream.response.write(sseComment('heartbeat'));
      }
      this.options.onHeartbeat?.();
    }, this.options.heartbeatMs);
    this.heartbeat.unref();
  }
}
