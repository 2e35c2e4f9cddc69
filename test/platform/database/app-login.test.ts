/**
 * The application connects as a role that cannot bypass row-level security
 * (docs/tenancy-and-security.md#application-role-vs-owner-role). With
 * ATRIUM_APP_DATABASE_URL it logs in as that role; a role that could see past the
 * policies is refused at start.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { sql } from 'drizzle-orm';
import { Database } from '../../../src/platform/database/database.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('login-role');
const suffix = randomBytes(4).toString('hex');
const roles: string[] = [];

/** A login role on the test's server (roles are cluster-wide: unique names, dropped at the end). */
async function loginRole(attributes: string): Promise<string> {
  const name = `atrium_login_${suffix}_${roles.length}`;
  roles.push(name);
  await api.db.ownerSql.unsafe(`create role ${name} login password 'pw-${suffix}' ${attributes}`);
  const url = new URL(api.db.url);
  url.username = name;
  url.password = `pw-${suffix}`;
  return url.toString();
}

t.teardown(async () => {
  for (const name of roles) await api.db.ownerSql.unsafe(`drop role if exists ${name}`).catch(() => {});
});

t.test('a dedicated login role that is a member of atrium_app is accepted and scoped by RLS', async (t) => {
  const db = new Database(api.db.url, { appUrl: await loginRole('nosuperuser nobypassrls in role atrium_app') });
  t.teardown(() => db.close());
  await db.verifyAppRole();
  const [who] = await db.appSql<{ session_user: string }[]>`select session_user`;
  t.match(who!.session_user, /^atrium_login_/, 'logged in as its own role, not the owner');
  const [unscoped] = await db.appSql<{ n: number }[]>`select count(*)::int as n from users`;
  t.equal(unscoped!.n, 0, 'nothing without a tenant');
  const scoped = await db.tenant(tenant.tenantId, (tx) => tx.execute<{ n: number }>(sql`select count(*)::int as n from users`));
  t.equal(scoped[0]!.n, 1, "its tenant's rows within the tenant transaction");
  // RESET ROLE goes back to the login role itself: there is no owner session to escape to.
  const connection = await db.appSql.reserve();
  await connection`reset role`;
  const [after] = await connection<{ current_user: string; n: number }[]>`select current_user, (select count(*)::int from users) as n`;
  connection.release();
  t.match(after!.current_user, /^atrium_login_/);
  t.equal(after!.n, 0);
});

t.test('a role that bypasses row-level security is refused', async (t) => {
  const db = new Database(api.db.url, { appUrl: await loginRole('nosuperuser bypassrls in role atrium_app') });
  t.teardown(() => db.close());
  await t.rejects(db.verifyAppRole(), /BYPASSRLS/);
});

t.test('a role outside atrium_app is refused', async (t) => {
  const db = new Database(api.db.url, { appUrl: await loginRole('nosuperuser nobypassrls') });
  t.teardown(() => db.close());
  await t.rejects(db.verifyAppRole(), /member of atrium_app/);
});
