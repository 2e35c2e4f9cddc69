/**
 * The audit trail's one way in (docs/audit.md): `recordAudit` writes one event in the
 * transaction of the change it describes, so a change commits with its event and a
 * refused (rolled back) request leaves none. `changesBetween` turns a record before and
 * after into per-field `{from, to}`, and never lets a secret's value through.
 */
import { sql } from 'drizzle-orm';
import type { FastifyRequest } from 'fastify';
import { sendAhead, type Database, type Tx } from '../database/database.ts';
import { requiredTenant } from '../database/tenancy.ts';
import type { ActorType, AuditAction } from './actions.ts';
import { auditErasures, auditEvents, type Changes, type FieldChange } from './table.ts';

/**
 * Who acted. `label` is their display name as it was when they acted: plain text, known
 * before the event's insert (Citus refuses a subquery among an insert's values).
 */
export interface AuditActor {
  type: ActorType;
  id: number | null;
  label: string | null;
}

/** Where a change came from: the request's operation, ids, address and agent; or a command; or a job. */
export interface AuditOrigin {
  operationId?: string | null;
  /** The id the server gave the request, unique to it. */
  requestId?: string | null;
  /** The `X-Request-Id` the client sent, as its claim: anyone may send anyone's. */
  clientRequestId?: string | null;
  clientAddress?: string | null;
  userAgent?: string | null;
  command?: string | null;
  job?: string | null;
}

/** Who and where, once per request, command or job. */
export interface AuditSource {
  actor: AuditActor;
  origin: AuditOrigin;
}

/** What an event says about the change. */
export interface AuditEntry {
  action: AuditAction;
  /** `label`: the record's name as the change leaves it (plain text, as the actor's). */
  target: { type: string; id: string | number | null; label: string | null };
  changes?: Changes;
  details?: Record<string, unknown>;
}

/**
 * A user's label in the trail: their full name (first and last, each trimmed, the blank
 * ones left out), or their username when they have none. Made from what the statement that
 * finds the user already reads (the bearer token's look-up, the login token's consumption),
 * so the event's insert carries it as text.
 */
export function userLabel(user: { firstName: string | null; lastName: string | null; username: string }): string {
  const name = [user.firstName, user.lastName]
    .map((part) => part?.trim() ?? '')
    .filter((part) => part !== '')
    .join(' ');
  return name === '' ? user.username : name;
}

/** The longest user agent kept: a header is the client's to fill, the trail is not. */
const USER_AGENT_LENGTH = 512;
/** The longest label kept (the spec's `maxLength` of `actor.label` and `target.label`). */
const LABEL_LENGTH = 1000;

/** A label as stored: cut to LABEL_LENGTH. */
const labelOf = (label: string | null): string | null => label?.slice(0, LABEL_LENGTH) ?? null;

/**
 * A request's origin: its operation, the id the server gave it and the client's own
 * `X-Request-Id` apart (a client may send another's id: the trail must not let it pass its
 * events off as part of someone else's request), the client address (as the proxy
 * settings resolve it) and its user agent.
 */
export function requestOrigin(request: FastifyRequest): AuditOrigin {
  const agent = request.headers['user-agent'];
  return {
    operationId: request.routeOptions.config?.operationId ?? null,
    requestId: request.serverRequestId || request.id,
    clientRequestId: request.clientRequestId ?? null,
    clientAddress: request.ip ?? null,
    userAgent: typeof agent === 'string' ? agent.slice(0, USER_AGENT_LENGTH) : null,
  };
}

/**
 * Writes one audit event in `tx` (whose tenant it takes). One statement, sent ahead of the
 * transaction's next one (`sendAhead`): no round trip of its own, and a failure of it
 * still fails the change.
 */
export async function recordAudit(tx: Tx, source: AuditSource, entry: AuditEntry): Promise<void> {
  await recordAudits(tx, source, [entry]);
}

/** Writes one audit event per entry in `tx` (a command that changes several records), in one statement sent ahead. */
export async function recordAudits(tx: Tx, source: AuditSource, entries: readonly AuditEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const { actor, origin } = source;
  const insert = tx.insert(auditEvents).values(
    entries.map((entry) => ({
      tenantId: requiredTenant as never,
      action: entry.action,
      actorType: actor.type,
      actorId: actor.id,
      actorLabel: labelOf(actor.label),
      targetType: entry.target.type,
      targetId: entry.target.id === null ? null : String(entry.target.id),
      targetLabel: labelOf(entry.target.label),
      changes: entry.changes ?? {},
      details: entry.details ?? null,
      operationId: origin.operationId ?? null,
      requestId: origin.requestId ?? null,
      clientRequestId: origin.clientRequestId ?? null,
      clientAddress: origin.clientAddress ?? null,
      userAgent: origin.userAgent ?? null,
      command: origin.command ?? null,
      job: origin.job ?? null,
    })),
  );
  await sendAhead(tx, insert);
}

/**
 * Fields whose values never enter the trail, whatever a caller passes: a change of one is
 * recorded as `{changed: true}`.
 */
const SECRET_FIELDS: ReadonlySet<string> = new Set([
  'password',
  'password_hash',
  'passwordHash',
  'old_password',
  'token',
  'token_hash',
  'tokenHash',
  'secret',
  'auth',
  'vapid_private_key',
]);

/**
 * Whether `a` and `b` are the same JSON value, whatever order their objects' keys came in:
 * a record read back from PostgreSQL has its jsonb's keys in an order of its own.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  const sorted = (_key: string, value: unknown) =>
    value && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)))
      : value;
  return JSON.stringify(a, sorted) === JSON.stringify(b, sorted);
}

/** A value as the trail stores it: dates as RFC 3339 text, undefined as null. */
function stored(value: unknown): unknown {
  if (value === undefined) return null;
  if (value instanceof Date) return value.toISOString();
  return value;
}

/**
 * The fields that differ between `before` and `after` (null: the record did not exist, or
 * no longer does), each as `{from, to}`; `secret` names more fields than the usual ones
 * (passwords, tokens) whose values are replaced by `{changed: true}`. Keys are the API's
 * field names, so the trail says the same word as the spec.
 */
export function changesBetween(
  before: Readonly<Record<string, unknown>> | null,
  after: Readonly<Record<string, unknown>> | null,
  secret: readonly string[] = [],
): Changes {
  const changes: Changes = {};
  const keys = new Set([...Object.keys(before ?? {}), ...Object.keys(after ?? {})]);
  for (const key of keys) {
    const from = stored(before?.[key]);
    const to = stored(after?.[key]);
    if (sameJson(from, to)) continue;
    changes[key] = SECRET_FIELDS.has(key) || secret.includes(key) ? { changed: true } : { from, to };
  }
  return changes;
}

/** The change of a secret (a password): that it changed, never its value. */
export const SECRET_CHANGED: FieldChange = Object.freeze({ changed: true as const });

/**
 * Erasure in the trail (docs/audit.md#erasure), first half: records in `tx`, the
 * transaction of a blackout of the user `userId` of `tx`'s tenant, that their past events
 * await erasure with `values` (the account's anonymized values, by the API's field names).
 * It commits with the blackout or not at all; `eraseAuditTrail` does the rest in a
 * transaction of its own. Recorded again (a second blackout), it stays as it is.
 */
export async function recordErasure(tx: Tx, userId: number, values: Readonly<Record<string, unknown>>): Promise<void> {
  const insert = tx
    .insert(auditErasures)
    .values({ tenantId: requiredTenant as never, userId, anonymizedValues: { ...values } })
    .onConflictDoNothing({ target: [auditErasures.tenantId, auditErasures.userId] });
  // Sent ahead like the blackout's own event: no round trip of its own, and its failure fails the blackout.
  await sendAhead(tx, insert);
}

/**
 * Erasure in the trail, second half, in a transaction of its own (the job `audit.erase`):
 * in every past event about, or by, the blacked-out user `userId` of tenant `tenantId`
 * whose erasure `recordErasure` recorded, the label becomes their anonymized username, and
 * each recorded field in the changes of events about them takes the anonymized value on
 * both sides; the record goes in the same transaction. Ids, actions and times stay.
 * The application role may not update the trail (it is append-only): this is the
 * security-definer `atrium_anonymize_audit_trail`, which refuses a user not blacked out,
 * and which alone writes in this transaction (Citus refuses a second role's writes to the
 * tenant's rows in one transaction). Answers how many events it rewrote: 0 when no erasure
 * awaits (done already), so running it again changes nothing.
 */
export async function eraseAuditTrail(db: Database, tenantId: number, userId: number): Promise<number> {
  return await db.tenant(tenantId, async (tx) => {
    const [row] = await tx.execute<{ rewritten: number }>(sql`select atrium_anonymize_audit_trail(${userId}) as rewritten`);
    return Number(row?.rewritten ?? 0);
  });
}
