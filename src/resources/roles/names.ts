/**
 * Names that people read to tell records apart and to choose one (roles, departments):
 * two names that look alike must not name two records, or a look-alike ("Administrator "
 * beside "Administrator") could be picked, or shown, in place of the real one.
 */

import { rectifyConfusion } from 'unicode-confusables';

/**
 * Characters that do not show, or change how the text around them shows: control and
 * format characters (zero-width spaces and joiners, bidirectional overrides, soft
 * hyphens), private-use and unpaired surrogate code points, line and paragraph separators,
 * the characters Unicode says to draw as nothing where unsupported (default-ignorable:
 * variation selectors, the combining grapheme joiner, Hangul fillers) and the blank
 * braille pattern.
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\u2800]/u;
/** Default-ignorable characters, which UTS #39's skeleton removes before comparing. */
const IGNORABLE = /\p{Default_Ignorable_Code_Point}/gu;

export const INVISIBLE_CHARACTER_PROBLEM = 'may not contain control, format or other invisible characters';

/** The form a name is stored in: Unicode NFC, so one name has one spelling. */
export const storedName = (name: string): string => name.normalize('NFC');

/** Whether `text` holds an invisible character (`INVISIBLE`): refused in names people read, and in usernames. */
export const hasInvisibleCharacter = (text: string): boolean => INVISIBLE.test(text);

/** What is wrong with `name` as a display name: whitespace at either end, an invisible character. */
export function displayNameProblems(name: string): string[] {
  const problems: string[] = [];
  if (/^\s|\s$/u.test(name)) problems.push('may not begin or end with whitespace');
  if (hasInvisibleCharacter(name)) problems.push(INVISIBLE_CHARACTER_PROBLEM);
  return problems;
}

/** Compatibility-normalised (NFKC: full-width and other variant letters become the plain ones) and lower-cased. */
const folded = (text: string): string => text.normalize('NFKC').toLowerCase().normalize('NFKC');

/** Each character replaced by the one it is drawn like: the skeleton of Unicode's UTS #39 (a Cyrillic `а` is a Latin `a`, `0` an `o`, `rn` an `m`). */
const skeleton = (text: string): string => rectifyConfusion(text.normalize('NFD')).normalize('NFD');

/** The keys of names already seen: a tenant's names are compared with every new one. */
const knownKeys = new Map<string, readonly [string, string]>();
const KNOWN_KEYS_MAX = 50_000;

/**
 * `skeleton` of the characters outside ASCII only, after NFKC (full-width letters are ASCII
 * ones): a Cyrillic `М` is a Latin `M`, and an ASCII letter keeps its case. A capital drawn
 * like `I` is an `I`, though UTS #39 takes `l` for what `I` and `l` look like.
 */
const latinised = (text: string): string =>
  [...text.normalize('NFKC').normalize('NFD')]
    .map((c) => {
      if (c.charCodeAt(0) < 0x80) return c;
      const like = rectifyConfusion(c);
      return like === 'l' && c !== c.toLowerCase() ? 'I' : like;
    })
    .join('');

/**
 * The keys two names are compared by; names with an equal first key or an equal second key
 * count as one name. Both take each character for the one it is drawn like (`skeleton`),
 * ignore letter case and Unicode form (`folded`) and default-ignorable characters, and take
 * every run of whitespace for one space. The first takes letters of other scripts for Latin ones before it folds, so that
 * a Cyrillic `М` (whose lower case `м` looks like no Latin letter) is an `M` while `IT` is
 * still `it`; the second takes every character for its look-alike before it folds, so that
 * a capital `I` is an `l` too. Accents stay: `é` is not `e`.
 */
export function nameKeys(name: string): readonly [string, string] {
  let keys = knownKeys.get(name);
  if (keys === undefined) {
    const key = (text: string) =>
      skeleton(folded(text.replace(IGNORABLE, '')))
        .toLowerCase()
        .replace(/\s+/gu, ' ')
        .trim();
    keys = [key(latinised(name)), key(skeleton(name))];
    if (knownKeys.size >= KNOWN_KEYS_MAX) knownKeys.clear();
    knownKeys.set(name, keys);
  }
  return keys;
}

export const NAME_TAKEN = 'is already taken (names that differ only in letter case, spacing, Unicode form or letters drawn alike count as the same name)';

/** Whether a record other than `exceptId` among `existing` has a name with a key of `name` (`nameKeys`). */
export function nameTaken(existing: { id: number; name: string }[], name: string, exceptId?: number): boolean {
  const [first, second] = nameKeys(name);
  return existing.some((row) => {
    if (row.id === exceptId) return false;
    const keys = nameKeys(row.name);
    return keys[0] === first || keys[1] === second;
  });
}
