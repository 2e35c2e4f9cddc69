/**
 * The rules of attribute sets and of the values departments hold for their fields
 * (docs/departments.md#attribute-sets-and-values).
 */
import { isDeepStrictEqual } from 'node:util';
import { coded, FIELDS_NAMED, type FieldErrors } from '../../platform/http/problem.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';
import type { AttributeField, AttributeType } from './table.ts';

/** Department keys that are not attribute values; attribute fields may not use them. */
export const DEPARTMENT_KEYS = [
  'id',
  'name',
  'user_id',
  'tags',
  'notification_setting_ids',
  'attribute_set_ids',
  'attributes',
  'created_at',
  'updated_at',
  'static_url',
  'url',
  'url_context',
  'users',
] as const;

/** What an attribute set is written from (create and update take the same body). */
export interface AttributeSetDraft {
  name: string;
  fields: readonly Pick<AttributeField, 'key'>[];
}

/** The set's name may not be blank; field keys are unique in the set and may not shadow a department field. */
export function attributeSetErrors(draft: AttributeSetDraft): FieldErrors {
  const errors: FieldErrors = {};
  const seen = new Set<string>();
  draft.fields.forEach((field, index) => {
    if ((DEPARTMENT_KEYS as readonly string[]).includes(field.key)) errors[`fields.${index}.key`] = [coded('reserved', 'is a department field name')];
    else if (seen.has(field.key)) errors[`fields.${index}.key`] = [coded('taken', 'is used twice')];
    seen.add(field.key);
  });
  if (draft.name.trim() === '') errors.name = [coded('required', 'must not be blank')];
  return errors;
}

/**
 * The set's new fields against the sets attached beside it to a department
 * (`fieldsAttachedBeside`): a key another of them defines with another type is a 422 on
 * the field's type (`fields.<i>.type`). Two such sets would make the department refuse
 * every write until one is detached (`attributeFieldTypes`).
 */
export function clashesBeside(fields: readonly AttributeField[], beside: readonly { fields: readonly AttributeField[] }[]): FieldErrors {
  const types = new Map<string, AttributeType[]>();
  for (const set of beside) for (const field of set.fields) (types.get(field.key) ?? types.set(field.key, []).get(field.key)!).push(field.type);
  const errors: FieldErrors = {};
  fields.forEach((field, index) => {
    const other = types.get(field.key)?.find((type) => type !== field.type);
    if (other) {
      errors[`fields.${index}.type`] = [coded('mismatch', `must be ${other}: a set attached beside this one to a department defines ${field.key} so`)];
    }
  });
  return errors;
}

/** Does `value` fit a field of `type`? (null always fits: it clears the value.) */
export function fitsAttributeType(type: AttributeType, value: unknown): boolean {
  if (value === null) return true;
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'integer':
      return typeof value === 'number' && Number.isSafeInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'date':
      return typeof value === 'string' && isCalendarDate(value);
  }
}

/** Field key → type over the fields of the given sets; a key two sets define with different types is a conflict. */
export function attributeFieldTypes(sets: readonly { fields: readonly AttributeField[] }[]): { types: Map<string, AttributeType>; conflicts: string[] } {
  const types = new Map<string, AttributeType>();
  const conflicts: string[] = [];
  for (const set of sets) {
    for (const field of set.fields) {
      const known = types.get(field.key);
      if (known && known !== field.type) conflicts.push(field.key);
      else types.set(field.key, field.type);
    }
  }
  return { types, conflicts };
}

/**
 * The department's attribute values after a create or update: values for fields of the
 * attached sets only, each of the field's type (errors keyed by the attribute key);
 * `null` removes a value; values not sent are kept from `current`, unless their field is
 * no longer attached. A value of a field no longer attached is dropped too when it is sent
 * as it is stored, or as null: the department sent back as it was read is no error.
 * `sent` is the body; its `declared` keys (the department's own) are not attribute values.
 * At most one fault more than a problem names (FIELDS_NAMED) is collected.
 */
export function mergeAttributeValues(
  types: Map<string, AttributeType>,
  sent: Record<string, unknown>,
  current: Record<string, unknown>,
  errors: FieldErrors,
  declared: readonly string[] = [],
): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(current)) {
    const type = types.get(key);
    if (!type) continue;
    result[key] = value;
    // A value stored before its field changed type is judged now, unless the write replaces it.
    if (!Object.hasOwn(sent, key) && !fitsAttributeType(type, value)) {
      errors[key] = [coded(type === 'date' ? 'format' : 'type', `holds a value stored before this field became of type ${type}: send a new value or null`)];
    }
  }
  // One field beyond those a problem names tells it that there are more; the rest are not
  // looked at (a body of 75,000 unknown keys would be as many errors). Keys, not entries:
  // only the keys looked at are read.
  let faults = Object.keys(errors).length;
  for (const key of Object.keys(sent)) {
    if (faults > FIELDS_NAMED) break;
    if (declared.includes(key)) continue;
    const value = sent[key];
    const type = types.get(key);
    if (!type) {
      if (Object.hasOwn(current, key) && (value === null || isDeepStrictEqual(value, current[key]))) continue;
      errors[key] = [coded('unknown_property', 'is not a field of an attached attribute set')];
      faults++;
      continue;
    }
    if (!fitsAttributeType(type, value)) {
      errors[key] = [type === 'date' ? coded('format', 'must be a date (YYYY-MM-DD)') : coded('type', `must be of type ${type}`)];
      faults++;
      continue;
    }
    if (value === null) delete result[key];
    else result[key] = value;
  }
  return result;
}
