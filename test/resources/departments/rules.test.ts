/** The department rules on their own (no HTTP, no database). */
import t from 'tap';
import { coded, FIELDS_NAMED, type FieldErrors, type ProblemError } from '../../../src/platform/http/problem.ts';
import { mergeAttributeValues } from '../../../src/resources/attribute-sets/rules.ts';
import {
  attributeSetAssignments,
  departmentAvailability,
  departmentLimitRefusal,
  departmentName,
  INPUT_KEYS,
  NAMED_ENTITIES_SHOWN,
  namedByEntityPermissionsRefusal,
  type DepartmentInput,
} from '../../../src/resources/departments/rules.ts';

t.test('departmentName: trimmed and composed (NFC); blank, overlong, invisible and padded names are refused', async (t) => {
  t.strictSame(departmentName('  Sales  '), { name: 'Sales', problems: [] });
  t.equal(departmentName('Cafe\u0301').name, 'Caf\u00e9', 'stored in NFC');
  t.strictSame(departmentName('   ').problems, [{ code: 'required', message: 'must not be blank' }]);
  t.strictSame(departmentName('').problems, [{ code: 'required', message: 'must not be blank' }]);
  t.strictSame(departmentName(` ${'x'.repeat(255)} `).problems, [], 'the limit counts the stored name');
  t.strictSame(departmentName('x'.repeat(256)).problems, [{ code: 'max_length', message: 'must be at most 255 characters long' }]);
  t.match(departmentName('Sa\u200bles').problems, [{ code: 'pattern', message: /invisible/ }]);
  t.match(departmentName('Sa\u0000les').problems, [{ code: 'pattern', message: /invisible/ }]);
  t.match(departmentName('Sales\ufe0f').problems, [{ code: 'pattern', message: /invisible/ }], 'a variation selector');
  t.match(departmentName('Sales\u2800').problems, [{ code: 'pattern', message: /invisible/ }], 'the blank braille pattern');
});

t.test('attributeSetAssignments: ids or {id, sort_number}, first occurrence wins, a bare id sorts by its position', async (t) => {
  t.strictSame(attributeSetAssignments(undefined), []);
  t.strictSame(attributeSetAssignments([]), []);
  t.strictSame(attributeSetAssignments([7, { id: 3, sort_number: 10 }, { id: 5 }, 7, { id: 3, sort_number: 1 }]), [
    { id: 7, sortNumber: 0 },
    { id: 3, sortNumber: 10 },
    { id: 5, sortNumber: 2 },
  ]);
});

t.test('a body’s keys beyond the declared ones are attribute values (read-only fields fail as unknown)', async (t) => {
  const body = { name: 'X', tags: ['a'], notification_setting_ids: [1], attribute_set_ids: [2], cost_center: 'A1', user_id: 5 } as unknown as DepartmentInput;
  const types = new Map([['cost_center', 'string']] as const);
  const errors: FieldErrors = {};
  t.strictSame(mergeAttributeValues(new Map(types), body, {}, errors, INPUT_KEYS), { cost_center: 'A1' });
  t.strictSame(errors, { user_id: [coded('unknown_property', 'is not a field of an attached attribute set')] });
  const declaredOnly: FieldErrors = {};
  t.strictSame(mergeAttributeValues(new Map(types), { name: 'X' }, {}, declaredOnly, INPUT_KEYS), {});
  t.strictSame(declaredOnly, {});
});

t.test('of many unknown keys, one more than a problem names is collected', async (t) => {
  const body: Record<string, unknown> = { name: 'X' };
  for (let i = 0; i < 5_000; i++) body[`k${i}`] = i;
  const errors: FieldErrors = { name: [coded('taken', 'is already taken')] };
  mergeAttributeValues(new Map(), body, {}, errors, INPUT_KEYS);
  t.equal(Object.keys(errors).length, FIELDS_NAMED + 1);
  t.ok(errors.name && errors.k0 && errors[`k${FIELDS_NAMED - 2}`], 'the faults found first, the ones found before included');
});

t.test('departmentAvailability: remaining is null without a limit and never below 0', async (t) => {
  t.strictSame(departmentAvailability({ count: 3, limit: null }), { count: 3, limit: null, remaining: null });
  t.strictSame(departmentAvailability({ count: 1, limit: 2 }), { count: 1, limit: 2, remaining: 1 });
  t.strictSame(departmentAvailability({ count: 2, limit: 2 }), { count: 2, limit: 2, remaining: 0 });
  t.strictSame(departmentAvailability({ count: 5, limit: 2 }), { count: 5, limit: 2, remaining: 0 }, 'a limit lowered below the count');
});

t.test('departmentLimitRefusal: a 422 on name once no place is free, nothing before or without a limit', async (t) => {
  t.equal(departmentLimitRefusal(departmentAvailability({ count: 1, limit: 2 })), null);
  t.equal(departmentLimitRefusal(departmentAvailability({ count: 100, limit: null })), null);
  const refusal = departmentLimitRefusal(departmentAvailability({ count: 2, limit: 2 }));
  t.equal(refusal?.status, 422);
  t.strictSame(refusal?.errors, { name: ["the tenant's limit of 2 departments is reached"] });
});

t.test('namedByEntityPermissionsRefusal: names what the caller may administer, of the rest only that there is some', async (t) => {
  t.equal(namedByEntityPermissionsRefusal({ shown: [], hidden: false }), null, 'no entity names the department');
  const detail = (refusal: ProblemError | null) => refusal?.errors?.department?.[0];
  const shown = [
    { entityType: 'form', entityId: 4 },
    { entityType: 'menuItem', entityId: 9 },
  ];
  t.equal(detail(namedByEntityPermissionsRefusal({ shown, hidden: false })), 'is named by entity permissions (form 4, menuItem 9); remove it from them first');
  t.equal(
    detail(namedByEntityPermissionsRefusal({ shown: [], hidden: true })),
    'is named by entity permissions (records you cannot administer); remove it from them first',
    'hidden records give no type or id',
  );
  t.equal(namedByEntityPermissionsRefusal({ shown, hidden: true })?.status, 422);
  t.match(detail(namedByEntityPermissionsRefusal({ shown, hidden: true })), /\(form 4, menuItem 9, records you cannot administer\)/);
  const full = Array.from({ length: NAMED_ENTITIES_SHOWN }, (_, i) => ({ entityType: 'menuItem', entityId: i + 1 }));
  t.match(detail(namedByEntityPermissionsRefusal({ shown: full, hidden: false })), /menuItem 5, …\)/, 'a full page ends in an ellipsis');
});
