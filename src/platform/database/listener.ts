/**
 * One PostgreSQL LISTEN on one channel. postgres.js holds every LISTEN of a pool on a
 * connection of its own and, when that connection drops (the server restarted, the backend
 * was terminated), connects again and listens again by itself. Notifications sent while it
 * was down are lost: `onReconnect` tells the caller, after each renewed LISTEN, so it can
 * catch up from its own records.
 */
import type postgres from 'postgres';

export interface ChannelHandlers {
  /** A notification's payload, as sent (`pg_notify(channel, payload)`). */
  onNotice(payload: string): void;
  /** LISTEN is in force again after its connection was lost (not called for the first LISTEN). */
  onReconnect(): void;
}

export class ChannelListener {
  private listening: Promise<{ unlisten(): Promise<void> }> | null = null;
  /**
   * The LISTEN whose notices are handled. postgres.js keeps retrying a LISTEN whose first
   * attempt failed, and gives no handle to end it: once another start replaced it, its
   * notices are ignored, so none is handled twice.
   */
  private current: object | null = null;

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
    if (!this.listening) {
      const attempt = {};
      this.current = attempt;
      let connected = false;
      const listening = this.sql.listen(
        this.channel,
        (payload) => {
          if (this.current === attempt) this.handlers.onNotice(payload);
        },
        () => {
          if (connected && this.current === attempt) this.handlers.onReconnect();
          connected = true;
        },
      );
      this.listening = listening;
      listening.catch(() => {
        if (this.listening === listening) this.listening = null;
      });
    }
    return this.listening;
  }

  /** Stops listening (a no-op when it does not); the connection closes with its pool. */
  async stop(): Promise<void> {
    const listening = this.listening;
    this.listening = null;
    this.current = null;
    if (listening) await listening.then((meta) => meta.unlisten()).catch(() => {});
  }
}
