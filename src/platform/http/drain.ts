/**
 * A graceful close of the HTTP server (docs/operations.md#signals-and-shutdown): it takes no
 * new connection, every answer in flight is written to its last byte, and each connection
 * is closed once it carries no answer.
 *
 * Node's own way, `closeIdleConnections` (which `http.Server.close` calls), takes an answer
 * for done as soon as its handler has ended it, and destroys its connection: the rest of a
 * large answer still waiting to be written to a slow client is lost, though it was logged
 * as sent. Here an answer counts until its response closes (its last byte handed to the
 * system, or its client gone).
 */
import type { Server } from 'node:http';
import net, { type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/**
 * Closes `app`'s server gracefully before Fastify closes it (a `preClose` hook), when it
 * listens. An answer not written within `deadlineMs` (a client that stopped reading) has
 * its connection closed then, so that the rest of the stop (the job workers, the pools)
 * still runs within the shutdown's own timeout.
 */
export function registerDrain(app: FastifyInstance, deadlineMs: number): void {
  const server: Server = app.server;
  const open = new Set<Socket>();
  /** Connections carrying an answer, with how many (pipelined requests). */
  const busy = new Map<Socket, number>();
  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => {
      open.delete(socket);
      busy.delete(socket);
    });
  });
  server.on('request', (request, response) => {
    const socket = request.socket;
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    response.once('close', () => {
      const left = (busy.get(socket) ?? 1) - 1;
      if (left > 0) busy.set(socket, left);
      else busy.delete(socket);
    });
  });
  app.addHook('preClose', async () => {
    if (!server.listening) return;
    const closed = new Promise((resolve) => server.once('close', resolve));
    // net's close, not http's: no new connection, and no connection destroyed while it writes.
    net.Server.prototype.close.call(server);
    const closeIdle = () => {
      for (const socket of open) if (!busy.has(socket)) socket.destroy();
    };
    closeIdle();
    // Connections whose last answer is written during the drain fall idle then: closed as they do.
    const sweep = setInterval(closeIdle, 100);
    const deadline = setTimeout(() => {
      app.log.warn({ connections: open.size, deadlineMs }, 'answers still being written at the drain deadline: their connections are closed');
      for (const socket of open) socket.destroy();
    }, deadlineMs);
    await closed.finally(() => {
      clearInterval(sweep);
      clearTimeout(deadline);
    });
  });
}
