/**
 * CSV import of users (docs/users.md#csv-import-preview): a preview of what an import
 * would change, grouped; nothing is written. The file is parsed as a stream of records
 * (csv-parse), compared with the tenant's users loaded once, so 50,000 rows cost a
 * handful of queries and memory proportional to the answer.
 *
 * A row that would create or update a user is judged by the rules the create and update
 * operations apply (`userDraftErrors` with the tenant's required profile keys,
 * `userReferenceErrors`, the entity rights of `membershipsConferringRights` and, for a
 * password, `usersHoldingRightsBeyond`), so the preview never offers what the API would
 * refuse, and a row may change what `PUT /api/users/{user}` lets the caller change.
 * It shows only what the caller may see and offers only what the caller may do (see the
 * spec, operationId importUsersCsv): hidden fields of existing users cannot be changed
 * (the row is invalid, whatever the cell holds, so the answer never confirms a stored
 * value), and users whose role could grant more than the caller holds are neither changed
 * nor deleted.
 */
import { isUtf8 } from 'node:buffer';
import { Readable } from 'node:stream';
import { parse, CsvError } from 'csv-parse';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { CONFERS_ENTITY_RIGHTS, HOLDS_ENTITY_RIGHTS, membershipsConferringRights, usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import { reportMissing } from '../../platform/database/existence.ts';
import { columnsOf, IMPORTABLE_KEYS, keepsCurrent, parseCell, USER_FIELDS, type CellValue, type UserKey } from './fields.ts';
import { loadMemberships, loadRequiredProfileKeys, loadUserReferences, usersWithRoleGrants } from './queries.ts';
import {
  addErrors,
  administerRefusal,
  assignsRole,
  hiddenKeyErrors,
  missingReferenceErrors,
  selfUpdateIgnoredKeys,
  userDraftErrors,
  userReferenceErrors,
  type UserDraft,
} from './rules.ts';
import { fullName } from './view.ts';

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

type ParsedRow = Partial<Record<UserKey, CellValue>>;

/** The header row → the importable key of each column; 422 for unknown, duplicate or missing ones. */
function mapHeader(header: string[], remap: CsvImportOptions['headers']): UserKey[] {
  const byHeader = new Map(IMPORTABLE_KEYS.map((key) => [remap[key] ?? key, key]));
  const keys: UserKey[] = [];
  const problems: string[] = [];
  header.forEach((cell, index) => {
    const key = byHeader.get(cell.trim());
    if (!key) problems.push(`column ${index + 1} "${cell}" is not an importable key`);
    else if (keys.includes(key)) problems.push(`column ${index + 1} "${cell}" repeats ${key}`);
    keys.push(key as UserKey);
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

/**
 * What a row would write (docs/users.md#csv-import-preview): its values over `current`,
 * the user it matches (absent: a new user), for `userDraftErrors` and
 * `userReferenceErrors` to judge as they judge the API's writes. An empty boolean or
 * `role_id` cell keeps the stored value, and so does an empty password cell; `leave` names
 * keys the row does not write (the username that matched, refused cells).
 */
function rowDraft(values: ParsedRow, current: UserDraft['current'], leave: ReadonlySet<string> = new Set()): UserDraft {
  const written = Object.fromEntries(Object.entries(values).filter(([key, value]) => !leave.has(key) && !keepsCurrent(key as UserKey, value)));
  return { ...columnsOf(written), password: written.password as string | null | undefined, current };
}

const ascending = (ids: readonly number[]) => [...ids].sort((a, b) => a - b);
function sameIds(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  const [sortedA, sortedB] = [ascending(a), ascending(b)];
  return sortedA.every((id, i) => id === sortedB[i]);
}

/** A row judged after the file, together with the others, for what needs the database (entity rights). */
interface DeferredCheck {
  line: number;
  username: string | null;
  /** The row's entry in `new_users` or `update_users`. */
  entry: object;
  /** The user (null: a new one), the role it assigns and the departments it sets, when they change. */
  membership?: { userId: number | null; roleId?: number; departmentIds?: readonly number[] };
  /** The existing user whose password the row sets. */
  passwordOf?: number;
}

export async function previewCsvImport(tx: Tx, content: Buffer, options: CsvImportOptions) {
  if (!isUtf8(content)) throw invalid({ user_data_csv: ['must be UTF-8 encoded'] }, 'The CSV file is not UTF-8.');

  const { caller } = options;
  const existing = await usersWithRoleGrants(tx);
  const byUsername = new Map(existing.map((user) => [user.username, user]));
  const references = await loadUserReferences(tx, 'all');
  const selfIgnored = new Set<string>(selfUpdateIgnoredKeys(caller));
  const rules = { passwordMinLength: options.passwordMinLength, requiredProfileKeys: await loadRequiredProfileKeys(tx) };
  let memberships: Awaited<ReturnType<typeof loadMemberships>> | null = null;

  const result = {
    new_users: [] as { line: number; user: ParsedRow }[],
    update_users: [] as { line: number; id: number; username: string; changes: Record<string, { from: CellValue; to: CellValue }> }[],
    unchanged_users: [] as { line: number; id: number; username: string }[],
    delete_users: [] as { id: number; username: string; full_name: string }[],
    invalid_rows: [] as { line: number; username: string | null; errors: FieldErrors }[],
  };
  const seen = new Map<string, number>();
  const deferred: DeferredCheck[] = [];
  let keys: UserKey[] | null = null;
  let rows = 0;

  const parser = Readable.from(chunks(content)).pipe(
    parse({ bom: true, delimiter: detectDelimiter(content), info: true, skip_empty_lines: true, relax_quotes: false }),
  );
  try {
    for await (const { record, info } of parser as AsyncIterable<{ record: string[]; info: { lines: number } }>) {
      if (!keys) {
        keys = mapHeader(record, options.headers);
        if (keys.includes('department_ids')) memberships = await loadMemberships(tx);
        continue;
      }
      rows++;
      const line = info.lines;
      const values: ParsedRow = {};
      const errors: FieldErrors = {};
      keys.forEach((key, index) => {
        const parsed = parseCell(USER_FIELDS[key].cell, record[index] ?? '', options.whitespaceToNull);
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
      const user = username !== null ? byUsername.get(username) : undefined;
      if (user?.deletedAt) errors.username = ['belongs to a deleted user'];
      const departmentIds = values.department_ids as number[] | undefined;
      if (departmentIds && memberships) {
        const known = memberships.departmentIds;
        reportMissing(errors, 'department_ids', departmentIds, new Set(departmentIds.filter((id) => !known.has(id))));
      }
      const storedDepartments = user && memberships ? (memberships.byUser.get(user.id) ?? []) : [];

      // What the row would write, judged by the API's rules; null when it writes nothing
      // (a matching user without update_users).
      let draft: UserDraft | null = null;
      if (!user) draft = rowDraft(values, undefined);
      else if (options.updateUsers) {
        const refusal = administerRefusal(caller, { id: user.id, grantable: user.grantable });
        if (refusal) errors.username ??= [refusal];
        const written = keys.filter((key) => key !== 'password' && values[key] !== undefined && !keepsCurrent(key, values[key]));
        // Whatever the cell holds: "changed" or "unchanged" would tell the stored value.
        const hidden = hiddenKeyErrors(caller, user, written);
        for (const key of written) {
          if (hidden[key]) errors[key] = hidden[key];
          else if (user.id === caller.userId && selfIgnored.has(key)) {
            const value = values[key];
            const column = USER_FIELDS[key].column;
            const unchanged = column === null ? sameIds(value as number[], storedDepartments) : value === user[column];
            if (!unchanged) errors[key] = ['cannot be changed on your own account'];
          }
        }
        draft = rowDraft(values, user, new Set(['username', ...Object.keys(errors)]));
      }
      if (draft) {
        addErrors(errors, userDraftErrors(draft, rules));
        addErrors(errors, userReferenceErrors(draft, references, caller));
      } else {
        addErrors(errors, missingReferenceErrors(rowDraft(values, undefined), references));
      }
      if (Object.keys(errors).length > 0) {
        result.invalid_rows.push({ line, username, errors });
        continue;
      }
      const assignedRole = draft && assignsRole(draft) ? draft.roleId! : undefined;
      const { password: _password, ...shown } = values;
      if (departmentIds) shown.department_ids = ascending(departmentIds);
      if (!user) {
        const entry = { line, user: shown };
        result.new_users.push(entry);
        if (assignedRole !== undefined || departmentIds?.length) {
          deferred.push({ line, username, entry, membership: { userId: null, roleId: assignedRole, departmentIds } });
        }
        continue;
      }
      const changes: Record<string, { from: CellValue; to: CellValue }> = {};
      let departmentsChange: number[] | undefined;
      if (options.updateUsers) {
        for (const [key, to] of Object.entries(shown) as [UserKey, CellValue][]) {
          const column = USER_FIELDS[key].column;
          if (!column || key === 'username' || keepsCurrent(key, to)) continue;
          const from = user[column] as CellValue | Date;
          if (from instanceof Date) continue;
          if (from !== to) changes[key] = { from, to };
        }
        if (departmentIds && !sameIds(departmentIds, storedDepartments)) {
          changes.department_ids = { from: storedDepartments, to: ascending(departmentIds) };
          departmentsChange = departmentIds;
        }
        // Never shown, never compared with the stored hash.
        if (typeof draft?.password === 'string') changes.password = { from: null, to: null };
      }
      if (Object.keys(changes).length > 0) {
        const entry = { line, id: user.id, username: user.username, changes };
        result.update_users.push(entry);
        const check: DeferredCheck = { line, username, entry };
        if (assignedRole !== undefined || departmentsChange) check.membership = { userId: user.id, roleId: assignedRole, departmentIds: departmentsChange };
        if (changes.password) check.passwordOf = user.id;
        if (check.membership || check.passwordOf !== undefined) deferred.push(check);
      } else result.unchanged_users.push({ line, id: user.id, username: user.username });
    }
  } catch (error) {
    if (error instanceof CsvError) throw invalid({ user_data_csv: [error.message] }, 'The CSV file is malformed.');
    throw error;
  }
  if (!keys) throw invalid({ user_data_csv: ['is empty'] }, 'The CSV file is empty.');
  if (rows === 0) throw invalid({ user_data_csv: ['has no data rows'] }, 'The CSV file has no data rows.');

  if (deferred.length > 0) await refuseDeferred(tx, caller, deferred, result);

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

/**
 * The rules that need the database, judged once for all rows (two queries): a new role
 * or new departments may not confer entity rights the caller lacks
 * (`membershipsConferringRights`), and a password may not be set for a user holding such
 * rights (`usersHoldingRightsBeyond`), as `PUT /api/users/{user}` refuses them. Rows that
 * break them move to `invalid_rows`.
 */
async function refuseDeferred(
  tx: Tx,
  caller: Auth,
  deferred: readonly DeferredCheck[],
  result: { new_users: object[]; update_users: object[]; invalid_rows: { line: number; username: string | null; errors: FieldErrors }[] },
) {
  const withMembership = deferred.filter((check) => check.membership);
  const conferred = await membershipsConferringRights(
    tx,
    caller,
    withMembership.map((check) => check.membership!),
  );
  const holding = await usersHoldingRightsBeyond(
    tx,
    caller,
    deferred.flatMap((check) => (check.passwordOf === undefined ? [] : [check.passwordOf])),
  );
  const refused = new Map<object, DeferredCheck & { errors: FieldErrors }>();
  const refuse = (check: DeferredCheck, key: string, message: string) => {
    const entry = refused.get(check.entry) ?? { ...check, errors: {} };
    entry.errors[key] = [message];
    refused.set(check.entry, entry);
  };
  withMembership.forEach((check, i) => {
    if (conferred[i]!.role) refuse(check, 'role_id', CONFERS_ENTITY_RIGHTS);
    check.membership!.departmentIds?.forEach((id, index) => {
      if (conferred[i]!.departmentIds.includes(id)) refuse(check, `department_ids.${index}`, CONFERS_ENTITY_RIGHTS);
    });
  });
  for (const check of deferred) if (check.passwordOf !== undefined && holding.has(check.passwordOf)) refuse(check, 'password', HOLDS_ENTITY_RIGHTS);
  if (refused.size === 0) return;
  result.new_users = result.new_users.filter((entry) => !refused.has(entry));
  result.update_users = result.update_users.filter((entry) => !refused.has(entry));
  for (const { line, username, errors } of refused.values()) result.invalid_rows.push({ line, username, errors });
  result.invalid_rows.sort((a, b) => a.line - b.line);
}
