import { bigint, foreignKey, index, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/**
 * Terms of use, which users accept: the user relation `acceptedPolicies` lists them (spec:
 * schema User). No operation writes them; operators write the rows with the owner role
 * (docs/users.md#terms-of-use).
 */
export const termsOfUse = pgTable(
  'terms_of_use',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    title: text('title').notNull(),
    version: text('version'),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.id] }), tenantIsolation('terms_of_use')],
).enableRLS();

/** Which user accepted which terms of use, and when. */
export const acceptedPolicies = pgTable(
  'accepted_policies',
  {
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    termsOfUseId: bigint('terms_of_use_id', { mode: 'number' }).notNull(),
    acceptedAt: timestamp('accepted_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.userId, t.termsOfUseId] }),
    index('accepted_policies_user_idx').on(t.tenantId, t.userId),
    foreignKey({ name: 'accepted_policies_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    foreignKey({ name: 'accepted_policies_terms_fk', columns: [t.tenantId, t.termsOfUseId], foreignColumns: [termsOfUse.tenantId, termsOfUse.id] }).onDelete(
      'cascade',
    ),
    tenantIsolation('accepted_policies'),
  ],
).enableRLS();
