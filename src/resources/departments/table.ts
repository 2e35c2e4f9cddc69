import { bigint, foreignKey, index, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { users } from '../users/table.ts';

/** Organisational units (seed "Department"); columns beyond these belong to the departments issue. */
export const departments = pgTable(
  'departments',
  {
    id: bigint('id', { mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    /** The creating user (stays linked after that user is blacked out). */
    userId: bigint('user_id', { mode: 'number' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    unique('departments_tenant_id_id_key').on(t.tenantId, t.id),
    unique('departments_tenant_id_name_key').on(t.tenantId, t.name),
    foreignKey({ name: 'departments_creator_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }),
    tenantIsolation('departments'),
  ],
).enableRLS();

/** Membership: users belong to departments (decisions §6: `department_ids`, relations `departments`/`users`). */
export const departmentUsers = pgTable(
  'department_users',
  {
    tenantId: tenantIdColumn(),
    departmentId: bigint('department_id', { mode: 'number' }).notNull(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.departmentId, t.userId] }),
    index('department_users_user_idx').on(t.tenantId, t.userId),
    foreignKey({ name: 'department_users_department_fk', columns: [t.tenantId, t.departmentId], foreignColumns: [departments.tenantId, departments.id] }).onDelete('cascade'),
    foreignKey({ name: 'department_users_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('department_users'),
  ],
).enableRLS();
