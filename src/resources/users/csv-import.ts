/**
 * CSV import of users (docs/users.md#csv-import-preview): a preview of what an import
 * would change, grouped; nothing is written. The file is read as a stream of records
 * (`csv-records.ts`) and judged in batches of rows, each compared with the users it names by a
 * constant number of set-based queries; the answer is written to the client as a stream.
 * Neither memory nor the number of queries per row grows with the file.
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
import { and, asc, eq, gt, isNull, ne, sql } from 'drizzle-orm';
import type { components } from '../../../generated/api.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds, reportMissing } from '../../platform/database/existence.ts';
import { textArray } from '../../platform/database/id-list.ts';
import { JsonArraySpool, jsonObjectOfArrays, type StreamedJson } from '../../platform/http/json-stream.ts';
import type { Upload } from '../../platform/http/multipart.ts';
import { coded, fieldMessages, invalid, type FieldErrors, type FieldMessages } from '../../platform/http/problem.ts';
import { departments } from '../departments/table.ts';
import { CONFERS_ENTITY_RIGHTS, HOLDS_ENTITY_RIGHTS, membershipsConferringRights, usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import { roles } from '../roles/table.ts';
import { FileShape, MalformedCsv, recordsOf } from './csv-records.ts';
import { columnsOf, IMPORTABLE_KEYS, keepsCurrent, parseCell, USER_FIELDS, type CellValue, type UserKey } from './fields.ts';
import { departmentIdsOf, loadRequiredProfileKeys, loadUserReferences, usersWithRoleGrants, type UserReferences } from './queries.ts';
import {
  addErrors,
  administerRefusal,
  assignsRole,
  hiddenKeyErrors,
  hiddenRequiredKeyErrors,
  missingReferenceErrors,
  selfUpdateIgnoredKeys,
  userDraftErrors,
  userReferenceErrors,
  type UserDraft,
  type UserWriteSettings,
} from './rules.ts';
import { users } from './table.ts';
import { fullName } from './view.ts';

/**
 * How a spreadsheet recognises a formula: a cell beginning with one of these runs when the
 * file is opened (a header text comes from the query, so a link could carry one).
 */
const FORMULA_START = /^[=+\-@\t\r]/;

/** A header as the template writes it: a formula's text after an apostrophe (shown as text), quoted where needed. */
function csvCell(value: string): string {
  const text = FORMULA_START.test(value) ? `'${value}` : value;
  return /[",;\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The template: one header row of the importable keys, each replaceable by `headers[key]`. */
export function importTemplate(headers: Partial<Record<string, string>>): string {
  return IMPORTABLE_KEYS.map((key) => csvCell(headers[key] ?? key)).join(',') + '\r\n';
}

/** The header a cell names: as written, or as the template wrote a formula's text (after an apostrophe). */
const headerText = (cell: string) => (cell.startsWith("'") && FORMULA_START.test(cell.slice(1)) ? cell.slice(1) : cell);

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

/** A header cell as a problem quotes it: a long one shortened, so the problem stays small. */
const quoted = (cell: string) => JSON.stringify(cell.length > 64 ? `${cell.slice(0, 64)}…` : cell);

/** The header row → the importable key of each column; 422 for unknown, duplicate or missing ones. */
function mapHeader(header: string[], remap: CsvImportOptions['headers']): UserKey[] {
  if (header.length > IMPORTABLE_KEYS.length) {
    throw invalid(
      { user_data_csv: [coded('csv_malformed', `the header has ${header.length} columns; there are ${IMPORTABLE_KEYS.length} importable keys`)] },
      'The CSV header is invalid.',
    );
  }
  const byHeader = new Map(IMPORTABLE_KEYS.map((key) => [remap[key] ?? key, key]));
  const keys: UserKey[] = [];
  const problems: string[] = [];
  header.forEach((cell, index) => {
    const key = byHeader.get(cell.trim()) ?? byHeader.get(headerText(cell.trim()));
    if (!key) problems.push(`column ${index + 1} ${quoted(cell)} is not an importable key`);
    else if (keys.includes(key)) problems.push(`column ${index + 1} ${quoted(cell)} repeats ${key}`);
    keys.push(key as UserKey);
  });
  if (!keys.includes('username')) problems.push(`no column holds username (header "${remap.username ?? 'username'}")`);
  if (problems.length > 0) throw invalid({ user_data_csv: problems.map((problem) => coded('csv_malformed', problem)) }, 'The CSV header is invalid.');
  return keys;
}

const NOTHING_LEFT: ReadonlySet<string> = new Set();

/**
 * What a row would write (docs/users.md#csv-import-preview): its values over `current`,
 * the user it matches (absent: a new user), for `userDraftErrors` and
 * `userReferenceErrors` to judge as they judge the API's writes. An empty boolean or
 * `role_id` cell keeps the stored value, and so does an empty password cell; `leave` names
 * keys the row does not write (the username that matched, refused cells).
 */
function rowDraft(values: ParsedRow, current: UserDraft['current'], leave: ReadonlySet<string> = NOTHING_LEFT): UserDraft {
  const writes = (key: UserKey, value: unknown) => !leave.has(key) && !keepsCurrent(key, value as CellValue);
  const draft: UserDraft = columnsOf(values, writes);
  if (values.password !== undefined && writes('password', values.password)) draft.password = values.password as string | null;
  draft.current = current;
  return draft;
}

/** Whether the row has any error (without listing the keys). */
function hasErrors(errors: FieldErrors): boolean {
  for (const key in errors) if (Object.hasOwn(errors, key)) return true;
  return false;
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

/** Rows judged together: each batch costs a constant number of queries, whatever the file's length. */
const BATCH_ROWS = 500;
/**
 * Batches judged at once, beyond the one being parsed: the database's work on them overlaps
 * the parsing. Rows kept longer are promoted to V8's old generation, which then grows
 * (docs/performance.md#the-csv-import-preview).
 */
const BATCHES_IN_FLIGHT = 2;

/**
 * The most data rows a file may hold; one more refuses the file (422) once the rows before
 * it are read. Each row is judged and answered, and an invalid row's entry in the answer is
 * some 200 bytes however short the row: the upload's 20 MiB held almost 4 million rows of
 * one-character usernames, judged for four minutes and answered with a gigabyte spooled to
 * a temporary file. As many rows as the benchmark's largest file are accepted.
 */
export const MAX_CSV_ROWS = 200_000;

const tooManyRows = () => invalid({ user_data_csv: [coded('csv_malformed', `has more than ${MAX_CSV_ROWS} data rows`)] }, 'The CSV file has too many rows.');

/** A data row's cells read (`parseCell`), before it is judged against the tenant's users. */
interface ParsedLine {
  line: number;
  username: string | null;
  values: ParsedRow;
  errors: FieldErrors;
}

function parseLine(keys: readonly UserKey[], record: readonly string[], line: number, whitespaceToNull: boolean): ParsedLine {
  const values: ParsedRow = {};
  const errors: FieldErrors = {};
  for (let index = 0; index < keys.length; index++) {
    const key = keys[index]!;
    const parsed = parseCell(USER_FIELDS[key].cell, record[index] ?? '', whitespaceToNull);
    if ('error' in parsed) errors[key] = [parsed.error];
    else values[key] = parsed.value;
  }
  return { line, username: typeof values.username === 'string' ? values.username : null, values, errors };
}

type NewUserEntry = { line: number; user: ParsedRow };
type UpdateUserEntry = { line: number; id: number; username: string; changes: Record<string, { from: CellValue; to: CellValue }> };
type InvalidRow = { line: number; username: string | null; errors: FieldMessages };

/** One batch's entries of each group, before they are written to the answer. */
interface BatchResult {
  new_users: NewUserEntry[];
  update_users: UpdateUserEntry[];
  unchanged_users: { line: number; id: number; username: string }[];
  invalid_rows: InvalidRow[];
}

/** What every batch is judged with: the options, and what the preview loads once. */
interface Judging {
  options: CsvImportOptions;
  keys: readonly UserKey[];
  references: UserReferences;
  selfIgnored: ReadonlySet<string>;
  rules: UserWriteSettings;
  /** Whether a role or department would confer entity rights to a new user, as found (`membershipsConferringRights`). */
  conferredToNewUsers: Map<string, boolean>;
}

/**
 * The file's usernames are kept in a temporary table of the transaction (dropped at its
 * end), so that a username on two rows is found, and users absent from the file are
 * listed, by set-based queries whatever the file's length. Only equality is asked of the
 * column, which every deterministic collation judges byte for byte: its index orders by
 * "C", the cheapest to keep.
 */
const createUsernameTable = (tx: Tx) =>
  tx.execute(sql`create temporary table csv_import_usernames (username text collate "C" primary key, line integer not null) on commit drop`);

/** Records the batch's usernames (`usernames`: their text[] literal); 422 for the first row (by line) whose username an earlier row holds. */
async function rememberUsernames(tx: Tx, named: readonly ParsedLine[], usernames: string): Promise<void> {
  if (named.length === 0) return;
  const inserted = await tx.execute(sql`
    insert into csv_import_usernames
    select * from unnest(${usernames}::text[], ${`{${named.map((row) => row.line).join(',')}}`}::int[]) as t(username, line) order by line
    on conflict (username) do nothing`);
  if (inserted.count === named.length) return;
  // Some username came earlier (in this batch or before): the first row holding one is refused.
  const stored = await tx.execute<{ username: string; line: number }>(
    sql`select username, line from csv_import_usernames where username = any(${usernames}::text[])`,
  );
  const firstLine = new Map(stored.map((row) => [row.username, row.line]));
  const repeated = named.find((row) => firstLine.get(row.username!) !== row.line)!;
  throw invalid(
    {
      user_data_csv: [coded('csv_malformed', `username "${repeated.username}" appears on line ${firstLine.get(repeated.username!)} and line ${repeated.line}`)],
    },
    'The CSV names a user twice.',
  );
}

/**
 * Users the file does not name (not soft-deleted, not the caller), by ascending id after
 * `afterId`, at most `limit`. An outer join with the file's usernames, not a correlated
 * subquery: Citus joins a table of the session with a distributed one only in `FROM`.
 */
function usersAbsentFromFile(tx: Tx, callerId: number, afterId: number, limit: number) {
  return tx
    .select({ id: users.id, username: users.username, firstName: users.firstName, lastName: users.lastName, grantable: roles.permissions })
    .from(users)
    .innerJoin(roles, and(eq(roles.tenantId, users.tenantId), eq(roles.id, users.roleId)))
    .leftJoin(sql`csv_import_usernames c`, sql`c.username = ${users.username}`)
    .where(and(isNull(users.deletedAt), ne(users.id, callerId), gt(users.id, afterId), sql`c.username is null`))
    .orderBy(asc(users.id))
    .limit(limit);
}

type Answer = components['schemas']['CsvImportResult'];

/**
 * The preview as a JSON stream (docs/users.md#csv-import-preview). The whole file is
 * judged first, batch by batch, so that a refusal of the file (422) comes before any
 * byte of the answer; each batch's entries are serialized into the answer's groups at
 * once (json-stream.ts), so memory does not grow with the file or the answer.
 */
export async function previewCsvImport(tx: Tx, file: Upload, options: CsvImportOptions): Promise<StreamedJson<Answer>> {
  const shape = new FileShape();
  for await (const chunk of file.chunks({ transient: true })) {
    if (!shape.add(chunk)) break;
  }
  if (!shape.utf8) throw invalid({ user_data_csv: [coded('csv_malformed', 'must be UTF-8 encoded')] }, 'The CSV file is not UTF-8.');
  const groups = {
    new_users: new JsonArraySpool(),
    update_users: new JsonArraySpool(),
    unchanged_users: new JsonArraySpool(),
    delete_users: new JsonArraySpool(),
    invalid_rows: new JsonArraySpool(),
  };
  try {
    await judgeFile(tx, file, shape, options, groups);
  } catch (error) {
    await Promise.all(Object.values(groups).map((group) => group.close()));
    throw error;
  }
  return jsonObjectOfArrays<Answer>(Object.entries(groups) as [keyof Answer, JsonArraySpool][]);
}

async function judgeFile(tx: Tx, file: Upload, shape: FileShape, options: CsvImportOptions, groups: Record<keyof Answer, JsonArraySpool>): Promise<void> {
  const { caller } = options;
  await createUsernameTable(tx);
  const references = await loadUserReferences(tx, 'all');
  const rules = { passwordMinLength: options.passwordMinLength, requiredProfileKeys: await loadRequiredProfileKeys(tx) };
  let judging: Judging | null = null;
  const parsed: ParsedLine[] = [];
  let rows = 0;

  // Batches in order; each sends its queries as soon as it is parsed, so the database works
  // on them while the next rows are parsed and judged, and its entries are written to the
  // answer in order. At most BATCHES_IN_FLIGHT are held at a time.
  const inFlight: Promise<BatchResult>[] = [];
  const start = (batch: ParsedLine[]) => {
    const judged = judgeBatch(tx, judging!, batch);
    // Awaited in order below; until then its failure is kept, not reported.
    judged.catch(() => undefined);
    inFlight.push(judged);
  };
  const writeNext = async () => {
    const result = await inFlight.shift()!;
    for (const [group, entries] of Object.entries(result) as [keyof BatchResult, object[]][]) await groups[group].addAll(entries);
  };

  const parser = recordsOf(shape, shape.delimiter, (record, line) => {
    if (!judging) {
      judging = {
        options,
        keys: mapHeader(record, options.headers),
        references,
        selfIgnored: new Set(selfUpdateIgnoredKeys(caller)),
        rules,
        conferredToNewUsers: new Map(),
      };
      return;
    }
    // Rows past the limit are counted, not kept: the file is refused once its chunk is read.
    if (++rows <= MAX_CSV_ROWS) parsed.push(parseLine(judging.keys, record, line, options.whitespaceToNull));
  });
  try {
    for await (const chunk of file.chunks({ transient: true })) {
      await parser.parse(chunk);
      if (rows > MAX_CSV_ROWS) throw tooManyRows();
      while (parsed.length >= BATCH_ROWS) {
        start(parsed.splice(0, BATCH_ROWS));
        while (inFlight.length > BATCHES_IN_FLIGHT) await writeNext();
      }
    }
    await parser.finish();
    if (rows > MAX_CSV_ROWS) throw tooManyRows();
    if (!judging) throw invalid({ user_data_csv: [coded('csv_empty', 'is empty')] }, 'The CSV file is empty.');
    if (rows === 0) throw invalid({ user_data_csv: [coded('csv_empty', 'has no data rows')] }, 'The CSV file has no data rows.');
    if (parsed.length > 0) start(parsed.splice(0));
    while (inFlight.length > 0) await writeNext();
  } catch (error) {
    // No statement may be left to run once the transaction ends.
    await Promise.allSettled(inFlight);
    if (error instanceof MalformedCsv) throw invalid({ user_data_csv: [coded('csv_malformed', error.message)] }, 'The CSV file is malformed.');
    throw error;
  }

  if (options.deleteUsers) {
    const page = 1000;
    for (let afterId = 0; ;) {
      const absent = await usersAbsentFromFile(tx, caller.userId, afterId, page);
      for (const user of absent) {
        // Never offered: a user the caller may not administer (their role could grant more).
        if (administerRefusal(caller, { id: user.id, grantable: user.grantable })) continue;
        await groups.delete_users.add({ id: user.id, username: user.username, full_name: fullName(user) });
      }
      if (absent.length < page) break;
      afterId = absent[absent.length - 1]!.id;
    }
  }
}

/**
 * One batch of rows against the tenant: the users they name, their departments and the
 * departments they list, each read with one query for the whole batch, then the rules
 * that need the database (`refuseDeferred`).
 */
async function judgeBatch(tx: Tx, judging: Judging, batch: readonly ParsedLine[]): Promise<BatchResult> {
  const { options, keys, references, selfIgnored, rules } = judging;
  const { caller } = options;
  const named = batch.filter((row) => row.username !== null);
  const usernames = textArray(named.map((row) => row.username!));
  // Sent together: the usernames are recorded in the order of the batches, and the users are read in the same trip.
  const [, existing] = await Promise.all([
    rememberUsernames(tx, named, usernames),
    named.length > 0 ? usersWithRoleGrants(tx).where(sql`${users.username} = any(${usernames}::text[])`) : [],
  ]);
  const byUsername = new Map(existing.map((user) => [user.username, user]));
  const withDepartments = keys.includes('department_ids');
  const missingDepartments = withDepartments
    ? await missingIds(
        tx,
        departments,
        batch.flatMap((row) => (row.values.department_ids as number[] | undefined) ?? []),
      )
    : new Set<number>();
  const storedDepartments = withDepartments
    ? await departmentIdsOf(
        tx,
        existing.map((user) => user.id),
      )
    : new Map<number, number[]>();

  const result: BatchResult = { new_users: [], update_users: [], unchanged_users: [], invalid_rows: [] };
  const deferred: DeferredCheck[] = [];
  for (const { line, username, values, errors } of batch) {
    const user = username !== null ? byUsername.get(username) : undefined;
    if (user?.deletedAt) errors.username = ['belongs to a deleted user'];
    const departmentIds = values.department_ids as number[] | undefined;
    if (departmentIds) reportMissing(errors, 'department_ids', departmentIds, missingDepartments);
    const stored = user ? (storedDepartments.get(user.id) ?? []) : [];

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
          const unchanged = column === null ? sameIds(value as number[], stored) : value === user[column];
          if (!unchanged) errors[key] = [coded('self_change_forbidden', 'cannot be changed on your own account')];
        }
      }
      draft = rowDraft(values, user, new Set(['username', ...Object.keys(errors)]));
      addErrors(errors, hiddenRequiredKeyErrors(caller, user, draft, rules.requiredProfileKeys ?? []));
    }
    if (draft) {
      addErrors(errors, userDraftErrors(draft, rules));
      addErrors(errors, userReferenceErrors(draft, references, caller));
    } else {
      addErrors(errors, missingReferenceErrors(rowDraft(values, undefined), references));
    }
    if (hasErrors(errors)) {
      result.invalid_rows.push({ line, username, errors: fieldMessages(errors) });
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
      if (departmentIds && !sameIds(departmentIds, stored)) {
        changes.department_ids = { from: stored, to: ascending(departmentIds) };
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
  if (deferred.length > 0) await refuseDeferred(tx, judging, deferred, result);
  return result;
}

/**
 * The rules that need the database, judged once for a batch's rows (two queries at most): a
 * new role or new departments may not confer entity rights the caller lacks
 * (`membershipsConferringRights`; for new users, what an earlier batch found for the same
 * role or department is not asked again), and a password may not be set for a user
 * holding such rights (`usersHoldingRightsBeyond`), as `PUT /api/users/{user}` refuses
 * them. Rows that break them move to `invalid_rows`.
 */
async function refuseDeferred(
  tx: Tx,
  { options: { caller }, conferredToNewUsers }: Judging,
  deferred: readonly DeferredCheck[],
  result: Pick<BatchResult, 'new_users' | 'update_users' | 'invalid_rows'>,
) {
  const withMembership = deferred.filter((check) => check.membership);
  const conferred = await membershipsConferringRights(
    tx,
    caller,
    withMembership.map((check) => check.membership!),
    conferredToNewUsers,
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
  for (const { line, username, errors } of refused.values()) result.invalid_rows.push({ line, username, errors: fieldMessages(errors) });
  result.invalid_rows.sort((a, b) => a.line - b.line);
}
