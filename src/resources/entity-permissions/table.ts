import { sql } from 'drizzle-orm';
import { bigint, check, index, pgTable, primaryKey, text, unique } from 'drizzle-orm/pg-core';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';

export const ENTITY_PERMISSION_SUBJECTS = ['user', 'role', 'department'] as const;

/**
 * Entity permissions: an entity (a menu item, a form, a task template…,
 * named by its morph alias and id) is made accessible to users, roles or departments.
 * Menu items: an item with none is unrestricted. Forms and task templates: the named
 * subjects may administer it besides holders of `tasks.administer`.
 * A user's `entityPermissions` relation lists the rows naming that user.
 */
export const entityPermissions = pgTable(
  'entity_permissions',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    entityType: text('entity_type').notNull(),
    entityId: bigint('entity_id', { mode: 'number' }).notNull(),
    subjectType: text('subject_type', { enum: ENTITY_PERMISSION_SUBJECTS }).notNull(),
    subjectId: bigint('subject_id', { mode: 'number' }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('entity_permissions_unique').on(t.tenantId, t.entityType, t.entityId, t.subjectType, t.subjectId),
    index('entity_permissions_subject_idx').on(t.tenantId, t.subjectType, t.subjectId),
    check('entity_permissions_subject_known', sql`${t.subjectType} IN ('user', 'role', 'department')`),
    tenantIsolation('entity_permissions'),
  ],
).enableRLS();
