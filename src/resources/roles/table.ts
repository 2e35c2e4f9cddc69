import { sql } from 'drizzle-orm';
import { bigint, boolean, check, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { PERMISSIONS } from '../../platform/auth/permissions.ts';

const knownPermissions = sql.raw(`ARRAY[${PERMISSIONS.map((p) => `'${p}'`).join(', ')}]::text[]`);

export const roles = pgTable(
  'roles',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    /** An inactive role grants no permissions and cannot be assigned on restore. */
    active: boolean('active').notNull().default(true),
    permissions: text('permissions')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('roles_tenant_id_name_key').on(t.tenantId, t.name),
    check('roles_permissions_known', sql`${t.permissions} <@ ${knownPermissions}`),
    tenantIsolation('roles'),
  ],
).enableRLS();
