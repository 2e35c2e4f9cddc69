import PgBoss from 'pg-boss';

/**
 * A background job: its queue (retry policy), how workers fetch it, an optional cron
 * schedule, and the work itself, given a context `C` (the process's services: see
 * define.ts). Resources define jobs next to their handlers, one `<verb>.job.ts` each, and
 * list them in src/jobs.ts.
 */
export interface JobDefinition<T extends object, C> {
  name: string;
  queue?: Omit<PgBoss.Queue, 'name'>;
  work?: PgBoss.WorkOptions;
  /** Cron expression; scheduled once by a worker process. */
  cron?: string;
  /** One job's work. A worker runs the jobs of a fetched batch one at a time, in order. */
  handle(data: T, context: C): Promise<void>;
}

export interface JobsLogger {
  error(object: unknown, message: string): void;
}

/** pg-boss in its own schema, connected as the owner role (it creates its own tables). */
export class Jobs {
  private readonly workers = new Map<string, string>();

  private constructor(private readonly boss: PgBoss) {}

  static async start(url: string, definitions: readonly JobDefinition<never, never>[], log: JobsLogger, options: { schedule: boolean }): Promise<Jobs> {
    const boss = new PgBoss({
      connectionString: url,
      schema: 'pgboss',
      max: 4,
      application_name: 'atrium-jobs',
      schedule: options.schedule,
      supervise: options.schedule,
    });
    boss.on('error', (error) => log.error({ err: error }, 'job queue error'));
    await boss.start();
    for (const definition of definitions) await boss.createQueue(definition.name, { name: definition.name, ...definition.queue });
    return new Jobs(boss);
  }

  /** Starts workers for every definition (ATRIUM_ROLE worker or all); each job's work is given `context`. */
  async work<C>(definitions: readonly JobDefinition<never, C>[], context: C): Promise<void> {
    for (const definition of definitions) {
      const id = await this.boss.work<never>(definition.name, { batchSize: 1, pollingIntervalSeconds: 2, ...definition.work }, async (jobs) => {
        for (const job of jobs) await definition.handle(job.data, context);
      });
      this.workers.set(definition.name, id);
      if (definition.cron) await this.boss.schedule(definition.name, definition.cron, {});
    }
  }

  async send<T extends object>(definition: JobDefinition<T, unknown>, data: T, options: PgBoss.SendOptions = {}): Promise<string> {
    const id = await this.boss.send(definition.name, data, options);
    if (!id) throw new Error(`Job ${definition.name} was not queued`);
    const worker = this.workers.get(definition.name);
    if (worker) this.boss.notifyWorker(worker); // same process: no need to wait for the next poll
    return id;
  }

  async getJob(name: string, id: string): Promise<{ state: string } | null> {
    return await this.boss.getJobById(name, id);
  }

  async stop(): Promise<void> {
    await this.boss.stop({ graceful: true, wait: true, timeout: 10_000 });
  }
}
