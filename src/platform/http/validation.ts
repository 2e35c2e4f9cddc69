import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import type { ErrorObject } from 'ajv';
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
    ...options,
  });
  addFormats(ajv);
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

/** Ajv errors → `errors` of a problem document, keyed by dotted field path. */
export function fieldErrors(errors: ErrorObject[], context?: string): FieldErrors {
  const result: FieldErrors = {};
  for (const error of errors) {
    const segments = error.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let message = error.message ?? 'is invalid';
    if (error.keyword === 'required') {
      segments.push(String((error.params as { missingProperty: string }).missingProperty));
      message = 'is required';
    } else if (error.keyword === 'additionalProperties') {
      segments.push(String((error.params as { additionalProperty: string }).additionalProperty));
      message = 'is not a known key';
    } else if (error.keyword === 'enum') {
      message = `must be one of: ${(error.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    } else if (error.keyword === 'if' || error.keyword === 'oneOf' || error.keyword === 'anyOf') {
      continue; // the branch errors say more
    }
    const key = segments.length > 0 ? segments.join('.') : (context === 'body' || !context ? 'body' : context);
    (result[key] ??= []).includes(message) || result[key].push(message);
  }
  return result;
}
