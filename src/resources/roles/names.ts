/**
 * Names that people read to tell records apart and to choose one (roles, departments):
 * two names that look alike must not name two records, or a look-alike ("Administrator "
 * beside "Administrator") could be picked, or shown, in place of the real one.
 */

import { rectifyConfusion } from 'unicode-confusables';

/**
 * Characters that do not show, or change how the text around them shows: control and
 * format characters (zero-width spaces and joiners, bidirectional overrides, soft
 * hyphens), private-use and unpaired surrogate code points, line and paragraph separators.
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Co}\p{Cs}\p{Zl}\p{Zp}]/u;

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

/**
 * The key two names are compared by: compatibility-normalised (NFKC: full-width and other
 * variant letters become the plain ones), lower-cased, each character replaced by the one
 * it is drawn like (the skeleton of Unicode's UTS #39: a Cyrillic `а` is a Latin `a`, `0`
 * an `o`), lower-cased again, with every run of whitespace as one space. Names with the
 * same key count as one name. Accents stay: `é` is not `e`.
 */
export const nameKey = (name: string): string => {
  const folded = name.normalize('NFKC').toLowerCase().normalize('NFKC');
  const skeleton = rectifyConfusion(folded.normalize('NFD')).normalize('NFD');
  return skeleton.toLowerCase().replace(/\s+/gu, ' ').trim();
};

export const NAME_TAKEN = 'is already taken (names that differ only in letter case, spacing, Unicode form or letters drawn alike count as the same name)';

/** Whether a record other than `exceptId` among `existing` has a name with the key of `name`. */
export function nameTaken(existing: { id: number; name: string }[], name: string, exceptId?: number): boolean {
  const key = nameKey(name);
  return existing.some((row) => row.id !== exceptId && nameKey(row.name) === key);
}
