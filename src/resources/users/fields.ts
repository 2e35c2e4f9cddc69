/**
 * The user keys a request or a CSV row writes, once for both: which column each key is
 * stored in and how a CSV cell of it is read (docs/users.md#csv-import-preview). The
 * create and update operations store `columnsOf` their body; the CSV preview reads each
 * cell with `parseCell` and compares the same columns. What a value must satisfy beyond
 * its type is judged by `userDraftErrors` and `userReferenceErrors` (rules.ts), again for
 * both.
 */
import { characterCount, isEmailAddress } from '../../platform/http/validation.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import { defaultRouteProblems, usernameShapeProblem } from './rules.ts';
import type { UserColumns } from './queries.ts';
import { GENDERS } from './table.ts';

/** How a CSV cell of a key is read. */
export type CellKind = 'username' | 'password' | 'text' | 'reference' | 'boolean' | 'integer' | 'date' | 'gender' | 'email' | 'route' | 'ids';

/**
 * The keys of a user that a create, an update or a CSV row writes (not the picture, which
 * a CSV cell cannot carry, nor `old_password`), in the CSV template's column order: each
 * key's column and cell kind. `password` (stored as a hash) and `department_ids` (rows of
 * `department_users`) are no columns of `users`.
 */
export const USER_FIELDS = {
  username: { column: 'username', cell: 'username' },
  password: { column: null, cell: 'password' },
  first_name: { column: 'firstName', cell: 'text' },
  last_name: { column: 'lastName', cell: 'text' },
  role_id: { column: 'roleId', cell: 'integer' },
  lang_id: { column: 'langId', cell: 'reference' },
  active: { column: 'active', cell: 'boolean' },
  group_account: { column: 'groupAccount', cell: 'boolean' },
  request_password_change: { column: 'requestPasswordChange', cell: 'boolean' },
  street: { column: 'street', cell: 'text' },
  zipcode: { column: 'zipcode', cell: 'text' },
  city: { column: 'city', cell: 'text' },
  phone: { column: 'phone', cell: 'text' },
  staff_number: { column: 'staffNumber', cell: 'text' },
  email: { column: 'email', cell: 'email' },
  birthdate: { column: 'birthdate', cell: 'date' },
  entering_date: { column: 'enteringDate', cell: 'date' },
  leaving_date: { column: 'leavingDate', cell: 'date' },
  gender: { column: 'gender', cell: 'gender' },
  wants_email_notifications: { column: 'wantsEmailNotifications', cell: 'boolean' },
  default_route: { column: 'defaultRoute', cell: 'route' },
  prevent_logout: { column: 'preventLogout', cell: 'boolean' },
  department_ids: { column: null, cell: 'ids' },
} as const satisfies Record<string, { column: keyof UserColumns | null; cell: CellKind }>;

export type UserKey = keyof typeof USER_FIELDS;

/** The keys a CSV may hold, in the template's order. */
export const IMPORTABLE_KEYS = Object.keys(USER_FIELDS) as UserKey[];

/** The keys stored in a column of `users`, with that column, in the template's order. */
const COLUMN_KEYS: readonly (readonly [UserKey, keyof UserColumns])[] = IMPORTABLE_KEYS.flatMap((key) => {
  const { column } = USER_FIELDS[key];
  return column === null ? [] : [[key, column] as const];
});

/**
 * The columns `input` sets: each user key it holds (undefined: not sent) under its column,
 * of those `writes` lets through (all by default). Other keys are left out.
 */
export function columnsOf(input: Partial<Record<string, unknown>>, writes?: (key: UserKey, value: unknown) => boolean): UserColumns {
  const values: Record<string, unknown> = {};
  for (const [key, column] of COLUMN_KEYS) {
    const value = input[key];
    if (value !== undefined && (!writes || writes(key, value))) values[column] = value;
  }
  return values;
}

/** A cell's value: what `parseCell` reads (`department_ids`: the IDs in the cell's order). */
export type CellValue = string | number | boolean | null | number[];

/** The most IDs a `department_ids` cell may list: the limit of the API's `department_ids`. */
const MAX_IDS = 1000;

const BOOLEANS: Record<string, boolean> = { true: true, '1': true, yes: true, false: false, '0': false, no: false };

/**
 * One CSV cell → its value, or why it is none. Cells are trimmed, except the password,
 * which is taken as written. An empty cell of a date, number, boolean, language or route
 * is null; an empty text cell is `""`, or null with `whitespaceToNull`. A `department_ids`
 * cell lists IDs separated by `|` (`1|4`), an empty one none. A username must have the
 * spec's form, and a route pass the rules the API applies to it (`defaultRouteProblems`). A NUL character (U+0000), which no text column can store and
 * the API therefore refuses, makes any cell but the password (stored as a hash) invalid.
 */
export function parseCell(kind: CellKind, raw: string, whitespaceToNull: boolean): { value: CellValue } | { error: string } {
  const text = raw.trim();
  // The create keys' limit (default_route allows more, but 255 is plenty for a CSV cell).
  if (kind !== 'password' && kind !== 'ids' && characterCount(text) > 255) return { error: 'must be at most 255 characters long' };
  if (kind !== 'password' && text.includes('\u0000')) return { error: 'contains a NUL character, which cannot be stored' };
  switch (kind) {
    case 'username': {
      if (!text) return { error: 'is required' };
      // The spec's schema of `username`, as POST /api/users judges it: a line break inside (a quoted cell) is refused.
      // The rules of a new name (`usernameProblems`) judge the rows that create a user: a row matching a stored name keeps it.
      const problem = usernameShapeProblem(text);
      return problem ? { error: problem } : { value: text };
    }
    case 'password':
      if (characterCount(raw) > 1024) return { error: 'must be at most 1024 characters long' };
      return { value: raw === '' ? null : raw };
    case 'text':
      return { value: text === '' && whitespaceToNull ? null : text };
    case 'reference':
      return { value: text === '' ? null : text };
    case 'email':
      if (text === '') return { value: whitespaceToNull ? null : '' };
      // The spec's format, as the API judges it: a value the API refuses would be refused by the mail server too.
      return isEmailAddress(text) ? { value: text } : { error: 'must be an e-mail address' };
    case 'boolean': {
      if (text === '') return { value: null };
      const value = BOOLEANS[text.toLowerCase()];
      return value === undefined ? { error: 'must be true, false, 1, 0, yes or no' } : { value };
    }
    case 'integer':
      if (text === '') return { value: null };
      return /^\d{1,15}$/.test(text) ? { value: Number(text) } : { error: 'must be a whole number' };
    case 'date':
      if (text === '') return { value: null };
      return isCalendarDate(text) ? { value: text } : { error: 'must be a date YYYY-MM-DD' };
    case 'gender':
      if (text === '') return { value: null };
      return (GENDERS as readonly string[]).includes(text) ? { value: text } : { error: `must be one of: ${GENDERS.join(', ')}` };
    case 'route': {
      if (text === '') return { value: null };
      const [problem] = defaultRouteProblems(text);
      return problem ? { error: problem } : { value: text };
    }
    case 'ids': {
      if (text === '') return { value: [] };
      const parts = text.split('|').map((part) => part.trim());
      if (parts.length > MAX_IDS) return { error: `must list at most ${MAX_IDS} IDs` };
      if (!parts.every((part) => /^[1-9]\d{0,14}$/.test(part))) return { error: 'must list IDs separated by |, e.g. 1|4' };
      const ids = parts.map(Number);
      if (new Set(ids).size !== ids.length) return { error: 'must not list an ID twice' };
      return { value: ids };
    }
  }
}

/**
 * A cell that leaves the stored value as it is: an empty boolean or `role_id` cell (those
 * columns cannot be null).
 */
export const keepsCurrent = (key: UserKey, value: CellValue | undefined) => value === null && (USER_FIELDS[key].cell === 'boolean' || key === 'role_id');

/**
 * The user keys stored in columns of `users` with their values in `row` (camel-case
 * columns), by key: what the audit trail compares before and after a write. Values that
 * are SQL (a blackout's `clock_timestamp()`) are left out; the password is no column.
 */
export function storedFieldsOf(row: UserColumns): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [key, column] of COLUMN_KEYS) {
    const value = row[column];
    if (value === undefined) continue;
    if (value !== null && typeof value === 'object' && !(value instanceof Date)) continue;
    fields[key] = value;
  }
  return fields;
}
