/** Datetime formats of the API: RFC 3339 generally; `YYYY-MM-DD HH:MM:SS` (UTC) for notifications (see the `Datetime` schema of the spec). */
export function rfc3339(value: Date | null | undefined): string | null {
  return value ? value.toISOString() : null;
}

export function notificationDatetime(value: Date | null | undefined): string | null {
  return value ? value.toISOString().slice(0, 19).replace('T', ' ') : null;
}
