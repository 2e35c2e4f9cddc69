import { sql } from 'drizzle-orm';
import { bigint, boolean, check, date, foreignKey, index, pgTable, primaryKey, text, timestamp, unique } from 'drizzle-orm/pg-core';
import { bytea } from '../../platform/database/columns.ts';
import { tenantIdColumn, tenantIsolation } from '../../platform/database/tenancy.ts';
import { languages } from '../languages/table.ts';
import { roles } from '../roles/table.ts';

export const GENDERS = ['female', 'male', 'diverse'] as const;

/** Column names follow the API's field names (openapi/components/users.yaml#/User). */
export const users = pgTable(
  'users',
  {
    id: bigint('id', { mode: 'number' }).generatedAlwaysAsIdentity(),
    tenantId: tenantIdColumn(),
    username: text('username').notNull(),
    passwordHash: text('password_hash'),
    firstName: text('first_name'),
    lastName: text('last_name'),
    roleId: bigint('role_id', { mode: 'number' }).notNull(),
    langId: text('lang_id'),
    active: boolean('active').notNull().default(true),
    groupAccount: boolean('group_account').notNull().default(false),
    requestPasswordChange: boolean('request_password_change').notNull().default(false),
    email: text('email'),
    phone: text('phone'),
    street: text('street'),
    zipcode: text('zipcode'),
    city: text('city'),
    staffNumber: text('staff_number'),
    birthdate: date('birthdate', { mode: 'string' }),
    enteringDate: date('entering_date', { mode: 'string' }),
    leavingDate: date('leaving_date', { mode: 'string' }),
    gender: text('gender', { enum: GENDERS }),
    wantsEmailNotifications: boolean('wants_email_notifications').notNull().default(false),
    defaultRoute: text('default_route'),
    preventLogout: boolean('prevent_logout').notNull().default(false),
    lastLoginAt: timestamp('last_login_at', { withTimezone: true, mode: 'date' }),
    /** Access tokens issued before this instant are rejected (POST /api/users/logout/{user}). */
    logoutMarkedAt: timestamp('logout_marked_at', { withTimezone: true, mode: 'date' }),
    blackedOutAt: timestamp('blacked_out_at', { withTimezone: true, mode: 'date' }),
    deletedAt: timestamp('deleted_at', { withTimezone: true, mode: 'date' }),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    /**
     * `lower(username)`, kept by PostgreSQL: SCIM compares `userName` case-insensitively
     * (RFC 7643 §4.1.1, caseExact false). A condition on `lower(username)` itself cannot
     * use an index under row-level security (lower() is not leakproof, so PostgreSQL
     * checks the tenant first); one on this column can.
     */
    usernameLower: text('username_lower')
      .notNull()
      .generatedAlwaysAs(sql`lower(username)`),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.id] }),
    unique('users_tenant_id_username_key').on(t.tenantId, t.username),
    index('users_tenant_id_username_lower_idx').on(t.tenantId, t.usernameLower),
    foreignKey({ name: 'users_role_fk', columns: [t.tenantId, t.roleId], foreignColumns: [roles.tenantId, roles.id] }),
    foreignKey({ name: 'users_language_fk', columns: [t.tenantId, t.langId], foreignColumns: [languages.tenantId, languages.id] }),
    index('users_tenant_name_order_idx').on(t.tenantId, t.lastName, t.firstName, t.id),
    check('users_gender_known', sql`${t.gender} IS NULL OR ${t.gender} IN ('female', 'male', 'diverse')`),
    tenantIsolation('users'),
  ],
).enableRLS();

/**
 * Profile pictures (stored in PostgreSQL), one per user, apart from `users`
 * so that user lists never read the bytes.
 */
export const userProfilePictures = pgTable(
  'user_profile_pictures',
  {
    tenantId: tenantIdColumn(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    /** Detected from the bytes: image/jpeg, image/png, image/webp or image/gif. */
    mediaType: text('media_type').notNull(),
    fileName: text('file_name').notNull(),
    content: bytea('content').notNull(),
    /** SHA-256 of the bytes (base64url), the HTTP ETag. */
    etag: text('etag').notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.userId] }),
    foreignKey({ name: 'user_profile_pictures_user_fk', columns: [t.tenantId, t.userId], foreignColumns: [users.tenantId, users.id] }).onDelete('cascade'),
    tenantIsolation('user_profile_pictures'),
  ],
).enableRLS();

/** The profile keys that a tenant's user settings can require of personal accounts (openapi/components/users.yaml#/ProfileKey). */
export const PROFILE_KEYS = ['profile_picture', 'street', 'zipcode', 'city', 'email', 'phone', 'birthdate', 'gender'] as const;
export type ProfileKey = (typeof PROFILE_KEYS)[number];

/**
 * The tenant's required profile keys (`PUT /api/administration/users/settings`), one row
 * per key: a tenant without rows requires none.
 */
export const requiredProfileKeys = pgTable(
  'required_profile_keys',
  {
    tenantId: tenantIdColumn(),
    key: text('key', { enum: PROFILE_KEYS }).notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.key] }),
    check('required_profile_keys_key_known', sql`${t.key} IN ('profile_picture', 'street', 'zipcode', 'city', 'email', 'phone', 'birthdate', 'gender')`),
    tenantIsolation('required_profile_keys'),
  ],
).enableRLS();
