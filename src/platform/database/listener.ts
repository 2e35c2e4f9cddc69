/**
 * One PostgreSQL LISTEN on one channel, on a connection of its own that reaches the server
 * as the given pool does (same URL, hosts and `target_session_attrs`). When that connection
 * is lost (the server restarted or failed over, the backend was terminated) it listens
 * again on a new one, trying until it holds; a LISTEN that a read-only server refuses
 * (a former primary, 25006) drops its connection, so the next attempt finds the primary.
 * Notifications sent while it was down are lost: `onReconnect` tells the caller, after
 * each renewed LISTEN, so it can catch up from its own records.
 *
 * postgres.js's own `listen()` renews a LISTEN once after its connection closes and gives up
 * when that attempt fails while the connection stays open (a read-only server answering,
 * as during a failover): the channel would then stay silent for good.
 */
import postgres from 'postgres';
import { dropConnection, isReadOnlyServer } from './connection-loss.ts';

export interface ChannelHandlers {
  /** A notification's payload, as sent (`pg_notify(channel, payload)`). */
  onNotice(payload: string): void;
  /** LISTEN is in force again after its connection was lost (not called for the first LISTEN). */
  onReconnect(): void;
}

/** Pause between attempts to listen again while no server takes the LISTEN. */
const RETRY_MS = 250;

export class ChannelListener {
  /** The connection of its own (one), made at the first start. */
  private session: postgres.Sql | null = null;
  /** The start under way or done; null before, after a failed start, and after a stop. */
  private listening: Promise<void> | null = null;
  /** Whether LISTEN was in force on the connection that was lost (so it is renewed). */
  private established = false;
  private renewing: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly sql: postgres.Sql,
    readonly channel: string,
    private readonly handlers: ChannelHandlers,
  ) {}

  /**
   * Listens unless it already does (or is about to): resolves once LISTEN is in force. A
   * start that failed is forgotten, so the next call tries again.
   */
  start(): Promise<unknown> {
    this.stopped = false;
    if (!this.listening) {
      const listening = this.listen().then(() => {
        this.established = true;
      });
      this.listening = listening;
      listening.catch(() => {
        if (this.listening === listening) this.listening = null;
      });
    }
    return this.listening;
  }

  /** Stops listening (a no-op when it does not) and closes its connection. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.listening = null;
    this.established = false;
    const session = this.session;
    this.session = null;
    await session?.end({ timeout: 1 }).catch(() => {});
    await this.renewing;
  }

  private connection(): postgres.Sql {
    this.session ??= postgres({
      // The pool's options (its hosts, login, session attributes), for one connection that stays.
      ...(this.sql.options as unknown as postgres.Options<Record<string, never>>),
      max: 1,
      idle_timeout: null as unknown as undefined,
      max_lifetime: null,
      fetch_types: false,
      onnotify: (channel: string, payload: string) => {
        if (channel === this.channel && !this.stopped) this.handlers.onNotice(payload);
      },
      onclose: () => this.lost(),
    } as postgres.Options<Record<string, never>>);
    return this.session;
  }

  private async listen(): Promise<void> {
    const session = this.connection();
    try {
      await session.unsafe(`listen "${this.channel.replace(/"/g, '""')}"`);
    } catch (error) {
      if (isReadOnlyServer(error)) await dropConnection(session);
      throw error;
    }
  }

  /** The connection closed: once LISTEN had been in force, listen again until it holds. */
  private lost(): void {
    if (this.stopped || !this.established || this.renewing) return;
    this.renewing = (async () => {
      while (!this.stopped) {
        try {
          await this.listen();
          if (!this.stopped) this.handlers.onReconnect();
          return;
        } catch {
          await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        }
      }
    })().finally(() => (this.renewing = null));
  }
}
