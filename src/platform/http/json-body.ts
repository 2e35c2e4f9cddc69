/**
 * JSON request bodies: parsed by Fastify's own parser (prototype poisoning refused), but
 * only after a check that arrays and objects nest at most MAX_JSON_DEPTH levels deep.
 * Validation, handlers and serializers walk documents recursively; a body nested
 * thousands of levels deep would exhaust the stack there. The check is one loop over the
 * text, so it cannot itself run out of stack, and runs before anything recursive does.
 */
import type { FastifyInstance } from 'fastify';
import { ProblemError } from './problem.ts';

/** Deepest nesting of arrays and objects a JSON body may have (the body itself is level 1). */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

/**
 * Whether JSON `text` nests arrays and objects deeper than `limit`. Brackets inside
 * strings do not count. Malformed text may be judged either way; the parser refuses it
 * anyway.
 */
export function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (inString) {
      if (code === BACKSLASH) index++;
      else if (code === QUOTE) inString = false;
    } else if (code === QUOTE) inString = true;
    else if (code === OPEN_OBJECT || code === OPEN_ARRAY) {
      if (++depth > limit) return true;
    } else if (code === CLOSE_OBJECT || code === CLOSE_ARRAY) depth--;
  }
  return false;
}

export function registerJsonBodies(app: FastifyInstance): void {
  const { onProtoPoisoning, onConstructorPoisoning } = app.initialConfig as { onProtoPoisoning?: string; onConstructorPoisoning?: string };
  const parse = app.getDefaultJsonParser((onProtoPoisoning ?? 'error') as never, (onConstructorPoisoning ?? 'error') as never);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (nestsDeeperThan(body as string, MAX_JSON_DEPTH)) {
      done(new ProblemError(400, `The request body nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep.`), undefined);
      return;
    }
    parse(request, body as string, done);
  });
}
