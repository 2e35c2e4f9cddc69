/**
 * Request bodies are taken as sent, never decoded from a content coding: a body whose
 * `Content-Encoding` names one (gzip, br, …) is refused with 415 (RFC 9110 §8.4), before
 * any parser reads it. Without this its bytes would be read as if uncoded: plain JSON
 * labelled gzip accepted, real gzip refused as text that is not UTF-8. The same holds for a
 * transfer coding (`Transfer-Encoding: gzip, chunked`): Node undoes the chunked framing
 * and nothing else, so a coding besides `chunked` is refused the same way.
 */
import type { FastifyInstance } from 'fastify';
import { ProblemError } from './problem.ts';

/** The methods whose body an operation reads; a GET ignores one, as it ignores its `Content-Type`. */
const WITH_BODY = new Set(['POST', 'PUT', 'PATCH']);

/** Whether the request sends a body: a DELETE's is parsed when it has one, though no operation reads it. */
const sendsBody = (headers: Record<string, string | string[] | undefined>) =>
  headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');

/** Whether a `Content-Encoding` header names a coding other than `identity`. */
export function isContentCoded(header: string | undefined): boolean {
  if (header === undefined) return false;
  return header.split(',').some((coding) => {
    const name = coding.trim().toLowerCase();
    return name !== '' && name !== 'identity';
  });
}

/** Whether a `Transfer-Encoding` header names a coding besides `chunked` (the framing Node reads) and `identity`. */
export function isTransferCoded(header: string | undefined): boolean {
  return isContentCoded(
    header
      ?.split(',')
      .filter((coding) => coding.trim().toLowerCase() !== 'chunked')
      .join(','),
  );
}

export function registerContentCodings(app: FastifyInstance): void {
  app.addHook('preParsing', async (request) => {
    // A path and method no route serves answer 404 or 405 as ever (the not-found handler).
    if (request.is404 || !(WITH_BODY.has(request.method) || (request.method === 'DELETE' && sendsBody(request.headers)))) return;
    if (isContentCoded(request.headers['content-encoding'])) {
      throw new ProblemError(415, 'The request body must be sent without a content coding (Content-Encoding): it is read as sent.');
    }
    if (isTransferCoded(request.headers['transfer-encoding'])) {
      throw new ProblemError(415, 'The request body must be sent without a transfer coding besides chunked (Transfer-Encoding): it is read as sent.');
    }
  });
}
