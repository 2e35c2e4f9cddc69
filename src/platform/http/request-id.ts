import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';

export const REQUEST_ID_HEADER = 'x-request-id';

/**
 * What a client (or a proxy in front) may send as its request id: 1 to 128 letters, digits
 * and `._:@+=/-`. Nothing that could break a log line or a header, and nothing long.
 */
const WELL_FORMED = /^[A-Za-z0-9._:@+=/-]{1,128}$/;

/** The id of a request: the client's `X-Request-Id` when well-formed, otherwise a new UUID. */
export function requestId(request: IncomingMessage): string {
  const sent = request.headers[REQUEST_ID_HEADER];
  return typeof sent === 'string' && WELL_FORMED.test(sent) ? sent : randomUUID();
}

/**
 * Echoes each request's id as `X-Request-Id` on its answer, before anything else can answer
 * it. Fastify binds the id to the request's logger (`request_id`), and the error handler
 * writes it into problem documents.
 */
export function registerRequestId(app: FastifyInstance): void {
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(REQUEST_ID_HEADER, request.id);
    done();
  });
}
