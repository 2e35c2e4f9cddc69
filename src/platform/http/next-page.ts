/**
 * The `Link: <…>; rel="next"` header of paged lists (RFC 8288; docs/api-conventions.md#paging).
 * Lists stay bare JSON arrays, so where the next page starts travels beside the answer:
 * the result-controls mechanism marks a list it cut short with the query parameters that
 * lead to the next page (`withNextPage`), and the operation binding turns the mark into
 * the header (`nextPageLink`). No handler writes it.
 */

import { queryParameterName } from './query-string.ts';

/** Query parameters of the next page: a value replaces the parameter, `undefined` removes it. */
export type NextPage = Readonly<Record<string, string | number | undefined>>;

const nextPages = new WeakMap<object, NextPage>();

/** `answer`, marked as a page that more records follow (reached with `next`). */
export function withNextPage<T extends object>(answer: T, next: NextPage): T {
  nextPages.set(answer, next);
  return answer;
}

/** The next page of a marked answer, or undefined for any other answer. */
export function nextPageOf(answer: unknown): NextPage | undefined {
  return typeof answer === 'object' && answer !== null ? nextPages.get(answer) : undefined;
}

/**
 * Bytes of a request target that may stand in a URI reference as they are: RFC 3986's
 * unreserved and reserved characters and `%`. Anything else (request targets arrive as
 * latin1 text, one character per byte) is percent-encoded, so the header stays a URI
 * inside `<…>` whatever the client sent.
 */
const encodeTarget = (text: string) =>
  text.replace(/[^A-Za-z0-9\-._~:/?[\]@!$&'()*+,;=%]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);

/**
 * The `Link` header value for the next page of the request `url` (path and query as
 * received): a relative reference to the same path with the same query, the parameters
 * `next` names replaced or removed, in the order the client sent the others.
 */
export function nextPageLink(url: string, next: NextPage): string {
  const question = url.indexOf('?');
  const path = question === -1 ? url : url.slice(0, question);
  const query = question === -1 ? '' : url.slice(question + 1);
  // A parameter is replaced in every spelling the query parser reads as it (`offset`, `offset[]`, `[offset]`,
  // `off%73et`): one left behind would make the next page's parameter an array, and the link a 422.
  const kept = query.split('&').filter((part) => part !== '' && !Object.hasOwn(next, queryParameterName(part) ?? ''));
  const changed = Object.entries(next)
    .filter((entry): entry is [string, string | number] => entry[1] !== undefined)
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeURIComponent(String(value))}`);
  return `<${encodeTarget(`${path}?${[...kept, ...changed].join('&')}`)}>; rel="next"`;
}
