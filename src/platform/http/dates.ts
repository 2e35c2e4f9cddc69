/** Calendar dates `YYYY-MM-DD`, the one rule for every date input (attributes, form values, CSV import). */

const DATE = /^(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/;

/**
 * Whether `text` is a real calendar date `YYYY-MM-DD` (2023-02-30 and 2023-02-29 are not).
 * Years run from 0001: PostgreSQL has no year 0.
 */
export function isCalendarDate(text: string): boolean {
  const match = DATE.exec(text);
  if (!match || Number(match[1]) < 1) return false;
  const date = new Date(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])));
  // Date.UTC maps years 0–99 to 1900–1999; setUTCFullYear keeps the year as written.
  date.setUTCFullYear(Number(match[1]));
  return date.getUTCMonth() === Number(match[2]) - 1 && date.getUTCDate() === Number(match[3]);
}
