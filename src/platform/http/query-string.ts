/**
 * Query strings (docs/api-conventions.md#query-strings): `filter[text]=…` → `{ filter: { text: … } }`,
 * read by qs to two levels of brackets, without the `comma` option (`selects` stays one
 * string), into null-prototype objects (`plainObjects`: keys named like Object members,
 * `filter[constructor]`, are kept as plain keys and judged like any unknown key).
 *
 * A key naming `__proto__` (`filter[__proto__]=1`) is refused, 400: qs drops such keys.
 * So is a key or value whose percent-encoding does not decode (`%FF`, a lone `%`), which qs
 * would keep as the characters sent.
 *
 * A query string beyond qs's limits (more than MAX_QUERY_PARAMETERS parameters, an array of
 * more than MAX_QUERY_ARRAY_ITEMS) is refused, 400, rather than read in part: qs would
 * otherwise drop the parameters past the limit, and the request be answered as if they were
 * not sent. The parser runs while the request is routed, where it cannot answer: it marks
 * the query, and `registerQueryStringLimits` refuses the request as it begins.
 */
import type { FastifyInstance } from 'fastify';
import qs from 'qs';
import { ProblemError } from './problem.ts';

export const MAX_QUERY_PARAMETERS = 200;
export const MAX_QUERY_ARRAY_ITEMS = 100;

/** How qs reads a key's nesting (`filter[text]`) into objects: for the query and for its parameters' names alike. */
const NESTING = { depth: 2, plainObjects: true } as const;

/** Where a refused query string carries qs's reason. */
const REFUSED = Symbol('query string refused');

/** Whether a key or value of a query string decodes: every `%` starts an escape, and the escapes spell UTF-8. */
function isPercentEncoded(text: string): boolean {
  if (!text.includes('%')) return true;
  try {
    decodeURIComponent(text);
    return true;
  } catch {
    return false;
  }
}

export function parseQueryString(query: string): Record<string, unknown> {
  try {
    let prototypeKey = false;
    let malformed = false;
    const parsed = qs.parse(query, {
      ...NESTING,
      parameterLimit: MAX_QUERY_PARAMETERS,
      arrayLimit: MAX_QUERY_ARRAY_ITEMS,
      throwOnLimitExceeded: true,
      // qs drops every `__proto__` key, even into null-prototype objects: `filter[__proto__]=1` would be read as no
      // filter at all. Such a key is refused instead (400), as the JSON bodies' is.
      decoder(text, decode, charset, type) {
        // qs keeps text it cannot decode as it was sent (`%FF`, `%E9t%E9` from a Latin-1 form, a lone `%`): the value
        // would be read as those characters, a question the client did not ask. Refused instead (400), as such a path is.
        if (!isPercentEncoded(text)) malformed = true;
        const decoded = decode(text, decode, charset);
        // A segment of the key, as qs reads `a[b][c]`; `x__proto__y` is a key like any other.
        if (type === 'key' && decoded.split(/[[\]]/).includes('__proto__')) prototypeKey = true;
        return decoded;
      },
    });
    if (malformed) return { [REFUSED]: 'it is not valid percent-encoded UTF-8' };
    return prototypeKey ? { [REFUSED]: 'a key names __proto__' } : parsed;
  } catch (error) {
    // qs's limits throw a RangeError that names the limit, and nothing of the query.
    if (error instanceof RangeError) return { [REFUSED]: error.message };
    throw error;
  }
}

/**
 * The parameter one `name=value` pair of a query string sets, as parseQueryString reads it: `signature` for
 * `signature[]=…`, `[signature]=…` and `%5Bsignature%5D=…` alike (qs takes a key's first bracket for its name when
 * nothing comes before it, and reads percent-encoded brackets as brackets). Undefined when it sets none (`__proto__`).
 * Never refused for qs's limits: a request refused for them is still logged.
 */
export function queryParameterName(pair: string): string | undefined {
  return Object.keys(qs.parse(pair, { ...NESTING, parameterLimit: 1 }))[0];
}

export function registerQueryStringLimits(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    const refused = (request.query as Record<symbol, string | undefined> | undefined)?.[REFUSED];
    done(refused === undefined ? undefined : new ProblemError(400, `The query string is refused: ${refused}`));
  });
}
