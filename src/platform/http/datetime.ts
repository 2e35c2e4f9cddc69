/**
 * Datetimes of the API, written and read only here (docs/api-conventions.md#datetimes-and-calendar-dates):
 * RFC 3339 in UTC generally; `YYYY-MM-DD HH:MM:SS` in UTC for notifications (the spec's
 * `Datetime` schema in components/notifications.yaml). Calendar dates are dates.ts.
 */
import { invalid } from './problem.ts';

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
    throw invalid({ [field]: ['must be a valid datetime in the form YYYY-MM-DD HH:MM:SS'] });
  }
  return date;
}
