/**
 * The notification module's internal API. Producers call `notify(tx, …)` inside their
 * own transaction (it validates the recipients and records the dispatch), and after the
 * commit `queueDelivery(jobs, dispatch)`; the `notifications.deliver` job then expands the
 * dispatch into one notification per recipient with `storeNotificationBatch` (queries.ts),
 * the ONE place notifications are inserted (push delivery hooks in there).
 */
import { and, inArray, isNull, sql } from 'drizzle-orm';
import sanitizeHtml from 'sanitize-html';
import type { Tx } from '../../platform/database/database.ts';
import { navigationUrlProblems, ROUTE_FORMS } from '../../platform/http/navigation-url.ts';
import { invalid, type FieldErrors } from '../../platform/http/problem.ts';
import type { Jobs } from '../../platform/jobs/jobs.ts';
import { deliverNotifications } from './deliver.job.ts';
import { departments } from '../departments/table.ts';
import { users } from '../users/table.ts';
import type { Dispatch } from './queries.ts';
import { notificationDispatches, type NotificationData } from './table.ts';

/** Decisions §6: the generic notification's type; it has no target. */
export const CUSTOM_NOTIFICATION = 'customNotification';

/** Typed notifications of the seed's Events section: type → target alias. */
export const TYPED_NOTIFICATIONS = {
  infoboardPostCreated: 'infoboardPost',
  infoboardPostUpdated: 'infoboardPost',
  infoboardPostReadingConfirmationRequired: 'infoboardPost',
  manualEntryUpdated: 'manualEntry',
} as const;

export interface NotifyInput {
  recipients: { userIds?: number[]; departmentIds?: number[] };
  type: string;
  targetable?: { type: string; id: number } | null;
  data: NotificationData;
  /** The requesting user, if any (kept on the dispatch for auditing). */
  createdBy?: number | null;
}

/** Rich text stays, scripts and event-handler attributes go (sanitize-html's allow-list). */
export function sanitizeBody(html: string): string {
  return sanitizeHtml(html, {
    allowedTags: [...sanitizeHtml.defaults.allowedTags, 'img'],
    allowedAttributes: { ...sanitizeHtml.defaults.allowedAttributes, img: ['src', 'alt', 'title', 'width', 'height'] },
  });
}

/** 422 `key.N` for every id that is not (or no longer) a record of the tenant. */
function reportMissing(key: string, ids: number[], found: Set<number>, errors: FieldErrors) {
  ids.forEach((id, index) => {
    if (!found.has(id)) errors[`${key}.${index}`] = ['does not exist'];
  });
}

/**
 * Validates the `url` (the navigation URL rule shared with menu links and `default_route`)
 * and the recipients (every id exists in the transaction's tenant; users not deleted),
 * then records the dispatch. Nothing is delivered until `queueDelivery`.
 */
export async function notify(tx: Tx, input: NotifyInput): Promise<Dispatch> {
  const userIds = input.recipients.userIds ?? [];
  const departmentIds = input.recipients.departmentIds ?? [];
  const errors: FieldErrors = {};
  const urlProblems = navigationUrlProblems(input.data.url, ROUTE_FORMS);
  if (urlProblems.length > 0) errors.url = urlProblems;
  if (userIds.length === 0 && departmentIds.length === 0) {
    const required = ['at least one user or department is required'];
    throw invalid({ ...errors, user_ids: required, department_ids: required });
  }
  const [foundUsers, foundDepartments] = await Promise.all([
    userIds.length ? tx.select({ id: users.id }).from(users).where(and(inArray(users.id, userIds), isNull(users.deletedAt))) : [],
    departmentIds.length ? tx.select({ id: departments.id }).from(departments).where(inArray(departments.id, departmentIds)) : [],
  ]);
  reportMissing('user_ids', userIds, new Set(foundUsers.map((u) => u.id)), errors);
  reportMissing('department_ids', departmentIds, new Set(foundDepartments.map((d) => d.id)), errors);
  if (Object.keys(errors).length > 0) throw invalid(errors);

  const [dispatch] = await tx
    .insert(notificationDispatches)
    .values({
      tenantId: sql`current_setting('atrium.tenant_id')::bigint`,
      type: input.type,
      targetableType: input.targetable?.type ?? null,
      targetableId: input.targetable?.id ?? null,
      data: { title: input.data.title, body: sanitizeBody(input.data.body), url: input.data.url },
      userIds: [...new Set(userIds)],
      departmentIds: [...new Set(departmentIds)],
      createdBy: input.createdBy ?? null,
    })
    .returning({ id: notificationDispatches.id, tenantId: notificationDispatches.tenantId });
  return { tenantId: dispatch!.tenantId, dispatchId: dispatch!.id };
}

/**
 * Queues the delivery job; call after the transaction that ran `notify` committed. (A
 * dispatch whose job never got queued is picked up by `notifications.deliver-pending`.)
 */
export async function queueDelivery(jobs: Jobs, dispatch: Dispatch): Promise<void> {
  await jobs.send(deliverNotifications, dispatch);
}
