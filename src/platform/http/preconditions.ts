/**
 * Conditional writes (RFC 9110 §13.1; docs/api-conventions.md#conditional-requests). Records
 * carry no entity tag, so of the preconditions a write may send, `If-Match: *` (the target
 * exists; the handler answers 404 when it does not) and an `If-None-Match` naming entity
 * tags (none of them is the target's) hold, and any other does not: an `If-Match` naming
 * an entity tag, weak or strong, alone or in a list, can match nothing, and
 * `If-None-Match: *` asks that the target not exist. A server must not carry out a write
 * whose precondition does not hold (412); ignoring one would let a client that guards
 * its update with the tag it read overwrite a change it never saw.
 *
 * `If-Unmodified-Since` is ignored: records carry no modification date an answer states
 * (RFC 9110 §13.1.4).
 */
import { ProblemError } from './problem.ts';

/**
 * Whether a precondition header is `*` (RFC 9110: `*` or a list of entity tags, never
 * both). Repeated headers arrive joined by commas (`*, *`); a list with an entity tag in it
 * is not `*`, nor is a tag that holds a star or a comma (`"a, *, b"`).
 */
const namesAny = (header: string) => header.split(',').every((member) => member.trim() === '*');

/** The 412 of a write whose precondition does not hold, or undefined. */
export function failedPrecondition(headers: { 'if-match'?: string; 'if-none-match'?: string }): ProblemError | undefined {
  const ifMatch = headers['if-match'];
  if (ifMatch !== undefined && !namesAny(ifMatch)) {
    return new ProblemError(412, 'If-Match names an entity tag, and records carry none: the precondition does not hold.');
  }
  const ifNoneMatch = headers['if-none-match'];
  if (ifNoneMatch !== undefined && namesAny(ifNoneMatch)) {
    return new ProblemError(412, 'If-None-Match: * asks that the target not exist, and it does: the precondition does not hold.');
  }
  return undefined;
}
