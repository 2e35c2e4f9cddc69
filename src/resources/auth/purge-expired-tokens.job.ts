import { sql } from 'drizzle-orm';
import { defineJob } from '../../platform/jobs/define.ts';

/**
 * Hourly sign-in housekeeping: access tokens past expiry or revoked a day ago are useless,
 * and so are failed-sign-in counts whose window ended (queries.ts).
 */
export const purgeExpiredTokens = defineJob<{ olderThanSeconds?: number }>({
  name: 'auth.purge-expired-tokens',
  cron: '17 * * * *',
  async handle(data, { db, config }) {
    const olderThan = data?.olderThanSeconds ?? 86_400;
    // Maintenance across every tenant: the owner role, not a tenant transaction.
    await db.owner.execute(sql`
      delete from access_tokens
      where expires_at < now() - make_interval(secs => ${olderThan})
         or revoked_at < now() - make_interval(secs => ${olderThan})`);
    // A count a sign-in holds is being renewed: skipped, not waited for (sign-ins lock in key order).
    await db.owner.execute(sql`
      delete from login_failures
      where key in (
        select key from login_failures
        where window_started_at < now() - make_interval(secs => ${config.loginFailureWindowSeconds})
        order by key for update skip locked)`);
  },
});
