/**
 * Client input never produces a 5xx, across every operation of the spec.
 *
 * The cases come from the spec itself (generated/openapi.json, the operation map of
 * generated/operations.ts), not from a hand list. For each operation a request the spec
 * accepts is derived from its schemas: ids point at records created first (by the name
 * of the path parameter or of the `<name>_id` field), and BASE_BODIES adds what a schema
 * cannot say (credentials, rules across fields). Then one place at a time is made
 * hostile: each path parameter, each query parameter (deepObject `filter[...]` keys,
 * `selects`, `relations`, `limit`), each header parameter, each key of a JSON or
 * multipart body (present, absent or extra), the body as a whole, its media type, and
 * the credentials; one run of each operation goes without a token. Every answer must
 * have a status below 500, be an `application/problem+json` document whenever it is a
 * failure, and honour the spec (the check `api.call` makes).
 *
 * All cases are generated; a deterministic sample is sent (the seed is fixed): per
 * operation the run without a token, the derived request, every hostile place and every
 * kind of hostility, then a draw up to CASES_PER_OPERATION; every distinct input is sent
 * by at least one operation. `NO5XX_CASES=all` (or another number) and `NO5XX_SEED`
 * search wider. A failure names the operation, the place and the input.
 */
import { createECDH } from 'node:crypto';
import qs from 'qs';
import t, { type Test } from 'tap';
import { operations, type OperationId } from '../../../generated/operations.ts';
import { DEMO_PASSWORD, startTestApi, type CallOptions } from '../../helpers/atrium.ts';
import { contractViolations, spec } from '../../helpers/contract.ts';
import { multipart, PNG_1X1, GIF_1X1, type FilePart } from '../../helpers/multipart.ts';
import { fieldCodes, fieldMessages } from '../../../src/platform/http/problem.ts';
import { fieldErrors } from '../../../src/platform/http/validation.ts';
import { startReceiver } from '../../helpers/receiver.ts';
import { eventually } from '../../helpers/eventually.ts';

const CASES_PER_OPERATION = process.env.NO5XX_CASES === 'all' ? Infinity : Number(process.env.NO5XX_CASES ?? 30);
const SEED = Number(process.env.NO5XX_SEED ?? 20240517);

// Some 3,000 requests, each answer checked against the spec: close to two minutes on a
// two-core machine running the suite, and up to five and a half when other work shares it
// (seen at load average 17). The limit only guards against a hang.
t.setTimeout(600_000);

// The sign-in limit would answer every later sign-in with 429 before its input is read.
const api = await startTestApi(t, { role: 'all', webhookAllowedCidrs: ['127.0.0.0/8'], pushAllowedCidrs: ['127.0.0.0/8'], loginMaxFailures: 1_000_000 });
const app = api.atrium.app!;
const receiver = await startReceiver(t);

// ---------------------------------------------------------------------------------------
// The spec, as data
// ---------------------------------------------------------------------------------------

type Schema = Record<string, any>;
const document = spec as unknown as Schema;

/** Follows `$ref`s (`#/components/<kind>/<name>`) to the object they name. */
function resolve<T = Schema>(node: any): T {
  let current = node;
  for (let hops = 0; current?.$ref && hops < 20; hops++) {
    const [, , kind, name] = (current.$ref as string).split('/');
    current = document.components[kind!][name!];
  }
  return current as T;
}

/** A schema with `$ref`s followed and `allOf` merged (properties, required, types). */
function effective(node: any): Schema {
  const schema = { ...resolve(node) };
  for (const part of (schema.allOf ?? []).map((p: any) => effective(p))) {
    if (part.type && !schema.type) schema.type = part.type;
    if (part.properties) schema.properties = { ...part.properties, ...schema.properties };
    if (part.required) schema.required = [...(schema.required ?? []), ...part.required];
    for (const key of ['format', 'pattern', 'enum', 'maxLength', 'minLength', 'maxItems', 'minimum', 'maximum', 'items', 'additionalProperties']) {
      if (part[key] !== undefined && schema[key] === undefined) schema[key] = part[key];
    }
  }
  return schema;
}

/** The JSON types a schema admits (its branches' types for oneOf/anyOf). */
function typesOf(node: any): Set<string> {
  const schema = effective(node);
  const types = new Set<string>();
  if (schema.const !== undefined) types.add(typeof schema.const === 'string' ? 'string' : typeof schema.const);
  for (const type of [schema.type ?? []].flat()) types.add(type);
  for (const branch of [...(schema.oneOf ?? []), ...(schema.anyOf ?? [])]) for (const type of typesOf(branch)) types.add(type);
  if (types.size === 0 && schema.properties) types.add('object');
  return types;
}

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  style?: string;
  schema: Schema;
}

interface OperationSpec {
  id: OperationId;
  method: string;
  path: string;
  secured: boolean;
  parameters: Parameter[];
  /** Media type → schema of the request body, when the operation takes one. */
  body: Record<string, Schema> | null;
  /** Schema of the 200/201 JSON answer (for names of fields and relations). */
  answer: Schema | null;
}

function operationSpec(id: OperationId): OperationSpec {
  const meta = operations[id];
  const item = document.paths[meta.path];
  const operation = item[meta.method.toLowerCase()];
  const parameters = [...(item.parameters ?? []), ...(operation.parameters ?? [])].map((p: any) => resolve<Parameter>(p));
  const requestBody = operation.requestBody ? resolve(operation.requestBody) : null;
  const body = requestBody
    ? Object.fromEntries(Object.entries(requestBody.content as Record<string, { schema: Schema }>).map(([type, content]) => [type, content.schema]))
    : null;
  const success = resolve(operation.responses['200'] ?? operation.responses['201']);
  const answer = success?.content?.['application/json']?.schema ?? null;
  return { id, method: meta.method, path: meta.path, secured: meta.secured, parameters, body, answer };
}

// ---------------------------------------------------------------------------------------
// Sending, and judging the answer
// ---------------------------------------------------------------------------------------

interface Answer {
  status: number;
  contentType: string;
  body: unknown;
  violations: string[];
}

/** Sends through `api.call` (which checks the answer against the spec) and keeps its verdict. */
async function call(operationId: OperationId, options: CallOptions): Promise<Answer> {
  let violations: string[] = [];
  const recorder = { strictSame: (found: string[]) => (violations = found) } as unknown as Test;
  const answer = await api.call(recorder, operationId, options);
  return { status: answer.status, contentType: String(answer.headers['content-type'] ?? ''), body: answer.body, violations };
}

interface RawRequest {
  url: string;
  headers?: Record<string, string>;
  payload?: string | Buffer;
}

/** Sends a request `api.call` cannot express (malformed URLs and bodies) and checks the answer the same way. */
async function inject(operationId: OperationId, request: RawRequest): Promise<Answer> {
  const response = await app.inject({ method: operations[operationId].method, ...request });
  const contentType = String(response.headers['content-type'] ?? '');
  let body: unknown = response.body;
  // NDJSON (the audit export) is text: only JSON and problem+json are parsed.
  if (/[/+]json\b/.test(contentType) && response.body.length > 0) {
    try {
      body = response.json();
    } catch {
      return { status: response.statusCode, contentType, body, violations: ['the answer is not valid JSON'] };
    }
  }
  return {
    status: response.statusCode,
    contentType,
    body,
    violations: contractViolations(operationId, response.statusCode, contentType, body === '' ? undefined : body),
  };
}

/** The event stream keeps its connection: take the status and headers, then hang up. */
async function openStream(request: RawRequest): Promise<Answer> {
  const response = await app.inject({ method: 'GET', ...request, payloadAsStream: true });
  const contentType = String(response.headers['content-type'] ?? '');
  if (response.statusCode < 400) {
    response.raw.res.destroy();
    // The status and media type are checked; the events are the stream tests' business.
    const violations = contractViolations('streamNotifications', response.statusCode, contentType, undefined);
    return { status: response.statusCode, contentType, body: undefined, violations: violations.filter((v) => !/declares no body|body does not match/.test(v)) };
  }
  const chunks: Buffer[] = [];
  for await (const chunk of response.stream()) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString();
  const body = /json/.test(contentType) ? JSON.parse(text) : text;
  return { status: response.statusCode, contentType, body, violations: contractViolations('streamNotifications', response.statusCode, contentType, body) };
}

/** Null when the answer is acceptable, else what is wrong with it. */
function verdict(answer: Answer): string | null {
  const detail = typeof answer.body === 'object' && answer.body !== null ? (answer.body as { detail?: string }).detail : undefined;
  if (answer.status >= 500) return `${answer.status}${detail ? ` (${detail})` : ''}`;
  if (answer.status >= 400 && !/^application\/problem\+json/.test(answer.contentType))
    return `${answer.status} as ${answer.contentType || 'no media type'}, not a problem document`;
  if (answer.violations.length > 0) return `${answer.status}: ${answer.violations.join('; ')}`;
  return null;
}

// ---------------------------------------------------------------------------------------
// Records to point at: one set in our tenant, one in another tenant
// ---------------------------------------------------------------------------------------

/**
 * Existing records by the name the spec gives them: a path parameter (`menuItem`), or a
 * body field without its `_id`/`_ids` (`role_id` → `role`). `<operationId>.<parameter>`
 * is a record of that operation's own, where its cases change what others rely on.
 */
type Fixtures = Record<string, string | number>;

const tenant = await api.createTenant('hostile');
const other = await api.createTenant('hostile-other');

/** A valid P-256 public key (deterministic) and auth secret, as push subscriptions carry. */
const ecdh = createECDH('prime256v1');
ecdh.setPrivateKey(Buffer.alloc(32, 7));
const pushKeys = { p256dh: ecdh.getPublicKey().toString('base64url'), auth: Buffer.alloc(16, 9).toString('base64url') };

const FIELD_TYPES = ['text', 'number', 'date', 'boolean', 'select'] as const;
const ATTRIBUTE_TYPES = ['string', 'integer', 'number', 'boolean', 'date'] as const;
const fieldsInput = FIELD_TYPES.map((type) => ({ name: `Fuzz ${type}`, field_type: type, ...(type === 'select' ? { options: ['a', 'b'] } : {}) }));

async function createFixtures(tenantId: number, adminUserId: number, token: string): Promise<Fixtures> {
  let serial = 0;
  const ok = async (operationId: OperationId, options: CallOptions, status = 201) => {
    const answer = await call(operationId, { token, ...options });
    if (answer.status !== status || answer.violations.length > 0) {
      throw new Error(`fixture ${operationId}: ${answer.status} ${JSON.stringify(answer.body)} ${answer.violations.join('; ')}`);
    }
    return answer.body as any;
  };
  const make = {
    user: async (values: Record<string, unknown> = {}) => {
      const username = `victim${tenantId}x${++serial}`;
      const email = `${username}@example.com`;
      return { id: (await api.createUser(tenantId, { username, values: { email, ...values } })).id, email };
    },
    role: async () => (await ok('createRole', { body: { name: `Fuzz role ${++serial}`, permissions: [] } })).id,
    attributeSet: async () =>
      (
        await ok('createAttributeSet', {
          body: { name: `Fuzz attributes ${++serial}`, fields: ATTRIBUTE_TYPES.map((type) => ({ key: `fuzz_${type}`, type })) },
        })
      ).id,
    department: async (attributeSet: number) =>
      (await ok('createDepartment', { body: { name: `Fuzz department ${++serial}`, attribute_set_ids: [attributeSet] } })).id,
    menuItem: async () =>
      (await ok('createMenuItem', { body: { icon_id: 1, menu_identifier: 'fuzz', type: 'link', title: 'Fuzz', link: 'https://example.com/' } })).id,
    automation: async () => (await ok('createAutomation', { body: { name: `Fuzz hook ${++serial}`, config: { url: receiver.url('/fuzz'), headers: {} } } })).id,
    source: async (field: number, variable: string) =>
      (await ok('createDefaultValueSource', { body: { type: 'systemVariable', form_field_id: field, config: { variable } } })).id,
  };
  const { id: victim, email } = await make.user();
  const attributeSet = await make.attributeSet();
  const form = await ok('createForm', { body: { title: 'Fuzz form', form_type: 'survey', fields: fieldsInput } });
  const taskTemplate = await ok('createTaskTemplate', { body: { title: 'Fuzz template', fields: fieldsInput } });
  const taskExecution = await ok('createTaskExecution', { body: { task_template_id: taskTemplate.id, user_id: victim } });
  const submission = await ok('createSubmission', { body: { form_id: form.id, values: { [form.fields[0].id]: 'x' } } });
  const subscription = await ok('createPushSubscription', { body: { endpoint: receiver.url(`/push/${tenantId}`), keys: pushKeys } });
  const loginToken = await ok('createUserLoginToken', { body: { expires_in: 3600, user_id: victim } });
  await ok('createNotification', { body: { title: 'Fuzz', body: 'Fuzz', url: '/fuzz', user_ids: [adminUserId] } }, 202);
  const notifications = await eventually(
    () => ok('listNotifications', {}, 200),
    (answer) => answer.length > 0,
  );
  const settings = await ok('listNotificationSettings', {}, 200);
  const picture = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'fuzz.png', type: 'image/png' } });
  const pictured = await ok('updateUser', { params: { user: victim }, ...picture }, 200);
  const pictureUrl = new URL(pictured.profile_picture_url, 'http://atrium.invalid');
  const fields = Object.fromEntries(form.fields.map((field: { id: number; field_type: string }) => [`formField.${field.field_type}`, field.id]));
  return {
    user: victim,
    email,
    role: await make.role(),
    attributeSet,
    department: await make.department(attributeSet),
    menuItem: await make.menuItem(),
    automation: await make.automation(),
    defaultValueSource: await make.source(taskTemplate.fields[0].id, 'username'),
    form: form.id,
    // Default value sources fill fields of task templates.
    formField: taskTemplate.fields[0].id,
    ...fields,
    taskTemplate: taskTemplate.id,
    taskExecution: taskExecution.id,
    formSubmission: submission.id,
    subscription: subscription.id,
    userLoginToken: loginToken.uuid,
    token: loginToken.token,
    notification: notifications[0].id,
    notificationSetting: settings[0].id,
    // The writes above left events in the trail.
    auditEvent: (await ok('listAuditEvents', { query: { limit: 1 } }, 200))[0].id,
    p256dh: pushKeys.p256dh,
    auth: pushKeys.auth,
    // A signed picture URL: what the picture operations check.
    fileName: decodeURIComponent(pictureUrl.pathname.split('/').pop()!),
    tenant: tenantId,
    expires: pictureUrl.searchParams.get('expires')!,
    signature: pictureUrl.searchParams.get('signature')!,
    // Records that operations change for good, each its own.
    'updateUser.user': (await make.user()).id,
    'restoreUser.user': (await make.user({ deletedAt: new Date() })).id,
    'updateRole.role': await make.role(),
    'updateAttributeSet.attributeSet': await make.attributeSet(),
    'updateDepartment.department': await make.department(attributeSet),
    'updateMenuItem.menuItem': await make.menuItem(),
    'updateAutomation.automation': await make.automation(),
    'updateDefaultValueSource.defaultValueSource': await make.source(taskTemplate.fields[2].id, 'current_date'),
  };
}

const ours = await createFixtures(tenant.tenantId, tenant.adminUserId, tenant.adminToken);
const theirs = await createFixtures(other.tenantId, other.adminUserId, other.adminToken);

/** `role_id` → `role`, `task_template_ids` → `taskTemplate`: the fixture a field refers to. */
function fixtureName(field: string | undefined): string | undefined {
  if (!field) return undefined;
  const bare = field.replace(/_ids?$/, '').replace(/^compatible_with_/, '');
  return bare.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase());
}

/**
 * What the spec alone cannot tell: credentials, and rules across fields (a personal
 * account has names; a submission names its form). Merged into the derived body.
 */
const BASE_BODIES: Partial<Record<OperationId, Record<string, unknown>>> = {
  login: { tenant: tenant.slug, username: 'admin', password: DEMO_PASSWORD },
  createUser: { first_name: 'Fuzz', last_name: 'User' },
  updateUser: { first_name: 'Fuzz' },
  createSubmission: { form_id: ours.form },
  createFormField: { form_id: ours.form },
  createDefaultValueSource: { source_entity_type: 'formField', source_entity_id: ours['formField.text'] },
};

/**
 * Operations whose effects reach past their own records (sign-outs, deletions, an import
 * that may delete users, a reset): sent last, so the others still find what they need.
 */
const SWEEPING = /^(delete|logout$|markUserForLogout$|blackoutUser$|importUsersCsv$|resetNotifications$)/;

// ---------------------------------------------------------------------------------------
// A request the spec accepts
// ---------------------------------------------------------------------------------------

/** JSON text sent as is where JSON.stringify cannot write it (1e400, -0, 2^63). */
class RawJson {
  constructor(readonly text: string) {}
}

/** Serializes like JSON.stringify, but writes RawJson as its text. */
function toJson(value: unknown): string {
  if (value instanceof RawJson) return value.text;
  if (Array.isArray(value)) return `[${value.map((item) => toJson(item)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value)
      .map(([key, item]) => `${JSON.stringify(key)}:${toJson(item)}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** The text derived for plain string fields; each request gets its own (`fuzz17`), as names are unique. */
const PLAIN = 'fuzz';
let serial = 0;
function unique(value: unknown): unknown {
  const n = ++serial;
  const walk = (node: unknown): unknown => {
    if (node === PLAIN) return `${PLAIN}${n}`;
    if (Array.isArray(node)) return node.map(walk);
    if (node === null || typeof node !== 'object' || node instanceof RawJson || Buffer.isBuffer(node)) return node;
    return Object.fromEntries(Object.entries(node).map(([key, item]) => [key, walk(item)]));
  };
  return walk(value);
}

const STRING_CANDIDATES = [PLAIN, 'Fuzz', '/fuzz', '2024-05-17 10:00:00', 'X-Fuzz', '1', 'a'];

/** Values by field name where a name says more than its schema. */
const NAMED_TEXT: [RegExp, () => string][] = [
  [/(^|_)(url|link|endpoint)$/, () => receiver.url('/fuzz')],
  [/password$/, () => 'correct horse battery staple'],
];

/** Keys an object with `additionalProperties` may carry: what the fixtures define, then anything. */
function additionalKeys(schema: Schema): string[] {
  const pattern = schema.propertyNames?.pattern ? new RegExp(schema.propertyNames.pattern, 'u') : null;
  const candidates = [...FIELD_TYPES.map((type) => String(ours[`formField.${type}`])), ...ATTRIBUTE_TYPES.map((type) => `fuzz_${type}`), 'X-Fuzz', PLAIN];
  return candidates.filter((key) => !pattern || pattern.test(key)).slice(0, 5);
}

/** A value the schema accepts; `field` names the property (ids point at fixtures). */
function sample(node: any, field?: string, depth = 0): unknown {
  let schema = effective(node);
  if (schema.const !== undefined) return schema.const;
  if (schema.default !== undefined) return schema.default;
  // A scalar's example; a record's example names the demo tenant's rows, not this file's fixtures.
  const scalar = typeof schema.examples?.[0] !== 'object' || schema.examples[0] === null;
  if (schema.examples?.length && scalar && !NAMED_TEXT.some(([name]) => name.test(field ?? ''))) return schema.examples[0];
  if (Array.isArray(schema.enum)) return schema.enum.find((value: unknown) => value !== null) ?? null;
  const branch = (schema.oneOf ?? schema.anyOf)?.[0];
  if (branch && !schema.properties) {
    // A choice of shapes (a discriminated union, an id or an object): the first.
    const first = effective(branch);
    if (first.properties || first.type || first.const !== undefined || first.enum) {
      schema = { ...first, required: [...(schema.required ?? []), ...(first.required ?? [])] };
      if (!first.properties) return sample(first, field, depth);
    }
  }
  const types = [schema.type ?? []].flat().filter((type: string) => type !== 'null');
  const type = types[0] ?? (schema.properties ? 'object' : undefined);
  const fixture = ours[fixtureName(field) ?? ''];
  switch (type) {
    case 'object': {
      if (depth > 6) return {};
      // `anyOf: [{required: [a]}, {required: [b]}]`: the first alternative's keys too.
      const alternatives = (schema.anyOf ?? []).map((alternative: Schema) => resolve(alternative));
      const required = new Set<string>([...(schema.required ?? []), ...(alternatives[0]?.properties ? [] : (alternatives[0]?.required ?? []))]);
      const result: Record<string, unknown> = {};
      for (const [key, property] of Object.entries((schema.properties ?? {}) as Record<string, Schema>)) {
        if (required.has(key)) result[key] = sample(property, key, depth + 1);
      }
      return result;
    }
    case 'array': {
      const item = sample(schema.items ?? {}, field, depth + 1);
      return item === undefined ? [] : [item];
    }
    case 'integer':
    case 'number':
      return typeof fixture === 'number' ? fixture : Math.max(schema.minimum ?? 1, 1);
    case 'boolean':
      return true;
    case 'string': {
      if (typeof fixture === 'string') return fixture;
      const named = NAMED_TEXT.find(([name]) => name.test(field ?? ''));
      if (named) return named[1]();
      if (schema.format === 'date') return '2024-05-17';
      if (schema.format === 'date-time') return '2024-05-17T10:00:00Z';
      if (schema.format === 'email') return 'fuzz@example.com';
      if (schema.format === 'uuid') return '00000000-0000-4000-8000-000000000000';
      const pattern = schema.pattern ? new RegExp(schema.pattern, 'u') : null;
      const text = STRING_CANDIDATES.find((candidate) => !pattern || pattern.test(candidate)) ?? PLAIN;
      return text.padEnd(schema.minLength ?? 0, 'z');
    }
    default:
      return field ? PLAIN : {};
  }
}

// ---------------------------------------------------------------------------------------
// Hostile values
// ---------------------------------------------------------------------------------------

/** `kind` groups variants (every kind is sent for every operation); `name` is the exact input. */
interface Variant {
  kind: string;
  name: string;
  value?: unknown;
  /** Remove the key instead of setting it. */
  remove?: true;
}

const LONG = 'a'.repeat(10_240);
/** Text that does not compress (distinct 4-byte characters): `length` characters, four times the bytes. */
const incompressible = (length: number) => Array.from({ length }, (_, i) => String.fromCodePoint(0x1f300 + ((i * 37) % 0x300))).join('');
const CONTROL = 'a\u0001\u0007\b\u001b[31m\r\n\t\u007f\u0085\u2028\u202eb';
const NUMBER_TEXTS = ['1e400', '-Infinity', 'Infinity', 'NaN', '9223372036854775808', '0x10', ' 1', '1 ', '2.5', '-1', '0', '+1', '1e3', '-0', '00001'];
const DATE_TEXTS = [
  ...['2023-02-30', '0000-01-01', '99999-01-01', '2023-02-29', '1970-01-01'],
  ...['2023-02-30 00:00:00', '0000-01-01 00:00:00', '9999-12-31 23:59:59', '2023-02-30T00:00:00Z'],
];
const SPECIAL_TEXTS = [
  'constructor',
  '__proto__',
  'toString',
  '../../../../etc/passwd',
  "' or 1=1 --",
  '%00',
  '<script>alert(1)</script>',
  'javascript:alert(1)',
  'http://[::1]:1/',
  'http://169.254.169.254/latest/meta-data/',
  'file:///etc/passwd',
  'https://user:pass@127.0.0.1:1/',
  '\ufeffBOM',
  'İǅß\u0301',
];
const JSON_NUMBERS = [
  ...['1e400', '-1e400', '9223372036854775808', '18446744073709551616', '1e308', '2147483648', '9007199254740992'],
  ...['-1', '0', '-0', '2.5', '1E2', '1.0', '0.1e-400'],
];

const nested = (levels: number): unknown => {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = { a: value };
  return value;
};
const wide = (keys: number) => Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i]));

/** Hostile JSON values for a place of `schema`; `field` its key, `level` the nesting of its value. */
function jsonVariants(node: any, field: string | undefined, level: number, present: boolean, required: boolean): Variant[] {
  const schema = effective(node);
  const types = typesOf(schema);
  const variants: Variant[] = [];
  const add = (kind: string, name: string, value: unknown) => variants.push({ kind, name, value });
  if (present) variants.push({ kind: required ? 'missing-required' : 'missing', name: 'removed', remove: true });
  add('wrong-type', 'null', null);
  if (!types.has('string')) add('wrong-type', 'a string', 'fuzz');
  if (!types.has('integer') && !types.has('number')) add('wrong-type', 'a number', 1);
  if (!types.has('boolean')) add('wrong-type', 'a boolean', true);
  if (!types.has('object')) add('wrong-type', 'an object', { a: 1 });
  if (!types.has('array')) add('wrong-type', 'an array', [sample(schema, field)]);
  if (types.has('string') || types.size === 0) {
    const max = schema.maxLength as number | undefined;
    add('empty', 'empty string', '');
    add('empty', 'blank string', ' \t ');
    add('long', '10 kB string', LONG);
    add('long', `incompressible ${max ?? 2600} characters`, incompressible(max ?? 2600));
    add('control', 'NUL character', 'a\u0000b');
    add('control', 'control characters', CONTROL);
    add('surrogate', 'lone high surrogate', 'a\ud800b');
    add('surrogate', 'reversed surrogates', '\udc00\ud800');
    for (const text of NUMBER_TEXTS) add('number-text', `text ${JSON.stringify(text)}`, text);
    for (const text of DATE_TEXTS) add('date', `date ${text}`, text);
    for (const text of SPECIAL_TEXTS) add('special-text', JSON.stringify(text), text);
    if (Array.isArray(schema.enum)) {
      const first = String(schema.enum.find((value: unknown) => typeof value === 'string') ?? '');
      add('enum', 'enum value in upper case', first.toUpperCase());
      add('enum', 'enum value with a space', `${first} `);
    }
    if (schema.format === 'uuid' || typeof ours[fixtureName(field) ?? ''] === 'string') {
      add('nonexistent', 'nil uuid', '00000000-0000-0000-0000-000000000000');
      add('nonexistent', 'unknown uuid', 'ffffffff-ffff-4fff-bfff-ffffffffffff');
      const foreign = theirs[fixtureName(field) ?? ''];
      if (typeof foreign === 'string') add('other-tenant', "another tenant's uuid", foreign);
    }
  }
  if (types.has('integer') || types.has('number')) {
    for (const text of JSON_NUMBERS) add('number', `JSON number ${text}`, new RawJson(text));
    for (const text of ['1', '1e400', '-Infinity', '0x10', ' 1']) add('number-text', `text ${JSON.stringify(text)} for a number`, text);
    const foreign = theirs[fixtureName(field) ?? ''];
    if (typeof foreign === 'number') add('other-tenant', `another tenant's ${fixtureName(field)} ${foreign}`, foreign);
    if (foreign !== undefined || schema.maximum === 9007199254740991) {
      add('nonexistent', 'nonexistent id 9007199254740991', 9007199254740991);
      add('nonexistent', 'nonexistent id 2147483647', 2147483647);
    }
  }
  if (types.has('boolean')) {
    add('wrong-type', 'text "true"', 'true');
    add('wrong-type', 'number 1 for a boolean', 1);
  }
  if (types.has('array')) {
    const item = sample(schema.items ?? {}, field);
    add('empty', 'empty array', []);
    add('wrong-type', 'an object for an array', { 0: item });
    const distinct = Array.from({ length: schema.maxItems ?? 70_000 }, (_, i) => (typeof item === 'number' ? i + 1 : `${item}${i}`));
    add('array-length', `${schema.maxItems ?? 'no limit'} distinct items`, distinct);
    add(
      'array-length',
      '70000 items',
      Array.from({ length: 70_000 }, () => (typeof item === 'object' ? {} : item)),
    );
    add('array-length', 'duplicate items', [item, item]);
    add('nesting', 'nested array', [[item]]);
  }
  if (types.has('object')) {
    const base = sample(schema, field) as Record<string, unknown>;
    add('empty', 'empty object', {});
    add('unknown-key', 'unknown key', { ...base, fuzz_unknown_key: 1 });
    add('unknown-key', 'key "constructor"', { ...base, constructor: 'x' });
    add('unknown-key', 'key "toString"', { ...base, toString: { a: 1 } });
    add('wide', '3000 keys', { ...base, ...wide(3000) });
    add('deep', 'nested to the depth limit', { ...base, fuzz_deep: nested(64 - level) });
    add('deep', 'nested past the depth limit', { ...base, fuzz_deep: nested(70) });
  }
  return variants;
}

/** Hostile text for a path, query, header or multipart value of `schema`. */
function textVariants(node: any, field: string | undefined): Variant[] {
  const schema = effective(node);
  const types = typesOf(schema);
  const variants: Variant[] = [];
  const add = (kind: string, name: string, value: unknown) => variants.push({ kind, name, value });
  add('empty', 'empty', '');
  add('empty', 'blank', ' ');
  add('long', '1000 characters', 'a'.repeat(1000));
  add('long', '10 kB', LONG);
  add('long', `incompressible ${schema.maxLength ?? 1000} characters`, incompressible(schema.maxLength ?? 1000));
  add('control', 'NUL character', 'a\u0000b');
  add('control', 'control characters', CONTROL);
  for (const text of NUMBER_TEXTS) add('number-text', JSON.stringify(text), text);
  for (const text of DATE_TEXTS) add('date', text, text);
  for (const text of SPECIAL_TEXTS) add('special-text', JSON.stringify(text), text);
  add('wrong-type', 'repeated', ['1', '2']);
  add('wrong-type', 'an object', { a: '1' });
  if (types.has('boolean')) for (const text of ['TRUE', 'yes', '1', 'null']) add('wrong-type', JSON.stringify(text), text);
  if (Array.isArray(schema.enum)) {
    const first = String(schema.enum.find((value: unknown) => typeof value === 'string') ?? '');
    add('enum', 'enum value in upper case', first.toUpperCase());
    add('enum', 'enum value with a space', `${first} `);
  }
  const fixture = fixtureName(field);
  if (types.has('integer') || types.has('number')) {
    add('nonexistent', 'nonexistent 9007199254740991', '9007199254740991');
    add('nonexistent', 'nonexistent 2147483647', '2147483647');
    add('number-text', '18446744073709551616', '18446744073709551616');
  }
  if (schema.format === 'uuid') {
    add('nonexistent', 'nil uuid', '00000000-0000-0000-0000-000000000000');
    add('nonexistent', 'unknown uuid', 'ffffffff-ffff-4fff-bfff-ffffffffffff');
    add('nonexistent', 'uuid in braces', `{${ours[fixture ?? ''] ?? '00000000-0000-0000-0000-000000000000'}}`);
    add('nonexistent', 'uuid in upper case', String(ours[fixture ?? ''] ?? 'ffffffff-ffff-4fff-bfff-ffffffffffff').toUpperCase());
  }
  const foreign = theirs[fixture ?? ''];
  if (foreign !== undefined) add('other-tenant', `another tenant's ${fixture} ${foreign}`, String(foreign));
  return variants;
}

// ---------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------

interface Case {
  /** Where the hostile input is (`path.user`, `query.filter.text`, `body.role_id`, `auth`). */
  site: string;
  kind: string;
  /** `<site> = <input>`: with the operation, names the case. */
  label: string;
  send: (token: string) => Promise<Answer>;
}

const preview = (value: unknown) => {
  const text = value instanceof RawJson ? value.text : typeof value === 'string' ? JSON.stringify(value) : toJson(value);
  return text.length > 60 ? `${text.slice(0, 60)}… (${text.length} characters)` : text;
};

function setAt(root: unknown, path: (string | number)[], variant: Variant): unknown {
  if (path.length === 0) return variant.value;
  const copy = structuredClone(root) as Record<string | number, unknown>;
  let parent = copy;
  for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
  const last = path.at(-1)!;
  if (variant.remove) delete parent[last];
  else parent[last] = variant.value;
  return copy;
}

interface Site {
  path: (string | number)[];
  schema: Schema;
  present: boolean;
  required: boolean;
}

/** Every place of a body: the body itself, its keys (present or not), array items, extra keys. */
function sitesOf(node: any, value: unknown, path: (string | number)[] = [], required = true, sites: Site[] = []): Site[] {
  const schema = effective(node);
  sites.push({ path, schema, present: value !== undefined, required });
  if (path.length >= 4) return sites;
  const types = typesOf(schema);
  if (types.has('object') && value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const object = value as Record<string, unknown>;
    const branch = (schema.oneOf ?? schema.anyOf)?.[0];
    const properties = { ...schema.properties, ...(branch ? effective(branch).properties : {}) };
    const requiredKeys = new Set<string>(schema.required ?? []);
    for (const [key, property] of Object.entries(properties as Record<string, Schema>)) {
      sitesOf(property, object[key], [...path, key], requiredKeys.has(key), sites);
    }
    if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
      for (const key of additionalKeys(schema)) sitesOf(schema.additionalProperties, undefined, [...path, key], false, sites);
    }
  }
  if (types.has('array') && Array.isArray(value) && value.length > 0) sitesOf(schema.items ?? {}, value[0], [...path, 0], true, sites);
  return sites;
}

/**
 * Operations that destroy or sign out what their path names: their cases aim at a record
 * that does not exist (the hostile path parameters aside), so the fixtures survive.
 */
const DESTRUCTIVE = /^(delete|logout$|markUserForLogout$|blackoutUser$)/;

/** Path parameters of the request the spec accepts: our fixtures (the operation's own where it has one). */
function basePathParams(op: OperationSpec): Record<string, string | number> {
  const params: Record<string, string | number> = {};
  for (const parameter of op.parameters.filter((p) => p.in === 'path')) {
    const schema = effective(parameter.schema);
    params[parameter.name] = DESTRUCTIVE.test(op.id)
      ? schema.format === 'uuid'
        ? 'ffffffff-ffff-4fff-bfff-ffffffffffff'
        : '9007199254740991'
      : (ours[`${op.id}.${parameter.name}`] ?? ours[parameter.name] ?? (sample(schema, parameter.name) as string | number));
  }
  return params;
}

function baseQuery(op: OperationSpec): Record<string, unknown> {
  const query: Record<string, unknown> = {};
  for (const parameter of op.parameters.filter((p) => p.in === 'query' && p.required)) query[parameter.name] = sample(parameter.schema, parameter.name);
  // A signed picture URL: its query is what the picture operations check.
  if (op.id.startsWith('getProfilePicture')) Object.assign(query, { tenant: ours.tenant, expires: ours.expires, signature: ours.signature });
  return query;
}

/** Bytes that are no UTF-8: a lone byte, an overlong slash, an encoded surrogate, a truncated sequence. */
const INVALID_UTF8 = Buffer.from([0xff, 0xfe, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0xe2, 0x82]);
const RAW_PATH_VALUES = ['%E0%A4%A', '%FF', '%ED%A0%80', '%C0%AF', '%', '%2e%2e', '..', '%2F', 'a%00b'];
const RAW_QUERIES = [
  ...['__proto__[x]=1', 'constructor[prototype][x]=1', 'selects=%E0%A4%A', 'filter=%FF', 'filter[%FF]=1'],
  Array.from({ length: 250 }, (_, i) => `p${i}=1`).join('&'),
];

type FormFields = Record<string, string | string[] | FilePart>;

/** A CSV of the importable keys (the spec's ImportableKeyMap) with one row of `cells`. */
function csvFile(cells: Record<string, string>): FilePart {
  const quote = (text: string) => (/[",\r\n;]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text);
  const keys = Object.keys(cells);
  return { content: Buffer.from(`${keys.join(',')}\n${keys.map((key) => quote(cells[key]!)).join(',')}\n`), fileName: 'users.csv', type: 'text/csv' };
}

function casesOf(op: OperationSpec): Case[] {
  const cases: Case[] = [];
  const pathParams = basePathParams(op);
  const query = baseQuery(op);
  const jsonSchema = op.body?.['application/json'];
  const formSchema = op.body?.['multipart/form-data'];
  const baseBody = jsonSchema ? { ...(sample(jsonSchema) as object), ...BASE_BODIES[op.id] } : undefined;
  const stream = op.id === 'streamNotifications';

  // The multipart form the spec accepts: required fields as text, files that fit.
  const formProperties = (formSchema ? effective(formSchema).properties : {}) as Record<string, Schema>;
  const formRequired = new Set<string>(formSchema ? (effective(formSchema).required ?? []) : []);
  const fileKeys = Object.keys(formProperties).filter((key) => effective(formProperties[key]).format === 'binary');
  const importable = Object.keys(effective(document.components.schemas.ImportableKeyMap).properties);
  const csvCells: Record<string, string> = {
    username: PLAIN,
    password: 'correct horse battery staple',
    first_name: 'Fuzz',
    last_name: 'Csv',
    role_id: String(ours.role),
  };
  const fileOf = (key: string): FilePart => (key === 'user_data_csv' ? csvFile(csvCells) : { content: PNG_1X1, fileName: 'fuzz.png', type: 'image/png' });
  const baseForm: FormFields = {};
  for (const [key, property] of Object.entries(formProperties)) {
    if (!formRequired.has(key) && !(key in (BASE_BODIES[op.id] ?? {}))) continue;
    const value = BASE_BODIES[op.id]?.[key] ?? (fileKeys.includes(key) ? fileOf(key) : sample(property, key));
    baseForm[key] = fileKeys.includes(key) ? (value as FilePart) : Array.isArray(value) ? value.map(String) : String(value);
  }

  const url = (params: Record<string, string | number>, queryObject: Record<string, unknown> = query, extraQuery = '') => {
    const path = op.path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(String(params[name])));
    const text = [qs.stringify(queryObject, { encodeValuesOnly: true }), extraQuery].filter(Boolean).join('&');
    return text ? `${path}?${text}` : path;
  };
  /** The request the spec accepts, with `change` applied; JSON bodies get unique names. */
  const send =
    (change: Partial<CallOptions> & { form?: FormFields }, authorization?: string | null) =>
    async (bearer: string): Promise<Answer> => {
      const options: CallOptions = { params: pathParams, query, ...change };
      if (change.form) Object.assign(options, await multipart(unique(change.form) as FormFields));
      else if (!('payload' in change)) {
        if (baseBody !== undefined) Object.assign(options, { payload: toJson(unique(baseBody)), contentType: 'application/json' });
        else if (formSchema) Object.assign(options, await multipart(unique(baseForm) as FormFields));
      }
      options.token = authorization === undefined ? bearer : null;
      if (authorization) options.headers = { ...options.headers, authorization };
      if (!stream) return call(op.id, options);
      const headers: Record<string, string> = { ...options.headers };
      if (options.token) headers.authorization = `Bearer ${options.token}`;
      return openStream({ url: url(options.params ?? {}, options.query ?? {}), headers });
    };
  const raw = (request: RawRequest) => (stream ? openStream(request) : inject(op.id, request));
  const add = (site: string, kind: string, label: string, sender: Case['send']) => cases.push({ site, kind, label: `${site} = ${label}`, send: sender });

  // Credentials: one run without a token, then tokens that are not ours or not tokens.
  add('auth', 'no-token', 'no token', send({}, null));
  if (op.secured) {
    add('auth', 'auth', "another tenant's administrator", () => send({})(other.adminToken));
    add('auth', 'auth', 'a token of 10 kB', send({}, `Bearer ${'x'.repeat(10_240)}`));
    add('auth', 'auth', 'a token with non-ASCII bytes', send({}, 'Bearer \u00ff\u00fe'));
    add('auth', 'auth', 'Basic credentials', send({}, 'Basic YWRtaW46YWRtaW4='));
    add('auth', 'auth', 'a bare scheme', send({}, 'Bearer'));
    add('auth', 'auth', 'a lower-case scheme and two spaces', (bearer) => send({}, `bearer  ${bearer}`)(bearer));
  }

  // Path parameters.
  for (const parameter of op.parameters.filter((p) => p.in === 'path')) {
    for (const variant of textVariants(parameter.schema, parameter.name)) {
      if (typeof variant.value !== 'string') continue;
      add(`path.${parameter.name}`, variant.kind, variant.name, send({ params: { ...pathParams, [parameter.name]: variant.value } }));
    }
    for (const text of RAW_PATH_VALUES) {
      add(`path.${parameter.name}`, 'malformed-url', `raw ${text}`, (bearer) => {
        const marker = 'RAWPATHVALUE';
        const target = url({ ...pathParams, [parameter.name]: marker }).replace(marker, text);
        return raw({ url: target, headers: { authorization: `Bearer ${bearer}` } });
      });
    }
  }

  // Query parameters; deepObject filters key by key.
  for (const parameter of op.parameters.filter((p) => p.in === 'query')) {
    const schema = effective(parameter.schema);
    const keyed = parameter.style === 'deepObject' || Boolean(schema.properties);
    const places: [string[], Schema][] = keyed
      ? Object.entries((schema.properties ?? {}) as Record<string, Schema>).map(([key, property]) => [[parameter.name, key], property])
      : [[[parameter.name], schema]];
    for (const [path, property] of places) {
      for (const variant of textVariants(property, path.at(-1))) {
        const hostile =
          path.length === 1 ? { ...query, [path[0]!]: variant.value } : { ...query, [path[0]!]: { ...(query[path[0]!] as object), [path[1]!]: variant.value } };
        add(`query.${path.join('.')}`, variant.kind, variant.name, send({ query: hostile }));
      }
    }
    if (keyed) {
      const first = Object.keys(schema.properties ?? { fuzz: 1 })[0]!;
      for (const [label, value] of [
        ['an unknown key', { fuzz_unknown: '1' }],
        ['a nested key', { [first]: { deeper: { still: '1' } } }],
        ['a plain value', PLAIN],
        ['a list', ['1', '2']],
      ] as const) {
        add(`query.${parameter.name}`, 'shape', label, send({ query: { ...query, [parameter.name]: value } }));
      }
    }
    if (parameter.name === 'selects' || parameter.name === 'relations') {
      const answer = effective(op.answer ?? {});
      const names = Object.keys(effective(answer.type === 'array' ? answer.items : answer).properties ?? {});
      const separator = parameter.name === 'selects' ? ',' : '|';
      for (const [label, value] of [
        ['only separators', separator.repeat(2000)],
        ['every field of the answer', names.join(separator)],
        ['every field twice', [...names, ...names].join(separator)],
        ['prototype names', ['constructor', '__proto__', 'toString', 'hasOwnProperty'].join(separator)],
        ['the other separator', names.join(separator === ',' ? '|' : ',')],
      ] as const) {
        add(`query.${parameter.name}`, 'result-controls', label, send({ query: { ...query, [parameter.name]: value } }));
      }
    }
  }
  add('query', 'shape', 'an unknown parameter', send({ query: { ...query, fuzz_unknown: '1' } }));
  for (const text of RAW_QUERIES) {
    add('query', 'malformed-url', `raw ${text.slice(0, 40)}`, (bearer) => {
      const request = { url: url(pathParams, query, text), headers: { authorization: `Bearer ${bearer}` } as Record<string, string> };
      // The body the operation expects, so only the query is wrong.
      if (baseBody !== undefined)
        Object.assign(request, { payload: toJson(unique(baseBody)), headers: { ...request.headers, 'content-type': 'application/json' } });
      return raw(request);
    });
  }

  // Header parameters.
  for (const parameter of op.parameters.filter((p) => p.in === 'header')) {
    for (const variant of textVariants(parameter.schema, parameter.name)) {
      // Header values are bytes without line breaks: the HTTP client cannot send others.
      if (typeof variant.value !== 'string' || !/^[\t\x20-\x7e]*$/.test(variant.value)) continue;
      add(`header.${parameter.name}`, variant.kind, variant.name, send({ headers: { [parameter.name]: variant.value } }));
    }
    add(
      `header.${parameter.name}`,
      'nonexistent',
      'an id of the right shape',
      send({ headers: { [parameter.name]: '1700000000000000-00000000-0000-4000-8000-000000000000' } }),
    );
  }

  // JSON bodies, place by place.
  if (jsonSchema) {
    for (const site of sitesOf(jsonSchema, baseBody)) {
      const field = site.path.filter((key): key is string => typeof key === 'string').at(-1);
      for (const variant of jsonVariants(site.schema, field, site.path.length + 1, site.present, site.required)) {
        const body = setAt(baseBody, site.path, variant);
        const name = site.path.length === 0 ? 'body' : `body.${site.path.join('.')}`;
        add(name, variant.kind, `${variant.name}${variant.remove ? '' : ` ${preview(variant.value)}`}`, (bearer) =>
          send({ payload: toJson(unique(body)), contentType: 'application/json' })(bearer),
        );
      }
    }
  }

  // Bodies as a whole, and their media types: also where the operation takes no body.
  const json = toJson(baseBody ?? {});
  const firstKey = Object.keys(baseBody ?? {})[0] ?? PLAIN;
  const rest = json.length > 2 ? `,${json.slice(1)}` : '}';
  const wholeBodies: [string, string, string | Buffer, string | undefined][] = [
    ['malformed', 'truncated JSON', json.slice(0, -1), 'application/json'],
    ['malformed', 'an empty body', '', 'application/json'],
    ['malformed', 'JSON null', 'null', 'application/json'],
    ['malformed', 'a JSON string', '"fuzz"', 'application/json'],
    ['malformed', 'the JSON number 1e400', '1e400', 'application/json'],
    ['malformed', 'the body in an array', `[${json}]`, 'application/json'],
    ['duplicate-key', 'duplicate keys, the hostile one first', `{"${firstKey}":{"a":[1e400]}${rest}`, 'application/json'],
    [
      'duplicate-key',
      'duplicate keys, the hostile one last',
      `${json.slice(0, -1)}${json.length > 2 ? ',' : ''}"${firstKey}":[null,"\\u0000"]}`,
      'application/json',
    ],
    ['malformed', 'a "__proto__" key', `{"__proto__":{"admin":true}${rest}`, 'application/json'],
    ['malformed', 'a "constructor.prototype" key', '{"constructor":{"prototype":{"admin":true}}}', 'application/json'],
    ['malformed', 'JavaScript literals', `{"${firstKey}":NaN}`, 'application/json'],
    ['malformed', 'a byte-order mark', `\ufeff${json}`, 'application/json'],
    ['encoding', 'invalid UTF-8 in a string', Buffer.concat([Buffer.from(`{"${firstKey}":"`), INVALID_UTF8, Buffer.from(`"${rest}`)]), 'application/json'],
    ['encoding', 'an escaped lone surrogate as a key', `{"\\ud800":1${rest}`, 'application/json'],
    ['encoding', 'UTF-16 declared', json, 'application/json; charset=utf-16'],
    ['encoding', 'Latin-1 declared', json, 'application/json; charset=iso-8859-1'],
    ['deep', '65 levels of arrays', `${'['.repeat(65)}${']'.repeat(65)}`, 'application/json'],
    ['deep', '100000 levels of arrays', `${'['.repeat(100_000)}${']'.repeat(100_000)}`, 'application/json'],
    ['wide', 'an array of 100000 numbers', `[${Array.from({ length: 100_000 }, (_, i) => i).join(',')}]`, 'application/json'],
    ['wide', 'a body of 2 MB', `{"${firstKey}":"${'a'.repeat(2 * 1024 * 1024)}"}`, 'application/json'],
    ['media-type', 'text/plain', json, 'text/plain'],
    ['media-type', 'form encoding', 'a=1&b=2', 'application/x-www-form-urlencoded'],
    ['media-type', 'multipart without a boundary', json, 'multipart/form-data'],
    ['media-type', 'a problem document', json, 'application/problem+json'],
    ['media-type', 'an image', PNG_1X1, 'image/png'],
    ['media-type', 'upper-case JSON', json, 'APPLICATION/JSON'],
    ['media-type', 'a JSON suffix', json, 'application/merge-patch+json'],
    ['media-type', 'a malformed media type', json, 'application/json; ;;=='],
    ['media-type', 'no media type', json, undefined],
    ['media-type', 'no media type and no body', '', undefined],
  ];
  for (const [kind, label, payload, contentType] of wholeBodies) {
    add('body', kind, label, (bearer) => {
      const headers = { authorization: `Bearer ${bearer}`, ...(contentType ? { 'content-type': contentType } : {}) };
      return raw({ url: url(pathParams), headers, payload });
    });
  }

  // Multipart bodies: the same places, as text, and files.
  if (formSchema) {
    const sendForm = (form: FormFields) => send({ form });
    for (const [key, property] of Object.entries(formProperties)) {
      if (fileKeys.includes(key)) continue;
      for (const variant of textVariants(property, key)) {
        if (typeof variant.value === 'object' && !Array.isArray(variant.value)) continue;
        add(`multipart.${key}`, variant.kind, variant.name, sendForm({ ...baseForm, [key]: variant.value as string | string[] }));
      }
      if (key in baseForm) {
        const without = Object.fromEntries(Object.entries(baseForm).filter(([name]) => name !== key));
        add(`multipart.${key}`, formRequired.has(key) ? 'missing-required' : 'missing', 'removed', sendForm(without));
      }
    }
    for (const key of fileKeys) {
      const files: [string, FilePart | string][] = [
        ['an empty file', { content: Buffer.alloc(0), fileName: 'empty.png', type: 'image/png' }],
        ['random bytes', { content: Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 131) % 256)), fileName: 'noise.bin' }],
        ['a truncated PNG', { content: PNG_1X1.subarray(0, 16), fileName: 'cut.png', type: 'image/png' }],
        ['a GIF named .png', { content: GIF_1X1, fileName: 'gif.png', type: 'image/png' }],
        [
          'an SVG with a script',
          { content: Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'), fileName: 'x.svg', type: 'image/svg+xml' },
        ],
        ['a hostile file name', { content: fileOf(key).content, fileName: `../../\u0000x\r\n${'n'.repeat(2000)}\ud800.png`, type: 'image/png' }],
        ['invalid UTF-8', { content: Buffer.from([0xef, 0xbb, 0xbf, 0xff, 0xfe, 0x2c, 0x0a, 0xc0, 0xaf, 0x0a]), fileName: 'bad.csv', type: 'text/csv' }],
        ['NUL bytes and unbalanced quotes', { content: Buffer.from('username,"first_name\n\u0000,"x\n'), fileName: 'bad.csv', type: 'text/csv' }],
        [
          'a header of 10000 columns',
          { content: Buffer.from(`${Array.from({ length: 10_000 }, (_, i) => `c${i}`).join(',')}\n`), fileName: 'wide.csv', type: 'text/csv' },
        ],
        ['a row of 200000 characters', { content: Buffer.from(`username,first_name\nx,${'a'.repeat(200_000)}\n`), fileName: 'long.csv', type: 'text/csv' }],
        [
          '10000 rows',
          { content: Buffer.from(`username\n${Array.from({ length: 10_000 }, (_, i) => `bulk${i}`).join('\n')}\n`), fileName: 'rows.csv', type: 'text/csv' },
        ],
        ['text instead of a file', 'not a file'],
        ['a file of 6 MB', { content: Buffer.alloc(6 * 1024 * 1024, 0x41), fileName: 'big.png', type: 'image/png' }],
      ];
      for (const [label, value] of files) add(`multipart.${key}`, 'file', label, sendForm({ ...baseForm, [key]: value }));
      add(`multipart.${key}`, 'file', 'two files', sendForm({ ...baseForm, [key]: fileOf(key), fuzz_second: fileOf(key) }));
      if (key === 'user_data_csv') {
        // Each importable column with hostile text in an otherwise valid row.
        for (const column of importable) {
          for (const variant of textVariants(effective(document.components.schemas.ImportableKeyMap).properties[column], column)) {
            if (typeof variant.value !== 'string') continue;
            add(`multipart.${key}.${column}`, variant.kind, variant.name, sendForm({ ...baseForm, [key]: csvFile({ ...csvCells, [column]: variant.value }) }));
          }
        }
      }
    }
    for (const [label, extra] of [
      ['an unknown field', { fuzz_unknown: '1' }],
      ['a "__proto__" field', JSON.parse('{"__proto__":"x"}')],
      ['a "constructor" field', { constructor: 'x' }],
      ['150 fields', Object.fromEntries(Array.from({ length: 150 }, (_, i) => [`f${i}`, 'x']))],
    ] as const) {
      add('multipart', 'unknown-key', label, sendForm({ ...baseForm, ...extra }));
    }
    const forms: [string, string][] = [
      ['a truncated form', '--fuzz\r\nContent-Disposition: form-data; name="username"\r\n\r\nfuzz'],
      ['a wrong boundary', '--other\r\nContent-Disposition: form-data; name="username"\r\n\r\nfuzz\r\n--other--\r\n'],
      ['a part without a name', '--fuzz\r\nContent-Disposition: form-data\r\n\r\nfuzz\r\n--fuzz--\r\n'],
      ['a part without headers', '--fuzz\r\n\r\nfuzz\r\n--fuzz--\r\n'],
      ['an empty form', '--fuzz--\r\n'],
      [
        'a file part without a file name',
        '--fuzz\r\nContent-Disposition: form-data; name="profile_picture"; filename=""\r\nContent-Type: image/png\r\n\r\nxx\r\n--fuzz--\r\n',
      ],
    ];
    for (const [label, payload] of forms) {
      add('multipart', 'malformed', label, (bearer) =>
        raw({ url: url(pathParams), headers: { authorization: `Bearer ${bearer}`, 'content-type': 'multipart/form-data; boundary=fuzz' }, payload }),
      );
    }
  }

  // The request as derived, last: it may use up what the hostile cases needed (a deleted user to restore).
  add('baseline', 'baseline', 'as the spec describes it', send({}));
  return cases;
}

// ---------------------------------------------------------------------------------------
// Sampling (deterministic) and running
// ---------------------------------------------------------------------------------------

function hash(text: string): number {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

/** mulberry32: a small seeded generator, so the sample is the same on every run. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = Math.imul(state ^ (state >>> 15), 1 | state);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffled<T>(items: T[], random: () => number): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy;
}

/**
 * The sample of an operation's cases: the run without a token and the derived request,
 * then every site once and every kind of hostility once (per part of the request), then a
 * draw up to the budget — all in an order the seed fixes.
 */
function sampleCases(operationId: string, cases: Case[]): Set<Case> {
  const order = shuffled(cases, generator(SEED ^ hash(operationId)));
  const chosen = new Set<Case>(cases.filter((c) => c.kind === 'no-token' || c.kind === 'baseline'));
  const sites = new Set<string>();
  const kinds = new Set<string>();
  const part = (c: Case) => `${c.site.split('.')[0]}:${c.kind}`;
  for (const c of order) {
    if (sites.has(c.site)) continue;
    chosen.add(c);
    sites.add(c.site);
  }
  for (const c of order) {
    if (kinds.has(part(c))) continue;
    chosen.add(c);
    kinds.add(part(c));
  }
  for (const c of order) if (chosen.size < CASES_PER_OPERATION) chosen.add(c);
  return chosen;
}

const specs = (Object.keys(operations) as OperationId[]).map(operationSpec);
const rank = (op: OperationSpec) => (op.id === 'logout' ? 2 : SWEEPING.test(op.id) ? 1 : 0);
specs.sort((a, b) => rank(a) - rank(b));

const plan = specs.map((op) => {
  const cases = casesOf(op);
  return { op, cases, chosen: sampleCases(op.id, cases) };
});
// Every exact input is sent somewhere: where it is not in any sample, the first operation that has it sends it.
const input = (c: Case) => `${c.site.split('.')[0]}:${c.label.slice(c.label.indexOf(' = '))}`;
const everywhere = new Set(plan.flatMap(({ chosen }) => [...chosen].map(input)));
for (const { cases, chosen } of plan) {
  for (const c of cases) {
    if (everywhere.has(input(c))) continue;
    chosen.add(c);
    everywhere.add(input(c));
  }
}

// ---------------------------------------------------------------------------------------
// What the sweep found, pinned down
// ---------------------------------------------------------------------------------------

t.test('a key named like a member of every object (constructor, toString) is reported under its name', async (t) => {
  const token = tenant.adminToken;
  for (const key of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
    const role = await call('createRole', { token, payload: `{"name":"prototype ${key}","${key}":"x"}`, contentType: 'application/json' });
    t.equal(role.status, 422, `createRole with the key ${key}`);
    t.strictSame(role.violations, [], 'a problem document as the spec declares');
    // Compared as text: an object whose own `constructor` is an array confuses deep equality.
    t.equal(JSON.stringify((role.body as { errors: object }).errors), JSON.stringify({ [key]: ['is not a known key'] }), `errors.${key}`);
  }
  const nested = await call('createAutomation', { token, body: { name: 'prototype', config: { url: receiver.url('/p'), headers: {}, constructor: 1 } } });
  t.equal(nested.status, 422);
  t.strictSame(Object.keys((nested.body as { errors: object }).errors), ['config.constructor'], 'nested keys keep their path');
  const roles = await call('listRoles', { token });
  t.notOk(JSON.stringify(roles.body).includes('prototype '), 'no role was created');

  // `__proto__` never gets past the JSON parser; the field errors still keep it as a key of their own.
  const errors = fieldErrors([
    { instancePath: '', schemaPath: '#/additionalProperties', keyword: 'additionalProperties', params: { additionalProperty: '__proto__' } },
    { instancePath: '/constructor', schemaPath: '#/type', keyword: 'type', params: { type: 'string' }, message: 'must be string' },
  ]);
  // Known keys are named before unknown ones.
  t.strictSame(Object.entries(fieldMessages(errors)), [
    ['constructor', ['must be string']],
    ['__proto__', ['is not a known key']],
  ]);
  t.strictSame(Object.entries(fieldCodes(errors)), [
    ['constructor', ['type']],
    ['__proto__', ['unknown_property']],
  ]);
  for (const map of [errors, fieldMessages(errors), fieldCodes(errors)]) {
    t.equal(Object.getPrototypeOf(map), Object.prototype, 'an ordinary object, its prototype untouched');
  }
});

/** The operations whose spec requires a request body, and the media types they take. */
const requiredBodies = specs.filter((op) => {
  const operation = document.paths[op.path][op.method.toLowerCase()];
  return operation.requestBody && resolve(operation.requestBody).required === true;
});

t.test('a request without the body an operation requires is a 422 on body, whatever the operation', async (t) => {
  t.ok(requiredBodies.length > 20, `${requiredBodies.length} operations require a body`);
  for (const op of requiredBodies) {
    const params = Object.fromEntries(op.parameters.filter((p) => p.in === 'path').map((p) => [p.name, ours[p.name] ?? sample(p.schema, p.name)]));
    const answer = await call(op.id, { token: tenant.adminToken, params: params as Record<string, string | number> });
    t.equal(answer.status, 422, `${op.id} without a body`);
    t.strictSame(answer.violations, [], `${op.id}: a problem document as the spec declares`);
    t.strictSame((answer.body as { errors?: object }).errors, { body: ['is required'] }, `${op.id}: errors.body`);
  }
  const before = await call('getNotification', { token: tenant.adminToken, params: { notification: String(ours.notification) } });
  const unread = await call('updateNotification', {
    token: tenant.adminToken,
    params: { notification: String(ours.notification) },
    headers: { 'content-length': '0' },
  });
  t.equal(unread.status, 422, 'an empty body without a media type is no body');
  const after = await call('getNotification', { token: tenant.adminToken, params: { notification: String(ours.notification) } });
  t.strictSame(after.body, before.body, 'the notification is unchanged');
  const signIn = await call('login', {});
  t.equal(signIn.status, 422, 'public operations too');
  const optional = await call('restoreUser', { token: tenant.adminToken, params: { user: Number(ours.user) } });
  t.ok(optional.status < 500, 'an operation whose body is optional still answers without one');
});

t.test('query parameters an operation does not declare are ignored, never read unvalidated', async (t) => {
  const auth = { authorization: `Bearer ${tenant.adminToken}` };
  const single = [
    `/api/users/${tenant.adminUserId}?filter[text][]=a`,
    `/api/users/${tenant.adminUserId}?filter[text][a]=1&limit=abc`,
    `/api/notifications/${ours.notification}?filter[created_from][]=a`,
    `/api/notifications/type/x?filter[created_to][a]=1`,
  ];
  for (const url of single) {
    const answer = await app.inject({ method: 'GET', url, headers: auth });
    t.ok(answer.statusCode < 500, `${url} → ${answer.statusCode}`);
  }
  const plain = await app.inject({ method: 'GET', url: `/api/users/${tenant.adminUserId}`, headers: auth });
  const withStray = await app.inject({ method: 'GET', url: `/api/users/${tenant.adminUserId}?filter[text][]=a&cache=1`, headers: auth });
  t.equal(withStray.statusCode, 200);
  t.equal(withStray.body, plain.body, 'the same answer as without them');
  const listed = await app.inject({ method: 'GET', url: '/api/users?filter[constructor]=1', headers: auth });
  t.equal(listed.statusCode, 422, 'a declared filter still refuses a key named like an Object member');
  t.ok(JSON.parse(listed.body).errors['filter.constructor'], 'reported under its own name');
  // qs drops a `__proto__` key: read as no filter, the list would answer everything.
  for (const query of ['filter[__proto__]=1', 'filter[%5F%5Fproto%5F%5F]=1', '__proto__[x]=1']) {
    const refused = await app.inject({ method: 'GET', url: `/api/users?${query}`, headers: auth });
    t.equal(refused.statusCode, 400, `${query} is refused`);
    t.match(JSON.parse(refused.body).detail, /__proto__/, 'saying why');
  }
  const named = await app.inject({ method: 'GET', url: '/api/users?filter[x__proto__y]=1', headers: auth });
  t.equal(named.statusCode, 422, 'a key that only contains the name is an unknown filter key like any other');
});

t.test('a body declared by reference takes only its declared media types', async (t) => {
  const token = tenant.adminToken;
  const payload = '{"seen_at":"2026-01-31 14:05:00"}';
  for (const [operationId, params] of [
    ['updateNotification', { notification: String(ours.notification) }],
    ['updateNotificationsByType', { targetableType: 'hostile' }],
    ['updateNotificationsByTarget', { targetableType: 'hostile', targetableId: 1 }],
  ] as const) {
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded']) {
      const refused = await call(operationId, { token, params, payload, contentType });
      t.equal(refused.status, 415, `${operationId} as ${contentType}`);
      t.strictSame(refused.violations, [], 'a problem document');
    }
    const accepted = await call(operationId, { token, params, payload, contentType: 'application/json' });
    t.equal(accepted.status, 200, `${operationId} as JSON`);
  }
});

/** Operations whose derived request was accepted: their hostile cases reach the handlers. */
const accepted = new Set<OperationId>();
let sent = 0;
const started = Date.now();
for (const { op, cases, chosen } of plan) {
  t.test(`${op.id}: hostile input is answered below 500, failures as problem documents`, async (t) => {
    // A token of its own: an operation may sign it out.
    const token = await api.tokenFor(tenant.tenantId, tenant.adminUserId);
    const failures: string[] = [];
    for (const c of cases.filter((c) => chosen.has(c))) {
      sent++;
      let problem: string | null;
      try {
        const answer = await c.send(token);
        if (c.kind === 'baseline' && answer.status < 400) accepted.add(op.id);
        problem = verdict(answer);
      } catch (error) {
        problem = `the request could not be sent: ${(error as Error).message}`;
      }
      if (problem) failures.push(`${op.method} ${op.path} ${c.label} → ${problem}`);
    }
    t.strictSame(failures, [], `${op.id}: ${chosen.size} of ${cases.length} cases (seed ${SEED})`);
  });
}

t.test('the sample reaches every operation, and most of them past validation', async (t) => {
  t.equal(plan.length, Object.keys(operations).length, 'every operation of the spec');
  t.ok(sent > 0, `${sent} requests in ${Date.now() - started} ms`);
  // Not all: deletions and sign-outs aim at records that do not exist, and a one-time
  // login token or a deleted user to restore is used up by the first valid case.
  const refused = plan.map(({ op }) => op.id).filter((id) => !accepted.has(id) && !DESTRUCTIVE.test(id));
  t.ok(refused.length <= 3, `the derived request is accepted by every operation but: ${refused.join(', ')}`);
});
