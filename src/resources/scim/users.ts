/**
 * SCIM Users ↔ Atrium users (docs/scim.md#attribute-mapping): how a user is presented as a
 * SCIM User, what a SCIM User writes, and SCIM filters as SQL conditions on `users`.
 */
import { isRfc3339DateTime } from '../../platform/http/datetime.ts';
import { characterCount } from '../../platform/http/validation.ts';
import { and, eq, not, or, sql, type SQL } from 'drizzle-orm';
import { parse, type Filter } from 'scim2-parse-filter';
import type { Tx } from '../../platform/database/database.ts';
import { parseCell } from '../users/fields.ts';
import { selectUsers, type UserColumns, type UserRow } from '../users/queries.ts';
import { departmentUsers, departments } from '../departments/table.ts';
import { languages } from '../languages/table.ts';
import { users } from '../users/table.ts';
import { ENTERPRISE_USER_SCHEMA, GROUP_SCHEMA, invalidFilter, invalidValue, isRecordId, scimBoolean, USER_SCHEMA } from './protocol.ts';
import { scimExternalIds } from './table.ts';

/** The identity provider's `externalId` of the user in the row, as a subquery. */
const externalIdOf = sql<string | null>`(select ${scimExternalIds.externalId} from ${scimExternalIds}
  where ${scimExternalIds.tenantId} = ${users.tenantId} and ${scimExternalIds.userId} = ${users.id})`;

/** Whether the user in the row has an `externalId` meeting `condition`: a semi-join on the index of externalIds, where a comparison of the subquery above would run it for every user. */
const someExternalId = (condition: (value: SQL) => SQL) => sql`exists (select 1 from ${scimExternalIds}
  where ${scimExternalIds.tenantId} = ${users.tenantId} and ${scimExternalIds.userId} = ${users.id} and ${condition(sql`${scimExternalIds.externalId}`)})`;

/** Users as SCIM sees them: personal accounts that are not deleted (group accounts stay Atrium's own). */
export const SCIM_USERS = and(sql`${users.deletedAt} is null`, eq(users.groupAccount, false))!;

/** Users with their `externalId`, and any `columns` more (add a `where`). */
export function selectScimUsers(tx: Tx, columns?: Record<string, SQL>) {
  return selectUsers(tx, { externalId: externalIdOf, ...columns });
}

export type ScimUserRow = UserRow & { externalId: string | null };

/** The user `id` (a SCIM id is text: anything but a decimal user id names no one), or undefined. */
export async function findScimUser(tx: Tx, id: string): Promise<ScimUserRow | undefined> {
  if (!isRecordId(id)) return undefined;
  const [row] = await selectScimUsers(tx).where(and(eq(users.id, Number(id)), SCIM_USERS));
  return row as ScimUserRow | undefined;
}

/** The user as a SCIM User resource (RFC 7643 §4.1); `location` under `baseUrl`. */
export function presentScimUser(row: ScimUserRow, baseUrl: string) {
  const enterprise = row.staffNumber !== null;
  const hasAddress = row.street !== null || row.zipcode !== null || row.city !== null;
  return {
    schemas: enterprise ? [USER_SCHEMA, ENTERPRISE_USER_SCHEMA] : [USER_SCHEMA],
    id: String(row.id),
    ...(row.externalId !== null ? { externalId: row.externalId } : {}),
    userName: row.username,
    name: {
      ...(row.firstName !== null ? { givenName: row.firstName } : {}),
      ...(row.lastName !== null ? { familyName: row.lastName } : {}),
      formatted: [row.firstName, row.lastName].filter((part) => part).join(' '),
    },
    displayName: [row.firstName, row.lastName].filter((part) => part).join(' ') || row.username,
    active: row.active,
    ...(row.email !== null ? { emails: [{ value: row.email, type: 'work', primary: true }] } : {}),
    ...(row.phone !== null ? { phoneNumbers: [{ value: row.phone, type: 'work', primary: true }] } : {}),
    ...(hasAddress
      ? {
          addresses: [
            {
              type: 'work',
              primary: true,
              ...(row.street !== null ? { streetAddress: row.street } : {}),
              ...(row.zipcode !== null ? { postalCode: row.zipcode } : {}),
              ...(row.city !== null ? { locality: row.city } : {}),
            },
          ],
        }
      : {}),
    ...(row.langId !== null ? { preferredLanguage: row.langId, locale: row.langId } : {}),
    ...(enterprise ? { [ENTERPRISE_USER_SCHEMA]: { employeeNumber: row.staffNumber } } : {}),
    meta: {
      resourceType: 'User',
      created: row.createdAt.toISOString(),
      lastModified: row.updatedAt.toISOString(),
      location: `${baseUrl}/Users/${row.id}`,
    },
  };
}

export type ScimUser = ReturnType<typeof presentScimUser>;

/** What a SCIM User writes to Atrium: the user's columns, its `externalId`, and a password if one was sent. */
export interface ScimUserWrite {
  columns: Required<Pick<UserColumns, 'username' | 'firstName' | 'lastName' | 'email' | 'phone' | 'street' | 'zipcode' | 'city' | 'langId' | 'staffNumber'>> & {
    active: boolean | undefined;
  };
  externalId: string | null;
  password: string | undefined;
}

type Json = Record<string, unknown>;
const object = (value: unknown): Json | undefined => (value && typeof value === 'object' && !Array.isArray(value) ? (value as Json) : undefined);

/** Keys compared case-insensitively, as SCIM attribute names are (RFC 7643 §2.1). */
export function get(container: unknown, name: string): unknown {
  const value = object(container);
  if (!value) return undefined;
  const lower = name.toLowerCase();
  const key = Object.keys(value).find((candidate) => candidate.toLowerCase() === lower);
  return key === undefined ? undefined : value[key];
}

/**
 * The element of a multi-valued attribute Atrium keeps one of: the `primary` one, else the
 * one of `type` "work", else the first; undefined for none (absent, null or empty). Of
 * several primary ones the last: a PATCH that adds a primary value appends it, and makes
 * it the primary one (RFC 7644 §3.5.2.1 takes `primary` away from the others).
 */
function chosenElement(value: unknown, attribute: string): Json | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw invalidValue(`${attribute} must be an array.`);
  const elements = value.map((element) => {
    const item = object(element);
    if (!item) throw invalidValue(`Each element of ${attribute} must be an object.`);
    return item;
  });
  const isPrimary = (item: Json) => {
    const primary = get(item, 'primary');
    return primary !== undefined && primary !== null && scimBoolean(primary, `${attribute}.primary`);
  };
  return (
    [...elements].reverse().find(isPrimary) ??
    elements.find((item) => {
      const type = get(item, 'type');
      return typeof type === 'string' && type.toLowerCase() === 'work';
    }) ??
    elements[0]
  );
}

/**
 * One text value of the resource, judged as the CSV import judges a cell of its key
 * (`parseCell`: trimmed, at most 255 characters, an e-mail address's form, a username's
 * rules), an empty text as none.
 */
function text(value: unknown, attribute: string, kind: 'username' | 'text' | 'email' | 'reference' = 'text'): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw invalidValue(`${attribute} must be a string.`);
  const cell = parseCell(kind, value, true);
  if ('error' in cell) throw invalidValue(`${attribute} ${cell.error}.`);
  return cell.value === '' ? null : (cell.value as string | null);
}

/** `preferredLanguage`, or else `locale`, as sent ("de-CH", "de_CH"); `languageId` finds the tenant's language for it. */
function languageOf(resource: Json): string | null {
  return text(get(resource, 'preferredLanguage'), 'preferredLanguage', 'reference') ?? text(get(resource, 'locale'), 'locale', 'reference');
}

/**
 * The tenant's language for a language tag: the one with that id (case-insensitively,
 * `_` taken as `-`), else the first, by id, of the same primary language ("de-CH" →
 * "de-DE"); the tag as sent when none is (the user rules then refuse it).
 */
export async function languageId(tx: Tx, tag: string | null): Promise<string | null> {
  if (tag === null) return null;
  const wanted = tag.replace(/_/g, '-').toLowerCase();
  const primary = wanted.split('-')[0]!;
  const [found] = await tx
    .select({ id: languages.id })
    .from(languages)
    .where(or(sql`lower(${languages.id}) = ${wanted}`, sql`split_part(lower(${languages.id}), '-', 1) = ${primary}`))
    .orderBy(sql`lower(${languages.id}) = ${wanted} desc`, languages.id)
    .limit(1);
  return found?.id ?? tag;
}

/**
 * A whole SCIM User (a POST or PUT body, or a resource after PATCH) → what it writes.
 * An attribute the resource lacks writes null (a PUT replaces the user's SCIM-visible
 * attributes), except `active`, which then stays as it is (true for a new user).
 */
export function scimUserWrite(resource: Json): ScimUserWrite {
  const userName = text(get(resource, 'userName'), 'userName', 'username');
  if (userName === null) throw invalidValue('userName is required.');
  const name = get(resource, 'name');
  if (name !== undefined && name !== null && !object(name)) throw invalidValue('name must be an object.');
  const email = chosenElement(get(resource, 'emails'), 'emails');
  const phone = chosenElement(get(resource, 'phoneNumbers'), 'phoneNumbers');
  const address = chosenElement(get(resource, 'addresses'), 'addresses');
  const enterprise = get(resource, ENTERPRISE_USER_SCHEMA);
  const active = get(resource, 'active');
  const externalId = get(resource, 'externalId');
  if (externalId !== undefined && externalId !== null && (typeof externalId !== 'string' || characterCount(externalId) > 255)) {
    throw invalidValue('externalId must be a string of at most 255 characters.');
  }
  const password = get(resource, 'password');
  if (password !== undefined && password !== null && (typeof password !== 'string' || characterCount(password) > 1024)) {
    throw invalidValue('password must be a string of at most 1024 characters.');
  }
  return {
    columns: {
      username: userName,
      firstName: text(get(name, 'givenName'), 'name.givenName'),
      lastName: text(get(name, 'familyName'), 'name.familyName'),
      email: email ? text(get(email, 'value'), 'emails.value', 'email') : null,
      phone: phone ? text(get(phone, 'value'), 'phoneNumbers.value') : null,
      street: address ? text(get(address, 'streetAddress'), 'addresses.streetAddress') : null,
      zipcode: address ? text(get(address, 'postalCode'), 'addresses.postalCode') : null,
      city: address ? text(get(address, 'locality'), 'addresses.locality') : null,
      langId: languageOf(resource),
      staffNumber: text(get(enterprise, 'employeeNumber'), `${ENTERPRISE_USER_SCHEMA}:employeeNumber`),
      active: active === undefined || active === null ? undefined : scimBoolean(active, 'active'),
    },
    externalId: typeof externalId === 'string' && externalId !== '' ? externalId : null,
    password: typeof password === 'string' ? password : undefined,
  };
}

/** The API field names of the columns a SCIM write may change, for the audit trail and the user rules' messages. */
export const API_FIELD_OF: Record<keyof ScimUserWrite['columns'], string> = {
  username: 'username',
  firstName: 'first_name',
  lastName: 'last_name',
  email: 'email',
  phone: 'phone',
  street: 'street',
  zipcode: 'zipcode',
  city: 'city',
  langId: 'lang_id',
  staffNumber: 'staff_number',
  active: 'active',
};

/** The SCIM attribute each API field comes from, to name it in an error detail. */
export const SCIM_ATTRIBUTE_OF: Record<string, string> = {
  username: 'userName',
  first_name: 'name.givenName',
  last_name: 'name.familyName',
  email: 'emails',
  phone: 'phoneNumbers',
  street: 'addresses.streetAddress',
  zipcode: 'addresses.postalCode',
  city: 'addresses.locality',
  lang_id: 'preferredLanguage',
  staff_number: `${ENTERPRISE_USER_SCHEMA}:employeeNumber`,
  active: 'active',
  password: 'password',
};

// ---- filters → SQL ----

type Kind = 'text' | 'exact' | 'boolean' | 'datetime' | 'id' | 'member';

/** A filterable attribute: the SQL value it is in a row, and how it compares (`member`: the value is a department id, compared by membership). */
export interface FilterAttribute {
  value: SQL;
  kind: Kind;
  /** A text's lower-case form kept in a column, compared in place of `lower(value)` so that an index serves it. */
  folded?: SQL;
  /** For a value kept in a table of its own: whether a row of it meets the condition (a comparison of `value` would be a subquery per row). */
  some?: (condition: (value: SQL) => SQL) => SQL;
}

const column = (c: unknown) => sql`${c}`;
/** The single element of `emails`/`phoneNumbers`/`addresses` exists when its value does: its constant `type` and `primary` exist then too. */
const whenPresent = (present: SQL, value: SQL) => sql`(case when ${present} then ${value} end)`;

const emailPresent = sql`${users.email} is not null`;
const phonePresent = sql`${users.phone} is not null`;
const addressPresent = sql`(${users.street} is not null or ${users.zipcode} is not null or ${users.city} is not null)`;

/** Filterable User attributes, by lower-case path (core schema URN prefix removed). */
export const USER_ATTRIBUTES: Record<string, FilterAttribute> = {
  id: { value: column(users.id), kind: 'id' },
  externalid: { value: externalIdOf, kind: 'exact', some: someExternalId },
  username: { value: column(users.username), kind: 'text', folded: column(users.usernameLower) },
  displayname: { value: sql`coalesce(nullif(concat_ws(' ', ${users.firstName}, ${users.lastName}), ''), ${users.username})`, kind: 'text' },
  'name.givenname': { value: column(users.firstName), kind: 'text' },
  'name.familyname': { value: column(users.lastName), kind: 'text' },
  'name.formatted': { value: sql`nullif(concat_ws(' ', ${users.firstName}, ${users.lastName}), '')`, kind: 'text' },
  // A complex attribute as a whole, for `pr` and for what a value path searches.
  name: { value: sql`nullif(concat_ws(' ', ${users.firstName}, ${users.lastName}), '')`, kind: 'text' },
  active: { value: column(users.active), kind: 'boolean' },
  emails: { value: column(users.email), kind: 'text' },
  'emails.value': { value: column(users.email), kind: 'text' },
  'emails.type': { value: whenPresent(emailPresent, sql`'work'`), kind: 'text' },
  'emails.primary': { value: whenPresent(emailPresent, sql`true`), kind: 'boolean' },
  phonenumbers: { value: column(users.phone), kind: 'text' },
  'phonenumbers.value': { value: column(users.phone), kind: 'text' },
  'phonenumbers.type': { value: whenPresent(phonePresent, sql`'work'`), kind: 'text' },
  'phonenumbers.primary': { value: whenPresent(phonePresent, sql`true`), kind: 'boolean' },
  addresses: { value: whenPresent(addressPresent, sql`'work'`), kind: 'text' },
  'addresses.streetaddress': { value: column(users.street), kind: 'text' },
  'addresses.postalcode': { value: column(users.zipcode), kind: 'text' },
  'addresses.locality': { value: column(users.city), kind: 'text' },
  'addresses.type': { value: whenPresent(addressPresent, sql`'work'`), kind: 'text' },
  'addresses.primary': { value: whenPresent(addressPresent, sql`true`), kind: 'boolean' },
  preferredlanguage: { value: column(users.langId), kind: 'text' },
  locale: { value: column(users.langId), kind: 'text' },
  'enterprise.employeenumber': { value: column(users.staffNumber), kind: 'text' },
  'meta.created': { value: column(users.createdAt), kind: 'datetime' },
  'meta.lastmodified': { value: column(users.updatedAt), kind: 'datetime' },
};

/**
 * An attribute path as `attributes` keys it: lower case, the URNs of its resource's schemas
 * resolved (the User's and its enterprise extension's for `USER_ATTRIBUTES`, the Group's for
 * a group's); another resource's URN is left, and names no attribute.
 */
function normalizedPath(path: string, attributes: Record<string, FilterAttribute>): string {
  const lower = path.toLowerCase();
  const ofUsers = attributes === USER_ATTRIBUTES;
  const enterprise = `${ENTERPRISE_USER_SCHEMA.toLowerCase()}:`;
  if (ofUsers && lower.startsWith(enterprise)) return `enterprise.${lower.slice(enterprise.length)}`;
  const core = `${(ofUsers ? USER_SCHEMA : GROUP_SCHEMA).toLowerCase()}:`;
  return lower.startsWith(core) ? lower.slice(core.length) : lower;
}

const TEXT_OPERATORS = new Set(['eq', 'ne', 'co', 'sw', 'ew', 'gt', 'ge', 'lt', 'le']);

/**
 * Whether the department `department` (SQL of its id) has a member SCIM sees (`SCIM_USERS`:
 * no deleted user, no group account), one meeting `which` if given: the members a filter
 * compares are those the group shows.
 */
function scimMembers(department: SQL, which?: SQL): SQL {
  // The department's tenant paired too: Citus joins the memberships to their department only on the distribution column.
  return sql`exists (select 1 from ${departmentUsers} join ${users} on ${users.tenantId} = ${departmentUsers.tenantId} and ${users.id} = ${departmentUsers.userId}
    where ${departmentUsers.tenantId} = ${departments.tenantId} and ${departmentUsers.departmentId} = ${department} and ${and(SCIM_USERS, which)})`;
}

/**
 * A comparison no record meets (a value that is no record id): its id is never null. Not
 * the constant `false`, which PostgreSQL 15 and 16 make a pseudoconstant qual that Citus
 * refuses under the user list's outer join ("outer joins and pseudoconstant quals").
 */
const noRecord = (id: SQL): SQL => sql`${id} is null`;

/**
 * How a filter's compared values enter its SQL: as parameters of the statement (`inline`,
 * the default), or as placeholders (`placeholders()`) whose values are given when a
 * prepared statement runs.
 */
export type Bind = (value: unknown) => SQL;
const inline: Bind = (value) => sql`${value}`;

/**
 * A binder that puts each compared value behind a placeholder (`filter0`, `filter1`, … in
 * the order the filter names them) and keeps the values for `execute`. Two filters whose
 * conditions read alike but for their values then make the same statement, prepared once.
 */
export function placeholders(): { bind: Bind; values: Record<string, unknown> } {
  const values: Record<string, unknown> = {};
  let next = 0;
  return {
    values,
    bind(value) {
      const name = `filter${next++}`;
      values[name] = value;
      return sql`${sql.placeholder(name)}`;
    },
  };
}

/** One comparison as SQL. Text compares case-insensitively (`caseExact` false), except `externalId` and `id`. */
function comparison(attribute: FilterAttribute, op: string, path: string, value: unknown, bind: Bind): SQL {
  const { kind } = attribute;
  if (kind === 'boolean') {
    if (op !== 'eq' && op !== 'ne') throw invalidFilter(`${path} is a boolean: only eq and ne compare it.`);
    let wanted: boolean;
    try {
      wanted = scimBoolean(value, path);
    } catch {
      throw invalidFilter(`${path} is compared with true or false.`);
    }
    return op === 'eq' ? sql`${attribute.value} = ${bind(wanted)}` : sql`${attribute.value} is distinct from ${bind(wanted)}`;
  }
  if (typeof value !== 'string') throw invalidFilter(`${path} is compared with a string.`);
  if (!TEXT_OPERATORS.has(op)) throw invalidFilter(`Unknown operator ${op}.`);
  if (kind === 'member') {
    if (op !== 'eq') throw invalidFilter('members are compared with eq.');
    if (!isRecordId(value)) return noRecord(attribute.value);
    return scimMembers(attribute.value, sql`${departmentUsers.userId} = ${bind(Number(value))}`);
  }
  if (kind === 'id') {
    if (op !== 'eq' && op !== 'ne') throw invalidFilter('id is compared with eq or ne.');
    // Ids are decimal text; anything else names no user.
    if (!isRecordId(value)) return op === 'ne' ? sql`true` : noRecord(attribute.value);
    return op === 'eq' ? sql`${attribute.value} = ${bind(Number(value))}` : sql`${attribute.value} <> ${bind(Number(value))}`;
  }
  if (kind === 'datetime') {
    // A date and time as RFC 3339 writes it: JavaScript's Date alone also reads "5" (the year 2005) and "May 5".
    const instant = new Date(isRfc3339DateTime(value) ? value : NaN);
    // JavaScript reads years 0, negative and up to 275760; timestamptz in ISO form does not: years 1 to 9999 (UTC) only.
    if (Number.isNaN(instant.getTime()) || instant.getUTCFullYear() < 1 || instant.getUTCFullYear() > 9999) {
      throw invalidFilter(`${path} is compared with a date and time (RFC 3339) in the years 1 to 9999.`);
    }
    // Kept to the microsecond, shown to the millisecond: compare the millisecond shown, so that the value a
    // client read is `eq` to it and `gt` it leaves it out. Written as a range, which an index can serve.
    const from = sql`${bind(instant.toISOString())}::timestamptz`;
    // Added in SQL: the millisecond after the last one of 9999 is no instant JavaScript writes as PostgreSQL reads it.
    const next = sql`(${from} + interval '1 millisecond')`;
    const column = attribute.value;
    switch (op) {
      case 'eq':
        return sql`(${column} >= ${from} and ${column} < ${next})`;
      case 'ne':
        return sql`not (${column} >= ${from} and ${column} < ${next})`;
      case 'gt':
        return sql`${column} >= ${next}`;
      case 'ge':
        return sql`${column} >= ${from}`;
      case 'lt':
        return sql`${column} < ${from}`;
      case 'le':
        return sql`${column} < ${next}`;
      default:
        throw invalidFilter(`${path} is a date and time: co, sw and ew do not compare it.`);
    }
  }
  const right = kind === 'text' ? sql`lower(${bind(value)})` : sql`${bind(value)}::text`;
  if (attribute.some) {
    // `ne` holds for a user without any value too, as `is distinct from` does.
    return op === 'ne'
      ? sql`not ${attribute.some((stored) => sql`${stored} = ${right}`)}`
      : attribute.some((stored) => textComparison(op, stored, right, value, bind));
  }
  const left = kind === 'text' ? (attribute.folded ?? sql`lower(${attribute.value})`) : attribute.value;
  return textComparison(op, left, right, value, bind);
}

/** `left op right` for text; `value` is the compared text as sent (its length ends `ew`). */
function textComparison(op: string, left: SQL, right: SQL, value: string, bind: Bind): SQL {
  switch (op) {
    case 'eq':
      return sql`${left} = ${right}`;
    case 'ne':
      return sql`${left} is distinct from ${right}`;
    case 'co':
      return sql`strpos(${left}, ${right}) > 0`;
    case 'sw':
      return sql`starts_with(${left}, ${right})`;
    case 'ew':
      return sql`right(${left}, char_length(${bind(value)})) = ${right}`;
    case 'gt':
      return sql`${left} > ${right}`;
    case 'ge':
      return sql`${left} >= ${right}`;
    case 'lt':
      return sql`${left} < ${right}`;
    default:
      return sql`${left} <= ${right}`;
  }
}

/** The attribute named by `path` (inside a value path `parent[...]`, relative to it). */
function attributeOf(attributes: Record<string, FilterAttribute>, path: string, parent: string | null): { attribute: FilterAttribute; name: string } {
  const name = parent === null ? normalizedPath(path, attributes) : `${parent}.${path.toLowerCase()}`;
  // Own keys only: `constructor` or `__proto__` would otherwise find what every object inherits.
  const attribute = Object.hasOwn(attributes, name) ? attributes[name] : undefined;
  if (!attribute) throw invalidFilter(`The attribute ${parent === null ? path : `${parent}[${path}]`} cannot be filtered on.`);
  return { attribute, name };
}

/** Whether `attribute` has a value (`pr`): text that is not empty, a member SCIM sees, anything else not null. */
function present(attribute: FilterAttribute): SQL {
  if (attribute.kind === 'member') return scimMembers(attribute.value);
  return attribute.kind === 'text' || attribute.kind === 'exact' ? sql`coalesce(${attribute.value}, '') <> ''` : sql`${attribute.value} is not null`;
}

/** A parsed filter as an SQL condition over `attributes`; `parent` inside a value path. */
export function filterCondition(filter: Filter, attributes: Record<string, FilterAttribute>, parent: string | null = null, bind: Bind = inline): SQL {
  switch (filter.op) {
    case 'and':
    case 'or': {
      const parts = filter.filters.map((part) => filterCondition(part, attributes, parent, bind));
      return (filter.op === 'and' ? and(...parts) : or(...parts))!;
    }
    case 'not':
      return sql`coalesce(${not(filterCondition(filter.filter, attributes, parent, bind))}, true)`;
    case '[]': {
      if (parent !== null) throw invalidFilter('A value path cannot be nested.');
      const base = normalizedPath(filter.attrPath, attributes);
      if (!Object.keys(attributes).some((name) => name.startsWith(`${base}.`))) throw invalidFilter(`${filter.attrPath} is not a multi-valued attribute.`);
      // The filter is applied to the values present (RFC 7644 §3.4.2.2): a resource without any matches no `ne` or `not` either.
      const whole = attributes[base];
      const condition = filterCondition(filter.valFilter, attributes, base, bind);
      return whole && whole.kind !== 'member' ? and(present(whole), condition)! : condition;
    }
    case 'pr':
      return present(attributeOf(attributes, filter.attrPath, parent).attribute);
    default: {
      const { attribute, name } = attributeOf(attributes, filter.attrPath, parent);
      if (filter.compValue === null) {
        // `eq null` is "not present", `ne null` "present" (RFC 7644 §3.4.2.2).
        if (attribute.kind === 'member' && (filter.op === 'eq' || filter.op === 'ne')) {
          return filter.op === 'eq' ? not(scimMembers(attribute.value)) : scimMembers(attribute.value);
        }
        if (filter.op === 'eq') return sql`${attribute.value} is null`;
        if (filter.op === 'ne') return sql`${attribute.value} is not null`;
        throw invalidFilter(`${name} cannot be ordered against null.`);
      }
      return comparison(attribute, filter.op, filter.attrPath, filter.compValue, bind);
    }
  }
}

/** The longest filter accepted: identity providers send one or two comparisons. */
const MAX_FILTER_LENGTH = 2000;

/**
 * A compared text as RFC 7644 writes it (a JSON string) where the sender escaped its
 * backslashes. scim2-parse-filter reads a backslash as itself unless a quote follows (so
 * `"DOMAIN\user"`, sent unescaped as some identity providers do, is `DOMAIN\user`), and
 * so reads the escaped form `"DOMAIN\\user"` as two backslashes. A text holding an
 * escaped backslash (`\\`) that is a valid JSON string is therefore read as one; any
 * other is kept as the library read it (`"DOMAIN\nancy"` stays a backslash and `n`).
 */
export function escapedText(read: string): string {
  // What was sent between the quotes: the library turned only `\"` into `"`.
  const sent = read.replaceAll('"', '\\"');
  if (!sent.includes('\\\\')) return read;
  try {
    return JSON.parse(`"${sent}"`) as string;
  } catch {
    return read;
  }
}

/** `filter` with each compared text replaced by `read` of it. */
export function withComparedTexts(filter: Filter, read: (text: string) => string): Filter {
  const each = (inner: Filter) => withComparedTexts(inner, read);
  switch (filter.op) {
    case 'and':
    case 'or':
      return { ...filter, filters: filter.filters.map(each) };
    case 'not':
      return { ...filter, filter: each(filter.filter) };
    case '[]':
      return { ...filter, valFilter: each(filter.valFilter) };
    case 'pr':
      return filter;
    default:
      return typeof filter.compValue === 'string' ? { ...filter, compValue: read(filter.compValue) } : filter;
  }
}

/** `filter` with each compared text as `escapedText` reads it. */
const withEscapesRead = (filter: Filter): Filter => withComparedTexts(filter, escapedText);

/**
 * Whether a compared text of `filter` (a string literal; one left unclosed runs to the end)
 * holds a line feed. No text can (a JSON string escapes it), so such a filter is malformed,
 * and it is refused before scim2-parse-filter reads it: its tokenizer matches a line feed
 * in a literal two ways, and an unclosed literal takes time doubling with each line feed
 * (24 held the process for a tenth of a second). A line feed between the parts of a filter
 * is a blank to the tokenizer, and stays one.
 */
export function lineFeedInText(filter: string): boolean {
  let inText = false;
  for (let i = 0; i < filter.length; i++) {
    const char = filter[i];
    if (char === '\n' && inText) return true;
    if (char === '"') inText = !inText;
    // A backslash escapes the next character in a literal (`\"`), as the tokenizer reads it, but for a line feed.
    else if (char === '\\' && inText && filter[i + 1] !== '\n') i++;
  }
  return false;
}

/** The refusal of a filter, or a PATCH path (whose value filter the parser reads too), that `lineFeedInText` finds malformed; `what` names it. */
export const lineFeedRefusal = (what: 'filter' | 'path') => `The ${what} is malformed: a compared text holds a line feed (a JSON string writes it \\n).`;

/** `filter` (RFC 7644 §3.4.2.2) as scim2-parse-filter parses it, escaped backslashes read (`escapedText`); undefined for no filter. */
export function parsedFilter(filter: unknown): Filter | undefined {
  if (filter === undefined || filter === '') return undefined;
  if (typeof filter !== 'string') throw invalidFilter('filter must be given once.');
  if (filter.length > MAX_FILTER_LENGTH) throw invalidFilter(`filter must be at most ${MAX_FILTER_LENGTH} characters long.`);
  if (lineFeedInText(filter)) throw invalidFilter(lineFeedRefusal('filter'));
  try {
    return withEscapesRead(parse(filter));
  } catch (error) {
    throw invalidFilter(`The filter is malformed: ${(error as Error).message}`);
  }
}

/** `filter` (RFC 7644 §3.4.2.2), parsed by scim2-parse-filter, as a condition on `attributes`; undefined for no filter. */
export function parseFilter(filter: unknown, attributes: Record<string, FilterAttribute> = USER_ATTRIBUTES): SQL | undefined {
  const parsed = parsedFilter(filter);
  return parsed === undefined ? undefined : filterCondition(parsed, attributes);
}

/**
 * What a parsed filter's condition (`filterCondition` with `placeholders()`) reads as, but
 * for its values: the filter with each compared value replaced by what the SQL's form
 * depends on (null, a decimal id or other text, another type). Two filters of one form
 * make the same SQL text, so one prepared statement serves both; cheaper than rendering
 * the condition (test/resources/scim/filter-forms.test.ts holds the two to agree).
 */
export function filterForm(filter: Filter | undefined): string {
  return JSON.stringify(filter ?? null, (key, value: unknown) => {
    if (key !== 'compValue') return value;
    if (typeof value === 'string') return isRecordId(value) ? 'record id' : 'text';
    return value === null ? 'null' : typeof value;
  });
}
