/**
 * The setting of the concurrent-write tests (docs/tenancy-and-security.md#concurrent-writes-of-one-record):
 * a test API and a tenant of its own, a SCIM token of the tenant's administrator, and the
 * checks those tests share. Each case sends its requests together, for several rounds: an
 * interleaving that breaks the rule shows in most rounds when nothing serialises the writes.
 */
import { sql } from 'drizzle-orm';
import type { Test } from 'tap';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { scimSettings, scimTokens } from '../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../src/resources/scim/tokens.ts';
import { startTestApi, type CallResult } from './atrium.ts';
import { CITUS_ENV } from './citus.ts';
import { bearer, roleNamed } from './fixtures.ts';

/** How many times a case sends its requests together. */
export const ROUNDS = 6;

/** A test API (sign-ins refused because a password changed count as failures: not limited here) and a tenant `slug` with a SCIM token. */
export async function startConcurrentWrites(t: Test, slug: string) {
  const api = await startTestApi(t, { loginMaxFailures: 1_000_000 });
  const tenant = await api.createTenant(slug);
  const scimToken = newScimTokenValue();
  await api.db.owner.insert(scimTokens).values({ tenantId: tenant.tenantId, userId: tenant.adminUserId, name: 'IdP', tokenHash: hashToken(scimToken) });
  await api.db.owner.insert(scimSettings).values({ tenantId: tenant.tenantId, defaultRoleId: (await roleNamed(api.db, tenant.tenantId, 'Employee')).id });
  const scim = (method: 'POST' | 'PUT' | 'PATCH' | 'DELETE', url: string, body?: unknown, token = scimToken) =>
    api.atrium
      .app!.inject({
        method,
        url: `/scim/v2${url}`,
        headers: { ...bearer(token), ...(body === undefined ? {} : { 'content-type': 'application/scim+json' }) },
        payload: body === undefined ? undefined : JSON.stringify(body),
      })
      .then((answer) => ({ status: answer.statusCode, text: answer.body }) as CallResult);
  /** The actions the trail recorded on a target, oldest first. */
  const trail = async (targetType: string, id: number) =>
    (
      await api.db.owner.execute<{ action: string }>(
        sql`select action from audit_events where tenant_id = ${tenant.tenantId} and target_type = ${targetType} and target_id = ${String(id)} order by occurred_at, id`,
      )
    ).map((row) => row.action);
  const countOf = async (action: string, targetType: string, id: number) => (await trail(targetType, id)).filter((recorded) => recorded === action).length;
  return { api, tenant, admin: tenant.adminToken, scimToken, scim, trail, countOf };
}

export const statuses = (answers: CallResult[]) => answers.map((answer) => answer.status);

export const noServerError = (t: Test, answers: CallResult[]) =>
  t.ok(
    answers.every((answer) => answer.status < 500),
    `no 5xx: ${answers.map((answer) => `${answer.status}${answer.status >= 500 ? ` ${answer.text}` : ''}`).join(', ')}`,
  );

/**
 * Where a session waiting on a row lock shows, and the id `pg_cancel_backend` takes: this server's sessions; on Citus
 * every node's (`citus_stat_activity`), since the row is locked, and waited on, on the worker that holds it, and the
 * waiting session's global id (Citus' `pg_cancel_backend(bigint)` cancels it on its node).
 */
export const activity = sql.raw(process.env[CITUS_ENV] ? 'citus_stat_activity' : 'pg_stat_activity');
export const waiterId = sql.raw(process.env[CITUS_ENV] ? 'global_pid' : 'pid');
/** Cancels the statement of the session `id` (`waiterId`): Citus' overload takes a bigint, PostgreSQL's an integer. */
export const cancel = (id: number) => sql`select pg_cancel_backend(${id}::${sql.raw(process.env[CITUS_ENV] ? 'bigint' : 'integer')})`;
