/**
 * Idempotency keys (docs/api-conventions.md#idempotent-retries): an operation that creates
 * or dispatches declares the `Idempotency-Key` header, and a request that sends one is
 * carried out once. Its answer is kept for IDEMPOTENCY_WINDOW_HOURS and replayed, byte for
 * byte, to a retry with the same key and the same request; the same key with another
 * request is a 422; a retry while the first is still running is a 409. A refused first
 * request (4xx, or 503) keeps nothing, so its retry runs afresh (`settleKey`).
 *
 * The key is claimed, in a transaction of its own, before the handler runs: a concurrent
 * duplicate finds the claim and never reaches the handler. Keys belong to the caller
 * (tenant and user): another user's request with the same key is a request of its own.
 */
import { createHmac } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { and, eq, sql } from 'drizzle-orm';
import { bigint, index, integer, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { bytea } from '../database/columns.ts';
import type { Database } from '../database/database.ts';
import { deleteInBatches } from '../database/purge.ts';
import { tenantIdColumn, tenantIsolation } from '../database/tenancy.ts';
import { defineJob } from '../jobs/define.ts';
import type { Secrets } from '../secrets/secrets.ts';
import type { Upload } from './multipart.ts';
import { coded, ProblemError } from './problem.ts';

/** The request header, lower-case as Node gives it. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/** The spec's schema of the header (components/parameters/IdempotencyKey): 1 to 255 printable ASCII characters. */
const WELL_FORMED_KEY = /^[\x21-\x7E]{1,255}$/;

/**
 * The request's key, checked against the spec's schema here: fastify validates no header
 * parameter under a validator compiler of its own (validation.ts), as it then leaves the
 * schema's header names as written while Node gives them in lower case.
 */
export function idempotencyKeyOf(headers: Record<string, string | string[] | undefined>): string | null {
  const key = headers[IDEMPOTENCY_KEY_HEADER];
  if (key === undefined) return null;
  if (typeof key !== 'string' || !WELL_FORMED_KEY.test(key)) {
    throw new ProblemError(422, 'The request is invalid.', {
      errors: { 'Idempotency-Key': [coded('pattern', 'must be 1 to 255 printable ASCII characters, without spaces')] },
    });
  }
  return key;
}

/** How long an answer is kept for replay. */
export const IDEMPOTENCY_WINDOW_HOURS = 24;

/** One claimed key: pending until its answer is stored (`status` set). */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    key: text('key').notNull(),
    operationId: text('operation_id').notNull(),
    /** HMAC-SHA256 of the operation and its parameters and body, under the installation's key (`requestFingerprint`). */
    fingerprint: bytea('fingerprint').notNull(),
    /** The answer, once the first request has one: status, media type, Location, body as sent (encrypted). */
    status: integer('status'),
    contentType: text('content_type'),
    location: text('location'),
    body: text('body'),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('idempotency_keys_caller_key').on(t.tenantId, t.userId, t.key),
    // The hourly purge finds expired keys by time.
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
    tenantIsolation('idempotency_keys'),
  ],
).enableRLS();

/** The value with its objects' keys sorted: equal requests, equal JSON text. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((name) => [name, canonical((value as Record<string, unknown>)[name])]),
    );
  }
  return value;
}

/** The purpose of the key that fingerprints requests (Secrets). */
const FINGERPRINT_PURPOSE = 'idempotency-fingerprint';

/**
 * What makes two requests the same: the operation, its path and query parameters and its
 * body as validated, and each uploaded file's name, media type and content, as an
 * HMAC-SHA256 under the installation's key. A body may hold a password or a webhook's
 * secret: a plain hash of it, kept for a day, would let whoever reads the database test
 * guesses at one SHA-256 each; without the key, a fingerprint tells nothing.
 */
export async function requestFingerprint(
  secrets: Secrets,
  operationId: string,
  request: { params: unknown; query: unknown; body: unknown },
  uploads: Record<string, Upload> | null,
): Promise<Buffer> {
  const hash = createHmac('sha256', secrets.key(FINGERPRINT_PURPOSE));
  const { params, query, body } = request;
  hash.update(JSON.stringify(canonical({ operationId, params, query, body })) ?? '');
  for (const field of Object.keys(uploads ?? {}).sort()) {
    const upload = uploads![field]!;
    hash.update(JSON.stringify([field, upload.fileName, upload.mimeType, upload.size]));
    for await (const chunk of upload.chunks({ transient: true })) hash.update(chunk);
  }
  return hash.digest();
}

/** Where keys live: the database, and the installation's key that seals kept answers. */
export interface KeyStore {
  db: Database;
  secrets: Secrets;
}

/** The purpose of the key that encrypts kept answers (Secrets). */
const ANSWER_PURPOSE = 'idempotency-answer';

export interface Caller {
  tenantId: number;
  userId: number;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The Idempotency-Key this request claimed, until its answer is stored or the claim released. */
    idempotencyKey: { owner: Caller; key: string } | null;
  }
}

/** A stored answer to replay. */
export interface StoredAnswer {
  status: number;
  contentType: string | null;
  location: string | null;
  body: string | null;
}

const reused = () =>
  new ProblemError(422, 'This Idempotency-Key was used for another request; send a new key for a new request.', {
    code: 'idempotency_key_reused',
    errors: { 'Idempotency-Key': [coded('reused', 'was used for another request')] },
  });
const inProgress = () =>
  new ProblemError(409, 'A request with this Idempotency-Key is in progress, or its server stopped before it answered; retry later.', {
    code: 'idempotency_request_in_progress',
    headers: { 'retry-after': '1' },
  });

/**
 * Claims `key` for this request: null when it is now this request's (run it, then `store` or
 * `release`), or the first request's answer to replay. Throws the 422 or 409 problem.
 */
export async function claimKey({ db, secrets }: KeyStore, caller: Caller, key: string, operationId: string, fingerprint: Buffer): Promise<StoredAnswer | null> {
  return db.tenant(caller.tenantId, async (tx) => {
    const mine = and(eq(idempotencyKeys.userId, caller.userId), eq(idempotencyKeys.key, key));
    // An expired claim no longer counts: the key starts over.
    await tx.delete(idempotencyKeys).where(and(mine, sql`${idempotencyKeys.expiresAt} <= now()`));
    const claimed = await tx
      .insert(idempotencyKeys)
      .values({
        tenantId: caller.tenantId,
        userId: caller.userId,
        key,
        operationId,
        fingerprint,
        expiresAt: sql`now() + make_interval(hours => ${IDEMPOTENCY_WINDOW_HOURS})`,
      })
      .onConflictDoNothing()
      .returning({ id: idempotencyKeys.id });
    if (claimed.length > 0) return null;
    // Taken: by a request that committed its claim (the insert waited for it, if concurrent).
    const [first] = await tx
      .select({
        operationId: idempotencyKeys.operationId,
        fingerprint: idempotencyKeys.fingerprint,
        status: idempotencyKeys.status,
        contentType: idempotencyKeys.contentType,
        location: idempotencyKeys.location,
        body: idempotencyKeys.body,
      })
      .from(idempotencyKeys)
      .where(mine);
    // Released between the two statements: the first request failed; this one may retry.
    if (!first) throw inProgress();
    if (first.operationId !== operationId || !first.fingerprint.equals(fingerprint)) throw reused();
    if (first.status === null) throw inProgress();
    return {
      status: first.status,
      contentType: first.contentType,
      location: first.location,
      body: first.body === null ? null : secrets.decrypt(ANSWER_PURPOSE, first.body),
    };
  });
}

/**
 * After the claimed request's answer: a refusal (4xx: nothing was changed) or a 503 (the
 * database was out of reach) gives the key up, so that a retry runs afresh; any other answer
 * (2xx, or a 500 whose effect is unknown) is kept, encrypted with the installation's key (it
 * may carry personal data or a one-time login token), and replayed. A failure here is
 * logged and the answer still sent: the key then stays claimed, and retries get a 409
 * until it expires, rather than a second effect.
 */
export async function settleKey(
  { db, secrets }: KeyStore,
  claimed: { owner: Caller; key: string },
  answer: StoredAnswer,
  log: FastifyBaseLogger,
): Promise<void> {
  const { owner, key } = claimed;
  const mine = and(eq(idempotencyKeys.userId, owner.userId), eq(idempotencyKeys.key, key));
  const refused = (answer.status >= 400 && answer.status < 500) || answer.status === 503;
  try {
    await db.tenant(owner.tenantId, async (tx) => {
      if (refused) await tx.delete(idempotencyKeys).where(and(mine, sql`${idempotencyKeys.status} is null`));
      else
        await tx
          .update(idempotencyKeys)
          .set({ ...answer, body: answer.body === null ? null : secrets.encrypt(ANSWER_PURPOSE, answer.body) })
          .where(mine);
    });
  } catch (error) {
    log.error({ err: error, status: answer.status }, refused ? 'could not release an idempotency key' : 'could not keep the answer of an idempotency key');
  }
}

/** Hourly: keys past their window are deleted, in batches (deleteInBatches). */
export const purgeExpiredIdempotencyKeys = defineJob<object>({
  name: 'http.purge-expired-idempotency-keys',
  cron: '41 * * * *',
  async handle(_data, { db, config }) {
    // Maintenance across every tenant: the owner role, not a tenant transaction.
    await deleteInBatches(db.owner, idempotencyKeys, sql`${idempotencyKeys.expiresAt} <= now()`, config.retention.batchSize);
  },
});
