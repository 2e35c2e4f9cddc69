/**
 * Conditional requests (RFC 9110 §13.1; docs/api-conventions.md#conditional-requests).
 *
 * Writes: records carry no entity tag, so of the preconditions a write may send,
 * `If-Match: *` (the target exists; the handler answers 404 when it does not) and an
 * `If-None-Match` naming entity tags (none of them is the target's) hold, and any other
 * does not: an `If-Match` naming an entity tag, weak or strong, alone or in a list, can
 * match nothing, and `If-None-Match: *` asks that the target not exist. A server must not
 * carry out a write whose precondition does not hold (412); ignoring one would let a
 * client that guards its update with the tag it read overwrite a change it never saw.
 *
 * Reads of what does carry an entity tag (a profile picture) answer 304 when
 * `If-None-Match` matches it (`noneMatchTags`).
 *
 * `If-Unmodified-Since` is ignored: records carry no modification date an answer states
 * (RFC 9110 §13.1.4).
 */
import { ProblemError } from './problem.ts';

/** An entity tag as a field names it (RFC 9110 §8.8.3): its opaque tag with its quotes (`"xyz"`), and whether it is weak (`W/"xyz"`). */
export interface EntityTag {
  weak: boolean;
  opaque: string;
}

/**
 * A field of `*` or entity tags: `If-Match`, `If-None-Match` (RFC 9110 §13.1.1, §13.1.2).
 * `*` only when every member is `*` (repeated fields arrive joined by commas: `*, *`);
 * otherwise its entity tags, of which a `*` among them is none.
 */
export type EntityTagList = { any: true } | { any: false; tags: EntityTag[] };

/**
 * One member of the list and the comma after it: `*`, or an entity tag (`W/`, then an
 * opaque tag in quotes, of any visible characters but `"`: commas and stars included), or
 * nothing (an empty member, which RFC 9110 §5.6.1 has a recipient skip). Blanks after a
 * member are read only after one: with an optional run on each side of an absent member,
 * a run of blanks that ends in no comma would be tried at every split of it (quadratic
 * time, a tenth of a second on a 16 KiB header).
 */
const MEMBER = /[ \t]*(?:(?:(\*)|(W\/)?("[\x21\x23-\x7e\x80-\xff]*"))[ \t]*)?(?:,|$)/y;

/**
 * The field value read as RFC 9110 writes it, or undefined when it is no such list (an
 * unclosed quote, a lower-case `w/`, text outside quotes). A comma inside a tag's quotes
 * is part of the tag, so `"a,*,b"` is one entity tag, neither `*` nor three members.
 */
export function entityTagList(value: string): EntityTagList | undefined {
  const tags: EntityTag[] = [];
  let stars = 0;
  for (let at = 0; at < value.length; at = MEMBER.lastIndex) {
    MEMBER.lastIndex = at;
    const member = MEMBER.exec(value);
    if (!member) return undefined;
    if (member[1]) stars++;
    else if (member[3]) tags.push({ weak: member[2] !== undefined, opaque: member[3] });
  }
  return stars > 0 && tags.length === 0 ? { any: true } : { any: false, tags };
}

/** Whether a precondition field is `*` (RFC 9110: `*` or a list of entity tags, never both). */
const namesAny = (value: string) => entityTagList(value)?.any === true;

/**
 * The entity tags for which a read's `If-None-Match` does not hold, so that the answer is
 * 304 (RFC 9110 §13.1.2): `'any'` for `*`, else the opaque tags it names without their
 * quotes, compared by the weak comparison (§8.8.3.2: either or both may be weak). A field
 * that is no list of `*` or entity tags is ignored (none).
 */
export function noneMatchTags(ifNoneMatch: string | undefined): 'any' | string[] {
  const list = ifNoneMatch === undefined ? undefined : entityTagList(ifNoneMatch);
  if (!list) return [];
  return list.any ? 'any' : list.tags.map((tag) => tag.opaque.slice(1, -1));
}

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
