import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { changesBetween, recordAudit, type AuditSource } from '../../platform/audit/audit.ts';
import { setTenant, type Database } from '../../platform/database/database.ts';
import { hashPassword } from '../../platform/auth/passwords.ts';
import { languages } from '../languages/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { PERMISSIONS } from '../../platform/auth/permissions.ts';
import { roles } from '../roles/table.ts';
import { users } from '../users/table.ts';
import { tenants } from '../../platform/database/tenancy.ts';
import { SLUG } from './slug.ts';

/**
 * The notification settings (delivery categories departments refer to) every tenant starts
 * with: one per typed notification, and one for custom notifications
 * (docs/notifications.md#typed-notifications).
 */
export const DEFAULT_NOTIFICATION_SETTINGS = [
  'infoboard_post_created',
  'infoboard_post_updated',
  'infoboard_post_reading_confirmation_required',
  'manual_entry_updated',
  'custom_notification',
];

export interface NewTenant {
  slug: string;
  name: string;
  adminUsername: string;
  adminPassword: string;
}

export class TenantExistsError extends Error {}

/**
 * A tenant with its languages, the seeded roles (`Administrator`: all permissions,
 * `Employee`: none), notification settings and one administrator. Runs as the owner
 * role in one transaction: all or nothing. With `source` (the command line, the first
 * start), the new tenant's trail begins with its `tenant.created` event, in the same
 * transaction (docs/audit.md#what-is-recorded).
 */
export async function createTenant(db: Database, input: NewTenant, source?: AuditSource) {
  if (!SLUG.test(input.slug)) throw new Error(`Tenant slug "${input.slug}" must be lower-case letters, digits and dashes.`);
  const passwordHash = await hashPassword(input.adminPassword, 0);
  return db.owner.transaction(async (tx) => {
    const [tenant] = await tx.insert(tenants).values({ slug: input.slug, name: input.name }).onConflictDoNothing().returning({ id: tenants.id });
    if (!tenant) throw new TenantExistsError(`Tenant "${input.slug}" exists already.`);
    const tenantId = tenant.id;
    await tx.insert(languages).values([
      { tenantId, id: 'en-US', name: 'English (US)', isSystem: true },
      { tenantId, id: 'de-DE', name: 'Deutsch' },
    ]);
    const [administrator] = await tx
      .insert(roles)
      .values([
        { tenantId, name: 'Administrator', permissions: [...PERMISSIONS] },
        { tenantId, name: 'Employee', permissions: [] },
      ])
      .returning({ id: roles.id });
    await tx.insert(notificationSettings).values(DEFAULT_NOTIFICATION_SETTINGS.map((key, i) => ({ tenantId, key, sortNumber: i + 1 })));
    const [admin] = await tx
      .insert(users)
      .values({
        tenantId,
        username: input.adminUsername,
        passwordHash,
        firstName: 'Atrium',
        lastName: 'Administrator',
        roleId: administrator!.id,
        langId: 'en-US',
      })
      .returning({ id: users.id });
    if (source) {
      // The event takes its tenant from the transaction, as every event does.
      await setTenant(tx, tenantId);
      await recordAudit(tx, source, {
        action: 'tenant.created',
        target: { type: 'tenant', id: tenantId, label: input.name },
        changes: changesBetween(null, { slug: input.slug, name: input.name }),
        // By id only: the administrator's name would outlive a blackout of them here.
        details: { administrator_id: admin!.id },
      });
    }
    return { tenantId, adminUserId: admin!.id };
  });
}

/** A password for an administrator whom nobody gave one: 16 random bytes, printed once. */
export function generatePassword(): string {
  return randomBytes(16).toString('base64url');
}

/** What an entry point prints, once and outside the log, when it made up an administrator's password. */
export function generatedPasswordNotice(tenant: { slug: string; name: string }, username: string, password: string): string {
  return `\n  ${tenant.name} tenant created. Sign in with tenant "${tenant.slug}", username "${username}", password "${password}".\n  This password is not shown again.\n\n`;
}

/**
 * The first tenant, with administrator `admin`, on a database that has no tenant yet
 * (docs/running.md#first-start); nothing on any other. Answers the administrator's password
 * when it was generated (no `adminPassword`), `{}` when it was given, null when nothing was
 * created. Processes that start together create it once: the others find it there.
 */
export async function seedFirstTenant(
  db: Database,
  tenant: { slug: string; name: string },
  adminPassword: string | undefined,
  source?: AuditSource,
): Promise<{ generatedPassword?: string } | null> {
  const [row] = await db.owner.execute<{ any: boolean }>(sql`select exists (select 1 from tenants) as any`);
  if (row?.any) return null;
  const password = adminPassword ?? generatePassword();
  try {
    await createTenant(db, { slug: tenant.slug, name: tenant.name, adminUsername: 'admin', adminPassword: password }, source);
  } catch (error) {
    if (error instanceof TenantExistsError) return null; // another process created it first
    throw error;
  }
  return adminPassword ? {} : { generatedPassword: password };
}
