/**
 * Contract checks: a response is compared with what the spec declares for its operation
 * and status (OpenAPI 3.1 schemas are JSON Schema 2020-12). Every status must be declared
 * by the operation, by its exact code, a range (`4XX`) or `default`, whatever its class:
 * a client generated from the spec, or a validating proxy, knows no other. Its body must
 * then match what the spec declares for it, every `required` field present.
 *
 * Answers reach the tests serialized by their response schema (fast-json-stringify), which
 * refuses a body missing a required field: the client then gets a 500, a status every
 * operation declares. `serializerViolations` tells such a 500 apart by the error the server
 * logged, so an answer that lacks a required field fails its test whatever status it expected.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { loadSpecification } from '../../src/platform/http/operations.ts';
import { operations, servedElsewhere, type OperationId, type ServedElsewhereId } from '../../generated/operations.ts';

const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;
export const spec = loadSpecification() as {
  paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
  components: { responses: Record<string, unknown>; schemas: Record<string, unknown>; headers: Record<string, unknown> };
};

/** Keys of an OpenAPI document that are not JSON Schema keywords, and the spec's own `x-` extensions. */
const OPENAPI_KEYWORDS = [
  'openapi',
  'info',
  'jsonSchemaDialect',
  'servers',
  'paths',
  'webhooks',
  'components',
  'security',
  'tags',
  'externalDocs',
  'discriminator',
  'xml',
  'example',
];
const extensions = new Set<string>();
JSON.stringify(spec, (key, value: unknown) => {
  if (key.startsWith('x-')) extensions.add(key);
  return value;
});

// The spec is not judged against the JSON Schema meta-schema here (half a second in every
// test process): the spec lint does that in CI, and the server's router at every start.
// Strict mode refuses any keyword Ajv does not know (OpenAPI's own and the spec's `x-`
// extensions aside), so a misspelt `required` or `maxLength` fails the schema that holds it
// instead of quietly checking nothing. Two strict rules stay off, as the spec uses JSON
// Schema as written: `required` names in `anyOf`/`then` branches declared beside the branch
// (`strictRequired`), and `maxLength` on values not typed string (`strictTypes`).
const ajv = new Ajv2020({
  strict: true,
  strictRequired: false,
  strictTypes: false,
  keywords: [...OPENAPI_KEYWORDS, ...extensions],
  allErrors: true,
  validateSchema: false,
});
addFormats(ajv);
ajv.addSchema(spec as object, 'spec');

const escape = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

/** Every operation of the spec: those the binding serves, and those another service serves (SCIM). */
const allOperations: Record<OperationId | ServedElsewhereId, { method: string; path: string }> = { ...operations, ...servedElsewhere };

/**
 * The response the operation declares for `status`: its own code first, then its range
 * (`4XX`), then `default` (OpenAPI's order of precedence); null when none covers it.
 */
function responseObject(
  operationId: OperationId | ServedElsewhereId,
  status: number,
): { pointer: string; content?: Record<string, unknown>; headers?: Record<string, unknown> } | null {
  const meta = allOperations[operationId];
  const responses = spec.paths[meta.path]?.[meta.method.toLowerCase()]?.responses ?? {};
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((candidate) => candidate in responses);
  if (key === undefined) return null;
  const declared = responses[key] as { $ref?: string; content?: Record<string, unknown>; headers?: Record<string, unknown> };
  if (declared.$ref) {
    const name = declared.$ref.split('/').pop()!;
    const shared = spec.components.responses[name] as { content?: Record<string, unknown>; headers?: Record<string, unknown> };
    return { pointer: `#/components/responses/${escape(name)}`, content: shared.content, headers: shared.headers };
  }
  return { pointer: `#/paths/${escape(meta.path)}/${meta.method.toLowerCase()}/responses/${key}`, content: declared.content, headers: declared.headers };
}

/** Returns a list of contract violations (empty when the response honours the spec). */
export function contractViolations(operationId: OperationId | ServedElsewhereId, status: number, contentType: string | undefined, body: unknown): string[] {
  const declared = responseObject(operationId, status);
  const mediaType = (contentType ?? '').split(';')[0]!.trim();
  if (!declared) return [`${operationId} does not declare status ${status}`];
  if (!declared.content) return body === undefined || body === '' ? [] : [`${status} declares no body but one was sent`];
  // A declared range such as `image/*` covers every subtype.
  const declaredType = mediaType in declared.content ? mediaType : `${mediaType.split('/')[0]}/*`;
  if (!(declaredType in declared.content)) return [`${status} answered ${mediaType}, spec declares ${Object.keys(declared.content).join(', ')}`];
  const validate = ajv.getSchema(`spec${declared.pointer}/content/${escape(declaredType)}/schema`);
  if (!validate) return [`no schema for ${status} ${mediaType}`];
  // A text answer may be empty (an NDJSON export that selects nothing); a JSON one may not.
  if (body === undefined && !/[/+]json\b/.test(mediaType)) body = '';
  return validate(body) ? [] : [`${status} body does not match the spec: ${ajv.errorsText(validate.errors)}`];
}

/** The operation served outside the binding (SCIM) whose method and path template match the request, or null. */
export function servedOperationOf(method: string, url: string): ServedElsewhereId | null {
  return servedOperationsAt(url).find(([, meta]) => meta.method === method.toUpperCase())?.[0] ?? null;
}

/** The operations outside the binding whose path template matches `url`'s path. */
function servedOperationsAt(url: string): [ServedElsewhereId, { method: string; path: string }][] {
  const path = url.split('?')[0]!;
  const literal = (text: string) => text.replace(/[.*+?^$()|[\]\\]/g, '\\$&');
  return Object.entries(servedElsewhere).flatMap(([id, meta]) => {
    const template = new RegExp(
      `^${meta.path
        .split(/\{[^}]+\}/)
        .map(literal)
        .join('[^/]+')}$`,
    );
    return template.test(path) ? [[id as ServedElsewhereId, meta]] : [];
  });
}

/**
 * Answer headers the spec declares where they are sent: one the answer carries must be
 * declared by its response (and one its response declares `required` must be sent).
 */
const DECLARED_HEADERS = [
  'x-request-id',
  'location',
  'www-authenticate',
  'retry-after',
  'ratelimit-limit',
  'ratelimit-remaining',
  'ratelimit-reset',
  'etag',
  'content-disposition',
  'link',
  'deprecation',
  'idempotent-replayed',
  'sunset',
];

/**
 * The headers of an answer of `operationId` with `status` that break the contract: each of
 * DECLARED_HEADERS it carries must be declared by its response and match the declared schema.
 */
export function headerViolations(operationId: OperationId | ServedElsewhereId, status: number, answerHeaders: Record<string, unknown>): string[] {
  const violations: string[] = [];
  const declared = responseObject(operationId, status);
  const headers = new Map(Object.entries(declared?.headers ?? {}).map(([name, header]) => [name.toLowerCase(), { name, header: header as { $ref?: string } }]));
  // A header the response declares required is on every such answer.
  for (const [lower, { name, header }] of headers) {
    const resolved = (header.$ref ? spec.components.headers[header.$ref.split('/').pop()!] : header) as { required?: boolean } | undefined;
    if (resolved?.required && answerHeaders[lower] === undefined) violations.push(`${status} lacks ${name}, which its response declares required`);
  }
  for (const name of DECLARED_HEADERS) {
    const value = answerHeaders[name];
    if (value === undefined) continue;
    const found = headers.get(name);
    if (!found) {
      violations.push(`${status} sends ${name}, which its response does not declare`);
      continue;
    }
    const pointer = `${found.header.$ref ?? `${declared!.pointer}/headers/${escape(found.name)}`}/schema`;
    // Header values are text: an integer header is judged as the number it spells.
    const asNumber = /^\d+$/.test(String(value)) ? Number(value) : undefined;
    const verdicts = [schemaViolations(pointer, value), ...(asNumber === undefined ? [] : [schemaViolations(pointer, asNumber)])];
    if (!verdicts.some((verdict) => verdict.length === 0)) violations.push(`${status} header ${name}: ${verdicts[0]!.join('; ')}`);
  }
  return violations;
}

/**
 * Contract violations of an answer of the SCIM service (docs/scim.md), which `api.call`
 * cannot send (it knows the operation binding's operations only): the status, media type
 * and body as `contractViolations` judges them, against the operation whose method and
 * path template match the request; and the headers: each of DECLARED_HEADERS the answer
 * carries must be declared by its response and match the declared schema. A path no
 * operation declares must be answered as the SCIM service answers an unknown endpoint: a
 * 404 error document.
 */
export function servedAnswerViolations(method: string, url: string, answer: { statusCode: number; headers: Record<string, unknown>; body: string }): string[] {
  const contentType = String(answer.headers['content-type'] ?? '');
  const body = answer.body === '' ? undefined : /[/+]json\b/.test(contentType) ? (JSON.parse(answer.body) as unknown) : answer.body;
  const operationId = servedOperationOf(method, url);
  if (!operationId) {
    // A path served with other methods: 405, `Allow` naming them (a GET's HEAD too); else 404.
    const methods = servedOperationsAt(url).flatMap(([, meta]) => (meta.method === 'GET' ? ['GET', 'HEAD'] : [meta.method]));
    const status = methods.length > 0 ? 405 : 404;
    if (answer.statusCode !== status) return [`no operation answers ${method} ${url}, but it was answered ${answer.statusCode}, not ${status}`];
    const violations = schemaViolations('#/components/schemas/ScimError', body).map((violation) => `${method} ${url} → ${status}: ${violation}`);
    const allow = String(answer.headers.allow ?? '')
      .split(', ')
      .filter(Boolean);
    if (status === 405 && !(allow.length === methods.length && methods.every((m) => allow.includes(m)))) {
      violations.push(`${method} ${url} → 405: Allow is "${allow.join(', ')}", not the methods served (${methods.join(', ')})`);
    }
    return violations;
  }
  const violations = [
    ...contractViolations(operationId, answer.statusCode, contentType, body),
    ...headerViolations(operationId, answer.statusCode, answer.headers),
  ];
  return violations.map((violation) => `${operationId}: ${violation}`);
}

/**
 * The contract violations behind a 500, from the messages of the errors the server logged
 * while answering it: fast-json-stringify refuses a body missing a required field (`"id" is
 * required!`) or holding a value its schema cannot write. Other 500s (a test that breaks
 * the service on purpose) are none of the contract's business.
 */
export function serializerViolations(loggedErrors: readonly string[]): string[] {
  return loggedErrors
    .filter((message) => /^".*" is required!$|does not match schema definition/.test(message))
    .map((message) => `the answer breaks its schema, so the server could not send it (500): ${message}`);
}

/**
 * Violations of `value` against the schema at `pointer` in the bundled spec (`#/paths/…/schema`),
 * with the same Ajv as the contract checks. The examples test judges every example with it.
 */
export function schemaViolations(pointer: string, value: unknown): string[] {
  const validate = ajv.getSchema(`spec${pointer}`);
  if (!validate) return [`no schema at ${pointer}`];
  return validate(value) ? [] : [ajv.errorsText(validate.errors)];
}

interface WebhookParameter {
  name: string;
  in: string;
  required?: boolean;
  schema: unknown;
}

/**
 * Contract violations of a request Atrium sent to a receiver, judged against the spec's
 * `webhooks` entry: the method, every declared header (required ones present, each
 * matching its schema) and the body against the declared request body.
 */
export function webhookViolations(name: string, request: { method: string; headers: Record<string, unknown>; body: string }): string[] {
  const entry = (spec as unknown as { webhooks: Record<string, Record<string, { parameters?: WebhookParameter[]; requestBody?: unknown }>> }).webhooks[name];
  if (!entry) return [`the spec declares no webhook ${name}`];
  const declared = entry[request.method.toLowerCase()] ?? entry.post!;
  const violations: string[] = [];
  for (const parameter of declared.parameters ?? []) {
    if (parameter.in !== 'header') continue;
    const value = request.headers[parameter.name.toLowerCase()];
    if (value === undefined) {
      if (parameter.required) violations.push(`header ${parameter.name} is required`);
      continue;
    }
    const validate = ajv.compile(parameter.schema as object);
    if (!validate(value)) violations.push(`header ${parameter.name}: ${ajv.errorsText(validate.errors)}`);
  }
  if (request.body !== '') {
    const pointer = `spec#/webhooks/${escape(name)}/${request.method.toLowerCase() in entry ? request.method.toLowerCase() : 'post'}/requestBody/content/application~1json/schema`;
    const validate = ajv.getSchema(pointer);
    if (!validate) return [...violations, `no request body schema at ${pointer}`];
    if (String(request.headers['content-type']).split(';')[0] !== 'application/json') violations.push('the body is not sent as application/json');
    else if (!validate(JSON.parse(request.body))) violations.push(`body: ${ajv.errorsText(validate.errors)}`);
  }
  return violations;
}

/**
 * Throws when an answer of the SCIM service breaks the spec (`servedAnswerViolations`), so
 * that a test's own request helper fails the test that made the request, whatever the test
 * asserts of the answer itself.
 */
export function assertServedAnswer(method: string, url: string, answer: { statusCode: number; headers: Record<string, unknown>; body: string }): void {
  const violations = servedAnswerViolations(method, url, answer);
  if (violations.length > 0) throw new Error(`${method} ${url} → ${answer.statusCode} breaks the spec:\n${violations.join('\n')}`);
}
