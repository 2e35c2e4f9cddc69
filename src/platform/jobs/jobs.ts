import { sql } from 'drizzle-orm';
import PgBoss from 'pg-boss';
import { dropConnection, isReadOnlyServer } from '../database/connection-loss.ts';
import { citusVersion } from '../database/citus.ts';
import { connectTo } from '../database/connection-url.ts';
import type { Db } from '../database/database.ts';
import { jobErrorLogFields } from '../http/error-handler.ts';
import { lostJobs, removeExpiredLeases, takeLeases } from './leases.ts';

/**
 * A background job: its queue (retry policy), how workers fetch it, an optional cron
 * schedule, and the work itself, given a context `C` (the process's services: see
 * define.ts). Resources define jobs next to their handlers, one `<verb>.job.ts` each, and
 * list them in src/jobs.ts.
 */
/** 2026-01-01 UTC in seconds: turn priorities count from it, so they stay within PostgreSQL's integer for decades. */
const TURN_EPOCH_SECONDS = 1_767_225_600;

/**
 * The pg-boss priority of a job that has `ahead` jobs of the same work before it (a tenant's
 * deliveries waiting, a fan-out's earlier batches), each counted `paceSeconds` later than
 * now: a virtual time, whose earliest workers take first (pg-boss takes the highest
 * priority, then the oldest job). One tenant's burst is so spread over `ahead × paceSeconds`,
 * and others' jobs queued meanwhile go between its jobs instead of behind all of them,
 * while a job queued earlier still goes before one queued later with as many ahead of it:
 * none waits for ever behind newer work (docs/outbound-delivery.md#concurrency).
 */
export function turnPriority(ahead: number, paceSeconds: number, now = Date.now()): number {
  return -(Math.floor(now / 1000) - TURN_EPOCH_SECONDS + ahead * paceSeconds);
}

/** How often the workers beyond a queue's first (`concurrency`) look for jobs. */
const EXTRA_WORKER_POLL_SECONDS = 10;

export interface JobDefinition<T extends object, C> {
  name: string;
  queue?: Omit<PgBoss.Queue, 'name'>;
  work?: PgBoss.WorkOptions;
  /**
   * How many of the queue's jobs a worker process runs at once (default 1), one pg-boss
   * worker each. For jobs that wait on other servers (webhooks, push): a receiver that
   * hangs until the timeout then holds one of them, not every delivery of the process.
   */
  concurrency?: number;
  /** Cron expression; scheduled once by a worker process. */
  cron?: string;
  /** One job's work. A worker runs the jobs of a fetched batch one at a time, in order. */
  handle(data: T, context: C, run: JobRun): Promise<void>;
}

/** What a job's work knows of its execution. */
export interface JobRun {
  /**
   * An earlier run of this very job ended without completing it: it failed, or its worker
   * was lost (its lease expired) possibly in the middle of the work.
   */
  retried: boolean;
}

export interface JobsLogger {
  error(object: unknown, message: string): void;
  warn(object: unknown, message: string): void;
}

export interface JobsOptions {
  /** Whether this process schedules cron jobs and runs queue maintenance (worker processes). */
  schedule: boolean;
  /**
   * How long a running job survives its worker's silence: the worker renews the lease every
   * third of it, and a sweeper fails jobs whose lease expired so pg-boss retries them
   * (docs/fault-tolerance.md).
   */
  leaseSeconds: number;
  /** The owner connection: leases are installation-wide. */
  db: Db;
}

/**
 * pg-boss's connection to the database: a postgres.js pool, given to pg-boss as its `db`
 * (`executeSql(text, values)` answering `{ rows }`). pg-boss's own pool (`pg`) takes one
 * host only; this one takes what every database URL of Atrium takes (several hosts,
 * `target_session_attrs`), so the job queue follows the primary after a failover as the
 * other pools do. Each statement runs on a connection reserved for it, so that one a
 * read-only server answered (the former primary) is dropped and not used again.
 *
 * Values are sent as `pg` sends them, which pg-boss's statements expect: a string for a
 * JSON parameter is JSON text already (pg-boss stringifies some), an object is
 * stringified; `undefined` is NULL. Answers are read alike: JSON parsed, timestamps as
 * dates, bigint and numeric as strings.
 *
 * With `citus`, the database is a Citus coordinator, where the job queue stays
 * (docs/scaling.md#what-runs-where): its sessions create pg-boss's schema, tables and
 * partitions with Citus' DDL propagation off. Left on, Citus carries pg-boss's schema to
 * the workers once the tenant tables are distributed, and the workers refuse it
 * ("operation is not allowed on this node"): no process could start.
 */
export function jobQueueConnection(url: string, max: number, citus = false): { db: PgBoss.Db; close(): Promise<void> } {
  const pool = connectTo(url, {
    max,
    onnotice: () => {},
    connection: { application_name: 'atrium-jobs', ...(citus ? { 'citus.enable_ddl_propagation': 'off' } : {}) },
    transform: { undefined: null },
    // Closer to a second than postgres.js's default (which grows to 20 s): a primary that is back is used at once.
    backoff: (lost: number) => Math.min(0.01 * lost, 0.5),
    connect_timeout: 5,
    types: {
      json: {
        to: 114,
        from: [114, 3802],
        serialize: (value: unknown) => (typeof value === 'string' ? value : JSON.stringify(value)),
        parse: (text: string) => JSON.parse(text) as unknown,
      },
      boolean: {
        to: 16,
        from: [16],
        serialize: (value: unknown) => (value === true || value === 't' || value === 'true' ? 't' : 'f'),
        parse: (text: string) => text === 't',
      },
    },
  });
  return {
    db: {
      async executeSql(text: string, values: unknown[] = []) {
        const connection = await pool.reserve();
        try {
          const result = await connection.unsafe(text, values);
          // Several statements in one text (pg-boss sends its transactions so) answer one result each: the last one's rows.
          const rows: unknown[] = Array.isArray(result[0]) ? (result.at(-1) as unknown as unknown[]) : result;
          return { rows };
        } catch (error) {
          // A text of several statements that opens a transaction (pg-boss's maintenance: BEGIN; …; COMMIT) and fails
          // midway leaves it open and failed: every later statement on the connection would be refused (25P02).
          await connection.unsafe('rollback').catch(() => {});
          if (isReadOnlyServer(error)) await dropConnection(connection);
          throw error;
        } finally {
          connection.release();
        }
      },
    },
    close: () => pool.end({ timeout: 5 }),
  };
}

/** Whether the database at `url` has Citus (its job queue then stays on the coordinator: `jobQueueConnection`). */
async function hasCitus(url: string): Promise<boolean> {
  const probe = connectTo(url, { max: 1, onnotice: () => {}, connect_timeout: 5 });
  try {
    return (await citusVersion(probe)) !== null;
  } finally {
    await probe.end({ timeout: 5 });
  }
}

/** Arbitrary constant: serialises the queue set-up of processes that start together. */
const QUEUE_SETUP_LOCK = 720_431_978;
/** Arbitrary constant: one lost-job sweep at a time across worker processes. */
const SWEEP_LOCK = 720_431_979;

/** pg-boss in its own schema, connected as the owner role (it creates its own tables). */
export class Jobs {
  /** The pg-boss workers of each queue this process works (`concurrency` of them). */
  private readonly workers = new Map<string, string[]>();
  private sweeper: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;

  private constructor(
    private readonly boss: PgBoss,
    private readonly connection: { close(): Promise<void> },
    private readonly log: JobsLogger,
    private readonly options: JobsOptions,
  ) {}

  static async start(url: string, definitions: readonly JobDefinition<never, never>[], log: JobsLogger, options: JobsOptions): Promise<Jobs> {
    const connection = jobQueueConnection(url, 4, await hasCitus(url));
    const boss = new PgBoss({
      db: connection.db,
      schema: 'pgboss',
      schedule: options.schedule,
      supervise: options.schedule,
      // Also fails jobs past their queue's `expireInSeconds` (a hung handler); run it often
      // enough that such a job is retried soon after its expiry.
      maintenanceIntervalSeconds: Math.max(1, Math.ceil(options.leaseSeconds / 3)),
    });
    boss.on('error', (error) => log.error({ err: error }, 'job queue error'));
    // pg-boss creates a queue's table on first use; two processes doing so at once (an API
    // and a worker starting on a new database) deadlock. They take turns instead.
    try {
      await options.db.transaction(async (tx) => {
        await tx.execute(sql`select pg_advisory_xact_lock(${QUEUE_SETUP_LOCK})`);
        await boss.start();
        await createQueues(boss, definitions);
      });
    } catch (error) {
      await boss.stop({ graceful: false, wait: true }).catch(() => {});
      await connection.close();
      throw error;
    }
    return new Jobs(boss, connection, log, options);
  }

  /**
   * What `start` creates in a new database (pg-boss's schema and the queues), then stops:
   * the test suite's template database carries it, so no test process spends its start-up
   * on it.
   */
  static async install(url: string, definitions: readonly JobDefinition<never, never>[]): Promise<void> {
    const connection = jobQueueConnection(url, 1, await hasCitus(url));
    const boss = new PgBoss({ db: connection.db, schema: 'pgboss', schedule: false, supervise: false });
    try {
      await boss.start();
      await createQueues(boss, definitions);
    } finally {
      await boss.stop({ graceful: false, wait: true }).catch(() => {});
      await connection.close();
    }
  }

  /** Starts workers for every definition (ATRIUM_ROLE worker or all); each job's work is given `context`. */
  async work<C>(definitions: readonly JobDefinition<never, C>[], context: C): Promise<void> {
    for (const definition of definitions) {
      const ids: string[] = [];
      for (let i = 0; i < (definition.concurrency ?? 1); i++) {
        const options = { batchSize: 1, pollingIntervalSeconds: 2, ...definition.work, includeMetadata: true as const };
        // The first worker polls as the definition says; the others, there for when it is busy, every EXTRA_WORKER_POLL_SECONDS
        // (a job sent by this process wakes them all at once), so an idle process asks little more than with one.
        if (i > 0) options.pollingIntervalSeconds = Math.max(options.pollingIntervalSeconds, EXTRA_WORKER_POLL_SECONDS);
        ids.push(await this.boss.work<never>(definition.name, options, (jobs) => this.runLeased(definition, jobs, context)));
      }
      this.workers.set(definition.name, ids);
      if (definition.cron) await this.boss.schedule(definition.name, definition.cron, {});
    }
    if (this.options.schedule && !this.sweeper) {
      this.sweeper = setInterval(() => {
        this.sweeping ??= this.failLostJobs().finally(() => (this.sweeping = undefined));
      }, this.renewEveryMs());
    }
  }

  private renewEveryMs(): number {
    return Math.max(500, (this.options.leaseSeconds * 1000) / 3);
  }

  /**
   * Runs a fetched batch under leases renewed every third of their length, one job at a
   * time. A renewal that fails (database briefly away) is logged and tried again at the
   * next tick; if a lease expires meanwhile the job is retried elsewhere, which jobs
   * tolerate (they are safe to run twice).
   *
   * A job that succeeds is completed here, and only then is its lease released: were the
   * completion lost (the database failed over at that moment), the job would stay running
   * in pg-boss's eyes with nobody vouching for it. Kept, the lease expires and the sweeper
   * retries the job. A job that fails is logged (a warning while retries are left, an
   * error on its last) and failed by pg-boss (the error thrown to it); its lease is left to
   * expire, so that a failure pg-boss could not record is retried too.
   */
  private async runLeased<C>(definition: JobDefinition<never, C>, jobs: PgBoss.JobWithMetadata<never>[], context: C): Promise<void> {
    const { db, leaseSeconds } = this.options;
    const queue = definition.name;
    const leases = await takeLeases(
      db,
      queue,
      jobs.map((job) => job.id),
      leaseSeconds,
    );
    const renewal = setInterval(() => {
      leases.renew().catch((error: unknown) => this.log.warn({ err: error, queue }, 'job lease not renewed'));
    }, this.renewEveryMs());
    try {
      for (const job of jobs) {
        try {
          await definition.handle(job.data, context, { retried: job.retryCount > 0 });
        } catch (error) {
          // pg-boss records the failure and retries per the queue's policy; the log says where, without the values the error may carry.
          const last = job.retryCount >= job.retryLimit;
          const fields = { ...jobErrorLogFields(error), queue, jobId: job.id, retryCount: job.retryCount };
          if (last) this.log.error(fields, 'job failed; no retry left');
          else this.log.warn(fields, 'job failed; it is retried');
          // pg-boss keeps what it is thrown in the job's row (`output`): what the log keeps, never the message or values.
          throw Object.assign(new Error('The job failed: see the log for where.'), jobErrorLogFields(error));
        }
        await this.boss.complete(queue, job.id);
        await leases.release(job.id).catch((error: unknown) => this.log.warn({ err: error, queue, jobId: job.id }, 'job lease not released'));
      }
    } finally {
      clearInterval(renewal);
    }
  }

  /**
   * Fails every job that no worker vouches for (`lostJobs`); pg-boss retries it per its
   * queue's policy. One sweeper at a time, so each lost job is failed once.
   */
  private async failLostJobs(): Promise<void> {
    try {
      await this.options.db.transaction(async (tx) => {
        const [turn] = await tx.execute<{ mine: boolean }>(sql`select pg_try_advisory_xact_lock(${SWEEP_LOCK}) as mine`);
        if (!turn?.mine) return;
        const lost = await lostJobs(tx, this.options.leaseSeconds);
        for (const { jobId, queue, holder } of lost) {
          this.log.warn({ queue, jobId, holder }, 'job lost with its worker; retrying it');
          await this.boss.fail(queue, jobId, { message: holder ? `worker ${holder} stopped renewing its lease` : 'no worker holds a lease on the job' });
        }
        await removeExpiredLeases(
          tx,
          lost.map((job) => job.jobId),
        );
      });
    } catch (error) {
      this.log.error({ err: error }, 'lost-job sweep failed');
    }
  }

  async send<T extends object>(definition: JobDefinition<T, unknown>, data: T, options: PgBoss.SendOptions = {}): Promise<string> {
    const id = await this.boss.send(definition.name, data, options);
    if (!id) throw new Error(`Job ${definition.name} was not queued`);
    // Same process: no need to wait for the next poll (each worker is told: some may be busy).
    for (const worker of this.workers.get(definition.name) ?? []) this.boss.notifyWorker(worker);
    return id;
  }

  /**
   * Sends the job of work that a transaction has recorded and committed, and that a sweep
   * sends again while no job has done it (a notification's dispatch, a webhook delivery, a
   * trail's erasure). A send that fails (the database away for a moment, as in a failover)
   * is logged, not thrown: the request that committed the work is answered as accepted,
   * since the sweep delivers it, rather than with a 503 that a client would retry into the
   * same work done twice (a refused answer keeps no idempotency key).
   */
  async sendCommitted<T extends object>(definition: JobDefinition<T, unknown>, data: T, options: PgBoss.SendOptions = {}): Promise<void> {
    try {
      await this.send(definition, data, options);
    } catch (error) {
      this.log.error({ err: error, job: definition.name }, 'job not sent after its commit; its sweep sends it');
    }
  }

  async getJob(name: string, id: string): Promise<{ state: string } | null> {
    return await this.boss.getJobById(name, id);
  }

  /**
   * Stops taking jobs and waits up to `waitMs` for the running ones to finish; pg-boss then
   * fails those still running ("pg-boss shut down while active"), which hands them back to
   * be retried. pg-boss looks whether they have every half second, so it is given half a
   * second less; it waits a second at least.
   */
  async stop(waitMs = 10_000): Promise<void> {
    clearInterval(this.sweeper);
    await this.sweeping;
    await this.boss.stop({ graceful: true, wait: true, timeout: Math.max(1_000, waitMs - 500) });
    await this.connection.close();
  }
}

/**
 * Creates each queue, or brings one that exists to its definition: pg-boss's `createQueue`
 * leaves an existing queue as it is, so a database set up by an older release would keep
 * that release's policy (an expiry since raised, say).
 */
async function createQueues(boss: PgBoss, definitions: readonly JobDefinition<never, never>[]): Promise<void> {
  for (const definition of definitions) {
    await boss.createQueue(definition.name, { name: definition.name, ...definition.queue });
    if (definition.queue) await boss.updateQueue(definition.name, { name: definition.name, ...definition.queue });
  }
}
