/**
 * The SCIM 2.0 service provider at `/scim/v2` (docs/scim.md): Users, and the discovery
 * resources, for identity providers holding a SCIM token of the tenant. Outside the
 * operation binding of `/api`: SCIM has its own authentication (a SCIM token, never an
 * access token), media type and error documents (RFC 7644 §3.12), so it is a Fastify
 * plugin of its own, under the same request id, logging, security headers and rate limits.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { and, asc, count, eq, sql, type SQL } from 'drizzle-orm';
import { scimPatch, ScimError as PatchError, type ScimPatchOperation } from 'scim-patch';
import { filter, parse, type Filter } from 'scim2-parse-filter';
import { changesBetween, type AuditSource, requestOrigin, sameJson, userLabel } from '../../platform/audit/audit.ts';
import type { Caller } from '../../platform/auth/auth.ts';
import { hashPassword } from '../../platform/auth/passwords.ts';
import type { RecentPrincipals } from '../../platform/auth/recent-principals.ts';
import { hashToken } from '../../platform/auth/tokens.ts';
import { onlyStatement, sendAhead, type Tx } from '../../platform/database/database.ts';
import { prepared } from '../../platform/database/prepared.ts';
import {
  DATABASE_UNAVAILABLE_HEADERS,
  endedByDatabase,
  errorLogFields,
  isDatabaseConnectionLoss,
  violatedConstraint,
} from '../../platform/http/error-handler.ts';
import { jsonBodyParser } from '../../platform/http/json-body.ts';
import { emptyPathParameter, noRouteError } from '../../platform/http/no-route.ts';
import { failedPrecondition } from '../../platform/http/preconditions.ts';
import { coded, ProblemError, type FieldErrors } from '../../platform/http/problem.ts';
import { HOLDS_ENTITY_RIGHTS, usersHoldingRightsBeyond } from '../entity-permissions/rules.ts';
import type { Services } from '../../platform/services.ts';
import { audit } from '../audit-events/record.ts';
import { endSessionsAfterPasswordChange } from '../auth/credentials.ts';
import { cutOff, insertUser, revokePendingLoginTokens, loadRequiredProfileKeys, softDeleteUser, updateUserColumns } from '../users/queries.ts';
import { addErrors, passwordErrors, requireAdministrableUser, userDraftErrors, userWriteReferenceErrors, type UserDraft } from '../users/rules.ts';
import { users } from '../users/table.ts';
import { lockAdministration } from '../roles/queries.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import {
  ENTERPRISE_USER_SCHEMA,
  errorDocument,
  GROUP_SCHEMA,
  invalidSyntax,
  invalidValue,
  isRecordId,
  listResponse,
  pageOf,
  projectAttributes,
  SCIM_MEDIA_TYPE,
  ScimError,
  scimNotFound,
  USER_SCHEMA,
} from './protocol.ts';
import { ATTRIBUTE_NAMES, discoveryRoutes, type AttributeNames } from './discovery.ts';
import {
  GROUP_ATTRIBUTES,
  groupWrite,
  groupsWithMembers,
  listGroups,
  membersOf,
  lockedGroup,
  presentGroup,
  requireGroup,
  saveGroup,
  type GroupWrite,
} from './groups.ts';
import { deleteDepartment, entityPermissionsNaming, type DepartmentRow } from '../departments/queries.ts';
import { NAMED_ENTITIES_SHOWN, namedByEntityPermissionsRefusal } from '../departments/rules.ts';
import { loadDefaultRoleId } from './settings.ts';
import { scimExternalIds } from './table.ts';
import { holdScimToken, lookUpScimToken, recordScimTokenUse, stillAuthenticates, type ScimPrincipal } from './tokens.ts';
import {
  API_FIELD_OF,
  escapedText,
  findScimUser,
  languageId,
  filterCondition,
  filterForm,
  parseFilter,
  parsedFilter,
  lineFeedInText,
  lineFeedRefusal,
  withComparedTexts,
  placeholders,
  presentScimUser,
  SCIM_ATTRIBUTE_OF,
  SCIM_USERS,
  scimUserWrite,
  selectScimUsers,
  type ScimUserRow,
  type ScimUserWrite,
  USER_ATTRIBUTES,
} from './users.ts';

export const SCIM_PREFIX = '/scim/v2';

declare module 'fastify' {
  interface FastifyRequest {
    scim: ScimPrincipal | null;
  }
}

const BEARER = /^Bearer +(scim_[A-Za-z0-9_-]{43}) *$/i;

/** Requests that change nothing (Fastify answers `HEAD` by a `GET` route): they may take a principal looked up in the last second. */
const SAFE_METHODS = new Set(['GET', 'HEAD']);

/** The 401 of a request without a valid SCIM token. */
const tokenRequired = () => new ScimError(401, 'A valid SCIM token is required.', undefined, { 'www-authenticate': 'Bearer realm="scim"' });

/**
 * The token's principal, or 401: a missing, unknown, expired or revoked token, or an access
 * token of `/api`. A safe request (`recent` given) may take it from a look-up of the same
 * token made in the last second by this process, as under `/api`.
 */
async function authenticate(services: Services, request: FastifyRequest, recent?: RecentPrincipals<ScimPrincipal>): Promise<ScimPrincipal> {
  const match = BEARER.exec(request.headers.authorization ?? '');
  const tokenHash = match ? hashToken(match[1]!) : null;
  const lookUp = () => lookUpScimToken(services.db, tokenHash!);
  const principal = tokenHash ? await (recent ? recent.remembered(tokenHash, lookUp) : lookUp()) : null;
  if (!principal) throw tokenRequired();
  return principal;
}

/** The user rules judge a SCIM write as the administrator who minted the token would be judged, as no user of the tenant (id 0). */
const callerOf = (principal: ScimPrincipal): Caller => ({ userId: 0, permissions: principal.permissions });

/** Who the audit trail names: the token, and the request's origin. */
const sourceOf = (request: FastifyRequest, principal: ScimPrincipal): AuditSource => ({
  actor: { type: 'scim_token', id: principal.tokenId, label: principal.tokenName },
  origin: { ...requestOrigin(request), operationId: `scim:${request.method} ${request.routeOptions.url ?? ''}` },
});

/** The base URL identity providers were given, for `meta.location`. */
function baseUrlOf(request: FastifyRequest): string {
  return `${request.protocol}://${request.host}${SCIM_PREFIX}`;
}

/**
 * How the fields of the user and the department rules read in SCIM (`refusalOf`): the
 * SCIM attribute each is, and the field whose `taken` refusal is a `uniqueness` conflict.
 */
const RULE_FIELDS: Record<Patchable, { attributeOf: Record<string, string>; unique: string; taken: string }> = {
  user: { attributeOf: SCIM_ATTRIBUTE_OF, unique: 'username', taken: 'userName is already taken.' },
  group: {
    attributeOf: { name: 'displayName', members: 'members' },
    unique: 'name',
    taken: 'displayName is already taken by another group (or one that looks alike).',
  },
};

/**
 * A refusal of the user or department rules (field errors) as a SCIM error naming the
 * attributes at fault: a taken `userName` or group `displayName` is `uniqueness` (409),
 * anything else `invalidValue`.
 */
function refusalOf(errors: FieldErrors, resource: Patchable = 'user'): ScimError {
  const { attributeOf, unique, taken } = RULE_FIELDS[resource];
  if (errors[unique]?.some((entry) => typeof entry !== 'string' && entry.code === 'taken')) return new ScimError(409, taken, 'uniqueness');
  const detail = Object.entries(errors)
    .map(([field, messages]) => `${attributeOf[field] ?? field} ${messages.map((m) => (typeof m === 'string' ? m : m.message)).join('; ')}`)
    .join('. ');
  return invalidValue(`${detail}.`);
}

/** The role new SCIM users get (`default_role_id`), or a refusal when the tenant has set none. */
async function defaultRole(tx: Tx): Promise<number> {
  const roleId = await loadDefaultRoleId(tx);
  if (roleId === null) {
    throw invalidValue('This tenant has no default role for provisioned users: an administrator sets default_role_id in the user settings first.');
  }
  return roleId;
}

/** The columns of the write that differ from the stored user (all of them for a new user). */
function changedColumns(write: ScimUserWrite, current: ScimUserRow | undefined): Record<string, unknown> {
  const changed: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(write.columns)) {
    if (value === undefined) continue;
    if (!current || current[key as keyof ScimUserRow] !== value) changed[key] = value;
  }
  return changed;
}

/** API field names → values, for the audit trail. */
const apiFields = (columns: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(columns).map(([key, value]) => [API_FIELD_OF[key as keyof typeof API_FIELD_OF] ?? key, value]));

/** Stores (or removes) the user's externalId. */
async function storeExternalId(tx: Tx, tenantId: number, userId: number, externalId: string | null): Promise<void> {
  // Sent ahead: nothing reads its answer, and it leaves with the read of the saved user.
  await sendAhead(
    tx,
    externalId === null
      ? tx.delete(scimExternalIds).where(eq(scimExternalIds.userId, userId))
      : tx
          .insert(scimExternalIds)
          .values({ tenantId, userId, externalId })
          .onConflictDoUpdate({ target: [scimExternalIds.tenantId, scimExternalIds.userId], set: { externalId } }),
  );
}

/** The judged password's hash (or undefined when none was sent); a password that breaks the rules is refused first. */
async function passwordHashOf(services: Services, write: ScimUserWrite, tenant: number): Promise<string | undefined> {
  if (write.password === undefined) return undefined;
  const errors = passwordErrors(write.password, services.config);
  if (Object.keys(errors).length > 0) throw refusalOf(errors);
  return hashPassword(write.password, tenant);
}

/**
 * Writes `write` over the stored user `current` (absent: creates one), under the user rules
 * the API and the CSV import judge with. Answers the user's id.
 */
async function saveUser(
  tx: Tx,
  services: Services,
  request: FastifyRequest,
  principal: ScimPrincipal,
  write: ScimUserWrite,
  current: ScimUserRow | undefined,
  passwordHash: string | undefined,
): Promise<number> {
  const caller = callerOf(principal);
  if (current) await requireAdministrableUser(tx, caller, current.id);
  // Three reads that do not depend on each other leave together (one round trip).
  const [langId, roleId, requiredProfileKeys] = await Promise.all([
    languageId(tx, write.columns.langId),
    current ? undefined : defaultRole(tx),
    loadRequiredProfileKeys(tx),
  ]);
  write = { ...write, columns: { ...write.columns, langId } };
  const changed = changedColumns(write, current);
  const draft: UserDraft = { ...(changed as Partial<UserDraft>), roleId, current };
  const errors = userDraftErrors(draft, { passwordMinLength: services.config.passwordMinLength, requiredProfileKeys, passwordOptional: true });
  // SCIM's schema says `userName` is unique and not case-exact (RFC 7643 §2.2): an identity provider that finds two
  // users for its `userName eq` filter cannot match either. The API keeps usernames unique as written.
  addErrors(errors, await userWriteReferenceErrors(tx, caller, draft, { userId: current?.id ?? null, usernameAnyCase: true }));
  // Whoever sets a password can sign in as the user: not while the user holds entity rights the minter lacks, as in the API.
  if (current && passwordHash && (await usersHoldingRightsBeyond(tx, caller, [current.id])).size > 0) {
    addErrors(errors, { password: [coded('confers_rights', HOLDS_ENTITY_RIGHTS)] });
  }
  if (Object.keys(errors).length > 0) throw refusalOf(errors);
  // Judged again once every wait of the write is over (rows, locks, the password's hash): a token ended since its
  // look-up (its minter marked for logout, deactivated or stripped of a permission) writes nothing.
  if (!(await stillAuthenticates(tx, principal))) throw tokenRequired();
  const source = sourceOf(request, principal);
  // A change of the externalId is recorded as a change of a secret is (`{changed: true}`): it names the person at the
  // identity provider, and blackout's erasure of the trail knows only the API's fields.
  const externalIdChanged = (current?.externalId ?? null) !== write.externalId;
  const externalIds = externalIdChanged
    ? { before: { external_id: current?.externalId ?? null }, after: { external_id: write.externalId } }
    : { before: {}, after: {} };
  let id: number;
  if (!current) {
    // Recorded whether it was sent or not, as the API's create records it.
    const active = write.columns.active ?? true;
    id = await insertUser(tx, {
      ...(changed as object),
      tenantId: principal.tenantId,
      username: write.columns.username,
      roleId: roleId!,
      passwordHash: passwordHash ?? null,
      active,
    });
    await audit(tx, source, {
      action: 'user.created',
      target: { type: 'user', id, label: userLabel(write.columns) },
      changes: changesBetween(
        null,
        { ...apiFields({ ...changed, active }), role_id: roleId, ...externalIds.after, ...(passwordHash ? { password: true } : {}) },
        ['external_id'],
      ),
    });
  } else {
    id = current.id;
    // A new externalId alone is a change of the User too: its meta.lastModified moves, as a group's does.
    if (Object.keys(changed).length > 0 || passwordHash || externalIdChanged) {
      await updateUserColumns(tx, id, { ...changed, ...(passwordHash ? { passwordHash } : {}) });
      const before = apiFields(Object.fromEntries(Object.keys(changed).map((key) => [key, current[key as keyof ScimUserRow]])));
      await audit(tx, source, {
        action: 'user.updated',
        target: { type: 'user', id, label: userLabel(write.columns) },
        changes: changesBetween(
          { ...before, ...externalIds.before, ...(passwordHash ? { password: 'old' } : {}) },
          { ...apiFields(changed), ...externalIds.after, ...(passwordHash ? { password: 'new' } : {}) },
          ['external_id'],
        ),
      });
    }
    // A deactivation cuts the leaver off; a new password ends what signed the user in, as the API's password change
    // does: their sessions and pending login tokens, not the SCIM tokens they minted (no logout mark).
    if (current.active && changed.active === false) await cutOff(tx, id);
    else if (passwordHash) {
      await endSessionsAfterPasswordChange(tx, { tenantId: principal.tenantId }, id);
      await revokePendingLoginTokens(tx, id);
    }
  }
  if (externalIdChanged) await storeExternalId(tx, principal.tenantId, id, write.externalId);
  return id;
}

/** The stored user as a SCIM resource, or 404. */
async function requireUser(tx: Tx, id: string): Promise<ScimUserRow> {
  const user = await findScimUser(tx, id);
  if (!user) throw scimNotFound('The user', id);
  return user;
}

/**
 * `requireUser` for a write of the user: first the tenant's administration lock
 * (`lockAdministration`: a write may deactivate or delete an administrator, and the token's
 * minter may have just lost the right), then the user's row (`lockRecord`), so that the
 * write reads what a concurrent one left and none is lost. In that order, as `/api` takes them.
 */
async function lockedUser(tx: Tx, principal: ScimPrincipal, id: string): Promise<ScimUserRow> {
  await lockAdministration(tx, callerOf(principal), principal.tokenId);
  if (!isRecordId(id) || !(await lockRecord(tx, users, Number(id)))) throw scimNotFound('The user', id);
  return requireUser(tx, id);
}

/**
 * The tenant's administration lock, shared (`lockAdministration`), for a write that grants
 * what the token's minter holds: a new user given the default role, members given what
 * their group's entity permissions confer. Taken before the write locks any row but its
 * token's (`holdScimToken`, which no holder of this lock waits for), as `/api` takes it:
 * a change of the minter's permissions under way is waited for and judged (403 when one
 * the token acts with was taken away), and one that comes later waits for this write, so
 * none is answered before a grant made under what it removed.
 */
const lockGrants = (tx: Tx, principal: ScimPrincipal) => lockAdministration(tx, callerOf(principal), principal.tokenId, 'shared');

/** A `PUT` body's `id`, when it has one, must name the resource of the URL: `id` is immutable (RFC 7644 §3.5.1). */
function refuseOtherId(resource: Record<string, unknown>, id: string): void {
  if (resource.id !== undefined && resource.id !== id && resource.id !== Number(id)) throw new ScimError(400, 'id is immutable.', 'mutability');
}

/** The body as a JSON object, or invalidSyntax. */
function bodyObject(body: unknown): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw invalidSyntax('The request body must be a JSON object.');
  return body as Record<string, unknown>;
}

/** The first attribute of a path: up to its first `.` or `[`. */
const firstAttribute = (path: string) => path.split(/[.[]/, 1)[0]!.trim().toLowerCase();

/** What a PATCH may name first, by resource: the filterable attributes, and what is written though not filtered on. */
const PATCHABLE = {
  user: {
    schema: USER_SCHEMA.toLowerCase(),
    attributes: new Set([
      ...Object.keys(USER_ATTRIBUTES)
        .filter((key) => !key.startsWith('enterprise.'))
        .map(firstAttribute),
      'password',
      'externalid',
      ENTERPRISE_USER_SCHEMA.toLowerCase(),
    ]),
  },
  group: { schema: GROUP_SCHEMA.toLowerCase(), attributes: new Set([...Object.keys(GROUP_ATTRIBUTES).map(firstAttribute), 'externalid']) },
};
type Patchable = keyof typeof PATCHABLE;

/**
 * Names that reach JavaScript's object machinery: scim-patch walks paths and value keys onto
 * plain objects, so `__proto__.x` or `constructor.prototype.x` would change every object of
 * the process. No SCIM attribute has these names.
 */
const FORBIDDEN_SEGMENT = /(?:^|[.:[\]])\s*(?:__proto__|constructor|prototype)\s*(?:[.:[\]]|$)/i;
const invalidPath = (detail: string) => new ScimError(400, detail, 'invalidPath');
/**
 * Whether a segment of `name` (between `.`, `[`, `]` and `:`), blanks around it and case
 * aside, is one of those names. Read in place: cut into its segments, a mebibyte of `[`
 * was a million strings, 70 to 100 ms of the event loop each time a path was judged.
 */
const namesForbidden = (name: string) => FORBIDDEN_SEGMENT.test(name);

/** The attribute paths `filter` names, those of its value paths and their filters too. */
function filterAttributes(filter: Filter): string[] {
  switch (filter.op) {
    case 'and':
    case 'or':
      return filter.filters.flatMap(filterAttributes);
    case 'not':
      return filterAttributes(filter.filter);
    case '[]':
      return [filter.attrPath, ...filterAttributes(filter.valFilter)];
    default:
      return [filter.attrPath];
  }
}

/**
 * Whether `path` names a forbidden segment, its value filter (`emails[type eq "work"]`)
 * included, where an operator follows a name rather than a separator. A filter that does
 * not parse is left to scim-patch, which refuses it.
 */
function pathNamesForbidden(path: string): boolean {
  if (namesForbidden(path)) return true;
  const filtered = valueFilterOf(path);
  if (!filtered) return false;
  let names: string[];
  try {
    names = filterAttributes(parse(filtered.filter));
  } catch {
    return false;
  }
  return names.some(namesForbidden);
}

/** Refuses a path that names no known attribute first, or that names a forbidden segment anywhere. */
function checkPatchPath(path: string, resource: Patchable, op: SentOperation['op']) {
  if (pathNamesForbidden(path)) throw invalidPath(`path ${JSON.stringify(path)} is not an attribute.`);
  const { schema, attributes } = PATCHABLE[resource];
  const lower = path.toLowerCase();
  const enterprise = ENTERPRISE_USER_SCHEMA.toLowerCase();
  if (resource === 'user' && (lower === enterprise || lower.startsWith(`${enterprise}:`))) return;
  const attributePath = lower.startsWith(`${schema}:`) ? lower.slice(schema.length + 1) : lower;
  if (!attributes.has(firstAttribute(attributePath))) throw invalidPath(`path ${JSON.stringify(path)} is not an attribute.`);
  const valueFilter = /^[^[]*\[(.*)\](\.[^.[\]]+)?$/s.exec(path);
  if (path.includes('[') && !valueFilter) throw invalidPath(`path ${JSON.stringify(path)} is not an attribute with a value filter.`);
  if (valueFilter) {
    try {
      parsedFilter(valueFilter[1]);
    } catch {
      throw invalidPath(`path ${JSON.stringify(path)} holds a malformed value filter.`);
    }
  }
  // A member's `display`, `$ref` and `type` are read-only. scim-patch would answer a replace of one whose member is
  // absent by adding that member (`treatMissingAsAdd`, kept for Entra ID's e-mail replaces): a grant of membership.
  const subAttribute = attributePath.startsWith('members.') || (attributePath.startsWith('members[') && !attributePath.endsWith(']'));
  if (resource === 'group' && subAttribute) {
    throw new ScimError(400, `path ${JSON.stringify(path)} names a member's sub-attribute, which is read-only: add or remove members.`, 'mutability');
  }
  // scim-patch would merge an add's value into the members the filter matches: an add that replaced a member.
  if (resource === 'group' && op === 'add' && attributePath.startsWith('members[')) {
    throw invalidPath(`path ${JSON.stringify(path)} filters members: add members with the path "members" and the members as its value.`);
  }
}

/**
 * What scim-patch may read to cut the paths and value keys of one PATCH at their dots: from
 * each dot on to the next `]` or the end (its SPLIT_PERIOD), on the event loop, so a path
 * costs at most its dots times its length; 128 KiB of dots held the process for ten
 * seconds. The paths identity providers send (`name.givenName`, `emails[value eq
 * "first.last@example.com"]`) cost tens to hundreds, a thousand of them well below this.
 */
const MAX_PATH_READING = 1_000_000;

/** `reading` and what cutting `path` (or a key) at its dots may read, its dots times its length; beyond MAX_PATH_READING, invalidPath. */
function withReading(reading: number, path: string): number {
  let dots = 0;
  for (let at = path.indexOf('.'); at !== -1; at = path.indexOf('.', at + 1)) dots++;
  const total = reading + dots * path.length;
  if (total > MAX_PATH_READING) {
    throw invalidPath(
      `The PATCH's paths and value keys hold too many dots for their length (dots times length over ${MAX_PATH_READING} in all): send shorter paths, with fewer dots.`,
    );
  }
  return total;
}

/** Refuses a value whose keys, at any depth, name a forbidden segment; answers `reading` with its keys' (`withReading`). */
function checkPatchValue(value: unknown, reading: number): number {
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (!next || typeof next !== 'object') continue;
    if (Array.isArray(next)) {
      pending.push(...(next as unknown[]));
      continue;
    }
    for (const key of Object.keys(next)) {
      reading = withReading(reading, key);
      if (namesForbidden(key)) throw invalidPath(`${JSON.stringify(key)} is not an attribute.`);
      pending.push((next as Record<string, unknown>)[key]);
    }
  }
  return reading;
}

/**
 * `path` (an attribute, a value filter, a sub-attribute, any of them schema-qualified)
 * with its attribute names spelled as the schema spells them, and the names of what it
 * points at (undefined: a single value). scim-patch compares names exactly, so a path
 * or key in another case would otherwise be written beside the attribute and change
 * nothing. A name the schema does not know is left as written.
 */
function canonical(path: string, names: AttributeNames): { path: string; names: AttributeNames | undefined } {
  const lower = path.toLowerCase();
  // The URNs of the resource's own schemas; another resource's names no attribute (scim-patch would drop it, as any URN).
  const [urns, foreign] =
    names === ATTRIBUTE_NAMES.user
      ? [[ENTERPRISE_USER_SCHEMA, USER_SCHEMA], [GROUP_SCHEMA]]
      : names === ATTRIBUTE_NAMES.group
        ? [[GROUP_SCHEMA], [ENTERPRISE_USER_SCHEMA, USER_SCHEMA]]
        : [[], []];
  if (foreign.some((urn) => lower === urn.toLowerCase() || lower.startsWith(`${urn.toLowerCase()}:`)))
    throw invalidPath(`${JSON.stringify(path)} is not an attribute.`);
  for (const urn of urns) {
    const inner = urn === ENTERPRISE_USER_SCHEMA ? names.get(urn.toLowerCase())?.sub : names;
    if (!inner) continue;
    if (lower === urn.toLowerCase()) return { path: urn, names: inner };
    if (lower.startsWith(`${urn.toLowerCase()}:`)) {
      const rest = canonical(path.slice(urn.length + 1), inner);
      // A core attribute written with its schema's URN is that attribute: the path goes on without it, as every other rule reads it.
      return urn === ENTERPRISE_USER_SCHEMA ? { path: `${urn}:${rest.path}`, names: rest.names } : rest;
    }
  }
  const parts = /^([^.[\]]+)(?:\[(.*)\])?(?:\.([^.[\]]+))?$/s.exec(path);
  const known = parts && names.get(parts[1]!.trim().toLowerCase());
  if (!parts || !known) return { path, names: undefined };
  const [, , filter, sub] = parts;
  // In a value filter, the names outside string literals that are sub-attributes (`value`, `type`).
  const canonicalFilter = filter?.replace(/"(?:[^"\\]|\\[^])*(?:"|\\?$)|[A-Za-z$][\w$]*/g, (token) =>
    token.startsWith('"') ? token : (known.sub.get(token.toLowerCase())?.name ?? token),
  );
  const subName = sub === undefined ? undefined : known.sub.get(sub.trim().toLowerCase());
  return {
    path: `${known.name}${canonicalFilter === undefined ? '' : `[${canonicalFilter}]`}${sub === undefined ? '' : `.${subName?.name ?? sub}`}`,
    names: sub === undefined ? (known.sub.size > 0 ? known.sub : undefined) : undefined,
  };
}

/** `value` (a PATCH operation's) with its keys, at every depth, spelled as the schema spells them (`canonical`); dotted keys too. */
function canonicalValue(value: unknown, names: AttributeNames | undefined): unknown {
  if (!names || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item) => canonicalValue(item, names));
  const result: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    const named = canonical(key, names);
    result[named.path] = canonicalValue(item, named.names);
  }
  return result;
}

/**
 * Entra ID removes members as `{"op": "Remove", "path": "members", "value": [{"value": "<id>"}]}`.
 * scim-patch would remove only members equal to those objects as a whole, and the group's
 * members carry `display`, `$ref` and `type` besides: each is removed by its `value`
 * instead, as the value-filter form Okta sends does.
 */
function memberRemovals(operation: ScimPatchOperation): ScimPatchOperation[] {
  // Without a value (or null), scim-patch removes every member, as RFC 7644 §3.5.2.2 has a remove without a filter do.
  if (operation.op !== 'remove' || operation.path !== 'members' || operation.value == null) return [operation];
  // One member sent as an object, not a list of one, is removed alike.
  const members = Array.isArray(operation.value) ? (operation.value as unknown[]) : [operation.value];
  return members.map((member) => {
    const id = (member as { value?: unknown } | null)?.value;
    if (typeof id !== 'string') throw invalidValue(`members: ${JSON.stringify(id ?? null)} is not a user id.`);
    return { op: 'remove', path: `members[value eq ${JSON.stringify(id)}]` };
  });
}

/**
 * The User attributes of RFC 7643 §4.1 that Atrium does not keep. Like any attribute Atrium
 * does not map, they are accepted and ignored in every write, a PATCH with a path to one
 * included: an identity provider's default mapping sends some (Entra ID's `title`), and
 * refusing them would fail every update of a user who has one.
 */
const IGNORED_USER_ATTRIBUTES = new Set([
  'nickname',
  'profileurl',
  'title',
  'usertype',
  'timezone',
  'ims',
  'photos',
  'entitlements',
  'roles',
  'x509certificates',
]);

/** Whether `path` (a User's) names first an attribute of `IGNORED_USER_ATTRIBUTES`, with or without the core schema's URN before it. */
function ignoredUserPath(path: string): boolean {
  const lower = path.toLowerCase();
  const schema = USER_SCHEMA.toLowerCase();
  return IGNORED_USER_ATTRIBUTES.has(firstAttribute(lower.startsWith(`${schema}:`) ? lower.slice(schema.length + 1) : lower));
}

/** The multi-valued attributes a PATCH writes, as `canonical` spells their paths. */
const MULTI_VALUED = new Set(['members', 'emails', 'phoneNumbers', 'addresses']);

/** A member of a PATCH operation (`op`, `path`, `value`) by its name in any case: RFC 7643 §2.1 has attribute names case-insensitive. */
function operationMember(operation: Record<string, unknown>, name: string): { value: unknown } | undefined {
  const key = Object.keys(operation).find((candidate) => candidate.toLowerCase() === name);
  return key === undefined ? undefined : { value: operation[key] };
}

interface SentOperation {
  op: 'add' | 'replace' | 'remove';
  path?: string;
  value?: unknown;
}

const isAttributes = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The enterprise extension written as a whole, by its URN as the path or as a key of a
 * path-less value, as one operation per sub-attribute (`URN:employeeNumber`), the form
 * scim-patch applies: RFC 7644 §3.5.2 leaves sub-attributes the value does not name as
 * they are, for an add and a replace alike.
 */
function extensionOperations(op: SentOperation['op'], value: unknown): SentOperation[] {
  // A remove of the extension, or a replace with null ("unassigned", RFC 7643 §2.5), removes each attribute it holds.
  if (op === 'remove' || (op === 'replace' && value === null)) return EXTENSION_REMOVALS;
  if (!isAttributes(value)) throw invalidValue(`${ENTERPRISE_USER_SCHEMA} takes an object of its attributes as its value.`);
  return Object.entries(value).map(([key, item]) => ({ op, path: `${ENTERPRISE_USER_SCHEMA}:${key}`, value: item }));
}

/** The enterprise extension removed whole: a remove of each attribute Atrium keeps of it (scim-patch removes nothing by the URN alone). */
const EXTENSION_REMOVALS: SentOperation[] = [...ATTRIBUTE_NAMES.user.get(ENTERPRISE_USER_SCHEMA.toLowerCase())!.sub.values()].map(({ name }) => ({
  op: 'remove',
  path: `${ENTERPRISE_USER_SCHEMA}:${name}`,
}));

/**
 * A path-less add or replace, whose value holds the attributes to write, as operations
 * scim-patch applies as meant: a key with a value filter (`emails[type eq "work"].value`,
 * as Entra ID sends several attributes in one operation) or naming the enterprise
 * extension becomes an operation with that path; the other keys stay together, dotted
 * ones (`name.givenName`) included, which scim-patch reads as paths. A user's `name` as
 * an object becomes dotted keys: its sub-attributes the value does not name are left as
 * they are (RFC 7644 §3.5.2.1, §3.5.2.3), as with the path `name`; scim-patch would
 * replace it whole.
 */
function pathlessOperations(op: SentOperation['op'], value: Record<string, unknown>, resource: Patchable): SentOperation[] {
  const together: Record<string, unknown> = {};
  const apart: SentOperation[] = [];
  const enterprise = ENTERPRISE_USER_SCHEMA.toLowerCase();
  for (const [key, item] of Object.entries(value)) {
    const lower = key.toLowerCase();
    if (resource === 'user' && lower === 'name' && isAttributes(item)) {
      for (const [sub, subValue] of Object.entries(item)) together[`${key}.${sub}`] = subValue;
    } else if (resource === 'user' && lower === enterprise) apart.push(...extensionOperations(op, item));
    // The resource's core schema wrapping its attributes (`{"urn:…:core:2.0:User": {"active": false}}`) is those attributes.
    else if (lower === (resource === 'user' ? USER_SCHEMA : GROUP_SCHEMA).toLowerCase() && isAttributes(item))
      apart.push(...pathlessOperations(op, item, resource));
    else if (key.includes('[') || (resource === 'user' && lower.startsWith(`${enterprise}:`))) apart.push({ op, path: key, value: item });
    else together[key] = item;
  }
  return [...(Object.keys(together).length > 0 || apart.length === 0 ? [{ op, value: together }] : []), ...apart];
}

/**
 * A PATCH request's operations (RFC 7644 §3.5.2), normalized for scim-patch and liberal
 * where identity providers deviate: `Operations`, `op`, `path` and `value` and operation
 * names in any case (`Replace`), attribute names in paths and value keys in any case
 * (`canonical`), members removed by value (`memberRemovals`), a path-less value's filtered
 * and extension keys as paths of their own (`pathlessOperations`), attributes Atrium does
 * not keep ignored (`IGNORED_USER_ATTRIBUTES`). An add or replace must carry a value, an
 * object of attributes when it has no path. Paths must name an attribute of the resource;
 * paths and value keys never name `__proto__`, `constructor` or `prototype` (invalidPath).
 */
function patchOperations(body: unknown, resource: Patchable): ScimPatchOperation[] {
  const request = bodyObject(body);
  const operations = operationMember(request, 'operations')?.value;
  if (!Array.isArray(operations) || operations.length === 0) throw invalidSyntax('Operations must be a non-empty array.');
  if (operations.length > 1000) throw invalidSyntax('Operations must hold at most 1000 operations.');
  let reading = 0;
  const sent = operations.flatMap((entry): SentOperation[] => {
    const operation = bodyObject(entry);
    const name = operationMember(operation, 'op')?.value;
    const op = typeof name === 'string' ? name.toLowerCase() : '';
    if (op !== 'add' && op !== 'replace' && op !== 'remove') throw invalidSyntax(`op must be add, replace or remove, not ${JSON.stringify(name)}.`);
    const path = operationMember(operation, 'path')?.value;
    const value = operationMember(operation, 'value');
    if (path !== undefined && typeof path !== 'string') throw invalidSyntax('path must be a string.');
    if (op === 'remove' && !path) throw new ScimError(400, 'A remove operation needs a path.', 'noTarget');
    if (path) reading = withReading(reading, path);
    if (value !== undefined) reading = checkPatchValue(value.value, reading);
    if (op === 'remove') {
      if (resource === 'user' && path!.toLowerCase() === ENTERPRISE_USER_SCHEMA.toLowerCase()) return extensionOperations(op, undefined);
      return [{ op, path: path!, ...(value === undefined ? {} : { value: value.value }) }];
    }
    if (value === undefined) throw invalidValue(`${op === 'add' ? 'An add' : 'A replace'} operation needs a value.`);
    if (!path) {
      if (!isAttributes(value.value))
        throw invalidValue(`${op === 'add' ? 'An add' : 'A replace'} operation without a path takes an object of attributes as its value.`);
      return pathlessOperations(op, value.value, resource);
    }
    if (resource === 'user' && path.toLowerCase() === ENTERPRISE_USER_SCHEMA.toLowerCase()) return extensionOperations(op, value.value);
    return [{ op, path, value: value.value }];
  });
  // Counted as scim-patch applies them: a path-less value's extension is an operation of its own, whose arrays it compares item by item.
  const values = sent.reduce<number>((sum, operation) => sum + valueCount(operation.value), 0);
  if (values > MAX_PATCH_VALUES) throw invalidValue(`A PATCH carries at most ${MAX_PATCH_VALUES} values in all its operations, not ${values}.`);
  // A path's value filter is read by scim2-parse-filter, here and in scim-patch: a line feed in its compared text is
  // refused first, as in a filter of a read (each one doubles the parser's time).
  for (const { path } of sent) if (path !== undefined && lineFeedInText(path)) throw invalidPath(lineFeedRefusal('path'));
  return sent
    .filter((operation) => !(resource === 'user' && operation.path !== undefined && !pathNamesForbidden(operation.path) && ignoredUserPath(operation.path)))
    .flatMap((operation) => {
      if (operation.path) checkPatchPath(operation.path, resource, operation.op);
      const named = operation.path ? canonical(operation.path, ATTRIBUTE_NAMES[resource]) : { path: undefined, names: ATTRIBUTE_NAMES[resource] };
      // null is "unassigned" (RFC 7643 §2.5): a replace with it removes what the path names.
      if (operation.op === 'replace' && named.path && operation.value === null) return [{ op: 'remove', path: named.path }];
      // `name` is one complex attribute: scim-patch would merge a list into it by its indexes, which Atrium ignores.
      if (resource === 'user' && named.path === 'name' && operation.op !== 'remove' && !isAttributes(operation.value))
        throw invalidValue('name must be an object.');
      // A multi-valued attribute replaced by one value holds that value alone (RFC 7644 §3.5.2.3): scim-patch would
      // merge it into each value held, and drop it where none is.
      const single = operation.op === 'replace' && MULTI_VALUED.has(named.path ?? '') && !Array.isArray(operation.value);
      return memberRemovals({
        op: operation.op,
        ...(named.path ? { path: named.path } : {}),
        ...('value' in operation ? { value: canonicalValue(single ? [operation.value] : operation.value, named.names) } : {}),
      } as ScimPatchOperation);
    });
}

/**
 * The values one PATCH may carry in all its operations. scim-patch compares each value it
 * adds with those the attribute holds already, on the event loop: 45,000 e-mails in 1000
 * operations of a 1 MiB body took over a minute, during which the process answered no one.
 * Identity providers send members in batches of at most a few hundred.
 */
const MAX_PATCH_VALUES = 1000;

/** How many values an operation's `value` carries: an array's items, an object's attributes (an array's items each), or one. */
function valueCount(value: unknown): number {
  if (value === undefined) return 0;
  if (Array.isArray(value)) return value.length;
  if (value !== null && typeof value === 'object') return Object.values(value).reduce<number>((sum, item) => sum + (Array.isArray(item) ? item.length : 1), 0);
  return 1;
}

/** A path's attribute, its value filter and what follows (`emails[type eq "work"].value`); null for a path without a value filter. */
function valueFilterOf(path: string | undefined): { attribute: string; filter: string; rest: string } | null {
  const parts = path === undefined ? null : /^([^.[\]:]+)\[(.*)\]((?:\.[^.[\]]+)?)$/s.exec(path);
  return parts ? { attribute: parts[1]!, filter: parts[2]!, rest: parts[3]! } : null;
}

/**
 * Whether `operation` removes by a value filter (`members[value eq "…"]`,
 * `phoneNumbers[type eq "fax"].value`) what matches nothing in `resource`: it changes
 * nothing, and succeeds (RFC 7644 §3.5.2.2). scim-patch refuses it instead: "a mono valued
 * attribute" once an earlier removal took the last value, as identity providers' batches
 * of removals do, and "no matching array entry" when the path names a sub-attribute, as
 * Entra ID's removal of a cleared mobile or fax number does (without a sub-attribute,
 * scim-patch removes nothing and succeeds, and members removed by id take a faster path
 * than a filter over every member). The filter is judged as scim-patch judges it, so it
 * is given after `matchingStoredCase`; one that does not parse is left to scim-patch.
 */
function removesFromNothing(resource: Record<string, unknown>, operation: ScimPatchOperation): boolean {
  const filtered = operation.op === 'remove' ? valueFilterOf(operation.path) : null;
  if (!filtered) return false;
  const held = resource[filtered.attribute];
  if (held === undefined || held === null || (Array.isArray(held) && held.length === 0)) return true;
  if (filtered.rest === '' || !Array.isArray(held)) return false;
  let matches: (item: unknown) => boolean;
  try {
    matches = filter(parse(filtered.filter));
  } catch {
    return false;
  }
  return !held.some((item) => matches(item));
}

/** `value` with every text in it in lower case. */
const lowerCasedValue = (value: unknown): unknown =>
  typeof value === 'string'
    ? value.toLowerCase()
    : Array.isArray(value)
      ? value.map(lowerCasedValue)
      : value && typeof value === 'object'
        ? Object.fromEntries(Object.entries(value).map(([key, item]) => [key, lowerCasedValue(item)]))
        : value;

/**
 * `operation` with its path's value filter (`emails[type eq "work" and value co "EXAMPLE"]`)
 * matching a User's value that it matches ignoring case, its escaped backslashes read
 * (`"C:\\Street"`, `escapedText`): string attributes are not case-exact (RFC 7643 §2.2),
 * as filters on reads compare them, while scim-patch compares exactly, and reads a
 * backslash as itself. A User holds one value of each such attribute; one the filter matches only
 * ignoring case is named instead by a sub-attribute it holds (`emails[value pr]`), and one
 * it matches only exactly is named by a filter that matches nothing; neither
 * writes a text again (scim-patch and the filter parser each read some characters
 * of a text otherwise: a backslash, `:`, `[`). A group's members are compared as sent
 * (their `value` is an id, and a member is removed by it). A filter that does not parse
 * is left to scim-patch.
 */
function matchingStoredCase(resource: Record<string, unknown>, operation: ScimPatchOperation): ScimPatchOperation {
  const filtered = valueFilterOf(operation.path);
  const held = filtered ? resource[filtered.attribute] : undefined;
  if (!filtered || !Array.isArray(held) || held.length !== 1 || filtered.attribute === 'members') return operation;
  const [value] = held as unknown[];
  if (!value || typeof value !== 'object') return operation;
  let matches: boolean;
  try {
    const parsed = parse(filtered.filter);
    matches = filter(withComparedTexts(parsed, (text) => escapedText(text).toLowerCase()))(lowerCasedValue(value));
    if (filter(parsed)(value) === matches) return operation;
  } catch {
    return operation;
  }
  const present = Object.keys(value).find((key) => /^[a-z]+$/i.test(key) && (value as Record<string, unknown>)[key] != null);
  if (present === undefined) return operation;
  // Matched only exactly (`value ne "bob@example.com"` against `Bob@Example.com`): a filter that matches nothing.
  return { ...operation, path: `${filtered.attribute}[${matches ? `${present} pr` : `${present} pr and not (${present} pr)`}]${filtered.rest}` };
}

/**
 * `after` (a User as patched from `before`) with `preferredLanguage` and `locale` agreeing:
 * both show the one language Atrium keeps, and the write reads `preferredLanguage` first,
 * so a PATCH of `locale` alone would change nothing, and a removal of `preferredLanguage`
 * alone would fall back to the old `locale`. The one the PATCH changed wins, as in a PUT
 * that sends only it.
 */
function followingLanguage(before: Record<string, unknown>, after: Record<string, unknown>): Record<string, unknown> {
  const changed = (key: string) => !sameJson(before[key], after[key]);
  const [from, to] =
    changed('locale') && !changed('preferredLanguage') ? ['locale', 'preferredLanguage'] : changed('preferredLanguage') ? ['preferredLanguage', 'locale'] : [];
  if (!from) return after;
  const { [to!]: _, ...rest } = after;
  return after[from] === undefined ? rest : { ...rest, [to!]: after[from] };
}

/** A member removed by its id alone, as both big identity providers remove members (`memberRemovals` makes Entra ID's form this one). */
const MEMBER_BY_ID = /^members\[\s*value\s+eq\s+("(?:[^"\\]|\\.)*")\s*\]$/i;

/**
 * The comparisons scim-patch may make for the value filters of one PATCH, each filter's
 * terms times the values of the attribute it searches. It evaluates a filter on every value
 * in turn, on the event loop, about a microsecond a comparison: 480 removals with 90-term
 * filters from a group of 1000 held the process for 25 seconds. A removal of a member by
 * id costs none of it (`MEMBER_BY_ID`).
 */
const MAX_FILTER_COMPARISONS = 200_000;

/** How many comparisons `operation`'s value filter costs on `document` (0 without one). */
function filterComparisons(document: Record<string, unknown>, operation: ScimPatchOperation): number {
  const filtered = valueFilterOf(operation.path);
  if (!filtered || MEMBER_BY_ID.test(operation.path!)) return 0;
  const values = document[filtered.attribute];
  const terms = (filtered.filter.replace(/"(?:[^"\\]|\\[^])*(?:"|\\?$)/g, '""').match(/\b(eq|ne|co|sw|ew|gt|ge|lt|le|pr)\b/gi) ?? []).length;
  return Math.max(1, terms) * (Array.isArray(values) ? values.length : 1);
}

/**
 * A JSON value as text, its objects' keys sorted: equal for values scim-patch deems equal (fast-deep-equal).
 * Strings are marked `s` and numbers JSON has no text for (1e999 is read as Infinity) `n`: JSON.stringify
 * writes those as null, which they are not equal to.
 */
const jsonKey = (value: unknown) =>
  JSON.stringify(value, (_key, item: unknown) =>
    typeof item === 'string'
      ? `s${item}`
      : typeof item === 'number' && !Number.isFinite(item)
        ? `n${item}`
        : item && typeof item === 'object' && !Array.isArray(item)
          ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
          : item,
  );

/** A list `addedToList` made, with the JSON of its values. */
interface KeyedList {
  list: unknown[];
  keys: Set<string>;
}

/**
 * `document`'s list at `operation`'s path after an add of a list of values to it, applied as
 * scim-patch applies it: the values it does not hold already are appended. null for any other
 * operation. scim-patch compares each added value with every value held, on the event loop:
 * 1000 members added to a group of 10,000 held the process for a quarter of a second, and a
 * group may have any number of members. Held values are looked up by their JSON here, kept
 * from the list `last` made when it is still the one held (1000 adds in a row).
 */
function addedToList(document: Record<string, unknown>, operation: ScimPatchOperation, last: KeyedList | null): KeyedList | null {
  if (operation.op !== 'add' || operation.path === undefined || !Object.hasOwn(document, operation.path)) return null;
  const held: unknown = document[operation.path];
  if (!Array.isArray(held) || !Array.isArray(operation.value)) return null;
  const keys = last?.list === held ? last.keys : new Set((held as unknown[]).map(jsonKey));
  const added = (operation.value as unknown[]).map((item) => [item, jsonKey(item)] as const).filter(([, key]) => !keys.has(key));
  for (const [, key] of added) keys.add(key);
  return { list: [...(held as unknown[]), ...added.map(([item]) => item)], keys };
}

/** The resource after the PATCH operations, applied in order by scim-patch (on a copy); its errors become SCIM errors. */
function patched<T extends Record<string, unknown>>(resource: T, operations: ScimPatchOperation[]): T {
  const tooManyComparisons = (comparisons: string) =>
    invalidValue(`The PATCH's value filters would compare ${comparisons} values, more than ${MAX_FILTER_COMPARISONS}: send fewer or simpler filters.`);
  const comparisons = operations.reduce((sum, operation) => sum + filterComparisons(resource, operation), 0);
  if (comparisons > MAX_FILTER_COMPARISONS) throw tooManyComparisons(String(comparisons));
  // Counted again as the operations are applied: an earlier one may add the values a later filter searches.
  let applied = 0;
  try {
    let document = structuredClone(resource) as Record<string, unknown>;
    // The last list an add made, with its values' JSON: any other operation may change it in place, and forgets it.
    let keyed: KeyedList | null = null;
    for (const sent of operations) {
      applied += filterComparisons(document, sent);
      if (applied > MAX_FILTER_COMPARISONS) throw tooManyComparisons(`at least ${applied}`);
      const operation = matchingStoredCase(document, sent);
      if (removesFromNothing(document, operation)) continue;
      const member = operation.op === 'remove' && operation.path !== undefined ? MEMBER_BY_ID.exec(operation.path) : null;
      if (member && Array.isArray(document.members)) {
        // Applied here, once over the members: scim-patch would evaluate the filter on each of them, about 9 s for 1000 removals from 10,000.
        const id = JSON.parse(member[1]!) as unknown;
        document.members = document.members.filter((held) => (held as { value?: unknown } | null)?.value !== id);
        continue;
      }
      keyed = addedToList(document, operation, keyed);
      if (keyed) {
        document[operation.path!] = keyed.list;
        continue;
      }
      document = scimPatch(document as never, [operation], { mutateDocument: true, treatMissingAsAdd: true });
    }
    return document as T;
  } catch (error) {
    if (error instanceof ScimError) throw error;
    if (error instanceof PatchError) {
      const scimType = (error as { scimCode?: string }).scimCode;
      throw new ScimError(400, error.message, scimType === 'noTarget' || scimType === 'invalidPath' ? scimType : 'invalidValue');
    }
    // Anything else scim-patch throws is its own failure on a value of the wrong shape: its text would name its internals.
    throw invalidValue('The PATCH cannot be applied: a value does not have the shape of the attribute it is written to.');
  }
}

/**
 * What a lost race on a unique rule collided with, by the constraint PostgreSQL names: a
 * user's `userName` or a group's `displayName` (a member is named where it is added,
 * `saveGroup`: under row-level security the driver's error does not quote the key).
 */
function uniquenessDetail(constraint: string | undefined): string {
  if (constraint === 'users_tenant_id_username_key') return RULE_FIELDS.user.taken;
  if (constraint === 'departments_tenant_id_name_key') return RULE_FIELDS.group.taken;
  return 'A value is already taken (by a concurrent request).';
}

/** What an error is to a SCIM client: an RFC 7644 §3.12 document, never a problem document. */
function answerError(error: FastifyError | ScimError | ProblemError, request: FastifyRequest, reply: FastifyReply) {
  let status: number;
  let detail: string;
  let scimType: string | undefined;
  const ended = endedByDatabase(error);
  if (error instanceof ScimError) {
    ({ status, scimType } = error);
    detail = error.message;
    reply.headers(error.headers);
  } else if (error instanceof ProblemError) {
    // A refusal of a shared rule (an administrator the token's minter may not administer: 403; a lost race: 404), or
    // the general rate limit's 429, whose Retry-After is among its headers (the RateLimit ones are on the reply already).
    status = error.status;
    detail = error.message;
    reply.headers(error.headers);
    // A body JSON refuses as such (nested too deep, an unpaired surrogate), sent as application/json: the API's parser refused it.
    if (status === 400) scimType = 'invalidSyntax';
    if (status === 422) {
      // The fields at fault, named as SCIM names them (a group's `name` is its `displayName`).
      const codes = error.errorCodes ?? {};
      const errors = Object.fromEntries(
        Object.entries(error.errors ?? {}).map(([field, messages]) => [field, messages.map((message, i) => coded(codes[field]?.[i] ?? 'invalid', message))]),
      );
      const refusal =
        Object.keys(errors).length > 0 ? refusalOf(errors, request.url.startsWith(`${SCIM_PREFIX}/Groups`) ? 'group' : 'user') : invalidValue(detail);
      ({ status, scimType } = refusal);
      detail = refusal.message;
    }
  } else if (ended) {
    ({ status, detail } = { status: 503, detail: ended });
    reply.headers(DATABASE_UNAVAILABLE_HEADERS);
    request.log.warn(errorLogFields(error), 'transaction ended by the database');
  } else if (isDatabaseConnectionLoss(error)) {
    // The database lost for a moment (a restart, a failover): the API's 503, as an error document.
    ({ status, detail } = { status: 503, detail: 'The database is unavailable for the moment. Try again shortly.' });
    reply.headers(DATABASE_UNAVAILABLE_HEADERS);
    request.log.warn(errorLogFields(error), 'database unavailable');
  } else if (typeof error.statusCode === 'number' && error.statusCode < 500) {
    status = error.statusCode!;
    detail =
      status === 415
        ? `The request body must be ${SCIM_MEDIA_TYPE} or application/json.`
        : // Fastify's own wording names application/json, whichever JSON media type was sent.
          error.code === 'FST_ERR_CTP_INVALID_JSON_BODY'
          ? 'The request body is not valid JSON.'
          : error.message;
    if (status === 400) scimType = 'invalidSyntax';
  } else {
    // Database refusals of the input (a race past the rules' own checks, text PostgreSQL refuses) are the client's, never a 5xx.
    const driver = ((error as { cause?: unknown }).cause ?? error) as { code?: string; message?: string; constraint_name?: string };
    if (driver.code === '23505') {
      // `violatedConstraint`: the constraint's name, also when a Citus worker raised it (its message names the shard's).
      ({ status, scimType, detail } = { status: 409, scimType: 'uniqueness', detail: uniquenessDetail(violatedConstraint(driver)?.name) });
    } else if (driver.code === '23503' || driver.code === '22021' || driver.code === '22P05' || driver.code === '22001') {
      ({ status, scimType, detail } = {
        status: 400,
        scimType: 'invalidValue',
        detail: 'A value is not accepted (a reference that does not exist, or text the database refuses).',
      });
    } else {
      status = 500;
      detail = 'An unexpected error occurred.';
      request.log.error(errorLogFields(error), 'SCIM request failed');
    }
  }
  return reply
    .code(status)
    .type(`${SCIM_MEDIA_TYPE}; charset=utf-8`)
    .send(errorDocument(status, detail, scimType as never));
}

/**
 * The users meeting `where` (a condition whose values are placeholders, `placeholders()`),
 * a page of them (`offset`, `limit`) with the count of all, by a statement prepared once
 * per `form` (`filterForm`: the filter but for its values). Identity providers look users
 * up with the same filter but for its value, and building the select costs as much as the
 * rest of the request. A first page has no `offset` in its statement, as the `/api` lists
 * (listing.ts): PostgreSQL prices a generic plan with an unknown offset above the plans it
 * makes for each value, and may then plan the statement anew on every execution.
 */
function usersPage(tx: Tx, where: SQL, form: string, first: boolean) {
  return prepared(tx, usersPage, first ? form : `${form} past the first page`, (tx) => {
    const page = selectScimUsers(tx, { total: sql<number>`count(*) over ()`.mapWith(Number) })
      .where(where)
      .orderBy(asc(users.id))
      .limit(sql.placeholder('limit'));
    return (first ? page : page.offset(sql.placeholder('offset'))).prepare('scim_users');
  });
}

/** How many users meet `where`, prepared as `usersPage` is. */
function usersCount(tx: Tx, where: SQL, form: string) {
  return prepared(tx, usersCount, form, (tx) => tx.select({ n: count() }).from(users).where(where).prepare('scim_users_count'));
}

/** Registers `/scim/v2`. */
export async function registerScim(app: FastifyInstance, services: Services): Promise<void> {
  app.decorateRequest('scim', null);
  // The last second's look-ups of SCIM tokens, forgotten with those of access tokens: every write under `/api` or here clears both.
  const recent = services.principals.companion<ScimPrincipal>();
  await app.register(
    async (scim) => {
      // As under `/api` (an empty body is none: a DELETE that names the media type is still a DELETE), answered as SCIM errors.
      scim.addContentTypeParser(
        SCIM_MEDIA_TYPE,
        { parseAs: 'buffer' },
        jsonBodyParser(app, scim, (status, problem) => (status === 415 ? new ScimError(415, problem) : invalidSyntax(problem))),
      );
      scim.setErrorHandler((error, request, reply) => answerError(error as FastifyError, request, reply));
      /** A path no route serves: 404, or 405 with `Allow` when it is served with other methods. */
      const noEndpoint = (request: FastifyRequest) => {
        const refusal = noRouteError(request);
        return refusal.status === 404 ? new ScimError(404, `${request.method} ${request.url.split('?')[0]} is not a SCIM endpoint.`) : refusal;
      };
      scim.setNotFoundHandler((request, reply) => answerError(noEndpoint(request), request, reply));
      scim.addHook('onRequest', async (request) => {
        // `/Users/` (an empty id) names no resource, as in `/api`: no endpoint, before authentication.
        if (emptyPathParameter(request)) throw noEndpoint(request);
        // Answers state where their resources are (`meta.location`, `Location`) at the request's
        // host; HTTP/1.0 may name none.
        if (!request.host) throw new ScimError(400, 'The request names no host (Host header): SCIM answers state where their resources are.');
        request.scim = await authenticate(services, request, SAFE_METHODS.has(request.method) ? recent : undefined);
        // A path and method no route serves: answered before the body is read, so that a malformed one decides nothing.
        if (request.is404) throw noEndpoint(request);
        // Each names one list (RFC 7644 §3.4.2.5): sent twice (or with brackets), it would be read as none, so it is
        // refused, as a second `filter` is.
        const query = request.query as Record<string, unknown>;
        for (const name of ['attributes', 'excludedAttributes']) {
          if (query[name] !== undefined && typeof query[name] !== 'string') throw invalidValue(`${name} must be given once, as one comma-separated list.`);
        }
        // Only a method that takes a body is judged by its type: a GET or DELETE ignores one, as in `/api`.
        const type =
          SAFE_METHODS.has(request.method) || request.method === 'DELETE' ? undefined : request.headers['content-type']?.split(';')[0]!.trim().toLowerCase();
        if (type !== undefined && type !== SCIM_MEDIA_TYPE && type !== 'application/json') {
          throw new ScimError(415, `The request body must be ${SCIM_MEDIA_TYPE} or application/json.`);
        }
      });
      // A write's preconditions, as under `/api` (docs/api-conventions.md#conditional-requests): resources carry no
      // entity tag (ServiceProviderConfig: etag unsupported), so an If-Match naming one, or If-None-Match: *, never
      // holds (412), once the request is authenticated and its body read; ignoring it would let a write through that
      // the client made conditional.
      scim.addHook('preHandler', async (request) => {
        // A path or method no route serves is its 404 or 405, whatever its preconditions.
        if (SAFE_METHODS.has(request.method) || request.is404) return;
        const failed = failedPrecondition(request.headers);
        if (failed) throw new ScimError(412, failed.message);
      });
      scim.addHook('onSend', async (request, reply, payload) => {
        if (reply.statusCode < 400 && payload !== undefined && payload !== '') reply.type(`${SCIM_MEDIA_TYPE}; charset=utf-8`);
        // Writes forget the last second's look-ups of access tokens and of SCIM tokens: a deactivation holds for the next request.
        // A request refused before it was authenticated changes nothing, so it forgets nothing.
        if (request.scim && !SAFE_METHODS.has(request.method)) services.principals.clear();
        return payload;
      });

      /** One transaction in the token's tenant, recording the token's use. */
      const inTenant = <T>(request: FastifyRequest, fn: (tx: Tx, principal: ScimPrincipal) => Promise<T>) => {
        const principal = request.scim!;
        return services.db.tenant(principal.tenantId, async (tx) => {
          // A read may answer from a look-up up to a second old, as the API's reads do.
          if (SAFE_METHODS.has(request.method)) {
            await recordScimTokenUse(tx, principal);
            return fn(tx, principal);
          }
          // A write commits only while its token exists (`holdScimToken`). The hold leaves with
          // the write's first statements and the server takes it before them; a token revoked
          // since its look-up refuses the write (401) and rolls it back. Its outcome is taken at
          // once, so that a failure of it is never a rejection left unhandled while the write runs.
          const hold = holdScimToken(tx, principal).then(
            (held): { held: boolean; error?: Error } => ({ held }),
            (error: Error) => ({ held: true, error }),
          );
          let result: T;
          try {
            await recordScimTokenUse(tx, principal);
            result = await fn(tx, principal);
          } catch (error) {
            if (!(await hold).held) throw tokenRequired();
            throw error;
          }
          const { held, error } = await hold;
          if (error !== undefined) throw error;
          if (!held) throw tokenRequired();
          return result;
        });
      };

      discoveryRoutes(scim, baseUrlOf);

      // `/Me` names the authenticated subject (RFC 7644 §3.11), and a SCIM token is no user: not supported, which a
      // service provider answers with 501 (§3.11), for every method. Refused before its body is read (a token is judged first).
      scim.route({
        method: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
        url: '/Me',
        onRequest: async () => {
          throw new ScimError(501, '/Me is not supported: a SCIM token acts for no user of its own. Use /Users.');
        },
        handler: async () => undefined,
      });

      scim.get('/Users', async (request) => {
        const query = request.query as Record<string, unknown>;
        const parsed = parsedFilter(query.filter);
        const filter = placeholders();
        const where = and(SCIM_USERS, parsed && filterCondition(parsed, USER_ATTRIBUTES, null, filter.bind))!;
        const form = filterForm(parsed);
        const { startIndex, count: pageSize } = pageOf(query);
        const { rows, total } = await inTenant(request, async (tx) => {
          const countAll = async () => (await usersCount(tx, where, form).execute(filter.values))[0]?.n ?? 0;
          if (pageSize === 0) return { rows: [], total: await countAll() };
          // The total rides on the page's rows (a window over every match, taken before the offset and limit): one statement where
          // the page holds a row. An empty page past the first is counted on its own; an empty first page means none match.
          const read = () => usersPage(tx, where, form, startIndex === 1).execute({ ...filter.values, offset: startIndex - 1, limit: pageSize });
          // A first page needs nothing after it (an empty one means none match): its transaction ends with it.
          const page = (await (startIndex === 1 ? onlyStatement(tx, read) : read())) as (ScimUserRow & { total: number })[];
          const total = page.length > 0 ? page[0]!.total : startIndex === 1 ? 0 : await countAll();
          return { rows: page, total };
        });
        const base = baseUrlOf(request);
        return listResponse(
          rows.map((row) => projectAttributes(presentScimUser(row, base), query)),
          total,
          startIndex,
        );
      });

      scim.get('/Users/:id', async (request) => {
        const { id } = request.params as { id: string };
        const user = await inTenant(request, (tx) => requireUser(tx, id));
        return projectAttributes(presentScimUser(user, baseUrlOf(request)), request.query as Record<string, unknown>);
      });

      scim.post('/Users', async (request, reply) => {
        const write = scimUserWrite(bodyObject(request.body));
        const passwordHash = await passwordHashOf(services, write, request.scim!.tenantId);
        const user = await inTenant(request, async (tx, principal) => {
          await lockGrants(tx, principal);
          const id = await saveUser(tx, services, request, principal, write, undefined, passwordHash);
          return requireUser(tx, String(id));
        });
        const body = presentScimUser(user, baseUrlOf(request));
        return reply
          .code(201)
          .header('location', body.meta.location)
          .send(projectAttributes(body, request.query as Record<string, unknown>));
      });

      scim.put('/Users/:id', async (request) => {
        const { id } = request.params as { id: string };
        const resource = bodyObject(request.body);
        refuseOtherId(resource, id);
        const write = scimUserWrite(resource);
        const passwordHash = await passwordHashOf(services, write, request.scim!.tenantId);
        const user = await inTenant(request, async (tx, principal) => {
          const current = await lockedUser(tx, principal, id);
          await saveUser(tx, services, request, principal, write, current, passwordHash);
          return requireUser(tx, id);
        });
        return projectAttributes(presentScimUser(user, baseUrlOf(request)), request.query as Record<string, unknown>);
      });

      scim.patch('/Users/:id', async (request, reply) => {
        const { id } = request.params as { id: string };
        const operations = patchOperations(request.body, 'user');
        const base = baseUrlOf(request);
        const user = await inTenant(request, async (tx, principal) => {
          const current = await lockedUser(tx, principal, id);
          const before = presentScimUser(current, base);
          const after = followingLanguage(before, patched(before as unknown as Record<string, unknown>, operations));
          if (String(after.id) !== before.id) throw new ScimError(400, 'id is immutable.', 'mutability');
          const write = scimUserWrite(after);
          const passwordHash = await passwordHashOf(services, write, principal.tenantId);
          await saveUser(tx, services, request, principal, write, current, passwordHash);
          return requireUser(tx, id);
        });
        const query = request.query as Record<string, unknown>;
        if (query.attributes === undefined && request.headers.prefer === 'return=minimal') return reply.code(204).send();
        return projectAttributes(presentScimUser(user, base), query);
      });

      /** Group writes change departments: the token's minter must hold `departments.manage`. */
      const requireDepartmentsManage = (principal: ScimPrincipal) => {
        if (!principal.permissions.has('departments.manage')) {
          throw new ScimError(403, 'Writing groups needs the permission "departments.manage" of the administrator who minted this token.');
        }
      };
      /** The names a list of attributes gives, lower case, without the Group schema's URN before them. */
      const attributeNames = (list: string) =>
        list
          .toLowerCase()
          .split(',')
          .map((name) => name.trim().replace(`${GROUP_SCHEMA.toLowerCase()}:`, ''));
      const withMembers = (query: Record<string, unknown>) =>
        !(typeof query.excludedAttributes === 'string' && attributeNames(query.excludedAttributes).includes('members')) &&
        !(typeof query.attributes === 'string' && !attributeNames(query.attributes).some((name) => name.startsWith('members')));
      const groupCaller = (principal: ScimPrincipal) => ({ ...callerOf(principal), tenantId: principal.tenantId });
      const groupSource = (request: FastifyRequest, principal: ScimPrincipal) => sourceOf(request, principal);

      scim.get('/Groups', async (request) => {
        const query = request.query as Record<string, unknown>;
        const where = parseFilter(query.filter, GROUP_ATTRIBUTES);
        const { startIndex, count: pageSize } = pageOf(query);
        const members = withMembers(query);
        const { rows, total, memberships } = await inTenant(request, async (tx) => {
          const page = await listGroups(tx, where, startIndex - 1, pageSize);
          return { total: page.total, ...(members ? await groupsWithMembers(tx, page.rows) : { rows: page.rows, memberships: null }) };
        });
        const base = baseUrlOf(request);
        return listResponse(
          rows.map((row) => projectAttributes(presentGroup(row, memberships ? (memberships.get(row.id) ?? []) : undefined, base), query)),
          total,
          startIndex,
        );
      });

      scim.get('/Groups/:id', async (request) => {
        const { id } = request.params as { id: string };
        const query = request.query as Record<string, unknown>;
        const members = withMembers(query);
        const { row, memberships } = await inTenant(request, async (tx) => {
          const group = await requireGroup(tx, id);
          return { row: group, memberships: members ? await membersOf(tx, [group.id]) : null };
        });
        return projectAttributes(presentGroup(row, memberships ? (memberships.get(row.id) ?? []) : undefined, baseUrlOf(request)), query);
      });

      /** Saves the group and answers it as stored. */
      const storeGroup = async (request: FastifyRequest, tx: Tx, principal: ScimPrincipal, write: GroupWrite, current: DepartmentRow | null) => {
        requireDepartmentsManage(principal);
        const { id, changed } = await saveGroup(tx, groupCaller(principal), write, current);
        // As `saveUser`, once every wait of the write is over (the group's row, its members' rows): a token ended since
        // its look-up adds no member (whom a department may give entity rights) and renames nothing, nor does one whose
        // minter lost departments.manage meanwhile (403, as before the write); the throw rolls back.
        const permissions = await stillAuthenticates(tx, principal);
        if (!permissions) throw tokenRequired();
        requireDepartmentsManage({ ...principal, permissions });
        const stored = await requireGroup(tx, String(id));
        // The attributes too: a write drops the values of fields no longer attached, a change the trail must hold.
        const recorded = (row: DepartmentRow) => ({ name: row.name, external_id: row.externalId, attributes: row.attributes });
        const changes = changesBetween(current ? recorded(current) : null, recorded(stored));
        // A write that leaves the group as it was (an identity provider's periodic PUT) records nothing, as in the API.
        if (!current || changed) {
          await audit(tx, groupSource(request, principal), {
            action: current ? 'department.updated' : 'department.created',
            target: { type: 'department', id, label: stored.name },
            changes,
            details: { member_ids: write.memberIds },
          });
        }
        return presentGroup(stored, (await membersOf(tx, [id])).get(id) ?? [], baseUrlOf(request));
      };

      scim.post('/Groups', async (request, reply) => {
        const write = groupWrite(bodyObject(request.body));
        const body = await inTenant(request, async (tx, principal) => {
          await lockGrants(tx, principal);
          return storeGroup(request, tx, principal, write, null);
        });
        return reply
          .code(201)
          .header('location', body.meta.location)
          .send(projectAttributes(body, request.query as Record<string, unknown>));
      });

      scim.put('/Groups/:id', async (request) => {
        const { id } = request.params as { id: string };
        const resource = bodyObject(request.body);
        refuseOtherId(resource, id);
        const write = groupWrite(resource);
        const body = await inTenant(request, async (tx, principal) => {
          await lockGrants(tx, principal);
          return storeGroup(request, tx, principal, write, await lockedGroup(tx, id));
        });
        return projectAttributes(body, request.query as Record<string, unknown>);
      });

      scim.patch('/Groups/:id', async (request, reply) => {
        const { id } = request.params as { id: string };
        const operations = patchOperations(request.body, 'group');
        const body = await inTenant(request, async (tx, principal) => {
          await lockGrants(tx, principal);
          const current = await lockedGroup(tx, id);
          const before = presentGroup(current, (await membersOf(tx, [current.id])).get(current.id) ?? [], baseUrlOf(request));
          const after = followingLanguage(before, patched(before as unknown as Record<string, unknown>, operations));
          if (String(after.id) !== before.id) throw new ScimError(400, 'id is immutable.', 'mutability');
          return storeGroup(request, tx, principal, groupWrite(after), current);
        });
        const query = request.query as Record<string, unknown>;
        if (query.attributes === undefined && request.headers.prefer === 'return=minimal') return reply.code(204).send();
        return projectAttributes(body, query);
      });

      scim.delete('/Groups/:id', async (request, reply) => {
        const { id } = request.params as { id: string };
        await inTenant(request, async (tx, principal) => {
          requireDepartmentsManage(principal);
          const current = await lockedGroup(tx, id, 'update');
          const caller = { ...groupCaller(principal), tokenId: 0, passwordChangeRequired: false, userLabel: principal.tokenName, secrets: services.secrets };
          const refusal = namedByEntityPermissionsRefusal(await entityPermissionsNaming(tx, caller, current.id, NAMED_ENTITIES_SHOWN));
          if (refusal) throw new ScimError(409, refusal.message);
          // As `storeGroup`: a token ended while the delete waited for the group deletes nothing (nor one that lost
          // departments.manage meanwhile).
          const permissions = await stillAuthenticates(tx, principal);
          if (!permissions) throw tokenRequired();
          requireDepartmentsManage({ ...principal, permissions });
          await deleteDepartment(tx, current.id);
          await audit(tx, groupSource(request, principal), {
            action: 'department.deleted',
            target: { type: 'department', id: current.id, label: current.name },
          });
        });
        return reply.code(204).send();
      });

      scim.delete('/Users/:id', async (request, reply) => {
        const { id } = request.params as { id: string };
        await inTenant(request, async (tx, principal) => {
          const current = await lockedUser(tx, principal, id);
          await requireAdministrableUser(tx, callerOf(principal), current.id);
          // As `saveUser`: a token ended while the delete waited for the user deletes nothing.
          if (!(await stillAuthenticates(tx, principal))) throw tokenRequired();
          if (!(await softDeleteUser(tx, current.id))) throw scimNotFound('The user', id);
          await cutOff(tx, current.id);
          await audit(tx, sourceOf(request, principal), { action: 'user.deleted', target: { type: 'user', id: current.id, label: userLabel(current) } });
        });
        return reply.code(204).send();
      });
    },
    { prefix: SCIM_PREFIX },
  );
}
