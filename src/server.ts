import { RecentPrincipals } from './platform/auth/recent-principals.ts';
import type { FastifyInstance } from 'fastify';
import pino, { type Logger } from 'pino';
import { buildApp, loggerOptions } from './app.ts';
import type { Config } from './config.ts';
import { openDatabaseServer, type DatabaseServer } from './database-server.ts';
import { jobDefinitions } from './jobs.ts';
import { Database } from './platform/database/database.ts';
import { Jobs } from './platform/jobs/jobs.ts';
import { setPasswordHashCost } from './platform/auth/passwords.ts';
import { stopEach } from './platform/process/shutdown.ts';
import { turnOffPretenuring } from './platform/process/heap.ts';
import { Metrics } from './platform/metrics/metrics.ts';
import { OutboundClient } from './platform/outbound/client.ts';
import { Secrets } from './platform/secrets/secrets.ts';
import type { Services } from './platform/services.ts';
import { NotificationStreams } from './resources/notifications/stream.ts';
import { seedFirstTenant } from './resources/tenants/create-tenant.ts';

/** The application pool's login: configured, or `atrium_app` itself on the embedded server. */
function appLoginUrl(config: Config, server: DatabaseServer): string | undefined {
  if (config.appDatabaseUrl) return config.appDatabaseUrl;
  if (!server.appPassword) return undefined;
  const url = new URL(server.url);
  url.username = 'atrium_app';
  url.password = server.appPassword;
  return url.toString();
}

export interface Atrium {
  services: Services;
  app: FastifyInstance | null;
  logger: Logger;
  /** Graceful: streams, in-flight requests, workers, pools, then the embedded database. */
  stop(): Promise<void>;
  /** Cuts a stop short: closes every open connection and stops the embedded database. */
  abort(): Promise<void>;
}

/**
 * Everything one process runs: migrations, first-start seed, the job queue (workers unless
 * ATRIUM_ROLE=api) and the HTTP API (unless ATRIUM_ROLE=worker). `stop()` shuts down in
 * order: stop accepting and finish in-flight requests, stop workers, close the pools, stop
 * the embedded database.
 */
export async function createAtrium(
  config: Config,
  options: {
    logger?: Logger;
    onAdminPassword?: (password: string, tenant: { slug: string; name: string }) => void;
    /** Given, the embedded PostgreSQL is started again when it dies, and this called when it cannot be (`openDatabaseServer`). */
    onDatabaseLost?: () => void;
  } = {},
): Promise<Atrium> {
  const logger = options.logger ?? pino(loggerOptions(config.logLevel) as pino.LoggerOptions);
  turnOffPretenuring();
  setPasswordHashCost(config.passwordHashCost);
  // First: a malformed WEBHOOK_ALLOWED_CIDRS or PUSH_ALLOWED_CIDRS stops start-up before anything is opened.
  const outbound = new OutboundClient({
    allowedCidrs: config.webhookAllowedCidrs,
    connectTimeoutMs: config.outboundConnectTimeoutMs,
    timeoutMs: config.outboundTimeoutMs,
    logger,
  });
  const pushOutbound = new OutboundClient({
    allowedCidrs: config.pushAllowedCidrs,
    allowListSetting: 'PUSH_ALLOWED_CIDRS',
    connectTimeoutMs: config.outboundConnectTimeoutMs,
    timeoutMs: config.outboundTimeoutMs,
    logger,
  });
  const server = await openDatabaseServer(config, logger, options.onDatabaseLost);
  // The command line may borrow a server's embedded PostgreSQL; a second server may not: the
  // first stops it when it ends, and the second would go on without a database.
  if (server.ownedBy !== undefined) {
    throw new Error(
      `the embedded PostgreSQL of ${config.dataDir} is run by another Atrium (pid ${server.ownedBy}), which stops it when it ends: ` +
        'run one server per data folder, or give several processes one PostgreSQL with DATABASE_URL',
    );
  }
  const db = new Database(server.url, {
    appUrl: appLoginUrl(config, server),
    directUrl: config.databaseUrl ? config.databaseDirectUrl : undefined,
    poolSize: config.databasePoolSize,
  });
  let jobs: Jobs | undefined;
  let notificationStreams: NotificationStreams;
  let services: Services;
  let app: FastifyInstance | null;
  // A failure anywhere in start-up stops what was started, the embedded database included.
  try {
    const applied = await db.migrate();
    if (applied.length > 0) logger.info({ migrations: applied }, 'applied migrations');
    if (server.appPassword && !config.appDatabaseUrl) await db.enableAppLogin(server.appPassword);
    if (config.appDatabaseUrl) await db.ensureAppLogin(config.appDatabaseUrl);
    await db.verifyAppRole();
    if (!db.dedicatedAppLogin) {
      logger.warn(
        'the application pool logs in as the DATABASE_URL role and switches to atrium_app; set ATRIUM_APP_DATABASE_URL to log in as a role of its own',
      );
    }
    // Only where the configuration names a first tenant (the embedded server's `demo` by default).
    const first = config.bootstrapTenant;
    // Atrium itself creates it, at its first start: no command, no job.
    const seeded = first ? await seedFirstTenant(db, first, config.adminPassword, { actor: { type: 'system', id: null, label: null }, origin: {} }) : null;
    if (seeded) logger.info({ tenant: first!.slug, username: 'admin' }, 'created the first tenant');
    if (seeded?.generatedPassword) options.onAdminPassword?.(seeded.generatedPassword, first!);
    const secrets = await Secrets.load(db, config.secretKey);
    jobs = await Jobs.start(db.sessionUrl, jobDefinitions, logger, {
      schedule: config.role !== 'api',
      leaseSeconds: config.jobLeaseSeconds,
      db: db.owner,
    });
    notificationStreams = new NotificationStreams(db, logger, config.streamHeartbeatMs);
    const metrics = new Metrics(db);
    const streams = notificationStreams;
    metrics.observe('atrium_event_streams_open', 'Live notification streams this process holds open.', () => streams.openStreams());
    services = { config, db, jobs, secrets, outbound, pushOutbound, notificationStreams, metrics, principals: new RecentPrincipals() };
    app = config.role !== 'worker' ? await buildApp(services, { logger }) : null;
    // Last: until the workers take jobs, a process that ends at once leaves no job half done.
    if (config.role !== 'api') await jobs.work(jobDefinitions, services);
  } catch (error) {
    // Everything started is stopped, whatever fails on the way; the start's own error is the one reported.
    const failures = await stopEach([() => jobs?.stop(), () => outbound.close(), () => pushOutbound.close(), () => db.close(), () => server.stop()]);
    for (const failure of failures) logger.error({ err: failure }, 'stopping after a failed start failed too');
    throw error;
  }
  const startedJobs = jobs;

  let stopping: Promise<void> | undefined;
  return {
    services,
    app,
    logger,
    stop: () =>
      (stopping ??= (async () => {
        const stopBy = Date.now() + config.shutdownTimeoutMs;
        // Open event streams never finish by themselves: end them, or closing waits forever.
        await notificationStreams.close();
        // Its connections close as their answers are written (drain.ts).
        await app?.close();
        // Running jobs may finish in what is left of SHUTDOWN_TIMEOUT_MS but a quarter of it,
        // kept for the outbound agents, the pools and the embedded database: the drain takes
        // at most half, so jobs have a quarter at least, and three quarters without the API.
        // Those still running then are handed back, and the process exits within its budget.
        const jobsWaitMs = Math.max(0, stopBy - Date.now() - config.shutdownTimeoutMs / 4);
        // The rest stops even if one part fails to; the first failure is then the stop's.
        const failures = await stopEach([
          () => startedJobs.stop(jobsWaitMs),
          () => outbound.close(),
          () => pushOutbound.close(),
          () => db.close(),
          () => server.stop(),
        ]);
        if (failures.length > 0) throw failures[0];
      })()),
    abort: async () => {
      app?.server.closeAllConnections();
      await server.stop();
    },
  };
}
