/**
 * SCIM discovery (RFC 7644 §4): what this service provider supports
 * (`ServiceProviderConfig`), its resource types and the schemas of their attributes, as
 * Atrium maps them (docs/scim.md#attribute-mapping).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  ENTERPRISE_USER_SCHEMA,
  GROUP_SCHEMA,
  listResponse,
  MAX_PAGE,
  RESOURCE_TYPE_SCHEMA,
  SCHEMA_SCHEMA,
  SERVICE_PROVIDER_CONFIG_SCHEMA,
  USER_SCHEMA,
  ScimError,
  scimNotFound,
} from './protocol.ts';

interface AttributeSpec {
  name: string;
  type: 'string' | 'boolean' | 'complex' | 'dateTime' | 'reference';
  multiValued?: boolean;
  required?: boolean;
  caseExact?: boolean;
  mutability?: 'readOnly' | 'readWrite' | 'immutable' | 'writeOnly';
  returned?: 'always' | 'never' | 'default' | 'request';
  uniqueness?: 'none' | 'server' | 'global';
  canonicalValues?: string[];
  referenceTypes?: string[];
  description: string;
  subAttributes?: AttributeSpec[];
}

/** An attribute definition with RFC 7643 §7's defaults filled in. */
const attribute = (spec: AttributeSpec): Record<string, unknown> => ({
  name: spec.name,
  type: spec.type,
  multiValued: spec.multiValued ?? false,
  description: spec.description,
  required: spec.required ?? false,
  caseExact: spec.caseExact ?? false,
  mutability: spec.mutability ?? 'readWrite',
  returned: spec.returned ?? 'default',
  uniqueness: spec.uniqueness ?? 'none',
  ...(spec.canonicalValues ? { canonicalValues: spec.canonicalValues } : {}),
  ...(spec.referenceTypes ? { referenceTypes: spec.referenceTypes } : {}),
  ...(spec.subAttributes ? { subAttributes: spec.subAttributes.map(attribute) } : {}),
});

const typedValue = (what: string, extra: AttributeSpec[] = []): AttributeSpec[] => [
  { name: 'value', type: 'string', description: `The ${what}.` },
  { name: 'type', type: 'string', description: 'Always "work": Atrium keeps one, the primary or work one.' },
  { name: 'primary', type: 'boolean', description: 'Always true.' },
  ...extra,
];

const USER_ATTRIBUTES: AttributeSpec[] = [
  { name: 'userName', type: 'string', required: true, uniqueness: 'server', description: "Atrium's username (unique in the tenant, deleted users included)." },
  {
    name: 'name',
    type: 'complex',
    required: true,
    description: 'First and last name: both required, as every user SCIM writes is a personal account.',
    subAttributes: [
      { name: 'givenName', type: 'string', required: true, description: 'first_name' },
      { name: 'familyName', type: 'string', required: true, description: 'last_name' },
      { name: 'formatted', type: 'string', mutability: 'readOnly', description: 'First and last name.' },
    ],
  },
  { name: 'displayName', type: 'string', mutability: 'readOnly', description: 'First and last name, or the username.' },
  { name: 'active', type: 'boolean', description: 'active; false ends every session, login token and push subscription at once.' },
  { name: 'password', type: 'string', mutability: 'writeOnly', returned: 'never', description: "Set under Atrium's password rules; never returned." },
  {
    name: 'emails',
    type: 'complex',
    multiValued: true,
    description: 'email: the primary (else work, else first) address.',
    subAttributes: typedValue('e-mail address'),
  },
  {
    name: 'phoneNumbers',
    type: 'complex',
    multiValued: true,
    description: 'phone: the primary (else work, else first) number.',
    subAttributes: typedValue('phone number'),
  },
  {
    name: 'addresses',
    type: 'complex',
    multiValued: true,
    description: 'street, zipcode and city: the primary (else work, else first) address.',
    subAttributes: [
      { name: 'streetAddress', type: 'string', description: 'street' },
      { name: 'postalCode', type: 'string', description: 'zipcode' },
      { name: 'locality', type: 'string', description: 'city' },
      { name: 'type', type: 'string', description: 'Always "work".' },
      { name: 'primary', type: 'boolean', description: 'Always true.' },
    ],
  },
  {
    name: 'preferredLanguage',
    type: 'string',
    description: "lang_id: the tenant's language with this tag, else one of the same primary language (de-CH → de-DE).",
  },
  { name: 'locale', type: 'string', description: 'lang_id, when preferredLanguage is not sent.' },
];

const GROUP_ATTRIBUTES: AttributeSpec[] = [
  { name: 'displayName', type: 'string', required: true, uniqueness: 'server', description: "The department's name (no look-alike of another's)." },
  {
    name: 'members',
    type: 'complex',
    multiValued: true,
    description: "The department's members among the users SCIM sees; a PUT replaces them (none when it has no members).",
    subAttributes: [
      { name: 'value', type: 'string', mutability: 'immutable', description: 'The user id.' },
      { name: 'display', type: 'string', mutability: 'readOnly', description: 'The username.' },
      { name: '$ref', type: 'reference', referenceTypes: ['User'], mutability: 'immutable', description: 'The user resource.' },
      {
        name: 'type',
        type: 'string',
        canonicalValues: ['User'],
        mutability: 'immutable',
        description: 'Always "User": a member said to be a Group is refused (groups do not nest).',
      },
    ],
  },
];

const ENTERPRISE_ATTRIBUTES: AttributeSpec[] = [{ name: 'employeeNumber', type: 'string', description: 'staff_number' }];

/** An attribute's name as the schema spells it, and its sub-attributes', by lower-case name (`ATTRIBUTE_NAMES`). */
export interface AttributeName {
  name: string;
  sub: AttributeNames;
}
export type AttributeNames = ReadonlyMap<string, AttributeName>;

const namesOf = (specs: readonly { name: string; subAttributes?: readonly { name: string }[] }[]): AttributeNames =>
  new Map(specs.map((spec) => [spec.name.toLowerCase(), { name: spec.name, sub: namesOf(spec.subAttributes ?? []) }]));

/** The attributes every resource has (RFC 7643 §3.1). */
const COMMON_ATTRIBUTES = [
  { name: 'schemas' },
  { name: 'id' },
  { name: 'externalId' },
  { name: 'meta', subAttributes: [{ name: 'resourceType' }, { name: 'created' }, { name: 'lastModified' }, { name: 'location' }] },
];

/**
 * The names of each resource's attributes as its schema spells them, by lower-case name:
 * attribute names are case-insensitive (RFC 7643 §2.1), so a PATCH path or value key may
 * spell them otherwise. The User's enterprise extension is an attribute named by its URN.
 */
export const ATTRIBUTE_NAMES: { user: AttributeNames; group: AttributeNames } = {
  user: namesOf([...COMMON_ATTRIBUTES, ...USER_ATTRIBUTES, { name: ENTERPRISE_USER_SCHEMA, subAttributes: ENTERPRISE_ATTRIBUTES }]),
  group: namesOf([...COMMON_ATTRIBUTES, ...GROUP_ATTRIBUTES]),
};

const meta = (request: FastifyRequest, baseUrl: (request: FastifyRequest) => string, resourceType: string, id: string) => ({
  resourceType,
  location: `${baseUrl(request)}/${resourceType === 'Schema' ? 'Schemas' : 'ResourceTypes'}/${id}`,
});

function schemas(request: FastifyRequest, baseUrl: (request: FastifyRequest) => string) {
  return [
    {
      schemas: [SCHEMA_SCHEMA],
      id: USER_SCHEMA,
      name: 'User',
      description: 'An Atrium user (personal accounts only).',
      attributes: USER_ATTRIBUTES.map(attribute),
      meta: meta(request, baseUrl, 'Schema', USER_SCHEMA),
    },
    {
      schemas: [SCHEMA_SCHEMA],
      id: GROUP_SCHEMA,
      name: 'Group',
      description: 'An Atrium department.',
      attributes: GROUP_ATTRIBUTES.map(attribute),
      meta: meta(request, baseUrl, 'Schema', GROUP_SCHEMA),
    },
    {
      schemas: [SCHEMA_SCHEMA],
      id: ENTERPRISE_USER_SCHEMA,
      name: 'EnterpriseUser',
      description: 'Enterprise User extension.',
      attributes: ENTERPRISE_ATTRIBUTES.map(attribute),
      meta: meta(request, baseUrl, 'Schema', ENTERPRISE_USER_SCHEMA),
    },
  ];
}

function resourceTypes(request: FastifyRequest, baseUrl: (request: FastifyRequest) => string) {
  return [
    {
      schemas: [RESOURCE_TYPE_SCHEMA],
      id: 'User',
      name: 'User',
      endpoint: '/Users',
      description: 'Atrium users',
      schema: USER_SCHEMA,
      schemaExtensions: [{ schema: ENTERPRISE_USER_SCHEMA, required: false }],
      meta: meta(request, baseUrl, 'ResourceType', 'User'),
    },
    {
      schemas: [RESOURCE_TYPE_SCHEMA],
      id: 'Group',
      name: 'Group',
      endpoint: '/Groups',
      description: 'Atrium departments',
      schema: GROUP_SCHEMA,
      meta: meta(request, baseUrl, 'ResourceType', 'Group'),
    },
  ];
}

/**
 * RFC 7644 §4: the discovery endpoints ignore the list parameters (paging, sorting), and
 * refuse a filter, so that a client cannot take their whole answer for what matches it.
 */
function refuseFilter(request: FastifyRequest): void {
  if ((request.query as Record<string, unknown>).filter !== undefined) {
    throw new ScimError(403, 'The discovery endpoints take no filter: their answers are never filtered.');
  }
}

/** The discovery endpoints, on the SCIM plugin. */
export function discoveryRoutes(scim: FastifyInstance, baseUrl: (request: FastifyRequest) => string): void {
  const discovery = { preHandler: async (request: FastifyRequest) => refuseFilter(request) };
  scim.get('/ServiceProviderConfig', discovery, async (request) => ({
    schemas: [SERVICE_PROVIDER_CONFIG_SCHEMA],
    patch: { supported: true },
    bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
    filter: { supported: true, maxResults: MAX_PAGE },
    changePassword: { supported: true },
    sort: { supported: false },
    etag: { supported: false },
    authenticationSchemes: [
      { type: 'oauthbearertoken', name: 'SCIM token', description: 'A SCIM token minted under POST /api/administration/scim-tokens.', primary: true },
    ],
    meta: { resourceType: 'ServiceProviderConfig', location: `${baseUrl(request)}/ServiceProviderConfig` },
  }));
  scim.get('/ResourceTypes', discovery, async (request) => {
    const all = resourceTypes(request, baseUrl);
    return listResponse(all, all.length, 1);
  });
  scim.get('/ResourceTypes/:id', discovery, async (request) => {
    const { id } = request.params as { id: string };
    const found = resourceTypes(request, baseUrl).find((type) => type.id === id);
    if (!found) throw scimNotFound('The resource type', id);
    return found;
  });
  scim.get('/Schemas', discovery, async (request) => {
    const all = schemas(request, baseUrl);
    return listResponse(all, all.length, 1);
  });
  scim.get('/Schemas/:id', discovery, async (request) => {
    const { id } = request.params as { id: string };
    const found = schemas(request, baseUrl).find((schema) => schema.id === id);
    if (!found) throw scimNotFound('The schema', id);
    return found;
  });
}
