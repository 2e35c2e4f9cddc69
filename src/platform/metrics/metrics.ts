/**
 * Prometheus metrics of one process (prom-client, a registry of its own per process so
 * that tests can run several apps side by side). Counters and histograms count what this
 * process did; gauges that read the database (job queues, connections) show the whole
 * deployment. See docs/observability.md.
 */
import { timingSafeEqual, createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { sql } from 'drizzle-orm';
import type { Database } from '../database/database.ts';
import { unauthorized } from '../http/problem.ts';

/** Request durations, seconds: from 5 ms (a cached read) to 10 s (a large CSV preview). */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequestDuration = new Histogram({
    name: 'atrium_http_request_duration_seconds',
    help: 'Time from receiving a request to sending its answer, by route pattern (unmatched: no route), method and status.',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });
  readonly deliveries = new Counter({
    name: 'atrium_delivery_attempts_total',
    help: 'Outbound delivery attempts made by this process, by channel (webhook, push) and outcome (succeeded, retry, failed, gone).',
    labelNames: ['channel', 'outcome'] as const,
    registers: [this.registry],
  });

  /**
   * The metrics of this process: the HTTP histogram, delivery counts, Node's own. The gauges
   * read from the database are left without a value while it is away, so that a scrape in
   * an outage still answers with the rest (the share of 5xx answers, say).
   */
  constructor(db: Database) {
    collectDefaultMetrics({ register: this.registry, prefix: 'atrium_' });
    new Gauge({
      name: 'atrium_jobs',
      help: 'Jobs in the queue tables by queue and state (created and retry: waiting; active; failed: failed for good, until archived). Shared by every process.',
      labelNames: ['queue', 'state'] as const,
      registers: [this.registry],
      async collect() {
        this.reset();
        const rows = await unlessAway(() =>
          db.owner.execute<{ name: string; state: string; count: number }>(
            sql`select name, state::text as state, count(*)::int as count from pgboss.job group by name, state`,
          ),
        );
        for (const row of rows) this.set({ queue: row.name, state: row.state }, row.count);
      },
    });
    new Gauge({
      name: 'atrium_database_connections',
      help: "Connections to Atrium's database by pool (app: requests and jobs under row-level security; owner: migrations, maintenance) and state, of every process.",
      labelNames: ['pool', 'state'] as const,
      registers: [this.registry],
      async collect() {
        this.reset();
        const rows = await unlessAway(() =>
          db.owner.execute<{ pool: string; state: string; count: number }>(
            sql`select application_name as pool, coalesce(state, 'unknown') as state, count(*)::int as count
                  from pg_stat_activity
                 where datname = current_database() and application_name in ('atrium', 'atrium-owner')
                 group by 1, 2`,
          ),
        );
        for (const row of rows) this.set({ pool: row.pool === 'atrium' ? 'app' : 'owner', state: row.state }, row.count);
      },
    });
    new Gauge({
      name: 'atrium_database_pool_max_connections',
      help: 'Most connections each pool of this process opens.',
      labelNames: ['pool'] as const,
      registers: [this.registry],
      collect() {
        this.set({ pool: 'app' }, db.poolSizes.app);
        this.set({ pool: 'owner' }, db.poolSizes.owner);
      },
    });
  }

  /** A gauge read when scraped, such as the number of open event streams. */
  observe(name: string, help: string, read: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }
}

/** The rows `read` answers, or none when the database cannot answer (`Metrics`' gauges). */
async function unlessAway<Row>(read: () => Promise<Row[]>): Promise<Row[]> {
  try {
    return await read();
  } catch {
    return [];
  }
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * Times every request (`onResponse`: route pattern, never the URL, so record ids do not
 * multiply the series) and serves `GET /metrics` to callers presenting `token` as a bearer
 * token; without a token configured the route does not exist.
 */
export function registerMetrics(app: FastifyInstance, metrics: Metrics, token: string | undefined): void {
  app.addHook('onResponse', (request, reply, done) => {
    metrics.httpRequestDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
    done();
  });
  if (!token) return;
  const expected = digest(token);
  app.get('/metrics', async (request, reply) => {
    const presented = /^Bearer +(\S+) *$/i.exec(request.headers.authorization ?? '')?.[1];
    if (!presented || !timingSafeEqual(digest(presented), expected)) {
      throw unauthorized('The metrics token is required.');
    }
    return reply.type(metrics.registry.contentType).send(await metrics.registry.metrics());
  });
}
