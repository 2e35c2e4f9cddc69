import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

export const REQUEST_ID_HEADER = 'x-request-id';

/**
 * What a client (or a proxy in front) may send as its request id: 1 to 128 letters, digits
 * and `._:@+=/-`. Nothing that could break a log line or a header, and nothing long.
 */
const WELL_FORMED = /^[A-Za-z0-9._:@+=/-]{1,128}$/;

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The id the server gave this request: unique to it whatever the client sent. It is
     * `request.id` when the client sent no well-formed `X-Request-Id`, a UUID of its own
     * otherwise (then logged as `server_request_id`). The audit trail records this one.
     */
    serverRequestId: string;
    /** The client's well-formed `X-Request-Id`, or null: its claim, which anyone may repeat. */
    clientRequestId: string | null;
  }
}

/** The client's `X-Request-Id` when well-formed, otherwise null. */
export function clientRequestId(request: IncomingMessage): string | null {
  const sent = request.headers[REQUEST_ID_HEADER];
  return typeof sent === 'string' && WELL_FORMED.test(sent) ? sent : null;
}

/** The id of a request: the client's `X-Request-Id` when well-formed, otherwise a new UUID. */
export function requestId(request: IncomingMessage): string {
  return clientRequestId(request) ?? randomUUID();
}

/**
 * Echoes each request's id as `X-Request-Id` on its answer, before anything else can answer
 * it. Fastify binds the id to the request's logger (`request_id`), and the error handler
 * writes it into problem documents. A client's id is the client's to choose, so any caller
 * can give their request the id of someone else's: the request also gets an id of the
 * server's (`serverRequestId`), which its log lines carry as `server_request_id` and the
 * audit trail records as the request's (docs/observability.md#request-ids).
 */
export function registerRequestId(app: FastifyInstance): void {
  app.decorateRequest('serverRequestId', '');
  app.decorateRequest('clientRequestId', null);
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(REQUEST_ID_HEADER, request.id);
    const client = clientRequestId(request.raw);
    request.clientRequestId = client;
    request.serverRequestId = client === null ? request.id : randomUUID();
    if (client !== null) request.log = request.log.child({ server_request_id: request.serverRequestId });
    done();
  });
}
