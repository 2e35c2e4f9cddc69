import { sql } from 'drizzle-orm';
import { bigint, check, index, jsonb, pgTable, primaryKey, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../database/tenancy.ts';
import { ACTOR_TYPES } from './actions.ts';

/** One field's change: its value before and after, or only that it changed (secrets, hidden fields). */
export type FieldChange = { from: unknown; to: unknown } | { changed: true };

/** Per field name (the API's), what changed. */
export type Changes = Record<string, FieldChange>;

/**
 * The audit trail (docs/audit.md): one row per administrative change, written in the
 * change's transaction. Labels are stored as they were when the change was made; a
 * blackout's erasure rewrites the person's (`eraseAuditTrail`). The application role may insert and read rows, never update or delete one (docs/audit.md#append-only). Column names follow the API's fields
 * (openapi/components/audit-events.yaml).
 */
export const auditEvents = pgTable(
  'audit_events',
  {
    id: uuid('id').notNull().defaultRandom(),
    tenantId: tenantIdColumn(),
    occurredAt: timestamp('occurred_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    action: text('action').notNull(),
    actorType: text('actor_type', { enum: ACTOR_TYPES }).notNull(),
    actorId: bigint('actor_id', { mode: 'number' }),
    actorLabel: text('actor_label'),
    targetType: text('target_type').notNull(),
    targetId: text('target_id'),
    targetLabel: text('target_label'),
    changes: jsonb('changes').$type<Changes>().notNull().default({}),
    /** What else the action carries (a fan-out's recipient count). */
    details: jsonb('details').$type<Record<string, unknown>>(),
    operationId: text('operation_id'),
    /** The id the server gave the request: unique to it, whatever the client sent. */
    requestId: text('request_id'),
    /** The client's own `X-Request-Id`, as it sent it: its claim, which links to its logs, never proof of anything. */
    clientRequestId: text('client_request_id'),
    clientAddress: text('client_address'),
    userAgent: text('user_agent'),
    command: text('command'),
    job: text('job'),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    // The list's order (newest first), and the other filters narrowing it.
    index('audit_events_occurred_idx').on(t.tenantId, t.occurredAt.desc(), t.id.desc()),
    index('audit_events_actor_idx').on(t.tenantId, t.actorId, t.occurredAt.desc()),
    index('audit_events_target_idx').on(t.tenantId, t.targetType, t.targetId, t.occurredAt.desc()),
    index('audit_events_action_idx').on(t.tenantId, t.action.op('text_pattern_ops')),
    index('audit_events_request_idx')
      .on(t.tenantId, t.requestId)
      .where(sql`${t.requestId} IS NOT NULL`),
    index('audit_events_client_request_idx')
      .on(t.tenantId, t.clientRequestId)
      .where(sql`${t.clientRequestId} IS NOT NULL`),
    // The retention purge (across tenants) finds events by age.
    index('audit_events_purge_idx').on(t.occurredAt),
    tenantIsolation('audit_events'),
  ],
).enableRLS();

/**
 * Erasures of the trail that await their job (docs/audit.md#erasure): a blackout records
 * here, in its own transaction, the person whose past events are to be rewritten and the
 * values their account took; the job `audit.erase` rewrites the events and removes the
 * row in one transaction of its own (`atrium_anonymize_audit_trail`, as the table owner),
 * and `audit.erase-pending` sends again every row left a minute after. The application
 * role may insert and read rows, never update or delete one.
 */
export const auditErasures = pgTable(
  'audit_erasures',
  {
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    /** The values the blackout gave the account, by the API's field names: the person's changes take them on both sides. */
    anonymizedValues: jsonb('anonymized_values').$type<Record<string, unknown>>().notNull(),
    requestedAt: timestamp('requested_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.userId] }),
    check('audit_erasures_values_object', sql`jsonb_typeof(${t.anonymizedValues}) = 'object'`),
    tenantIsolation('audit_erasures'),
  ],
).enableRLS();
