/**
 * `npm start` (and the container's command, `node dist/src/main.js`): the API and the job
 * workers (ATRIUM_ROLE narrows it) until SIGTERM, SIGINT or SIGHUP (docs/operations.md#signals-and-shutdown).
 */
import { entryPointConfig } from './config.ts';
import { toleratingConnectionLoss } from './platform/database/connection-loss.ts';
import type { Atrium } from './server.ts';

const config = entryPointConfig();
// The application loads only once the configuration is known to be good, so that a mistake
// answers at once.
const [{ createAtrium }, { generatedPasswordNotice }] = await Promise.all([import('./server.ts'), import('./resources/tenants/create-tenant.ts')]);

/** A start-up failure: one line on stderr (the log may not exist yet), exit status 1. */
function fail(what: string, error: unknown): never {
  process.stderr.write(`atrium: ${what}: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
}

let atrium: Atrium;
try {
  atrium = await createAtrium(config, {
    // Shown once on the terminal, on purpose outside the (JSON) log.
    onAdminPassword: (password, tenant) => process.stdout.write(generatedPasswordNotice(tenant, 'admin', password)),
  });
} catch (error) {
  fail('could not start', error);
}
process.on(
  'unhandledRejection',
  toleratingConnectionLoss((error) => atrium.logger.warn({ err: error }, 'database connection lost under a statement of the driver; it reconnects')),
);
if (atrium.app) {
  try {
    await atrium.app.listen({ host: config.host, port: config.port });
  } catch (error) {
    await atrium.stop();
    fail(`cannot listen on ${config.host}:${config.port}`, error);
  }
  atrium.logger.info(`API docs at http://${config.host}:${config.port}/docs`);
}
if (config.role !== 'api') atrium.logger.info('job workers started');

/**
 * Graceful shutdown: end event streams, finish in-flight requests, let running jobs finish
 * (pg-boss hands back what does not), close the pools, stop the embedded PostgreSQL last;
 * exit 0. Past SHUTDOWN_TIMEOUT_MS, or on a second signal, the rest is cut short (open
 * connections closed, the embedded PostgreSQL stopped) and the exit status is 1.
 * Listeners are added, never replaced: a wrapper such as tsx relays signals through its own.
 */
let signalled = false;
function shutDown(signal: NodeJS.Signals): void {
  if (signalled) {
    atrium.logger.warn({ signal }, 'second signal: stopping at once');
    void atrium.abort().finally(() => process.exit(1));
    return;
  }
  signalled = true;
  atrium.logger.info({ signal, timeoutMs: config.shutdownTimeoutMs }, 'shutting down');
  const deadline = setTimeout(() => {
    atrium.logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'shutdown took too long: stopping at once');
    void atrium.abort().finally(() => process.exit(1));
  }, config.shutdownTimeoutMs);
  atrium.stop().then(
    () => {
      clearTimeout(deadline);
      atrium.logger.info('stopped');
      process.exit(0);
    },
    (error: unknown) => {
      clearTimeout(deadline);
      atrium.logger.error({ err: error }, 'shutdown failed');
      void atrium.abort().finally(() => process.exit(1));
    },
  );
}
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, shutDown);
