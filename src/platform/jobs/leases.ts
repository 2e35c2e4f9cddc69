import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { and, eq, inArray, lt, sql } from 'drizzle-orm';
import { pgTable, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import type { Db } from '../database/database.ts';

/**
 * Running jobs and how long their worker vouches for them (docs/fault-tolerance.md). A
 * worker writes a lease when it fetches a job, renews it while the job runs, and deletes it
 * once the job's completion is recorded. A running job without a live lease means the
 * worker is gone (killed, out of memory, host lost) or could not record the outcome: the
 * sweeper fails the job and pg-boss retries it. Installation-wide (not a tenant's) and
 * read only by the owner role.
 */
export const jobLeases = pgTable('job_leases', {
  /** The pg-boss job; its retries keep the id. */
  jobId: uuid('job_id').primaryKey(),
  queue: text('queue').notNull(),
  /** One execution of the job, so a late worker cannot renew or end a retry's lease. */
  run: uuid('run').notNull(),
  /** Host and process id of the worker, for operators. */
  holder: text('holder').notNull(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
});

const holder = `${os.hostname()}:${process.pid}`;
const expiry = (seconds: number) => sql`now() + make_interval(secs => ${seconds})`;

/** The leases of one fetched batch of jobs, taken together and renewed together. */
export interface Leases {
  renew(): Promise<void>;
  /** Ends the lease of one job, once its outcome is recorded. */
  release(jobId: string): Promise<void>;
}

/** Takes the leases of `jobIds` for `seconds` (replacing the leases of earlier, lost runs). */
export async function takeLeases(db: Db, queue: string, jobIds: readonly string[], seconds: number): Promise<Leases> {
  const run = randomUUID();
  await db
    .insert(jobLeases)
    .values(jobIds.map((jobId) => ({ jobId, queue, run, holder, expiresAt: expiry(seconds) })))
    .onConflictDoUpdate({ target: jobLeases.jobId, set: { run, holder, expiresAt: expiry(seconds) } });
  return {
    async renew() {
      await db
        .update(jobLeases)
        .set({ expiresAt: expiry(seconds) })
        .where(eq(jobLeases.run, run));
    },
    async release(jobId) {
      await db.delete(jobLeases).where(and(eq(jobLeases.jobId, jobId), eq(jobLeases.run, run)));
    },
  };
}

/**
 * The jobs pg-boss holds as running that no worker vouches for: active for longer than a
 * lease, and without a lease that is still renewed. Their worker died (the lease
 * expired), died before it wrote the lease, or could not record the job's outcome (the
 * database went away at that moment: the lease is kept then, and expires).
 */
export function lostJobs(db: Pick<Db, 'execute'>, seconds: number): Promise<{ jobId: string; queue: string; holder: string | null }[]> {
  return db.execute<{ jobId: string; queue: string; holder: string | null }>(sql`
    select job.id as "jobId", job.name as queue, lease.holder
    from pgboss.job job
    left join ${jobLeases} lease on lease.job_id = job.id
    where job.state = 'active'
      and job.started_on < now() - make_interval(secs => ${seconds})
      and (lease.expires_at is null or lease.expires_at < now())`);
}

/** Removes the expired leases of `jobIds` (their jobs were failed, for pg-boss to retry). */
export async function removeExpiredLeases(db: Pick<Db, 'delete'>, jobIds: readonly string[]): Promise<void> {
  if (jobIds.length === 0) return;
  await db.delete(jobLeases).where(and(inArray(jobLeases.jobId, [...jobIds]), lt(jobLeases.expiresAt, sql`now()`)));
}
