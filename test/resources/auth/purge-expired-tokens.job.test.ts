import t from 'tap';
import { sql } from 'drizzle-orm';
import { purgeExpiredTokens } from '../../../src/resources/auth/purge-expired-tokens.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { rowCount } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { role: 'all' });

t.test('the job queue runs a job: expired access tokens are purged', async (t) => {
  const tenant = await api.createTenant('jobs');
  const stale = await api.createUser(tenant.tenantId);
  const fresh = await api.createUser(tenant.tenantId);
  await api.db.owner.execute(sql`update access_tokens set expires_at = now() - interval '2 days' where user_id = ${stale.id}`);
  const count = (userId: number) => rowCount(api.db, 'access_tokens', sql`user_id = ${userId}`);
  t.equal(await count(stale.id), 1);

  const id = await api.atrium.services.jobs.send(purgeExpiredTokens, { olderThanSeconds: 86_400 });
  const state = await eventually(
    async () => (await api.atrium.services.jobs.getJob(purgeExpiredTokens.name, id))?.state,
    (s) => s === 'completed' || s === 'failed',
  );
  t.equal(state, 'completed');
  t.equal(await count(stale.id), 0, 'the expired token is gone');
  t.equal(await count(fresh.id), 1, 'a valid token stays');
});

t.test('failed-sign-in counts whose window ended are purged, current ones stay', async (t) => {
  await api.db.owner.execute(sql`
    insert into login_failures (key, failures, window_started_at) values
      ('account:old/x', 3, now() - interval '2 days'), ('account:new/x', 3, now())`);
  const id = await api.atrium.services.jobs.send(purgeExpiredTokens, {});
  await eventually(
    async () => (await api.atrium.services.jobs.getJob(purgeExpiredTokens.name, id))?.state,
    (s) => s === 'completed' || s === 'failed',
  );
  const rows = await api.db.owner.execute<{ key: string }>(sql`select key from login_failures order by key`);
  t.strictSame(
    rows.map((r) => r.key),
    ['account:new/x'],
  );
});
