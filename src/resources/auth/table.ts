import { sql } from 'drizzle-orm';
import { bigint, foreignKey, index, integer, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { bytea } from '../../platform/database/columns.ts';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/** Opaque bearer tokens; only the SHA-256 of the token is stored (docs/tenancy-and-security.md#access-tokens). */
export const accessTokens = pgTable(
  'access_tokens',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    tokenHash: bytea('token_hash').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' })
      .notNull()
      .default(sql`clock_timestamp()`),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('access_tokens_tenant_id_token_hash_key').on(t.tenantId, t.tokenHash),
    index('access_tokens_token_hash_idx').on(t.tokenHash),
    index('access_tokens_expires_at_idx').on(t.expiresAt),
    foreignKey({ name: 'access_tokens_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('access_tokens'),
  ],
).enableRLS();

/**
 * Failed sign-in counters per key (account or client address), shared by every API
 * process. Not tenant-owned: it is consulted before any tenant is known.
 */
export const loginFailures = pgTable('login_failures', {
  key: text('key').primaryKey(),
  failures: integer('failures').notNull(),
  windowStartedAt: timestamp('window_started_at', { withTimezone: true, mode: 'date' }).notNull(),
});
