/**
 * The rules of notifications (docs/notifications.md): which types exist, what a dispatch
 * request must name, how a body is cleaned, and how a read-state request changes a record.
 */
import { isNull, sql, type SQL } from 'drizzle-orm';
import sanitizeHtml from 'sanitize-html';
import { parseNotificationDatetime } from '../../platform/http/datetime.ts';
import { navigationUrlProblems, ROUTE_FORMS } from '../../platform/http/navigation-url.ts';
import { coded, type FieldErrors } from '../../platform/http/problem.ts';
import { notifications, type NotificationData } from './table.ts';

/** The generic notification's type (operation createNotification); it has no target. */
export const CUSTOM_NOTIFICATION = 'customNotification';

/**
 * The typed notifications producers send (operation createTypedNotification): type →
 * target alias (docs/notifications.md#typed-notifications).
 */
export const TYPED_NOTIFICATIONS = {
  infoboardPostCreated: 'infoboardPost',
  infoboardPostUpdated: 'infoboardPost',
  infoboardPostReadingConfirmationRequired: 'infoboardPost',
  manualEntryUpdated: 'manualEntry',
} as const;

export type TypedNotification = keyof typeof TYPED_NOTIFICATIONS;

/**
 * The notification setting (delivery category) that decides who receives a typed
 * notification: the type's name in snake_case (`infoboardPostCreated` →
 * `infoboard_post_created`). The generic notification has none: an explicit message goes
 * to whoever it names. See docs/notifications.md#notification-settings.
 */
export function notificationSettingKey(type: string): string | null {
  if (!Object.hasOwn(TYPED_NOTIFICATIONS, type)) return null;
  return type.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

/** Who a dispatch goes to: users and the members of departments. */
export interface Recipients {
  userIds?: number[];
  departmentIds?: number[];
}

export const RECIPIENT_REQUIRED = 'at least one user or department is required';

/**
 * What a dispatch request gets wrong before any lookup: a `url` outside the navigation URL
 * rule (shared with menu links and `default_route`), and no recipient at all (then both
 * `user_ids` and `department_ids` name the problem). Whether the ids exist is the tenant's
 * to say (docs/notifications.md#recipients).
 */
export function dispatchInputErrors(data: Pick<NotificationData, 'url'>, recipients: Recipients): FieldErrors {
  const errors: FieldErrors = {};
  const urlProblems = navigationUrlProblems(data.url, ROUTE_FORMS);
  if (urlProblems.length > 0) errors.url = urlProblems.map((problem) => coded('format', problem));
  if (!hasRecipients(recipients)) {
    errors.user_ids = [coded('required', RECIPIENT_REQUIRED)];
    errors.department_ids = [coded('required', RECIPIENT_REQUIRED)];
  }
  return errors;
}

/** Whether `recipients` names at least one user or department. */
export const hasRecipients = (recipients: Recipients): boolean => (recipients.userIds?.length ?? 0) > 0 || (recipients.departmentIds?.length ?? 0) > 0;

/** Rich text stays, scripts and event-handler attributes go (sanitize-html's allow-list, plus images). */
export function sanitizeBody(html: string): string {
  return sanitizeHtml(html, {
    allowedTags: [...sanitizeHtml.defaults.allowedTags, 'img'],
    allowedAttributes: { ...sanitizeHtml.defaults.allowedAttributes, img: ['src', 'alt', 'title', 'width', 'height'] },
  });
}

/** A read-state request body (schema ReadState): either time, or both. */
export interface ReadStateInput {
  seen_at?: string;
  read_at?: string;
}

/** A read-state request, parsed. */
export interface ReadState {
  seenAt: Date;
  readAt: Date | null;
}

/**
 * The body's datetimes, parsed (a 422 on a date the calendar lacks); `seen_at` defaults to
 * `read_at` (docs/notifications.md#read-state).
 */
export function readState(body: ReadStateInput): ReadState {
  const readAt = body.read_at !== undefined ? parseNotificationDatetime(body.read_at, 'read_at') : null;
  const seenAt = body.seen_at !== undefined ? parseNotificationDatetime(body.seen_at, 'seen_at') : readAt!;
  return { seenAt, readAt };
}

/**
 * How a read state changes a record (docs/notifications.md#read-state): `read_at` marks it
 * read (and seen, if not yet); `seen_at` alone marks it seen. Stored times are never
 * overwritten (first sight and first read win): `set` keeps a stored `seen_at`, and
 * `changes` is the condition of the records that actually change, so only they are
 * touched and counted.
 */
export function readStateChange(state: ReadState): { set: Record<string, SQL>; changes: SQL } {
  const seen = sql`coalesce(${notifications.seenAt}, ${state.seenAt.toISOString()}::timestamptz)`;
  if (state.readAt) {
    return {
      set: { readAt: sql`${state.readAt.toISOString()}::timestamptz`, seenAt: seen, updatedAt: sql`now()` },
      changes: isNull(notifications.readAt),
    };
  }
  return { set: { seenAt: seen, updatedAt: sql`now()` }, changes: isNull(notifications.seenAt) };
}
