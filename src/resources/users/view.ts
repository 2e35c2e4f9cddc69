import { and, asc, eq, inArray, isNull, sql, type SQL } from 'drizzle-orm';
import type { AnyPgColumn } from 'drizzle-orm/pg-core';
import { can, type Auth, type Caller } from '../../platform/auth/auth.ts';
import type { Permission } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { containsPattern } from '../../platform/database/text-search.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { invalid } from '../../platform/http/problem.ts';
import { ALL_FIELDS, selectRecords, type Listing } from '../../platform/result-controls/listing.ts';
import { defineView, groupBy, type Visibility } from '../../platform/result-controls/result-controls.ts';
import { urlContextFields } from '../../platform/result-controls/url-context.ts';
import { departments, departmentUsers } from '../departments/table.ts';
import { entityPermissions } from '../entity-permissions/table.ts';
import { languages } from '../languages/table.ts';
import { roles } from '../roles/table.ts';
import { acceptedPolicies, termsOfUse } from '../terms-of-use/table.ts';
import { signedPictureUrl } from './profile-picture.ts';
import { deletedIs, selectUsers, tenantNamed, USER_ORDER, type UserRow } from './queries.ts';
import { users } from './table.ts';

/** Whoever users are presented to: the caller, whose `secrets` sign picture URLs. */
export type UserViewer = Auth;

/** Personal and administrative fields need their permission; one's own record shows all. */
export function userFieldVisible(viewer: Caller, visibility: Visibility, row?: Pick<UserRow, 'id'>): boolean {
  if (visibility === 'public' || row?.id === viewer.userId) return true;
  return can(viewer, visibility === 'personal' ? 'users.view-personal' : 'users.view-administrative');
}

/**
 * The permission `viewer` lacks to see the user field `key` of `user` — and so to change it
 * (see `hiddenFieldError`) — or null when the field is visible to them (public fields,
 * keys that are not fields, one's own record).
 */
export function hiddenFieldPermission(viewer: Caller, key: string, user: Pick<UserRow, 'id'>): Permission | null {
  const visibility = (userView.fields as Record<string, { visibility?: Visibility }>)[key]?.visibility ?? 'public';
  if (userFieldVisible(viewer, visibility, user)) return null;
  return visibility === 'personal' ? 'users.view-personal' : 'users.view-administrative';
}

/**
 * The refusal of a change to a field the caller may not see (`PUT /api/users/{user}` and
 * the CSV preview): given whatever the value, so it never confirms a stored one.
 */
export const hiddenFieldError = (permission: Permission) => `cannot be changed: seeing it needs the permission "${permission}"`;

export const fullName = (row: Pick<UserRow, 'firstName' | 'lastName'>) =>
  [row.firstName, row.lastName].filter((part) => part !== null && part !== '').join(' ');

const personal = { visibility: 'personal' } as const;
const administrative = { visibility: 'administrative' } as const;

/**
 * The most memberships the `departments` relation shows in one answer; more are refused
 * (422). A user may be in 1000 departments, and the list is unpaged without `limit`: 5,000
 * users in 200 departments were a million departments in one answer.
 */
export const MAX_DEPARTMENTS_SHOWN = 50_000;

/**
 * The most entity permissions the `entityPermissions` relation shows in one answer; more
 * are refused (422), as for `MAX_DEPARTMENTS_SHOWN`: each form or task template may name
 * 1000 users, and a tenant may hold any number of them.
 */
export const MAX_ENTITY_PERMISSIONS_SHOWN = 50_000;

/** Relations shown when `relations` is not sent. */
export const DEFAULT_USER_RELATIONS = ['role', 'language'];

/**
 * `filter[text]`: a part of username, first or last name, and of e-mail and staff number
 * only where the viewer may see those fields (otherwise the filter would reveal them).
 */
export function userTextFilter(value: string, viewer: Caller): SQL {
  const pattern = containsPattern(value);
  const columns: AnyPgColumn[] = [users.username, users.firstName, users.lastName];
  if (userFieldVisible(viewer, 'personal')) columns.push(users.email);
  if (userFieldVisible(viewer, 'administrative')) columns.push(users.staffNumber);
  return sql`(${sql.join(
    columns.map((column) => sql`${column} ilike ${pattern}`),
    sql` or `,
  )})`;
}

/** The filters of the user lists (`filter[<key>]`). */
export type UserFilterKey = 'text' | 'role_id' | 'active' | 'group_account' | 'department_id';

export const userView = defineView<UserRow, UserViewer, UserFilterKey>({
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
    profile_picture_url: {
      value: (r, viewer) => (r.pictureFileName ? signedPictureUrl(viewer.secrets, viewer.tenantId, r.id, r.pictureFileName, r.pictureEtag ?? '') : null),
    },
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
    ...urlContextFields<UserRow>('user', 'users'),
  },
  relations: {
    role: {
      visibility: 'administrative',
      empty: null,
      inline: sql`(select json_build_object('id', r.id, 'name', r.name, 'active', r.active, 'permissions', r.permissions)
        from ${roles} r where r.tenant_id = ${users.tenantId} and r.id = ${users.roleId})`,
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
      inline: sql`(select json_build_object('id', l.id, 'name', l.name) from ${languages} l where l.tenant_id = ${users.tenantId} and l.id = ${users.langId})`,
      async load(tx, rows) {
        const ids = [...new Set(rows.map((r) => r.langId).filter((id): id is string => id !== null))];
        if (ids.length === 0) return new Map();
        const found = await tx.select({ id: languages.id, name: languages.name }).from(languages).where(inArray(languages.id, ids));
        const byId = new Map(found.map((language) => [language.id, language]));
        return new Map(rows.map((r) => [r.id, r.langId ? byId.get(r.langId) : undefined]));
      },
    },
    departments: {
      empty: [],
      async load(tx, rows) {
        const found = await tx
          .select({ userId: departmentUsers.userId, id: departments.id, name: departments.name })
          .from(departmentUsers)
          .innerJoin(departments, and(eq(departments.tenantId, departmentUsers.tenantId), eq(departments.id, departmentUsers.departmentId)))
          .where(
            and(
              tenantNamed(tx, departmentUsers.tenantId),
              inIdList(
                departmentUsers.userId,
                rows.map((r) => r.id),
              ),
            ),
          )
          .orderBy(asc(departments.name), asc(departments.id))
          .limit(MAX_DEPARTMENTS_SHOWN + 1);
        if (found.length > MAX_DEPARTMENTS_SHOWN) {
          throw invalid({
            relations: [`departments: the users are members of more than ${MAX_DEPARTMENTS_SHOWN} departments in all; ask for fewer users (limit)`],
          });
        }
        return groupBy(
          found,
          (f) => f.userId,
          ({ id, name }) => ({ id, name }),
        );
      },
    },
    acceptedPolicies: {
      visibility: 'administrative',
      empty: [],
      async load(tx, rows) {
        const found = await tx
          .select({
            userId: acceptedPolicies.userId,
            id: termsOfUse.id,
            title: termsOfUse.title,
            version: termsOfUse.version,
            acceptedAt: acceptedPolicies.acceptedAt,
          })
          .from(acceptedPolicies)
          .innerJoin(termsOfUse, and(eq(termsOfUse.tenantId, acceptedPolicies.tenantId), eq(termsOfUse.id, acceptedPolicies.termsOfUseId)))
          .where(
            inIdList(
              acceptedPolicies.userId,
              rows.map((r) => r.id),
            ),
          )
          .orderBy(asc(acceptedPolicies.acceptedAt), asc(termsOfUse.id));
        return groupBy(
          found,
          (f) => f.userId,
          (f) => ({ id: f.id, title: f.title, version: f.version, accepted_at: rfc3339(f.acceptedAt) }),
        );
      },
    },
    entityPermissions: {
      visibility: 'administrative',
      empty: [],
      async load(tx, rows) {
        const found = await tx
          .select({
            id: entityPermissions.id,
            subjectId: entityPermissions.subjectId,
            entityType: entityPermissions.entityType,
            entityId: entityPermissions.entityId,
          })
          .from(entityPermissions)
          .where(
            and(
              tenantNamed(tx, entityPermissions.tenantId),
              eq(entityPermissions.subjectType, 'user'),
              inIdList(
                entityPermissions.subjectId,
                rows.map((r) => r.id),
              ),
            ),
          )
          .orderBy(asc(entityPermissions.id))
          .limit(MAX_ENTITY_PERMISSIONS_SHOWN + 1);
        if (found.length > MAX_ENTITY_PERMISSIONS_SHOWN) {
          throw invalid({
            relations: [
              `entityPermissions: the users are named by more than ${MAX_ENTITY_PERMISSIONS_SHOWN} entity permissions in all; ask for fewer users (limit)`,
            ],
          });
        }
        return groupBy(
          found,
          (f) => f.subjectId,
          (f) => ({ id: f.id, entity_type: f.entityType, entity_id: f.entityId }),
        );
      },
    },
  },
  filters: {
    text: (value: string, viewer) => userTextFilter(value, viewer),
    role_id: (value: number) => eq(users.roleId, value),
    active: (value: boolean) => eq(users.active, value),
    group_account: (value: boolean) => eq(users.groupAccount, value),
    department_id: (value: number) =>
      sql`exists (select 1 from ${departmentUsers} where ${departmentUsers.userId} = ${users.id} and ${departmentUsers.departmentId} = ${value})`,
  },
});

/**
 * Users as the list, show and write operations answer them: every user of the tenant (the
 * operations narrow to deleted or not deleted ones), in the users' list order, with the
 * relations `role` and `language` by default.
 */
export const userListing: Listing<UserRow, UserViewer, UserFilterKey> = {
  view: userView,
  query: selectUsers,
  tenant: users.tenantId,
  key: users.id,
  order: USER_ORDER,
  defaultRelations: DEFAULT_USER_RELATIONS,
};

/**
 * The users of `GET /api/users` (not deleted) and of `GET /api/users/deleted`: the user
 * listing within each, as a scope, so that each list's select is prepared once.
 */
export const listedUserListing: Listing<UserRow, UserViewer, UserFilterKey> = { ...userListing, scope: { where: deletedIs(false) } };
export const deletedUserListing: Listing<UserRow, UserViewer, UserFilterKey> = { ...userListing, scope: { where: deletedIs(true) } };

/**
 * The users `ids` (deleted ones too, unless `exceptDeleted`), each presented as `viewer` may
 * see users (every visible field, no relations), keyed by id in the users' list order: how
 * other resources show the users they name. One query.
 */
export async function presentUsersById(
  tx: Tx,
  ids: readonly number[],
  viewer: UserViewer,
  options: { exceptDeleted?: boolean } = {},
): Promise<Map<number, Record<string, unknown>>> {
  const unique = [...new Set(ids)];
  const where = options.exceptDeleted ? and(inIdList(users.id, unique), isNull(users.deletedAt)) : inIdList(users.id, unique);
  // `id` is a public field: every presented user carries it.
  const presented = await selectRecords(tx, userListing, viewer, { where, presentation: ALL_FIELDS });
  return new Map(presented.map((user) => [user.id as number, user]));
}
