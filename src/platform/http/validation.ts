import { Ajv, type ErrorObject, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';
import { isCalendarDate } from './dates.ts';
import { isNotificationDatetimeSchema, isRfc3339DateTime, NOTIFICATION_DATETIME_PROBLEM } from './datetime.ts';
import { FIELD_CODES, FIELDS_NAMED, type FieldCode, type FieldErrors } from './problem.ts';

/**
 * A text's length as JSON Schema's `maxLength` and `minLength` count it, and people count
 * characters: in code points (an emoji is one, where `String.length` counts two). Rules
 * that bound a length outside the schema (a value normalised first, a CSV cell, a SCIM
 * attribute) count with this, so they agree with the contract.
 */
export function characterCount(text: string): number {
  // As `[...text].length` counts, without making the array: a surrogate pair is one code point.
  let length = 0;
  for (let i = 0; i < text.length; i++, length++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
  }
  return length;
}

// ajv-formats is CommonJS: its default import is the plugin function itself (datetime.ts reads one of its formats).
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({
    allErrors: true,
    removeAdditional: false, // unknown keys must fail, not vanish
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
  // RFC 3339's date-time, offsets with their minutes (ajv-formats' takes `+14` and `+1400` as well).
  ajv.addFormat('date-time', isRfc3339DateTime);
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

/**
 * How numbers are written in text (paths, query strings, multipart fields): decimal
 * digits, an optional minus sign and, for non-integers, a decimal fraction. At most 20
 * digits before the point, leading zeros aside, so the value is always finite and the
 * spec's bounds judge it.
 */
const TEXT_INTEGER = /^-?(?=[0-9])0*(?:[1-9][0-9]{0,19})?$/;
const TEXT_NUMBER = /^-?(?=[0-9])0*(?:[1-9][0-9]{0,19})?(\.[0-9]{1,20})?$/;
/** More digits than those 20 before the point: a number written as it should be, beyond every range. */
const TEXT_INTEGER_TOO_LONG = /^-?0*[1-9][0-9]{20,}$/;

/** ajv-formats' `email` (its full mode, as `addFormats(ajv)` sets it): the API's format of an e-mail address. */
const EMAIL_FORMAT = addFormats.get('email') as RegExp;

/** Whether `text` is an e-mail address as the spec's `format: email` reads one: for values that do not come through it (a CSV cell, SCIM). */
export const isEmailAddress = (text: string): boolean => EMAIL_FORMAT.test(text);

/** Whether `text` is an integer as validation reads one in text (a path's id): `012` is, ` 12` and `1e1` are not. */
export const isTextInteger = (text: string): boolean => TEXT_INTEGER.test(text);
const TEXT_NUMBER_TOO_LONG = /^-?0*[1-9][0-9]{20,}(\.[0-9]{1,20})?$/;

/** The range of a format that bounds integers (ajv-formats' int64 admits every integer a JSON number holds). */
const FORMAT_RANGES: Record<string, { minimum: number; maximum: number }> = {
  int32: { minimum: -(2 ** 31), maximum: 2 ** 31 - 1 },
};

type SchemaNode = {
  type?: string | string[];
  format?: string;
  minimum?: number;
  maximum?: number;
  allOf?: SchemaNode[];
  items?: SchemaNode;
  properties?: Record<string, SchemaNode>;
  additionalProperties?: SchemaNode | boolean;
};

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The error of a number written in decimal digits, too many of them (more than 20 before
 * the point): it lies beyond every bound, so it is told the bound it breaks (the schema's
 * `maximum` or `minimum`, else its format's range; without either, that it is too large or
 * too small) as Ajv tells a number of 20 digits, not that it is no decimal number.
 */
function outOfRange(node: SchemaNode, path: string, negative: boolean): ErrorObject {
  const keyword = negative ? 'minimum' : 'maximum';
  const bound = node[keyword] ?? (node.format === undefined ? undefined : FORMAT_RANGES[node.format]?.[keyword]);
  const message = bound === undefined ? `is too ${negative ? 'small' : 'large'}` : `must be ${negative ? '>=' : '<='} ${bound}`;
  return { instancePath: path, schemaPath: `#/${keyword}`, keyword, params: { comparison: negative ? '>=' : '<=', limit: bound }, message };
}

/**
 * Numbers written in text other than in plain decimal: Ajv's coercion reads text with
 * JavaScript's `Number()`, which takes `1e400` and `Infinity` (infinite values that then
 * skip every bound, format and integer check), `0x10` and ` 1`. Each is refused as Ajv
 * would refuse a wrong type, before Ajv coerces it. Walks the data along the schema (the
 * shapes query strings and multipart bodies take: properties, items, allOf).
 */
export function textNumberErrors(schema: unknown, data: unknown, path = '', errors: ErrorObject[] = []): ErrorObject[] {
  if (!isRecord(schema)) return errors;
  const node = schema as SchemaNode;
  for (const part of node.allOf ?? []) textNumberErrors(part, data, path, errors);
  const types = Array.isArray(node.type) ? node.type : node.type ? [node.type] : [];
  if (typeof data === 'string') {
    if (!types.includes('string')) {
      const integer = types.includes('integer');
      if ((integer || types.includes('number')) && !(integer ? TEXT_INTEGER : TEXT_NUMBER).test(data)) {
        if ((integer ? TEXT_INTEGER_TOO_LONG : TEXT_NUMBER_TOO_LONG).test(data)) {
          errors.push(outOfRange(node, path, data.startsWith('-')));
          return errors;
        }
        errors.push({
          instancePath: path,
          schemaPath: '#/type',
          keyword: 'type',
          params: { type: integer ? 'integer' : 'number' },
          message: integer ? 'must be an integer written in decimal digits' : 'must be a number written in decimal digits',
        });
        return errors;
      }
    }
    // coerceTypes 'array': a single value stands for a one-element array.
    if (types.includes('array') && node.items) textNumberErrors(node.items, data, path, errors);
  } else if (Array.isArray(data)) {
    const items = node.items;
    if (types.includes('array')) {
      if (items) data.forEach((item, index) => textNumberErrors(items, item, `${path}/${index}`, errors));
    } else {
      // An array where one value is expected (`?limit=1&limit=2`): the coercion unwraps one element.
      data.forEach((item) => textNumberErrors(node, item, path, errors));
    }
  } else if (isRecord(data)) {
    for (const [key, value] of Object.entries(data)) {
      const property = node.properties?.[key] ?? (isRecord(node.additionalProperties) ? node.additionalProperties : undefined);
      if (property) textNumberErrors(property, value, `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`, errors);
    }
  }
  return errors;
}

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

/** A validator for text parts: numbers must be written in decimal (textNumberErrors), then Ajv. */
function textValidator(schema: object): Validate {
  const validate = textAjv.compile(schema);
  const wrapped: Validate = (data: unknown) => {
    const errors = textNumberErrors(schema, data);
    if (errors.length > 0) {
      wrapped.errors = errors;
      return false;
    }
    const valid = validate(data);
    wrapped.errors = validate.errors;
    return valid;
  };
  return wrapped;
}

/**
 * A validator compiled on its first use: a process compiles the schemas of the operations
 * it is asked for, not of every operation at start (docs/performance.md#memory-of-a-started-process).
 */
function compiledOnFirstUse(compile: () => Validate): Validate {
  let validate: Validate | undefined;
  const lazy: Validate = (data: unknown) => {
    validate ??= compile();
    const valid = validate(data);
    lazy.errors = validate.errors;
    return valid;
  };
  return lazy;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart, contentType }) => {
  if (httpPart === 'body' && contentType !== 'multipart/form-data') return compiledOnFirstUse(() => bodyAjv.compile(schema as object)) as never;
  return compiledOnFirstUse(() => textValidator(schema as object)) as never;
};

/** The keys an object schema requires (none for anything else). */
function requiredKeys(schema: unknown): string[] {
  const required = (schema as { required?: unknown } | undefined)?.required;
  return Array.isArray(required) ? required.filter((key): key is string => typeof key === 'string') : [];
}

/** `a or b`, `a, b or c`. */
const either = (keys: string[]) => (keys.length > 1 ? `${keys.slice(0, -1).join(', ')} or ${keys.at(-1)}` : (keys[0] ?? ''));

/**
 * The `required` errors of an `anyOf` whose every branch asks for one key of its own
 * (`anyOf: [{required: [seen_at]}, {required: [read_at]}]`), each mapped to the message
 * that says one of those keys is required: Ajv's own "is required" on each key reads as
 * if every key were.
 */
function alternativeKeys(errors: ErrorObject[]): Map<ErrorObject, string> {
  const messages = new Map<ErrorObject, string>();
  for (const anyOf of errors) {
    if (anyOf.keyword !== 'anyOf' || !Array.isArray(anyOf.schema)) continue;
    const keys = anyOf.schema.map((branch: unknown) => {
      const required = isRecord(branch) && Object.keys(branch).length === 1 ? branch.required : undefined;
      return Array.isArray(required) && required.length === 1 && typeof required[0] === 'string' ? required[0] : undefined;
    });
    if (keys.some((key) => key === undefined)) continue;
    const message = `one of ${either(keys as string[])} is required`;
    for (const error of errors) {
      if (error.keyword === 'required' && error.instancePath === anyOf.instancePath && error.schemaPath.startsWith(`${anyOf.schemaPath}/`)) {
        messages.set(error, message);
      }
    }
  }
  return messages;
}

/** JSON Schema keyword → field code: `minLength` → `min_length`; a keyword without a code of its own is `invalid`. */
export function keywordCode(keyword: string): FieldCode {
  const code = keyword.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
  return (FIELD_CODES as readonly string[]).includes(code) ? (code as FieldCode) : 'invalid';
}

/**
 * Ajv errors → `errors` of a problem document, each message with its code (keywordCode), keyed by dotted field path. An object that
 * a condition makes required and whose own keys are required (`if: {type: basic}, then:
 * {required: [basic], properties: {basic: {required: [username, password]}}}`) is reported
 * as its missing keys, `auth.basic.username` and `auth.basic.password`: the exact paths
 * the condition asks for. Unconditional required objects keep their own path. Keys of
 * which one is required (`anyOf` of `required`) are each told "one of … is required"; a
 * notification datetime that fails in any way is told the form it must have
 * (NOTIFICATION_DATETIME_PROBLEM), not its pattern.
 */
export function fieldErrors(errors: ErrorObject[], context?: string): FieldErrors {
  const alternatives = alternativeKeys(errors);
  // Keys are the client's (`constructor`, `toString`): collected in a Map, never looked up on an object.
  const result = new Map<string, { code: FieldCode; message: string }[]>();
  const add = (key: string, message: string, code: FieldCode) => {
    const messages = result.get(key) ?? [];
    if (!messages.some((entry) => entry.message === message)) messages.push({ code, message });
    result.set(key, messages);
  };
  // Unknown keys last: when more fields are at fault than a problem names, those the
  // operation knows are named first.
  const known = errors.filter((error) => error.keyword !== 'additionalProperties');
  for (const error of known.length === errors.length ? errors : [...known, ...errors.filter((error) => error.keyword === 'additionalProperties')]) {
    // One field beyond those a problem names (`FIELDS_NAMED`) tells it that there are more;
    // the rest are not looked at (a body of 100,000 unknown keys is as many errors).
    if (result.size > FIELDS_NAMED) break;
    const segments = error.instancePath
      .split('/')
      .slice(1)
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let message = error.message ?? 'is invalid';
    let code = keywordCode(error.keyword);
    if (error.keyword === 'required') {
      const missing = String((error.params as { missingProperty: string }).missingProperty);
      const conditional = error.schemaPath.endsWith('/then/required');
      const nested = conditional ? requiredKeys((error.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties?.[missing]) : [];
      if (nested.length > 0) {
        for (const key of nested) add([...segments, missing, key].join('.'), 'is required', 'required');
        continue;
      }
      segments.push(missing);
      message = alternatives.get(error) ?? 'is required';
    } else if (error.keyword === 'propertyNames') {
      continue; // the error below it names the key
    } else if (error.propertyName !== undefined) {
      // A key that breaks `propertyNames` (e.g. a header name with a space).
      segments.push(error.propertyName);
      message = `is not an allowed name: ${message}`;
      code = 'property_name';
    } else if (error.keyword === 'additionalProperties') {
      segments.push(String((error.params as { additionalProperty: string }).additionalProperty));
      message = 'is not a known key';
      code = 'unknown_property';
    } else if (isNotificationDatetimeSchema(error.parentSchema)) {
      message = NOTIFICATION_DATETIME_PROBLEM; // also instead of its length and type errors: one message says it all
      code = 'format';
    } else if (error.keyword === 'enum') {
      message = `must be one of: ${(error.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    } else if (error.keyword === 'discriminator') {
      // oneOf + discriminator: the error belongs to the tag property (e.g. a source's `type`)
      const params = error.params as { error: string; tag: string };
      segments.push(params.tag);
      message = params.error === 'tag' ? 'is required and must be a string' : 'is not one of the documented values';
      code = params.error === 'tag' ? 'required' : 'enum';
    } else if (error.keyword === 'if' || error.keyword === 'oneOf' || error.keyword === 'anyOf') {
      continue; // the branch errors say more
    }
    add(segments.length > 0 ? segments.join('.') : context === 'body' || !context ? 'body' : context, message, code);
  }
  return Object.fromEntries(result);
}
