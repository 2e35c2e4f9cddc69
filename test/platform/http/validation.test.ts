/**
 * Ajv's errors as the problem document's `errors` (fieldErrors, src/platform/http/validation.ts):
 * keys of which one is required, and notification datetimes, through the request validator
 * the API compiles its schemas with.
 */
import t from 'tap';
import type { ErrorObject } from 'ajv';
import { fieldMessages } from '../../../src/platform/http/problem.ts';
import { fieldErrors, validatorCompiler } from '../../../src/platform/http/validation.ts';
import { NOTIFICATION_DATETIME_PATTERN, NOTIFICATION_DATETIME_PROBLEM } from '../../../src/platform/http/datetime.ts';

/** The `errors` a JSON body gets from the schema, or null when it is valid (their codes: test/platform/http/problem-codes.test.ts). */
function bodyErrors(schema: object, body: unknown) {
  const validate = validatorCompiler({ schema, method: 'PUT', url: '/', httpPart: 'body' }) as ((data: unknown) => boolean) & { errors?: ErrorObject[] };
  return validate(body) ? null : fieldMessages(fieldErrors(validate.errors ?? [], 'body'));
}

const oneOfThree = {
  type: 'object',
  anyOf: [{ required: ['a'] }, { required: ['b'] }, { required: ['c'] }],
  properties: { a: { type: 'string' }, b: { type: 'string' }, c: { type: 'string' } },
};

t.test('keys of which one is required are each told so, naming every alternative', async (t) => {
  const message = 'one of a, b or c is required';
  t.strictSame(bodyErrors(oneOfThree, {}), { a: [message], b: [message], c: [message] });
  t.equal(bodyErrors(oneOfThree, { b: 'x' }), null, 'one of them is enough');
  const nested = { type: 'object', required: ['state'], properties: { state: oneOfThree } };
  t.strictSame(bodyErrors(nested, { state: {} }), { 'state.a': [message], 'state.b': [message], 'state.c': [message] }, 'at a nested path');
});

t.test('an anyOf whose branches ask for more than one key each keeps the plain message', async (t) => {
  const pairs = { type: 'object', anyOf: [{ required: ['a', 'b'] }, { required: ['c'] }] };
  t.strictSame(bodyErrors(pairs, {}), { a: ['is required'], b: ['is required'], c: ['is required'] });
});

t.test('a notification datetime is told its form, once, whatever it got wrong', async (t) => {
  const schema = {
    type: 'object',
    properties: { at: { type: 'string', maxLength: 19, pattern: NOTIFICATION_DATETIME_PATTERN }, note: { type: 'string', maxLength: 3, pattern: '^[a-z]+$' } },
  };
  for (const at of ['2026-11-28T10:00:00Z', '2026-11-28T10:00:00', '28.11.2026 10:00', 42, null]) {
    t.strictSame(bodyErrors(schema, { at }), { at: [NOTIFICATION_DATETIME_PROBLEM] }, JSON.stringify(at));
  }
  t.equal(bodyErrors(schema, { at: '2026-11-28 10:00:00' }), null);
  t.strictSame(
    bodyErrors(schema, { note: 'ABCD' }),
    { note: ['must NOT have more than 3 characters', 'must match pattern "^[a-z]+$"'] },
    'other patterns keep their messages',
  );
});
