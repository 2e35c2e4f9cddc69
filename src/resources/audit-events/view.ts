import { and, desc, eq, gte, like, lt, sql, type SQL } from 'drizzle-orm';
import { auditEvents, type Changes } from '../../platform/audit/table.ts';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { coded, invalid, type FieldErrors } from '../../platform/http/problem.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { hiddenFieldPermission } from '../users/view.ts';

export type AuditEventRow = typeof auditEvents.$inferSelect;

/**
 * The changes of `row` as `viewer` may see them: in an event about a user, a field the
 * users resource hides from the viewer (personal fields without `users.view-personal`,
 * administrative ones without `users.view-administrative`; one's own record shows all)
 * shows only that it changed, never its values.
 */
export function visibleChanges(row: Pick<AuditEventRow, 'targetType' | 'targetId' | 'changes'>, viewer: Auth): Changes {
  if (row.targetType !== 'user' || row.targetId === null) return row.changes;
  const user = { id: Number(row.targetId) };
  const shown: Changes = {};
  for (const [key, change] of Object.entries(row.changes)) shown[key] = hiddenFieldPermission(viewer, key, user) ? { changed: true } : change;
  return shown;
}

/** `action` filter: an action, or every action of a kind when it ends in a dot (`user.`). Actions hold no `%` or `\`; `_` is escaped. */
function actionCondition(value: string): SQL {
  return value.endsWith('.') ? like(auditEvents.action, `${value.replace(/_/g, '\\_')}%`) : eq(auditEvents.action, value);
}

export type AuditEventFilterKey = 'actor_id' | 'actor_type' | 'action' | 'target_type' | 'target_id' | 'from' | 'to' | 'request_id' | 'client_request_id';

export const auditEventView = defineView<AuditEventRow, Auth, AuditEventFilterKey>({
  key: (row) => row.id,
  // Who may see which changes is decided per field (visibleChanges); the records themselves need audit.view only.
  visible: () => true,
  fields: {
    id: {},
    occurred_at: { value: (r) => rfc3339(r.occurredAt) },
    action: {},
    actor: { value: (r) => ({ type: r.actorType, id: r.actorId, label: r.actorLabel }) },
    target: { value: (r) => ({ type: r.targetType, id: r.targetId, label: r.targetLabel }) },
    changes: { value: visibleChanges },
    details: { value: (r) => r.details ?? null },
    origin: {
      value: (r) => ({
        operation_id: r.operationId,
        request_id: r.requestId,
        client_request_id: r.clientRequestId,
        client_address: r.clientAddress,
        user_agent: r.userAgent,
        command: r.command,
        job: r.job,
      }),
    },
  },
  filters: {
    actor_id: (value: number) => eq(auditEvents.actorId, value),
    actor_type: (value: AuditEventRow['actorType']) => eq(auditEvents.actorType, value),
    action: actionCondition,
    target_type: (value: string) => eq(auditEvents.targetType, value),
    target_id: (value: string) => eq(auditEvents.targetId, value),
    // As UTC text to the microsecond: PostgreSQL reads it whatever offset the client wrote (assertFilterCoherent has bounded it).
    from: (value: string) => gte(auditEvents.occurredAt, sql`${utcText(boundOf(value))}::timestamptz`),
    to: (value: string) => lt(auditEvents.occurredAt, sql`${utcText(boundOf(value))}::timestamptz`),
    request_id: (value: string) => eq(auditEvents.requestId, value),
    client_request_id: (value: string) => eq(auditEvents.clientRequestId, value),
  },
});

/**
 * The instant an RFC 3339 date-time names, in ms (NaN if none). A leap second (`23:59:60`,
 * which RFC 3339 and the spec's `date-time` admit but JavaScript's `Date` does not read) is
 * read as PostgreSQL reads it: `23:59:60.5` is half a second into the next day.
 */
function instantOf(value: string): number {
  const leap = /^([^T]*T\d\d:\d\d:)60(\.\d+)?(\D.*)?$/is.exec(value);
  return leap ? Date.parse(`${leap[1]}59${leap[2] ?? ''}${leap[3] ?? ''}`) + 1000 : Date.parse(value);
}

/**
 * A time filter's instant to the microsecond, as events are stored (`timestamptz`): the
 * whole second (in ms, NaN if none) and the microseconds into it. An instant between two
 * microseconds is taken as the later one: an event, at a whole microsecond, is at or after
 * the instant exactly when it is at or after that one, so both bounds (`from` at or after,
 * `to` before) hold of the instant as written. Read to the millisecond, a bound 500 µs
 * into a millisecond would list an event 200 µs into it as after it.
 */
function boundOf(value: string): Bound {
  // RFC 3339 §5.6 lets a space stand for the `T` (the spec's date-time admits any blank there): read as the `T`.
  const written = value.replace(/^(\d{4}-\d\d-\d\d)\s/, '$1T');
  const [, whole = '', fraction = '', zone = ''] = /^([^T]*T\d\d:\d\d:\d\d)(?:\.(\d+))?(\D.*)?$/is.exec(written) ?? [];
  const second = instantOf(`${whole}${zone}`);
  const micros = Number(fraction.slice(0, 6).padEnd(6, '0')) + (/[1-9]/.test(fraction.slice(6)) ? 1 : 0);
  return micros === 1_000_000 ? { second: second + 1000, micros: 0, writtenSecond: second } : { second, micros, writtenSecond: second };
}

/**
 * `boundOf`'s instant (`second`, `micros`); `writtenSecond` is the second the value names, before a
 * fraction finer than a microsecond carried it into the next one.
 */
interface Bound {
  second: number;
  micros: number;
  writtenSecond: number;
}

/**
 * `boundOf`'s instant as UTC text PostgreSQL reads exactly (`2026-01-31T08:00:00.000200Z`); the
 * year 10000 (the last instant of 9999, carried) as `10000-…`, without the sign `toISOString` gives it.
 */
const utcText = ({ second, micros }: Bound) =>
  `${new Date(second)
    .toISOString()
    .replace(/^\+0*/, '')
    .replace(/\.\d{3}Z$/, '')}.${String(micros).padStart(6, '0')}Z`;

/** Whether bound `a` is a later instant than `b`. */
const later = (a: Bound, b: Bound) => a.second > b.second || (a.second === b.second && a.micros > b.micros);

/** The instants a time filter may name: the years 1 to 9999, which PostgreSQL and RFC 3339 both hold (by their whole second). */
const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59Z');

/**
 * The filters' rules beyond each value's own (the spec's): `from` and `to` within the years
 * 1 to 9999, `target_id` needs `target_type`, and `from` is not after `to`. 422 otherwise.
 */
export function assertFilterCoherent(filter: Partial<Record<AuditEventFilterKey, unknown>> | undefined): void {
  const errors: FieldErrors = {};
  for (const key of ['from', 'to'] as const) {
    const value = filter?.[key];
    if (typeof value !== 'string') continue;
    // The instant as written: the last one of 9999, finer than a microsecond, lies within them though it is compared as 10000.
    const { writtenSecond } = boundOf(value);
    if (!(writtenSecond >= EARLIEST && writtenSecond <= LATEST)) errors[`filter.${key}`] = [coded('out_of_range', 'must lie within the years 1 to 9999')];
  }
  if (filter?.target_id !== undefined && filter.target_type === undefined) {
    errors['filter.target_id'] = [coded('required', 'needs filter[target_type]: ids are unique only within a kind of record')];
  }
  if (filter?.actor_id !== undefined && filter.actor_type === undefined) {
    errors['filter.actor_id'] = [coded('required', 'needs filter[actor_type]: a user and a SCIM token may have the same id')];
  }
  if (
    Object.keys(errors).length === 0 &&
    typeof filter?.from === 'string' &&
    typeof filter.to === 'string' &&
    later(boundOf(filter.from), boundOf(filter.to))
  ) {
    errors['filter.from'] = [coded('out_of_range', 'must not be after filter[to]')];
  }
  if (Object.keys(errors).length > 0) throw invalid(errors, 'The filters are invalid.');
}

/** Newest first; ties by id, so the order is total. */
export const AUDIT_ORDER = [desc(auditEvents.occurredAt), desc(auditEvents.id)];

/** The rows after the event at `position` (its `occurred_at` as stored, to the microsecond) in list order. */
export const olderThan = (position: { at: string; id: string }): SQL =>
  sql`(${auditEvents.occurredAt}, ${auditEvents.id}) < (${position.at}::timestamptz, ${position.id}::uuid)`;

/** The position of event `id` for the cursor, or undefined when the tenant has no such event. */
export const positionColumn = sql<string>`${auditEvents.occurredAt}::text`;

export const auditEventListing: Listing<AuditEventRow, Auth, AuditEventFilterKey> = {
  view: auditEventView,
  query: (tx) => tx.select().from(auditEvents),
  tenant: auditEvents.tenantId,
  key: auditEvents.id,
  order: AUDIT_ORDER,
  cursor: {
    async after(tx, _viewer, id) {
      const [named] = await tx.select({ at: positionColumn, id: auditEvents.id }).from(auditEvents).where(eq(auditEvents.id, id));
      return named && and(olderThan(named));
    },
    of: (row) => row.id,
  },
};
