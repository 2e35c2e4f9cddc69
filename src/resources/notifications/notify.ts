/**
 * How other modules send notifications (docs/notifications.md#dispatch-and-asynchronous-delivery).
 * Producers call `notify(tx, …)` inside their own transaction (it validates the recipients
 * and records the dispatch), and after the commit `queueDelivery(jobs, dispatch)`; the
 * `notifications.deliver` job then expands the dispatch into one notification per
 * recipient with `storeNotificationBatch` (queries.ts), the ONE place notifications are
 * inserted (push delivery hooks in there).
 */
import type { Tx } from '../../platform/database/database.ts';
import { reportMissing } from '../../platform/database/existence.ts';
import { invalid } from '../../platform/http/problem.ts';
import type { Jobs } from '../../platform/jobs/jobs.ts';
import { deliverNotifications } from './deliver.job.ts';
import { missingRecipients, recordDispatch, type Dispatch } from './queries.ts';
import { dispatchInputErrors, hasRecipients, sanitizeBody, type Recipients } from './rules.ts';
import type { NotificationData } from './table.ts';

export interface NotifyInput {
  recipients: Recipients;
  type: string;
  targetable?: { type: string; id: number } | null;
  data: NotificationData;
  /** The requesting user, if any (kept on the dispatch for auditing). */
  createdBy?: number | null;
}

/**
 * Validates the `url` and the recipients (every id exists in the transaction's tenant;
 * users not deleted), then records the dispatch with the body sanitized. Nothing is
 * delivered until `queueDelivery`. A 422 names every problem.
 */
export async function notify(tx: Tx, input: NotifyInput): Promise<Dispatch> {
  const userIds = input.recipients.userIds ?? [];
  const departmentIds = input.recipients.departmentIds ?? [];
  const errors = dispatchInputErrors(input.data, input.recipients);
  // No recipient named: nothing to look up.
  if (!hasRecipients(input.recipients)) throw invalid(errors);
  const missing = await missingRecipients(tx, userIds, departmentIds);
  reportMissing(errors, 'user_ids', userIds, missing.users);
  reportMissing(errors, 'department_ids', departmentIds, missing.departments);
  if (Object.keys(errors).length > 0) throw invalid(errors);

  return recordDispatch(tx, {
    type: input.type,
    targetable: input.targetable ?? null,
    data: { title: input.data.title, body: sanitizeBody(input.data.body), url: input.data.url },
    userIds,
    departmentIds,
    createdBy: input.createdBy ?? null,
  });
}

/**
 * Queues the delivery job; call after the transaction that ran `notify` committed. A
 * dispatch whose job was not queued (the send failed, or the process died first) is picked
 * up by `notifications.deliver-pending`.
 */
export async function queueDelivery(jobs: Jobs, dispatch: Dispatch): Promise<void> {
  await jobs.sendCommitted(deliverNotifications, dispatch);
}
