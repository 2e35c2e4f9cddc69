import { eq, inArray } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { can, type Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView, type Visibility } from '../../platform/result-controls/result-controls.ts';
import { languages } from '../languages/table.ts';
import { roles } from '../roles/table.ts';
import { users } from './table.ts';

export type UserRow = typeof users.$inferSelect;

/** Personal and administrative fields need their permission; one's own record shows all (decisions §5). */
export function userFieldVisible(viewer: Auth, visibility: Visibility, row?: Pick<UserRow, 'id'>): boolean {
  if (visibility === 'public' || row?.id === viewer.userId) return true;
  return can(viewer, visibility === 'personal' ? 'users.view-personal' : 'users.view-administrative');
}

export const fullName = (row: Pick<UserRow, 'firstName' | 'lastName'>) =>
  [row.firstName, row.lastName].filter((part) => part !== null && part !== '').join(' ');

const personal = { visibility: 'personal' } as const;
const administrative = { visibility: 'administrative' } as const;

export const userView = defineView<UserRow, Auth>({
  key: (row) => row.id,
  visible: userFieldVisible,
  fields: {
    id: {},
    username: {},
    first_name: { value: (r) => r.firstName },
    last_name: { value: (r) => r.lastName },
    full_name: { value: fullName },
    lang_id: { value: (r) => r.langId },
    group_account: { value: (r) => r.groupAccount },
    profile_picture_url: { value: () => null },
    email: personal,
    phone: personal,
    street: personal,
    zipcode: personal,
    city: personal,
    birthdate: personal,
    gender: personal,
    staff_number: { ...administrative, value: (r) => r.staffNumber },
    entering_date: { ...administrative, value: (r) => r.enteringDate },
    leaving_date: { ...administrative, value: (r) => r.leavingDate },
    active: administrative,
    role_id: { ...administrative, value: (r) => r.roleId },
    request_password_change: { ...administrative, value: (r) => r.requestPasswordChange },
    prevent_logout: { ...administrative, value: (r) => r.preventLogout },
    wants_email_notifications: { ...administrative, value: (r) => r.wantsEmailNotifications },
    default_route: { ...administrative, value: (r) => r.defaultRoute },
    last_login_at: { ...administrative, value: (r) => rfc3339(r.lastLoginAt) },
    created_at: { value: (r) => rfc3339(r.createdAt) },
    updated_at: { value: (r) => rfc3339(r.updatedAt) },
    deleted_at: { value: (r) => rfc3339(r.deletedAt) },
  },
  relations: {
    role: {
      empty: null,
      async load(tx, rows) {
        const ids = [...new Set(rows.map((r) => r.roleId))];
        const found = await tx
          .select({ id: roles.id, name: roles.name, active: roles.active, permissions: roles.permissions })
          .from(roles)
          .where(inArray(roles.id, ids));
        const byId = new Map(found.map((role) => [role.id, role]));
        return new Map(rows.map((r) => [r.id, byId.get(r.roleId)]));
      },
    },
    language: {
      empty: null,
      async load(tx, rows) {
        const ids = [...new Set(rows.map((r) => r.langId).filter((id): id is string => id !== null))];
        if (ids.length === 0) return new Map();
        const found = await tx.select({ id: languages.id, name: languages.name }).from(languages).where(inArray(languages.id, ids));
        const byId = new Map(found.map((language) => [language.id, language]));
        return new Map(rows.map((r) => [r.id, r.langId ? byId.get(r.langId) : undefined]));
      },
    },
  },
});

/** The user with `id` in the transaction's tenant; soft-deleted ones only when `withTrashed`. */
export async function findUser(tx: Tx, id: number, withTrashed = false): Promise<UserRow | undefined> {
  const [row] = await tx.select().from(users).where(eq(users.id, id));
  if (!row || (!withTrashed && row.deletedAt)) return undefined;
  return row;
}
