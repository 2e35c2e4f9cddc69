import { inArray } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import type { FieldErrors } from '../../platform/http/problem.ts';
import { attributeSets, type AttributeType } from './table.ts';
import { isCalendarDate } from '../../platform/http/dates.ts';

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
  'users',
] as const;


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

/** Field key → type over the given sets; a key two sets define with different types is a conflict. */
export async function attributeFieldTypes(tx: Tx, setIds: number[]): Promise<{ types: Map<string, AttributeType>; conflicts: string[] }> {
  const types = new Map<string, AttributeType>();
  const conflicts: string[] = [];
  if (setIds.length === 0) return { types, conflicts };
  const sets = await tx.select({ fields: attributeSets.fields }).from(attributeSets).where(inArray(attributeSets.id, setIds));
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
 * no longer attached.
 */
export function mergeAttributeValues(
  types: Map<string, AttributeType>,
  sent: Record<string, unknown>,
  current: Record<string, unknown>,
  errors: FieldErrors,
): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(current)) if (types.has(key)) result[key] = value;
  for (const [key, value] of Object.entries(sent)) {
    const type = types.get(key);
    if (!type) {
      errors[key] = ['is not a field of an attached attribute set'];
      continue;
    }
    if (!fitsAttributeType(type, value)) {
      errors[key] = [type === 'date' ? 'must be a date (YYYY-MM-DD)' : `must be of type ${type}`];
      continue;
    }
    if (value === null) delete result[key];
    else result[key] = value;
  }
  return result;
}
