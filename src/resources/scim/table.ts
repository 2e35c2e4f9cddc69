import { sql } from 'drizzle-orm';
import { bigint, foreignKey, index, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { bytea } from '../../platform/database/columns.ts';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/**
 * Bearer tokens of identity providers for `/scim/v2` (docs/scim.md). Only the SHA-256 of
 * the value is stored. A token acts with the authority of the administrator who minted it
 * (`user_id`), as it stands at each request: it stops working when they lose
 * `users.administer`, are deactivated or deleted. Authentication happens before any tenant
 * is known, through the security-definer function `atrium_authenticate_scim`.
 */
export const scimTokens = pgTable(
  'scim_tokens',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    /** The administrator who minted the token. */
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    tokenHash: bytea('token_hash').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }),
    lastUsedAt: timestamp('last_used_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' })
      .notNull()
      .default(sql`clock_timestamp()`),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('scim_tokens_tenant_id_token_hash_key').on(t.tenantId, t.tokenHash),
    // Authentication looks the hash up without a tenant.
    index('scim_tokens_token_hash_idx').on(t.tokenHash),
    foreignKey({ name: 'scim_tokens_creator_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('scim_tokens'),
  ],
).enableRLS();

/** The identity provider's `externalId` of a user it provisions (at most one a user). */
export const scimExternalIds = pgTable(
  'scim_external_ids',
  {
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    externalId: text('external_id').notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.userId] }),
    index('scim_external_ids_external_id_idx').on(t.tenantId, t.externalId),
    foreignKey({ name: 'scim_external_ids_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('scim_external_ids'),
  ],
).enableRLS();

/** Per tenant: the role a user created over SCIM gets (SCIM has no standard attribute for roles). */
export const scimSettings = pgTable(
  'scim_settings',
  {
    tenantId: tenantIdColumn().primaryKey(),
    defaultRoleId: bigint('default_role_id', { mode: 'number' }),
  },
  // No foreign key: deleting the role must stay possible. A missing default role refuses SCIM creates; an inactive one
  // is assigned, as `/api` assigns one (docs/scim.md).
  () => [tenantIsolation('scim_settings')],
).enableRLS();
