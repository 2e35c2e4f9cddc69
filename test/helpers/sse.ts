/** A Server-Sent Events client on a real HTTP connection, for stream tests. */
import http from 'node:http';
import type { Test } from 'tap';

export interface SseEvent {
  id?: string;
  event: string;
  data: string;
  /** When it arrived (Date.now()). */
  at: number;
}

export interface SseClient {
  status: number;
  contentType: string;
  events: SseEvent[];
  comments: string[];
  /** Resolves when the server ended the stream. */
  ended: Promise<void>;
  /** The first event after `from` (index) matching `match`, within `timeoutMs`. */
  next(match: (event: SseEvent) => boolean, timeoutMs?: number, from?: number): Promise<SseEvent>;
  close(): void;
}

export function openSse(t: Test, url: string, headers: Record<string, string>): Promise<SseClient> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { headers: { accept: 'text/event-stream', ...headers } }, (response) => {
      const events: SseEvent[] = [];
      const comments: string[] = [];
      const waiters = new Set<() => void>();
      let buffer = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        buffer += chunk;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const parsed: SseEvent = { event: 'message', data: '', at: Date.now() };
          let isEvent = false;
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) comments.push(line.slice(1).trim());
            else if (line.startsWith('id: ')) parsed.id = line.slice(4);
            else if (line.startsWith('event: ')) {
              parsed.event = line.slice(7);
              isEvent = true;
            } else if (line.startsWith('data: ')) {
              parsed.data += line.slice(6);
              isEvent = true;
            }
          }
          if (isEvent) events.push(parsed);
        }
        for (const wake of waiters) wake();
      });
      const ended = new Promise<void>((done) => response.on('close', () => done()));
      const client: SseClient = {
        status: response.statusCode ?? 0,
        contentType: String(response.headers['content-type'] ?? ''),
        events,
        comments,
        ended,
        next(match, timeoutMs = 5000, from = 0) {
          return new Promise((found, fail) => {
            const check = () => {
              const hit = events.slice(from).find(match);
              if (!hit) return;
              waiters.delete(check);
              clearTimeout(timer);
              found(hit);
            };
            const timer = setTimeout(() => {
              waiters.delete(check);
              fail(new Error(`no matching event within ${timeoutMs} ms; got ${JSON.stringify(events.map((e) => e.event))}`));
            }, timeoutMs);
            waiters.add(check);
            check();
          });
        },
        close: () => request.destroy(),
      };
      t.teardown(() => request.destroy());
      resolve(client);
    });
    request.on('error', reject);
  });
}
