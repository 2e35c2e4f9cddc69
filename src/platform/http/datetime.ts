/** Datetime formats of the API: RFC 3339 generally; `YYYY-MM-DD HH:MM:SS` (UTC) for notifications (seed convention 9). */
export function rfc3339(value: Date | null | undefined): string | null {
  return value ? value.toISOString() : null;
}

export function notificationDatetime(value: Date | null | undefined): string | null {
  return value ? value.toISOString().slice(0, 19).replace('T', ' ') : null;
}
