import { sql } from 'drizzle-orm';
import { bigint, foreignKey, index, integer, jsonb, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { attributeSets } from '../attribute-sets/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { users } from '../users/table.ts';

/** Organisational units (docs/departments.md#departments). */
export const departments = pgTable(
  'departments',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    name: text('name').notNull(),
    /** The creating user (stays linked after that user is blacked out). */
    userId: bigint('user_id', { mode: 'number' }),
    /** Free tags, matched by `#word` in the text filter (`departmentTextFilter`, ./view.ts). */
    tags: text('tags')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    /** Values of the fields of the attached attribute sets ("additional attribute keys"). */
    attributes: jsonb('attributes')
      .$type<Record<string, unknown>>()
      .notNull()
      .default(sql`'{}'::jsonb`),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /**
     * The identity provider's `externalId` of the department as a SCIM Group (docs/scim.md):
     * case-exact, not unique (RFC 7643 §3.1 leaves its uniqueness to the provisioning
     * client, and a tenant may have several).
     */
    externalId: text('external_id'),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('departments_tenant_id_name_key').on(t.tenantId, t.name),
    index('departments_tenant_id_external_id_idx').on(t.tenantId, t.externalId),
    foreignKey({ name: 'departments_creator_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }),
    index('departments_tags_idx').using('gin', t.tags),
    tenantIsolation('departments'),
  ],
).enableRLS();

/**
 * Membership: users belong to departments (a user's `department_ids` and `departments`, a
 * department's `users`; docs/users.md#departments-membership).
 */
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
    foreignKey({
      name: 'department_users_department_fk',
      columns: [t.tenantId, t.departmentId],
      foreignColumns: [departments.tenantId, departments.id],
    }).onDelete('cascade'),
    foreignKey({ name: 'department_users_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('department_users'),
  ],
).enableRLS();

/** Notification settings assigned to a department (`notification_setting_ids`). */
export const departmentNotificationSettings = pgTable(
  'department_notification_settings',
  {
    tenantId: tenantIdColumn(),
    departmentId: bigint('department_id', { mode: 'number' }).notNull(),
    notificationSettingId: bigint('notification_setting_id', { mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.departmentId, t.notificationSettingId] }),
    foreignKey({
      name: 'department_notification_settings_department_fk',
      columns: [t.tenantId, t.departmentId],
      foreignColumns: [departments.tenantId, departments.id],
    }).onDelete('cascade'),
    foreignKey({
      name: 'department_notification_settings_setting_fk',
      columns: [t.tenantId, t.notificationSettingId],
      foreignColumns: [notificationSettings.tenantId, notificationSettings.id],
    }).onDelete('cascade'),
    tenantIsolation('department_notification_settings'),
  ],
).enableRLS();

/** Attribute sets attached to a department (`attribute_set_ids`, ordered by `sort_number`). */
export const departmentAttributeSets = pgTable(
  'department_attribute_sets',
  {
    tenantId: tenantIdColumn(),
    departmentId: bigint('department_id', { mode: 'number' }).notNull(),
    attributeSetId: bigint('attribute_set_id', { mode: 'number' }).notNull(),
    sortNumber: integer('sort_number').notNull().default(0),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.departmentId, t.attributeSetId] }),
    index('department_attribute_sets_set_idx').on(t.tenantId, t.attributeSetId),
    foreignKey({
      name: 'department_attribute_sets_department_fk',
      columns: [t.tenantId, t.departmentId],
      foreignColumns: [departments.tenantId, departments.id],
    }).onDelete('cascade'),
    foreignKey({
      name: 'department_attribute_sets_set_fk',
      columns: [t.tenantId, t.attributeSetId],
      foreignColumns: [attributeSets.tenantId, attributeSets.id],
    }),
    tenantIsolation('department_attribute_sets'),
  ],
).enableRLS();
