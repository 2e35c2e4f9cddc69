/**
 * A real HTTP peer on loopback for outbound-request tests: records every request and
 * answers per path from a script of statuses (the last one repeats). `'hang'` never
 * answers (until `releaseHung()`, which answers 200); `'redirect'` answers 302 to `/redirected`; `{status, body, headers}` answers
 * that body (and headers).
 */
import http from 'node:http';
import type { Test } from 'tap';

export interface ReceivedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** The body's bytes (binary payloads such as encrypted push messages). */
  raw: Buffer;
  /** When the request arrived (Date.now()). */
  at: number;
}

export type Scripted = number | 'hang' | 'redirect' | { status: number; body: string; headers?: Record<string, string> };

export interface Receiver {
  url(path: string): string;
  port: number;
  received(path?: string): ReceivedRequest[];
  script(path: string, answers: Scripted[]): void;
  /** Answers 200 to every request left hanging so far. */
  releaseHung(): void;
}

export async function startReceiver(t: Test, options: { maxBodyBytes?: number } = {}): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const scripts = new Map<string, Scripted[]>();
  const hung: http.ServerResponse[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = (req.url ?? '/').split('?')[0]!;
      const raw = Buffer.concat(chunks);
      requests.push({ method: req.method ?? '', path, headers: req.headers, body: raw.toString('utf8'), raw, at: Date.now() });
      if (options.maxBodyBytes !== undefined && raw.length > options.maxBodyBytes) {
        res.writeHead(413, { 'content-type': 'text/plain' }).end('payload too large');
        return;
      }
      const script = scripts.get(path) ?? [200];
      const answer = script.length > 1 ? script.shift()! : script[0]!;
      if (answer === 'hang') {
        hung.push(res);
        return;
      }
      if (answer === 'redirect') {
        res.writeHead(302, { location: '/redirected' }).end();
        return;
      }
      if (typeof answer === 'object') {
        res.writeHead(answer.status, { 'content-type': 'text/plain', ...answer.headers }).end(answer.body);
        return;
      }
      res.writeHead(answer, { 'content-type': 'text/plain' }).end(`status ${answer}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const port = (server.address() as { port: number }).port;
  return {
    port,
    url: (path) => `http://127.0.0.1:${port}${path}`,
    received: (path) => requests.filter((request) => path === undefined || request.path === path),
    script: (path, answers) => scripts.set(path, [...answers]),
    releaseHung: () => {
      for (const res of hung.splice(0)) if (!res.writableEnded && !res.destroyed) res.writeHead(200, { 'content-type': 'text/plain' }).end('released');
    },
  };
}
