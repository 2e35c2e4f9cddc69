/**
 * Datetimes of the API, written and read only here (docs/api-conventions.md#datetimes-and-calendar-dates):
 * RFC 3339 in UTC generally; `YYYY-MM-DD HH:MM:SS` in UTC for notifications (the spec's
 * `Datetime` schema in components/notifications.yaml). Calendar dates are dates.ts.
 */
import addFormatsModule from 'ajv-formats';
import { coded, invalid } from './problem.ts';

// ajv-formats is CommonJS: its default import is the plugin function itself.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

/** ajv-formats' `date-time`: RFC 3339's, but for the offset (isRfc3339DateTime). */
const lenientDateTime = (addFormats.get('date-time') as { validate: (value: string) => boolean }).validate;

/** RFC 3339 §5.6's `time-offset`, at the end of a date-time: `Z`, or `+hh:mm` / `-hh:mm`. */
const RFC3339_OFFSET = /(?:z|[+-]\d\d:\d\d)$/i;

/**
 * The spec's `date-time` format (JSON Schema's: RFC 3339 §5.6), which request validation
 * checks. ajv-formats' own also takes ISO 8601's offsets without minutes (`+14`) or without
 * their colon (`+1400`), which RFC 3339 does not write; JavaScript's `Date` reads no `+14`,
 * and such a value reached the reading of a filter as an instant it could not read.
 */
export const isRfc3339DateTime = (value: string): boolean => lenientDateTime(value) && RFC3339_OFFSET.test(value);

/**
 * The shape of a notification datetime: the pattern of the spec's `Datetime` and
 * `NullableDatetime` (components/notifications.yaml), which validation checks first.
 */
export const NOTIFICATION_DATETIME_PATTERN = '^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]) ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]$';

/**
 * What a notification datetime field is told when it holds anything else: another form
 * (ISO 8601 with `T` or an offset, a date alone), another type, or a date the calendar
 * lacks. One message, naming the one form accepted, wherever the field is.
 */
export const NOTIFICATION_DATETIME_PROBLEM = 'must be a valid datetime in the form YYYY-MM-DD HH:MM:SS (UTC), such as 2026-01-31 14:05:00';

/** Whether a schema is a notification datetime (`Datetime`, `NullableDatetime`): its errors then say NOTIFICATION_DATETIME_PROBLEM. */
export const isNotificationDatetimeSchema = (schema: unknown): boolean =>
  typeof schema === 'object' && schema !== null && (schema as { pattern?: unknown }).pattern === NOTIFICATION_DATETIME_PATTERN;

/** RFC 3339 in UTC with milliseconds (`2026-01-31T08:00:00.000Z`); null for no value. */
export function rfc3339(value: Date | null | undefined): string | null {
  return value ? value.toISOString() : null;
}

/** `YYYY-MM-DD HH:MM:SS` in UTC, to the second (notifications); null for no value. */
export function notificationDatetime(value: Date | null | undefined): string | null {
  return value ? value.toISOString().slice(0, 19).replace('T', ' ') : null;
}

/**
 * `YYYY-MM-DD HH:MM:SS` (UTC) → Date. The spec's pattern has checked the shape; this
 * rejects dates the calendar lacks (2026-02-30) with a 422 on `field`.
 */
export function parseNotificationDatetime(value: string, field: string): Date {
  const date = new Date(`${value.replace(' ', 'T')}Z`);
  // Years 0001–9999: PostgreSQL has no year 0.
  if (Number.isNaN(date.getTime()) || date.getUTCFullYear() < 1 || notificationDatetime(date) !== value) {
    throw invalid({ [field]: [coded('format', NOTIFICATION_DATETIME_PROBLEM)] });
  }
  return date;
}
