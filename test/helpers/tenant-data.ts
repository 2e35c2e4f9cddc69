/**
 * Tenants, users and tokens written for a test, as the owner role: the same in the database
 * tier (`startTestDatabase`) and the HTTP tier (`startTestApi`, which spreads them into its
 * `api`). See docs/testing.md#tiers.
 */
import type { Test } from 'tap';
import type { Permission } from '../../src/platform/auth/permissions.ts';
import { hashPassword, setPasswordHashCost } from '../../src/platform/auth/passwords.ts';
import { Database } from '../../src/platform/database/database.ts';
import { issueAccessToken } from '../../src/resources/auth/queries.ts';
import { roles } from '../../src/resources/roles/table.ts';
import { createTenant } from '../../src/resources/tenants/create-tenant.ts';
import { users } from '../../src/resources/users/table.ts';
import { createTestDatabase } from './database.ts';

export const DEMO_PASSWORD = 'demo-admin-password';

export interface TestTenant {
  tenantId: number;
  slug: string;
  adminUserId: number;
  adminToken: string;
}

export interface TenantData {
  createTenant(slug: string): Promise<TestTenant>;
  /** A user with a role of its own that holds exactly `permissions`, and an access token. */
  createUser(
    tenantId: number,
    options?: { username?: string; permissions?: Permission[]; password?: string; values?: Partial<typeof users.$inferInsert> },
  ): Promise<{ id: number; token: string; username: string; password: string }>;
  tokenFor(tenantId: number, userId: number): Promise<string>;
}

let userCounter = 0;

export function tenantData(db: Database): TenantData {
  const data: TenantData = {
    async createTenant(slug) {
      const created = await createTenant(db, { slug, name: slug.toUpperCase(), adminUsername: 'admin', adminPassword: DEMO_PASSWORD });
      return { ...created, slug, adminToken: await data.tokenFor(created.tenantId, created.adminUserId) };
    },

    async createUser(tenantId, options = {}) {
      const username = options.username ?? `user${++userCounter}`;
      const password = options.password ?? 'correct horse battery';
      const roleName = `role-${username}`;
      const [role] = await db.owner
        .insert(roles)
        .values({ tenantId, name: roleName, permissions: options.permissions ?? [] })
        .returning({ id: roles.id });
      const [user] = await db.owner
        .insert(users)
        .values({
          tenantId,
          username,
          passwordHash: await hashPassword(password, 0),
          firstName: 'Test',
          lastName: username,
          roleId: role!.id,
          ...options.values,
        })
        .returning({ id: users.id });
      return { id: user!.id, token: await data.tokenFor(tenantId, user!.id), username, password };
    },

    async tokenFor(tenantId, userId) {
      const answer = await db.tenant(tenantId, (tx) => issueAccessToken(tx, tenantId, userId, 3600));
      return answer.access_token;
    },
  };
  return data;
}

export interface TestDatabaseApi extends TenantData {
  db: Database;
  /** The application role's own login onto the same database, where the server provides one (`db` uses it). */
  appUrl?: string;
}

/**
 * The database tier: a migrated database of the file's own (a copy of the run's template)
 * with Atrium's pools onto it, for tests of queries and row-level security that need no
 * HTTP and no job queue. Closed and dropped when the file ends.
 */
export async function startTestDatabase(t: Test): Promise<TestDatabaseApi> {
  // The suite's weak password hashes, as the HTTP tier's configuration sets them.
  setPasswordHashCost('test');
  const database = await createTestDatabase();
  const db = new Database(database.url, { appUrl: database.appUrl });
  t.teardown(async () => {
    await db.close();
    await database.drop();
  });
  // Nothing to do on a template copy; a database made for `npx tap <file>` alone is empty.
  await db.migrate();
  return { db, appUrl: database.appUrl, ...tenantData(db) };
}
