/** Calendar dates `YYYY-MM-DD`, the one rule for every date input (attributes, form values, CSV import). */

const DATE = /^(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/;

/**
 * Whether `text` is a real calendar date `YYYY-MM-DD` (2023-02-30 and 2023-02-29 are not).
 * Years run from 0001: PostgreSQL has no year 0.
 */
export function isCalendarDate(text: string): boolean {
  if (!DATE.test(text)) return false;
  // Read from the digits in place (the form is checked): no match array, no substrings.
  const digit = (at: number) => text.charCodeAt(at) - 48;
  const year = digit(0) * 1000 + digit(1) * 100 + digit(2) * 10 + digit(3);
  const month = digit(5) * 10 + digit(6);
  const day = digit(8) * 10 + digit(9);
  if (year < 1) return false;
  // The Gregorian calendar, as PostgreSQL's dates (and JavaScript's) count it.
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return day <= (month === 2 ? (leap ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31);
}
