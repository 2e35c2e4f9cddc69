import type { FieldType } from './table.ts';

const DATE = /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/;

/** Whether `text` is a real calendar date `YYYY-MM-DD` (2026-02-30 is not). */
export function isCalendarDate(text: string): boolean {
  if (!DATE.test(text)) return false;
  const date = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === text;
}

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
