/**
 * JSON request bodies: parsed by Fastify's own parser (prototype poisoning refused), but
 * only after a check that arrays and objects nest at most MAX_JSON_DEPTH levels deep and
 * that no string escapes an unpaired surrogate.
 * Validation, handlers and serializers walk documents recursively; a body nested
 * thousands of levels deep would exhaust the stack there. The check is one loop over the
 * text, so it cannot itself run out of stack, and runs before anything recursive does.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ProblemError } from './problem.ts';

/** Deepest nesting of arrays and objects a JSON body may have (the body itself is level 1). */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const LETTER_U = 0x75;

/** The UTF-16 code unit a `\uXXXX` escape at `index` (the backslash) stands for, or -1. */
function escapedUnit(text: string, index: number): number {
  if (text.charCodeAt(index) !== BACKSLASH || text.charCodeAt(index + 1) !== LETTER_U) return -1;
  const hex = text.slice(index + 2, index + 6);
  return /^[0-9a-fA-F]{4}$/.test(hex) ? parseInt(hex, 16) : -1;
}

const isHighSurrogate = (unit: number) => unit >= 0xd800 && unit <= 0xdbff;
const isLowSurrogate = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff;

/**
 * What makes JSON `text` unacceptable before parsing, or null: arrays and objects nested
 * deeper than `limit` (brackets inside strings do not count), or a string escaping half
 * of a surrogate pair (`"\ud800"`), which is no character at all: PostgreSQL refuses it in
 * JSON columns and would store U+FFFD in text columns, so it is refused here, the same for
 * every field. Malformed text may pass; the parser refuses it anyway.
 */
export function jsonBodyProblem(text: string, limit: number): string | null {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === BACKSLASH) {
        const unit = escapedUnit(text, index);
        if (isHighSurrogate(unit)) {
          if (!isLowSurrogate(escapedUnit(text, index + 6))) return 'The request body contains a string with an unpaired surrogate (\\uD800–\\uDFFF).';
          index += 11;
        } else if (isLowSurrogate(unit)) {
          return 'The request body contains a string with an unpaired surrogate (\\uD800–\\uDFFF).';
        } else index++;
      } else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) inString = true;
    else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      if (++depth > limit) return `The request body nests arrays and objects more than ${limit} levels deep.`;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) depth--;
  }
  return null;
}

const CHARSET = /;\s*charset\s*=\s*"?([^";\s]*)/i;

/**
 * The text of a JSON body (`body` as received, with its `Content-Type`), or why it is
 * refused: a charset other than UTF-8 (415), bytes that are not UTF-8 (400: decoding would
 * put U+FFFD in their place, and store it without a word), or `jsonBodyProblem`'s (400).
 */
function jsonBodyText(body: Buffer, contentType: string | undefined): { text: string } | { status: 400 | 415; problem: string } {
  const charset = CHARSET.exec(contentType ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') return { status: 415, problem: 'The request body must be UTF-8 (charset=utf-8).' };
  if (!isUtf8(body)) return { status: 400, problem: 'The request body is not valid UTF-8.' };
  const text = body.toString('utf8');
  const problem = jsonBodyProblem(text, MAX_JSON_DEPTH);
  return problem ? { status: 400, problem } : { text };
}

/** Why a well-formed JSON body that the parser refused is refused. */
const PROTOTYPE_KEY = 'The request body holds a key "__proto__" (or "constructor" with "prototype"), which is refused.';

function wellFormed(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * The content-type parser of JSON bodies for `scope` (the API's, SCIM's): an empty body is
 * none, `jsonBodyText`'s checks, then Fastify's parser, whose errors are passed on except
 * for a refused `__proto__` key in well-formed JSON (Fastify calls it malformed), which is
 * named. `refusal` makes the error answered for a status and its problem.
 */
export function jsonBodyParser(
  app: FastifyInstance,
  scope: FastifyInstance,
  refusal: (status: 400 | 415, problem: string) => Error,
): (request: FastifyRequest, body: string | Buffer, done: (error: Error | null, body?: unknown) => void) => void {
  const { onProtoPoisoning, onConstructorPoisoning } = app.initialConfig as { onProtoPoisoning?: string; onConstructorPoisoning?: string };
  const parse = scope.getDefaultJsonParser((onProtoPoisoning ?? 'error') as never, (onConstructorPoisoning ?? 'error') as never);
  return (request, body, done) => {
    // No content is no body, whatever Content-Type says (many clients send one on every request, a DELETE's too).
    if ((body as Buffer).length === 0) {
      done(null, undefined);
      return;
    }
    const read = jsonBodyText(body as Buffer, request.headers['content-type']);
    if ('problem' in read) {
      done(refusal(read.status, read.problem), undefined);
      return;
    }
    void parse(request, read.text, (error, value) => done(error && wellFormed(read.text) ? refusal(400, PROTOTYPE_KEY) : error, value));
  };
}

export function registerJsonBodies(app: FastifyInstance): void {
  app.addContentTypeParser(
    'application/json',
    { parseAs: 'buffer' },
    jsonBodyParser(app, app, (status, problem) => new ProblemError(status, problem)),
  );
}
