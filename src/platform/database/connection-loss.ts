/**
 * Errors that say the database connection, not the statement, failed: the server restarted
 * or failed over, a proxy dropped an idle connection, the backend was terminated, or no
 * connection can be had right now (docs/fault-tolerance.md#lost-database-connections).
 */

/** postgres.js's own codes (a closed or destroyed connection, a connect timeout) and Node's socket errors. */
const CLIENT_CODES = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_DESTROYED',
  'CONNECTION_ENDED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * SQLSTATEs of the same: class 08 (connection exception), 57P01–57P03 (the server shuts
 * down, crashed, or is starting), 53300 (too many connections), 25006 after a failover
 * to a standby that is read-only, and 55000 when the database refuses logins for now.
 */
const SERVER_CODES = new Set(['57P01', '57P02', '57P03', '53300', '25006']);

/** Whether `error`, or a cause of it (five deep), has a `code` that `test` accepts. */
function hasCode(error: unknown, test: (code: string, current: { message?: unknown }) => boolean): boolean {
  for (let current = error, depth = 0; current && typeof current === 'object' && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && test(code, current)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

export function isConnectionLoss(error: unknown): boolean {
  // 55000 at login: the database does not accept connections now (ALLOW_CONNECTIONS false, as in maintenance).
  const refusing = (code: string, error: { message?: unknown }) => code === '55000' && /not currently accepting connections/.test(String(error.message));
  return hasCode(error, (code, current) => CLIENT_CODES.has(code) || SERVER_CODES.has(code) || code.startsWith('08') || refusing(code, current));
}

/**
 * The server refused a write because it accepts none (25006): a standby answers, or a
 * primary being demoted. After a failover that is how a pooled connection to the former
 * primary shows itself; it counts as lost (above), and is dropped with
 * `dropConnection` so that its pool connects again, to the server that accepts writes
 * now (`target_session_attrs=read-write`).
 */
export const isReadOnlyServer = (error: unknown) => hasCode(error, (code) => code === '25006');

/**
 * Has the server end the session of `connection` (a reserved connection, or a pool of one),
 * so that its pool replaces it with a new one when next needed. The session asks for an
 * idle timeout of a millisecond: any role may (`pg_terminate_backend` of its own backend
 * needs the login role, which a pool that switches to `atrium_app` does not have), and it
 * works on a standby. The pause lets the server close it before the caller hands it back.
 * Any error (the session is gone already) is ignored.
 */
export async function dropConnection(connection: { unsafe(query: string): PromiseLike<unknown> }): Promise<void> {
  try {
    await connection.unsafe('set idle_session_timeout = 1');
    await new Promise((resolve) => setTimeout(resolve, DROP_SETTLE_MS));
  } catch {
    // The connection was lost already: it is gone either way.
  }
}

/** How long `dropConnection` waits for the server to close an idle session of a 1 ms timeout. */
const DROP_SETTLE_MS = 20;

/**
 * A process-wide `unhandledRejection` listener for the entry point. postgres.js 3.4 reads
 * the server's array types on each new connection with a statement of its own whose
 * failure nobody handles: when that connection is lost while the statement runs (the
 * server terminated it, or it closed and reconnected), Node would end the process for an
 * unhandled rejection. A rejection that is a lost connection is reported to `log` and the
 * process goes on (the driver connects again by itself); any other rejection still ends
 * it, as Node does by default.
 */
export function toleratingConnectionLoss(log: (error: unknown) => void): (reason: unknown) => void {
  return (reason) => {
    if (!isConnectionLoss(reason)) throw reason;
    log(reason);
  };
}
