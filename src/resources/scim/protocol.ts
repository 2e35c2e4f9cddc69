/**
 * The SCIM 2.0 protocol's fixed parts (RFC 7643, RFC 7644) as Atrium serves them: schema
 * URNs, the error document (RFC 7644 §3.12) and the list response.
 */
export const SCIM_MEDIA_TYPE = 'application/scim+json';

export const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const ENTERPRISE_USER_SCHEMA = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
export const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';
export const LIST_RESPONSE_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const PATCH_OP_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
export const ERROR_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:Error';
export const SERVICE_PROVIDER_CONFIG_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig';
export const RESOURCE_TYPE_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:ResourceType';
export const SCHEMA_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Schema';

/** The `scimType` values of RFC 7644 §3.12 that Atrium answers. */
export type ScimType = 'invalidFilter' | 'tooMany' | 'uniqueness' | 'mutability' | 'invalidSyntax' | 'invalidPath' | 'noTarget' | 'invalidValue';

/** A refusal of a SCIM request, answered as an RFC 7644 §3.12 error document. */
export class ScimError extends Error {
  readonly status: number;
  readonly scimType: ScimType | undefined;
  readonly headers: Record<string, string>;
  constructor(status: number, detail: string, scimType?: ScimType, headers: Record<string, string> = {}) {
    super(detail);
    this.status = status;
    this.scimType = scimType;
    this.headers = headers;
  }
}

/** The error document of RFC 7644 §3.12: `status` is a string there. */
export function errorDocument(status: number, detail: string, scimType?: ScimType) {
  return { schemas: [ERROR_SCHEMA], status: String(status), ...(scimType ? { scimType } : {}), detail };
}

export const invalidValue = (detail: string) => new ScimError(400, detail, 'invalidValue');
export const invalidSyntax = (detail: string) => new ScimError(400, detail, 'invalidSyntax');
export const invalidFilter = (detail: string) => new ScimError(400, detail, 'invalidFilter');
export const scimNotFound = (what: string, id: string) => new ScimError(404, `${what} ${JSON.stringify(id)} does not exist.`);

/**
 * Whether `value` is a SCIM id that can name a record: Atrium's ids are decimal text, at most
 * 2^53 − 1 (a larger one would be read as another number); anything else names none.
 */
export const isRecordId = (value: string) => /^[1-9]\d{0,15}$/.test(value) && Number(value) <= Number.MAX_SAFE_INTEGER;

/** The largest page: `count` above it is cut to it (RFC 7644 §3.4.2.4 lets the service provider choose). */
export const MAX_PAGE = 200;

/** `startIndex` (1-based, below 1 taken as 1) and `count` (negative taken as 0, above MAX_PAGE cut) of a list request. */
export function pageOf(query: Record<string, unknown>): { startIndex: number; count: number } {
  const number = (value: unknown, name: string): number | undefined => {
    if (value === undefined || value === '') return undefined;
    // The spec's range (ScimStartIndex, ScimCount): nine digits either side of 0.
    if (typeof value !== 'string' || !/^-?\d{1,9}$/.test(value)) throw invalidValue(`${name} must be an integer from -999999999 to 999999999.`);
    return Number(value);
  };
  const startIndex = Math.max(1, number(query.startIndex, 'startIndex') ?? 1);
  const count = Math.min(MAX_PAGE, Math.max(0, number(query.count, 'count') ?? MAX_PAGE));
  return { startIndex, count };
}

/** A list response (RFC 7644 §3.4.2). */
export function listResponse<T>(resources: T[], totalResults: number, startIndex: number) {
  return { schemas: [LIST_RESPONSE_SCHEMA], totalResults, startIndex, itemsPerPage: resources.length, Resources: resources };
}

/**
 * Booleans as identity providers send them: JSON booleans, or the strings "true" and
 * "false" in any case (Entra ID sends "False"). Anything else is refused.
 */
export function scimBoolean(value: unknown, attribute: string): boolean {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string') {
    const lower = value.trim().toLowerCase();
    if (lower === 'true') return true;
    if (lower === 'false') return false;
  }
  throw invalidValue(`${attribute} must be a boolean.`);
}

/**
 * `attributes` / `excludedAttributes` (RFC 7644 §3.4.2.5) applied to a resource:
 * top-level names and `parent.child` sub-attributes (an extension's as `urn:…:child`),
 * in either list, compared case-insensitively. `id`,
 * `schemas` and `meta.resourceType` are always returned.
 */
export function projectAttributes(resource: Record<string, unknown>, query: Record<string, unknown>): Record<string, unknown> {
  // A name qualified by the resource's own core schema is that attribute; another resource's names none.
  const core = [USER_SCHEMA, GROUP_SCHEMA].find((schema) => Array.isArray(resource.schemas) && resource.schemas.includes(schema));
  const qualified = core === undefined ? undefined : `${core.toLowerCase()}:`;
  const list = (value: unknown) =>
    typeof value === 'string' && value.trim() !== ''
      ? value
          .split(',')
          .map((name) => name.trim().toLowerCase())
          .map((name) => (qualified !== undefined && name.startsWith(qualified) ? name.slice(qualified.length) : name))
      : null;
  const wanted = list(query.attributes);
  const excluded = list(query.excludedAttributes);
  if (!wanted && !excluded) return resource;
  // The sub-attributes `names` lists of the attribute `name` (`name.child`, an extension's `name:child`).
  const childrenOf = (names: string[], name: string) =>
    names.filter((n) => n.startsWith(`${name}.`) || n.startsWith(`${name}:`)).map((n) => n.slice(name.length + 1));
  const out: Record<string, unknown> = {};
  // A complex attribute left with no sub-attribute is left out, as one without a value is (RFC 7643 §2.5); so is
  // a multi-valued one whose every value was left so.
  const keep = (key: string, value: unknown) => {
    const empty = (item: unknown) => item !== null && typeof item === 'object' && !Array.isArray(item) && Object.keys(item).length === 0;
    if (!Array.isArray(value)) {
      if (!empty(value)) out[key] = value;
      return;
    }
    const kept = value.filter((item) => !empty(item));
    if (kept.length > 0 || value.length === 0) out[key] = kept;
  };
  for (const [key, value] of Object.entries(resource)) {
    const name = key.toLowerCase();
    if (name === 'id' || name === 'schemas') {
      out[key] = value;
      continue;
    }
    if (wanted) {
      if (wanted.includes(name)) out[key] = value;
      else {
        const children = childrenOf(wanted, name);
        if (children.length > 0 && value && typeof value === 'object' && !Array.isArray(value)) {
          keep(key, Object.fromEntries(Object.entries(value).filter(([child]) => children.includes(child.toLowerCase()))));
        } else if (children.length > 0 && Array.isArray(value)) {
          keep(
            key,
            value.map((item: Record<string, unknown>) => Object.fromEntries(Object.entries(item).filter(([child]) => children.includes(child.toLowerCase())))),
          );
        }
      }
    } else if (!excluded!.includes(name)) {
      const children = childrenOf(excluded!, name);
      const without = (item: unknown) =>
        item && typeof item === 'object' ? Object.fromEntries(Object.entries(item).filter(([child]) => !children.includes(child.toLowerCase()))) : item;
      if (children.length === 0 || !value || typeof value !== 'object') out[key] = value;
      else keep(key, Array.isArray(value) ? value.map(without) : without(value));
    }
    if (name === 'meta') out[key] = { resourceType: (value as { resourceType?: string }).resourceType, ...(out[key] as object | undefined) };
  }
  // `schemas` names the extensions the answer holds (RFC 7643 §3): one projected away is not named.
  if (Array.isArray(out.schemas))
    out.schemas = out.schemas.filter((urn) => urn === USER_SCHEMA || urn === GROUP_SCHEMA || (typeof urn === 'string' && urn in out));
  return out;
}
