import { sql } from 'drizzle-orm';
import { bigint, foreignKey, index, pgTable, primaryKey, timestamp, unique, uuid } from 'drizzle-orm/pg-core';
import { bytea } from '../../platform/database/columns.ts';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/**
 * One-time login tokens (the spec, schema UserLoginToken). Only the SHA-256 of the signed
 * value is stored. Consumption happens before any tenant is known, through the
 * security-definer function `atrium_consume_login_token`
 * (docs/tenancy-and-security.md#security-definer-functions).
 */
export const userLoginTokens = pgTable(
  'user_login_tokens',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    uuid: uuid('uuid')
      .notNull()
      .default(sql`gen_random_uuid()`),
    /** The creator: always the authenticated user who created the token. */
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    /** The user the token signs in. */
    loginUserId: bigint('login_user_id', { mode: 'number' }).notNull(),
    tokenHash: bytea('token_hash').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
    usedAt: timestamp('used_at', { withTimezone: true, mode: 'date' }),
    deletedAt: timestamp('deleted_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' })
      .notNull()
      .default(sql`clock_timestamp()`),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('user_login_tokens_tenant_id_uuid_key').on(t.tenantId, t.uuid),
    unique('user_login_tokens_tenant_id_token_hash_key').on(t.tenantId, t.tokenHash),
    // Consumption looks the hash up without a tenant.
    index('user_login_tokens_token_hash_idx').on(t.tokenHash),
    foreignKey({ name: 'user_login_tokens_creator_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    foreignKey({ name: 'user_login_tokens_login_user_fk', columns: [t.tenantId, t.loginUserId], foreignColumns: [users.tenantId, users.id] }).onDelete(
      'cascade',
    ),
    tenantIsolation('user_login_tokens'),
  ],
).enableRLS();
