/**
 * Server-Sent Events on the wire (the `text/event-stream` format): the response head, the
 * frames, and whether the client is still there. Knows nothing of what is streamed.
 */
import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';

/**
 * The head of an event stream: never stored (it carries a user's notifications: `no-store`,
 * as every other answer) or transformed, never buffered by a proxy. The connection is left
 * to Node, which keeps it for the stream and honours a client's `Connection: close`.
 */
export const EVENT_STREAM_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store, no-transform',
  'x-accel-buffering': 'no',
};

/** One event: an optional `id` (what a reconnecting client sends back as `Last-Event-ID`), its name and its data as JSON. */
export const sseEvent = (name: string, data: unknown, id?: string): string => `${id ? `id: ${id}\n` : ''}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

/** A comment line: clients ignore it; it keeps an idle connection open through proxies. */
export const sseComment = (text: string): string => `: ${text}\n\n`;

/** How long a client waits before reconnecting after the stream ended. */
export const sseRetry = (ms: number): string => `retry: ${Math.trunc(ms)}\n\n`;

/**
 * Takes the request over from Fastify (which then sends nothing for it) and starts the
 * stream: status 200, the headers set on the reply so far with the event-stream head, and
 * the client's reconnection delay.
 */
export function startEventStream(reply: FastifyReply, retryMs: number): void {
  reply.hijack();
  // Headers set on the reply so far (request id, CORS) are kept: a hijacked reply sends none itself.
  reply.raw.writeHead(200, { ...(reply.getHeaders() as Record<string, string>), ...EVENT_STREAM_HEADERS });
  reply.raw.write(sseRetry(retryMs));
}

/** Whether nothing can be written to the client any more (it left, or the stream was ended). */
export function isGone(response: ServerResponse): boolean {
  return response.writableEnded || response.destroyed || !response.socket || response.socket.destroyed;
}
