import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { and, eq, lt, sql } from 'drizzle-orm';
import { pgTable, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import type { Db } from '../database/database.ts';

/**
 * Running jobs and how long their worker vouches for them (docs/fault-tolerance.md). A
 * worker writes a lease when it starts a job, renews it while the job runs, and deletes it
 * when the job ends. A lease that expires means the worker is gone (killed, out of memory,
 * host lost): the sweeper fails the job and pg-boss retries it. Installation-wide (not a
 * tenant's) and read only by the owner role.
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

export interface Lease {
  renew(): Promise<void>;
  release(): Promise<void>;
}

/** Takes the lease of job `jobId` for `seconds` (replacing the lease of an earlier, lost run). */
export async function takeLease(db: Db, queue: string, jobId: string, seconds: number): Promise<Lease> {
  const run = randomUUID();
  await db
    .insert(jobLeases)
    .values({ jobId, queue, run, holder, expiresAt: expiry(seconds) })
    .onConflictDoUpdate({ target: jobLeases.jobId, set: { run, holder, expiresAt: expiry(seconds) } });
  const mine = and(eq(jobLeases.jobId, jobId), eq(jobLeases.run, run));
  return {
    async renew() {
      await db
        .update(jobLeases)
        .set({ expiresAt: expiry(seconds) })
        .where(mine);
    },
    async release() {
      await db.delete(jobLeases).where(mine);
    },
  };
}

/** Removes every expired lease and returns its job, each to exactly one caller. */
export function takeExpiredLeases(db: Db): Promise<{ jobId: string; queue: string; holder: string }[]> {
  return db
    .delete(jobLeases)
    .where(lt(jobLeases.expiresAt, sql`now()`))
    .returning({ jobId: jobLeases.jobId, queue: jobLeases.queue, holder: jobLeases.holder });
}
