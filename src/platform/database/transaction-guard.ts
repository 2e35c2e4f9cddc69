/**
 * Keeps postgres.js from writing to a connection it has already closed
 * (docs/fault-tolerance.md#lost-database-connections).
 *
 * postgres.js 3.4 defers a small write to the next turn of the event loop. When the
 * connection has closed by then (the server or a proxy dropped it), that deferred write
 * dereferences the closed socket and throws outside any promise: the process dies. Inside
 * a transaction the driver writes to the closed connection itself: a statement fails
 * because the connection closed, the transaction's function rejects, and the driver then
 * sends `ROLLBACK` on that same connection; so does any statement the function sends after
 * the loss, and `COMMIT` when the function swallowed the error.
 *
 * The guard wraps a pool's `begin`. Once a statement of a transaction failed because its
 * connection is gone, later statements of that transaction fail at once without reaching
 * the driver, and the transaction's function never settles: the driver then sends neither
 * `ROLLBACK` nor `COMMIT`, and `begin` rejects with the driver's own "connection closed"
 * error, which it raises for every transaction whose connection closes. The server has
 * already rolled the transaction back by ending its session.
 */
import type postgres from 'postgres';
import { hasCode } from './connection-loss.ts';

/**
 * Failures that mean the transaction's socket is closed or closing (the driver ends the
 * connection after each): not the server's refusals, after which the connection stays open.
 */
const SOCKET_GONE = new Set(['CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT']);

const isSocketGone = (error: unknown) => hasCode(error, (code) => SOCKET_GONE.has(code));

/**
 * How long a transaction whose connection was lost waits for the driver to reject it.
 * The driver does so as soon as the socket's close is handled, in the same turn of the
 * event loop or the next; should it not (the connection stayed open after all), the
 * function's error is passed on and the driver rolls back on the open connection.
 */
const LOSS_SETTLE_MS = 2_000;

/** A statement refused before it reaches the driver, shaped like the driver's pending query. */
function refused(error: Error): postgres.PendingQuery<postgres.Row[]> {
  const answer = Promise.reject(error) as Promise<never> & Record<string, unknown>;
  for (const chained of ['values', 'raw', 'execute', 'simple', 'describe']) answer[chained] = () => answer;
  return answer as unknown as postgres.PendingQuery<postgres.Row[]>;
}

interface TransactionState {
  /** The driver's error that said the connection is gone (its errors are `Error`s). */
  lost: Error | undefined;
}

/** The transaction's `sql`: statements are watched for a lost connection, and refused once it is lost. */
function watched(tx: postgres.TransactionSql, state: TransactionState): postgres.TransactionSql {
  const watch = (query: postgres.PendingQuery<postgres.Row[]>) => {
    // Observing the outcome starts the statement, as awaiting it would: the driver hands it
    // on only after a microtask, by which time drizzle (which awaits every statement it
    // makes) has chained `.values()` where it wants it.
    query.then(undefined, (error: unknown) => {
      if (isSocketGone(error)) state.lost ??= error as Error;
    });
    return query;
  };
  return new Proxy(tx, {
    apply(target, thisArg, args: unknown[]) {
      // A tagged template is a statement; any other call builds a fragment (an identifier, a list).
      const statement = Array.isArray(args[0]) && 'raw' in args[0];
      if (!statement) return Reflect.apply(target, thisArg, args) as unknown;
      if (state.lost) return refused(state.lost);
      return watch(Reflect.apply(target, thisArg, args) as postgres.PendingQuery<postgres.Row[]>);
    },
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (...args: Parameters<postgres.TransactionSql['unsafe']>) => (state.lost ? refused(state.lost) : watch(target.unsafe(...args)));
      }
      return Reflect.get(target, property, receiver) as unknown;
    },
  });
}

/** `client` with its transactions guarded as described above; everything else passes through. */
export function guardTransactions(client: postgres.Sql): postgres.Sql {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property !== 'begin') return Reflect.get(target, property, receiver) as unknown;
      return (...args: unknown[]) => {
        const fn = args.pop() as (tx: postgres.TransactionSql) => unknown;
        let settled = false;
        let cancelWait = () => {};
        const run = async (tx: postgres.TransactionSql) => {
          const state: TransactionState = { lost: undefined };
          let outcome: { value: unknown } | { error: unknown };
          try {
            outcome = { value: await fn(watched(tx, state)) };
          } catch (error) {
            outcome = { error };
            if (isSocketGone(error)) state.lost ??= error as Error;
          }
          if (!state.lost) {
            if ('error' in outcome) throw outcome.error;
            return outcome.value;
          }
          // Neither ROLLBACK nor COMMIT: wait for the driver to reject `begin` (then never settle).
          const lost = state.lost;
          return new Promise((_resolve, reject) => {
            if (settled) return;
            const timer = setTimeout(() => reject(('error' in outcome ? outcome.error : lost) as Error), LOSS_SETTLE_MS);
            cancelWait = () => clearTimeout(timer);
          });
        };
        return (target.begin as (...a: unknown[]) => Promise<unknown>)(...args, run).finally(() => {
          settled = true;
          cancelWait();
        });
      };
    },
  });
}
