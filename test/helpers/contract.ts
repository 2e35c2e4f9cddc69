/**
 * Contract checks: a response is compared with what the spec declares for its operation
 * and status (OpenAPI 3.1 schemas are JSON Schema 2020-12). Every status must be declared
 * by the operation, by its exact code, a range (`4XX`) or `default`, whatever its class:
 * a client generated from the spec, or a validating proxy, knows no other. Its body must
 * then match what the spec declares for it.
 */
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { loadSpecification } from '../../src/platform/http/operations.ts';
import { operations, type OperationId } from '../../generated/operations.ts';

const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;
export const spec = loadSpecification() as {
  paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
  components: { responses: Record<string, unknown>; schemas: Record<string, unknown> };
};

// The spec is not judged against the JSON Schema meta-schema here (half a second in every
// test process): the spec lint does that in CI, and the server's router at every start.
const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
addFormats(ajv);
ajv.addSchema(spec as object, 'spec');

const escape = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * The response the operation declares for `status`: its own code first, then its range
 * (`4XX`), then `default` (OpenAPI's order of precedence); null when none covers it.
 */
function responseObject(operationId: OperationId, status: number): { pointer: string; content?: Record<string, unknown> } | null {
  const meta = operations[operationId];
  const responses = spec.paths[meta.path]?.[meta.method.toLowerCase()]?.responses ?? {};
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((candidate) => candidate in responses);
  if (key === undefined) return null;
  const declared = responses[key] as { $ref?: string; content?: Record<string, unknown> };
  if (declared.$ref) {
    const name = declared.$ref.split('/').pop()!;
    return { pointer: `#/components/responses/${escape(name)}`, content: (spec.components.responses[name] as { content?: Record<string, unknown> }).content };
  }
  return { pointer: `#/paths/${escape(meta.path)}/${meta.method.toLowerCase()}/responses/${key}`, content: declared.content };
}

/** Returns a list of contract violations (empty when the response honours the spec). */
export function contractViolations(operationId: OperationId, status: number, contentType: string | undefined, body: unknown): string[] {
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
