import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import type { ErrorObject } from 'ajv';
import { isCalendarDate } from './dates.ts';
import type { FieldErrors } from './problem.ts';

// ajv-formats is CommonJS: its default import is the plugin function itself.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({
    allErrors: true,
    removeAdditional: false, // unknown keys must fail, not vanish (stack.md)
    useDefaults: true,
    strict: true,
    strictTypes: false,
    strictRequired: false,
    strictTuples: false,
    discriminator: true,
    verbose: true, // errors carry their schema: `fieldErrors` names nested required keys from it
    ...options,
  });
  addFormats(ajv);
  // The one calendar-date rule (no 2023-02-30, no year 0000, which PostgreSQL refuses).
  ajv.addFormat('date', isCalendarDate);
  ajv.addFormat('binary', true);
  ajv.addKeyword({ keyword: 'example' });
  return ajv;
}

/**
 * JSON bodies are taken as sent ("1" is not 1); query strings, paths and multipart
 * fields are text and coerced.
 */
const bodyAjv = makeAjv({ coerceTypes: false });
const textAjv = makeAjv({ coerceTypes: 'array' });

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart, contentType }) => {
  const ajv = httpPart === 'body' && contentType !== 'multipart/form-data' ? bodyAjv : textAjv;
  return ajv.compile(schema as object) as never;
};

/** The keys an object schema requires (none for anything else). */
function requiredKeys(schema: unknown): string[] {
  const required = (schema as { required?: unknown } | undefined)?.required;
  return Array.isArray(required) ? required.filter((key): key is string => typeof key === 'string') : [];
}

/**
 * Ajv errors → `errors` of a problem document, keyed by dotted field path. An object that
 * a condition makes required and whose own keys are required (`if: {type: basic}, then:
 * {required: [basic], properties: {basic: {required: [username, password]}}}`) is reported
 * as its missing keys, `auth.basic.username` and `auth.basic.password`: the exact paths
 * the condition asks for (decisions §3 "conditional keys"). Unconditional required
 * objects keep their own path.
 */
export function fieldErrors(errors: ErrorObject[], context?: string): FieldErrors {
  const result: FieldErrors = {};
  const add = (key: string, message: string) => {
    (result[key] ??= []).includes(message) || result[key].push(message);
  };
  for (const error of errors) {
    const segments = error.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let message = error.message ?? 'is invalid';
    if (error.keyword === 'required') {
      const missing = String((error.params as { missingProperty: string }).missingProperty);
      const conditional = error.schemaPath.endsWith('/then/required');
      const nested = conditional
        ? requiredKeys((error.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties?.[missing])
        : [];
      if (nested.length > 0) {
        for (const key of nested) add([...segments, missing, key].join('.'), 'is required');
        continue;
      }
      segments.push(missing);
      message = 'is required';
    } else if (error.keyword === 'propertyNames') {
      continue; // the error below it names the key
    } else if (error.propertyName !== undefined) {
      // A key that breaks `propertyNames` (e.g. a header name with a space).
      segments.push(error.propertyName);
      message = `is not an allowed name: ${message}`;
    } else if (error.keyword === 'additionalProperties') {
      segments.push(String((error.params as { additionalProperty: string }).additionalProperty));
      message = 'is not a known key';
    } else if (error.keyword === 'enum') {
      message = `must be one of: ${(error.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    } else if (error.keyword === 'discriminator') {
      // oneOf + discriminator: the error belongs to the tag property (e.g. a source's `type`)
      const params = error.params as { error: string; tag: string };
      segments.push(params.tag);
      message = params.error === 'tag' ? 'is required and must be a string' : 'is not one of the documented values';
    } else if (error.keyword === 'if' || error.keyword === 'oneOf' || error.keyword === 'anyOf') {
      continue; // the branch errors say more
    }
    add(segments.length > 0 ? segments.join('.') : context === 'body' || !context ? 'body' : context, message);
  }
  return result;
}
