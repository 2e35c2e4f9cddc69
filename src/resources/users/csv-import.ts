/**
 * CSV import of users: a preview of what an import would change, grouped; nothing is
 * written. The file is parsed as a stream of records (csv-parse), compared with the
 * tenant's users loaded once, so 50,000 rows cost a handful of queries and memory
 * proportional to the answer.
 *
 * The preview shows only what the caller may see, and offers only what the API would
 * let the caller do (see the operation `importUsersCsv` in the spec): hidden fields of
 * existing users cannot be changed (the row is invalid, whatever the cell holds, so the
 * answer never confirms a stored value), users whose role could grant more than the
 * caller holds are neither changed nor deleted, and roles obey `roleAssignmentError` and
 * `membershipsConferringRights` like on `POST`/`PUT /api/users`.
 */
import { isUtf8 } from 'node:buffer';
import { Readable } from 'node:stream';
import { eq, getTableColumns } from 'drizzle-orm';
import { parse, CsvError } from 'csv-parse';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { CONFERS_ENTITY_RIGHTS, membershipsConferringRights } from '../entity-permissions/rules.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import { navigationUrlProblems, ROUTE_FORMS } from '../../platform/http/navigation-url.ts';
import { invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { languages } from '../languages/table.ts';
import { roles } from '../roles/table.ts';
import { grantablePermissions } from '../../platform/auth/permissions.ts';
import { administerRefusal, isReservedUsername, roleAssignmentError, selfUpdateIgnoredKeys } from './rules.ts';
import { fullName, hiddenFieldError, hiddenFieldPermission } from './view.ts';
import { GENDERS, users } from './table.ts';

type Kind = 'username' | 'password' | 'text' | 'reference' | 'boolean' | 'integer' | 'date' | 'gender' | 'email' | 'route';

/** Importable keys (the create keys without the picture), their cell type and column. */
const IMPORTABLE = {
  username: { kind: 'username', column: 'username' },
  password: { kind: 'password', column: null },
  first_name: { kind: 'text', column: 'firstName' },
  last_name: { kind: 'text', column: 'lastName' },
  role_id: { kind: 'integer', column: 'roleId' },
  lang_id: { kind: 'reference', column: 'langId' },
  active: { kind: 'boolean', column: 'active' },
  group_account: { kind: 'boolean', column: 'groupAccount' },
  request_password_change: { kind: 'boolean', column: 'requestPasswordChange' },
  street: { kind: 'text', column: 'street' },
  zipcode: { kind: 'text', column: 'zipcode' },
  city: { kind: 'text', column: 'city' },
  phone: { kind: 'text', column: 'phone' },
  staff_number: { kind: 'text', column: 'staffNumber' },
  email: { kind: 'email', column: 'email' },
  birthdate: { kind: 'date', column: 'birthdate' },
  entering_date: { kind: 'date', column: 'enteringDate' },
  leaving_date: { kind: 'date', column: 'leavingDate' },
  gender: { kind: 'gender', column: 'gender' },
  wants_email_notifications: { kind: 'boolean', column: 'wantsEmailNotifications' },
  default_route: { kind: 'route', column: 'defaultRoute' },
  prevent_logout: { kind: 'boolean', column: 'preventLogout' },
} as const satisfies Record<string, { kind: Kind; column: keyof typeof users.$inferSelect | null }>;

export type ImportableKey = keyof typeof IMPORTABLE;
export const IMPORTABLE_KEYS = Object.keys(IMPORTABLE) as ImportableKey[];

const csvCell = (value: string) => (/[",;\r\n]/.test(value) ? `"${value.replace(/"/g, '""')}"` : value);

/** The template: one header row of the importable keys, each replaceable by `headers[key]`. */
export function importTemplate(headers: Partial<Record<string, string>>): string {
  return IMPORTABLE_KEYS.map((key) => csvCell(headers[key] ?? key)).join(',') + '\r\n';
}

export interface CsvImportOptions {
  updateUsers: boolean;
  deleteUsers: boolean;
  whitespaceToNull: boolean;
  /** Importable key → the CSV header that holds it (multipart values). */
  headers: Partial<Record<string, string>>;
  /** Who asks: what they may see, administer and assign. */
  caller: Auth;
  passwordMinLength: number;
}

type Value = string | number | boolean | null;
type ParsedRow = Partial<Record<ImportableKey, Value>>;

const BOOLEANS: Record<string, boolean> = { true: true, '1': true, yes: true, false: false, '0': false, no: false };
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** One cell → its value, or an error message. */
function parseCell(kind: Kind, raw: string, whitespaceToNull: boolean): { value: Value } | { error: string } {
  const text = raw.trim();
  // The create keys' limit (default_route allows more, but 255 is plenty for a CSV cell).
  if (kind !== 'password' && text.length > 255) return { error: 'must be at most 255 characters long' };
  switch (kind) {
    case 'username':
      if (!text) return { error: 'is required' };
      return isReservedUsername(text) ? { error: 'is reserved for blacked-out accounts' } : { value: text };
    case 'password':
      if (raw.length > 1024) return { error: 'must be at most 1024 characters long' };
      return { value: raw === '' ? null : raw };
    case 'text':
      return { value: text === '' && whitespaceToNull ? null : text };
    case 'reference':
      return { value: text === '' ? null : text };
    case 'email':
      if (text === '') return { value: whitespaceToNull ? null : '' };
      return EMAIL.test(text) ? { value: text } : { error: 'must be an e-mail address' };
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
      const [problem] = navigationUrlProblems(text, ROUTE_FORMS);
      return problem ? { error: problem } : { value: text };
    }
  }
}

/** A cell that leaves the stored value as it is: an empty boolean or role cell (they cannot be null). */
const keepsCurrent = (key: ImportableKey, value: Value) => value === null && (IMPORTABLE[key].kind === 'boolean' || key === 'role_id');

/** The header row → the importable key of each column; 422 for unknown, duplicate or missing ones. */
function mapHeader(header: string[], remap: CsvImportOptions['headers']): ImportableKey[] {
  const byHeader = new Map(IMPORTABLE_KEYS.map((key) => [remap[key] ?? key, key]));
  const keys: ImportableKey[] = [];
  const problems: string[] = [];
  header.forEach((cell, index) => {
    const key = byHeader.get(cell.trim());
    if (!key) problems.push(`column ${index + 1} "${cell}" is not an importable key`);
    else if (keys.includes(key)) problems.push(`column ${index + 1} "${cell}" repeats ${key}`);
    keys.push(key as ImportableKey);
  });
  if (!keys.includes('username')) problems.push(`no column holds username (header "${remap.username ?? 'username'}")`);
  if (problems.length > 0) throw invalid({ user_data_csv: problems }, 'The CSV header is invalid.');
  return keys;
}

/** `,` or `;`, whichever the header line uses more. */
function detectDelimiter(content: Buffer): string {
  const end = content.indexOf(0x0a);
  const firstLine = content.subarray(0, end === -1 ? Math.min(content.length, 65536) : end).toString('utf8');
  return (firstLine.match(/;/g)?.length ?? 0) > (firstLine.match(/,/g)?.length ?? 0) ? ';' : ',';
}

/** Feeds the buffer to the parser in chunks, so records flow one by one. */
function* chunks(content: Buffer, size = 64 * 1024): Generator<Buffer> {
  for (let offset = 0; offset < content.length; offset += size) yield content.subarray(offset, offset + size);
}

export async function previewCsvImport(tx: Tx, content: Buffer, options: CsvImportOptions) {
  if (!isUtf8(content)) throw invalid({ user_data_csv: ['must be UTF-8 encoded'] }, 'The CSV file is not UTF-8.');

  const { caller } = options;
  const existing = await tx
    .select({ ...getTableColumns(users), grantable: roles.permissions })
    .from(users)
    .innerJoin(roles, eq(roles.id, users.roleId));
  const byUsername = new Map(existing.map((user) => [user.username, user]));
  const roleGrantable = new Map((await tx.select({ id: roles.id, permissions: roles.permissions }).from(roles)).map((role) => [role.id, grantablePermissions(role)]));
  const selfIgnored = new Set<string>(selfUpdateIgnoredKeys(caller));
  const languageIds = new Set((await tx.select({ id: languages.id }).from(languages)).map((l) => l.id));

  const result = {
    new_users: [] as { line: number; user: ParsedRow }[],
    update_users: [] as { line: number; id: number; username: string; changes: Record<string, { from: Value; to: Value }> }[],
    unchanged_users: [] as { line: number; id: number; username: string }[],
    delete_users: [] as { id: number; username: string; full_name: string }[],
    invalid_rows: [] as { line: number; username: string | null; errors: FieldErrors }[],
  };
  const seen = new Map<string, number>();
  /** Rows that would assign a role: judged for entity rights together, after the file. */
  const roleAssignments: { line: number; username: string | null; userId: number | null; roleId: number; entry: object }[] = [];
  let keys: ImportableKey[] | null = null;
  let rows = 0;

  const parser = Readable.from(chunks(content)).pipe(
    parse({ bom: true, delimiter: detectDelimiter(content), info: true, skip_empty_lines: true, relax_quotes: false }),
  );
  try {
    for await (const { record, info } of parser as AsyncIterable<{ record: string[]; info: { lines: number } }>) {
      if (!keys) {
        keys = mapHeader(record, options.headers);
        continue;
      }
      rows++;
      const line = info.lines;
      const values: ParsedRow = {};
      const errors: FieldErrors = {};
      keys.forEach((key, index) => {
        const parsed = parseCell(IMPORTABLE[key].kind, record[index] ?? '', options.whitespaceToNull);
        if ('error' in parsed) errors[key] = [parsed.error];
        else values[key] = parsed.value;
      });
      const username = typeof values.username === 'string' ? values.username : null;
      if (username !== null) {
        const earlier = seen.get(username);
        if (earlier !== undefined) {
          throw invalid({ user_data_csv: [`username "${username}" appears on line ${earlier} and line ${line}`] }, 'The CSV names a user twice.');
        }
        seen.set(username, line);
      }
      if (typeof values.role_id === 'number' && !roleGrantable.has(values.role_id)) errors.role_id = ['does not name a role'];
      if (typeof values.lang_id === 'string' && values.lang_id !== '' && !languageIds.has(values.lang_id)) errors.lang_id = ['does not name a language'];
      const user = username !== null ? byUsername.get(username) : undefined;
      if (user?.deletedAt) errors.username = ['belongs to a deleted user'];

      if (!user) {
        if (values.password === undefined || values.password === null) errors.password = ['is required for new users'];
        else if ([...String(values.password)].length < options.passwordMinLength) {
          errors.password = [`must be at least ${options.passwordMinLength} characters long`];
        }
        if (values.role_id === undefined || values.role_id === null) errors.role_id ??= ['is required for new users'];
        if (values.group_account !== true) {
          if (!values.first_name) errors.first_name ??= ['is required for personal accounts'];
          if (!values.last_name) errors.last_name ??= ['is required for personal accounts'];
        }
      } else if (options.updateUsers) {
        // An update may not leave a personal account without its names.
        if ((values.group_account ?? user.groupAccount) !== true) {
          for (const key of ['first_name', 'last_name'] as const) {
            if (key in values && !values[key]) errors[key] ??= ['is required for personal accounts'];
          }
        }
        const refusal = administerRefusal(caller, { id: user.id, grantable: user.grantable });
        if (refusal) errors.username ??= [refusal];
        for (const key of keys) {
          if (key === 'password' || keepsCurrent(key, values[key] ?? null) || values[key] === undefined) continue;
          // Whatever the cell holds: "changed" or "unchanged" would tell the stored value.
          const permission = hiddenFieldPermission(caller, key, user);
          if (permission) errors[key] = [hiddenFieldError(permission)];
          else if (user.id === caller.userId && selfIgnored.has(key) && values[key] !== user[IMPORTABLE[key].column!]) {
            errors[key] = ['cannot be changed on your own account'];
          }
        }
      }
      const assignedRole = typeof values.role_id === 'number' && (!user || (options.updateUsers && values.role_id !== user.roleId)) ? values.role_id : null;
      if (assignedRole !== null && !errors.role_id) {
        const escalation = roleAssignmentError(caller, roleGrantable.get(assignedRole)!);
        if (escalation) errors.role_id = escalation;
      }
      if (Object.keys(errors).length > 0) {
        result.invalid_rows.push({ line, username, errors });
        continue;
      }
      const { password: _password, ...shown } = values;
      if (!user) {
        const entry = { line, user: shown };
        result.new_users.push(entry);
        if (assignedRole !== null) roleAssignments.push({ line, username, userId: null, roleId: assignedRole, entry });
        continue;
      }
      const changes: Record<string, { from: Value; to: Value }> = {};
      if (options.updateUsers) {
        for (const [key, to] of Object.entries(shown) as [ImportableKey, Value][]) {
          const column = IMPORTABLE[key].column;
          if (!column || key === 'username' || keepsCurrent(key, to)) continue;
          const from = user[column] as Value | Date;
          if (from instanceof Date) continue;
          if (from !== to) changes[key] = { from, to };
        }
      }
      if (Object.keys(changes).length > 0) {
        const entry = { line, id: user.id, username: user.username, changes };
        result.update_users.push(entry);
        if (assignedRole !== null) roleAssignments.push({ line, username, userId: user.id, roleId: assignedRole, entry });
      } else result.unchanged_users.push({ line, id: user.id, username: user.username });
    }
  } catch (error) {
    if (error instanceof CsvError) throw invalid({ user_data_csv: [error.message] }, 'The CSV file is malformed.');
    throw error;
  }
  if (!keys) throw invalid({ user_data_csv: ['is empty'] }, 'The CSV file is empty.');
  if (rows === 0) throw invalid({ user_data_csv: ['has no data rows'] }, 'The CSV file has no data rows.');

  if (roleAssignments.length > 0) {
    // One query for every row that assigns a role: rows whose role would confer entity
    // rights the caller lacks become invalid.
    const conferred = await membershipsConferringRights(
      tx,
      caller,
      roleAssignments.map((row) => ({ userId: row.userId, roleId: row.roleId })),
    );
    const refused = new Set(roleAssignments.filter((_, i) => conferred[i]!.role).map((row) => row.entry));
    if (refused.size > 0) {
      result.new_users = result.new_users.filter((entry) => !refused.has(entry));
      result.update_users = result.update_users.filter((entry) => !refused.has(entry));
      for (const row of roleAssignments) {
        if (refused.has(row.entry)) result.invalid_rows.push({ line: row.line, username: row.username, errors: { role_id: [CONFERS_ENTITY_RIGHTS] } });
      }
      result.invalid_rows.sort((a, b) => a.line - b.line);
    }
  }

  if (options.deleteUsers) {
    for (const user of existing) {
      if (user.deletedAt || seen.has(user.username) || user.id === caller.userId) continue;
      // Never offered: a user the caller may not administer (their role could grant more).
      if (administerRefusal(caller, { id: user.id, grantable: user.grantable })) continue;
      result.delete_users.push({ id: user.id, username: user.username, full_name: fullName(user) });
    }
  }
  return result;
}
