import { request } from 'node:http';
import { connect } from 'node:net';
import type { FastifyInstance } from 'fastify';

/** What `app.inject` takes, for a request sent over a real connection instead. */
export interface WireRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  payload?: string | Buffer;
}

/** An answer as a client on the network reads it, shaped as `app.inject` answers (for `assertServedAnswer`). */
export interface WireAnswer {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  json(): any;
}

/**
 * A real HTTP client of `app`: the app listens on a loopback port (once), and each request
 * goes through Node's HTTP client and server, headers, chunking and connection handling
 * included, as an identity provider's requests do. The path is sent as given, but for the
 * characters an HTTP request line cannot hold (spaces, beyond Latin-1), which are
 * percent-encoded as a client would.
 */
export async function wireClient(app: FastifyInstance): Promise<{ base: string; send(request: WireRequest): Promise<WireAnswer> }> {
  if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  const base = `http://127.0.0.1:${port}`;
  const send = ({ method, url, headers = {}, payload }: WireRequest) =>
    new Promise<WireAnswer>((resolve, reject) => {
      const path = url.replace(/[^\u0021-\u00ff]/gu, (character) => encodeURIComponent(character));
      const outgoing = request(
        { host: '127.0.0.1', port, method, path, headers: { ...headers, ...(payload === undefined ? {} : { 'content-length': Buffer.byteLength(payload) }) } },
        (incoming) => {
          const chunks: Buffer[] = [];
          incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
          incoming.on('error', reject);
          incoming.on('end', () => {
            const body = Buffer.concat(chunks).toString();
            resolve({ statusCode: incoming.statusCode!, headers: incoming.headers, body, json: () => JSON.parse(body) as unknown });
          });
        },
      );
      outgoing.on('error', reject);
      outgoing.end(payload);
    });
  return { base, send };
}

/**
 * Sends `bytes` as written over a new loopback connection to `port` and answers all the
 * server sent back before the connection ended (a request the HTTP parser refuses, a
 * CONNECT, a request line no client library would write).
 */
export function rawRequest(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => resolve(Buffer.concat(chunks).toString()));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString()));
    socket.setTimeout(5000, () => reject(new Error('no answer')));
    socket.write(bytes);
  });
}
