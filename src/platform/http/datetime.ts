import { invalid } from './problem.ts';

/** Datetime formats of the API: RFC 3339 generally; `YYYY-MM-DD HH:MM:SS` (UTC) for notifications (see the `Datetime` schema of the spec). */
export function rfc3339(value: Date | null | undefined): string | null {
  return value ? value.toISOString() : null;
}

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
