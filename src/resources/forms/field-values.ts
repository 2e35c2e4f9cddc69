import { isCalendarDate } from '../../platform/http/dates.ts';
import type { FieldType } from './table.ts';


/** Why `value` does not fit a field of this type, or null when it does (null always fits: it clears). */
export function fieldValueProblem(field: { fieldType: FieldType; options: string[] | null }, value: unknown): string | null {
  if (value === null) return null;
  switch (field.fieldType) {
    case 'text':
      return typeof value === 'string' ? null : 'must be a string';
    case 'number':
      return typeof value === 'number' ? null : 'must be a number';
    case 'boolean':
      return typeof value === 'boolean' ? null : 'must be a boolean';
    case 'date':
      return typeof value === 'string' && isCalendarDate(value) ? null : 'must be a date YYYY-MM-DD';
    case 'select':
      return typeof value === 'string' && (field.options ?? []).includes(value)
        ? null
        : `must be one of: ${(field.options ?? []).join(', ')}`;
  }
}
