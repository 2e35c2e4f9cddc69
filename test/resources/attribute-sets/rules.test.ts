/** The attribute-set rules on their own (no HTTP, no database). */
import t from 'tap';
import { coded, type FieldErrors } from '../../../src/platform/http/problem.ts';
import {
  attributeFieldTypes,
  attributeSetErrors,
  clashesBeside,
  DEPARTMENT_KEYS,
  fitsAttributeType,
  mergeAttributeValues,
} from '../../../src/resources/attribute-sets/rules.ts';

t.test('attributeSetErrors: a blank name, department field names and keys used twice', async (t) => {
  t.strictSame(attributeSetErrors({ name: 'Finance', fields: [{ key: 'cost_center' }, { key: 'budget' }] }), {});
  t.strictSame(attributeSetErrors({ name: '  ', fields: [{ key: 'name' }, { key: 'a' }, { key: 'a' }, { key: 'tags' }] }), {
    'fields.0.key': [coded('reserved', 'is a department field name')],
    'fields.2.key': [coded('taken', 'is used twice')],
    'fields.3.key': [coded('reserved', 'is a department field name')],
    name: [coded('required', 'must not be blank')],
  });
  for (const key of DEPARTMENT_KEYS) t.ok(attributeSetErrors({ name: 'X', fields: [{ key }] })['fields.0.key'], key);
});

t.test('fitsAttributeType: each type, null always fits', async (t) => {
  const fits: [Parameters<typeof fitsAttributeType>[0], unknown, boolean][] = [
    ['string', 'x', true],
    ['string', 1, false],
    ['integer', 12, true],
    ['integer', 1.5, false],
    ['integer', 2 ** 53, false],
    ['integer', '12', false],
    ['number', 1.5, true],
    ['number', Infinity, false],
    ['boolean', false, true],
    ['boolean', 'true', false],
    ['date', '2020-02-29', true],
    ['date', '2021-02-29', false],
    ['date', '2020-02-29T00:00:00Z', false],
  ];
  for (const [type, value, expected] of fits) t.equal(fitsAttributeType(type, value), expected, `${type} ${JSON.stringify(value)}`);
  for (const type of ['string', 'integer', 'number', 'boolean', 'date'] as const) t.ok(fitsAttributeType(type, null), `${type} null`);
});

t.test('attributeFieldTypes: key → type over all sets; a key defined with two types is a conflict', async (t) => {
  t.strictSame(attributeFieldTypes([]), { types: new Map(), conflicts: [] });
  const { types, conflicts } = attributeFieldTypes([
    {
      fields: [
        { key: 'a', type: 'string' },
        { key: 'b', type: 'integer' },
      ],
    },
    {
      fields: [
        { key: 'a', type: 'string' },
        { key: 'b', type: 'number' },
        { key: 'c', type: 'date' },
      ],
    },
  ]);
  t.strictSame(
    [...types],
    [
      ['a', 'string'],
      ['b', 'integer'],
      ['c', 'date'],
    ],
  );
  t.strictSame(conflicts, ['b']);
});

t.test('mergeAttributeValues: typed values of attached fields; null removes; unsent kept unless detached', async (t) => {
  const types = new Map([
    ['cost_center', 'string'],
    ['head_count', 'integer'],
    ['founded', 'date'],
  ] as const);
  const errors: FieldErrors = {};
  const merged = mergeAttributeValues(new Map(types), { head_count: 12, founded: null }, { cost_center: 'A1', founded: '2020-01-01', detached: true }, errors);
  t.strictSame(errors, {});
  t.strictSame(merged, { cost_center: 'A1', head_count: 12 });
  const bad: FieldErrors = {};
  mergeAttributeValues(new Map(types), { head_count: '12', founded: '2020-13-01', unknown: 1 }, {}, bad);
  t.strictSame(bad, {
    head_count: [coded('type', 'must be of type integer')],
    founded: [coded('format', 'must be a date (YYYY-MM-DD)')],
    unknown: [coded('unknown_property', 'is not a field of an attached attribute set')],
  });
  // A value stored before its field changed type is judged when the department is next written, unless replaced.
  const stale: FieldErrors = {};
  const kept = mergeAttributeValues(new Map(types), { cost_center: 'B2' }, { head_count: 'twelve', founded: 99999999999, cost_center: 'A1' }, stale);
  t.strictSame(stale, {
    head_count: [coded('type', 'holds a value stored before this field became of type integer: send a new value or null')],
    founded: [coded('format', 'holds a value stored before this field became of type date: send a new value or null')],
  });
  t.strictSame(kept.cost_center, 'B2');
  const replaced: FieldErrors = {};
  t.strictSame(mergeAttributeValues(new Map(types), { head_count: 12, founded: null }, { head_count: 'twelve', founded: 99999999999 }, replaced), {
    head_count: 12,
  });
  t.strictSame(replaced, {}, 'sending a new value or null for the key is accepted');
  // A value of a field no longer attached is answered until the next write drops it: sent back as read, or as null, it is no error.
  const detached: FieldErrors = {};
  const dropped = mergeAttributeValues(new Map(types), { gone: 7, cleared: null, cost_center: 'A1' }, { gone: 7, cleared: 'x', cost_center: 'A1' }, detached);
  t.strictSame(detached, {}, 'the stored value of a detached field sent back is accepted');
  t.strictSame(dropped, { cost_center: 'A1' }, 'and dropped with the rest of the detached values');
  const changed: FieldErrors = {};
  mergeAttributeValues(new Map(types), { gone: 8 }, { gone: 7 }, changed);
  t.strictSame(changed, { gone: [coded('unknown_property', 'is not a field of an attached attribute set')] }, 'another value for it is still refused');
  const inherited: FieldErrors = {};
  mergeAttributeValues(new Map(types), { constructor: null, toString: 1 }, {}, inherited);
  t.strictSame(Object.keys(inherited).sort(), ['constructor', 'toString'], 'a key the stored object only inherits is no stored value');
  // A field whose key every object inherits (`constructor`): its stale value is judged like any other's.
  const staleInherited: FieldErrors = {};
  mergeAttributeValues(new Map([['constructor', 'boolean']]), {}, { constructor: 7 }, staleInherited);
  // Compared as entries: tap takes an own `constructor` for the object's class.
  t.strictSame(
    Object.entries(staleInherited),
    [['constructor', [coded('type', 'holds a value stored before this field became of type boolean: send a new value or null')]]],
    'a write that does not send the key does not replace its value',
  );
});

t.test('clashesBeside: a key another type beside it, in any department, is a mismatch on its type', async (t) => {
  const fields = [
    { key: 'note', type: 'string' as const },
    { key: 'amount', type: 'string' as const },
  ];
  // Two departments: the first attaches the key with the same type, the second with another.
  const beside = [{ fields: [{ key: 'amount', type: 'string' as const }] }, { fields: [{ key: 'amount', type: 'number' as const }] }];
  t.strictSame(Object.keys(clashesBeside(fields, beside)), ['fields.1.type']);
  t.match(clashesBeside(fields, beside)['fields.1.type']![0], { code: 'mismatch' });
  t.strictSame(clashesBeside(fields, [beside[0]!]), {}, 'the same type is no clash');
  t.strictSame(clashesBeside(fields, []), {}, 'nothing beside it');
});
