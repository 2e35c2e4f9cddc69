/**
 * `npm start` (and the container's command, `node dist/src/main.js`): the API and the job
 * workers (ATRIUM_ROLE narrows it) until SIGTERM, SIGINT or SIGHUP (docs/operations.md#signals-and-shutdown).
 */
import net from 'node:net';
import { entryPointConfig } from './config.ts';
import { toleratingConnectionLoss } from './platform/database/connection-loss.ts';
import { failureMessage } from './platform/database/failure-message.ts';
import { onTerminationSignals, signalExitStatus, type TerminationSignal } from './platform/process/signals.ts';
import type { Atrium } from './server.ts';

const config = entryPointConfig();
// The application loads only once the configuration is known to be good, so that a mistake
// answers at once.
const [{ createAtrium }, { generatedPasswordNotice }] = await Promise.all([import('./server.ts'), import('./resources/tenants/create-tenant.ts')]);

/** A start-up failure: one line on stderr (the log may not exist yet), exit status 1. */
function fail(what: string, error: unknown): never {
  process.stderr.write(`atrium: ${what}: ${failureMessage(error)}\n`);
  process.exit(1);
}

/**
 * Listens on `host:port` and closes again: a port another process holds is found before
 * anything starts, rather than after the embedded PostgreSQL was set up and the demo
 * tenant's password printed. The listen proper may still fail, if the port is taken in
 * between.
 */
function probePort(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen({ host, port }, () => server.close(() => resolve()));
  });
}

if (config.role !== 'worker' && config.port !== 0) {
  await probePort(config.host, config.port).catch((error: unknown) => fail(`cannot listen on ${config.host}:${config.port}`, error));
}

// A signal during start-up (a terminal's Ctrl-C while migrations run, say) is acted on once
// the process is up, so that the embedded PostgreSQL it started is stopped with it. With
// DATABASE_URL nothing of the process outlives it (what start-up writes, it writes in
// transactions; the job workers start last, when start-up is all but done), and a database
// that does not answer would hold the start, and the signal, for a minute: the process ends
// at once, as the signal would end it (128 + its number).
let atrium: Atrium | undefined;
let signalledDuringStart: TerminationSignal | undefined;
onTerminationSignals({
  first(signal) {
    if (atrium) shutDown(atrium, signal);
    else if (config.databaseUrl) {
      process.stderr.write(`atrium: ${signal} before the start had finished: stopped\n`);
      process.exit(signalExitStatus(signal));
    } else signalledDuringStart = signal;
  },
  repeat(signal) {
    atrium?.logger.debug({ signal }, 'the same signal again within a second: already shutting down');
  },
  again(signal) {
    atrium?.logger.warn({ signal }, 'second signal: stopping at once');
    stopAtOnce(atrium);
  },
});

try {
  atrium = await createAtrium(config, {
    // Shown once on the terminal, on purpose outside the (JSON) log.
    onAdminPassword: (password, tenant) => process.stdout.write(generatedPasswordNotice(tenant, 'admin', password)),
    // The embedded PostgreSQL died and did not start again: exit 1, for a supervisor to act on.
    onDatabaseLost: () => stopAtOnce(atrium),
  });
} catch (error) {
  fail('could not start', error);
}
const started = atrium;
process.on(
  'unhandledRejection',
  toleratingConnectionLoss((error) => started.logger.warn({ err: error }, 'database connection lost under a statement of the driver; it reconnects')),
);
if (signalledDuringStart) {
  shutDown(started, signalledDuringStart);
} else {
  if (started.app) {
    let address: string;
    try {
      // The address listened on: with PORT=0, the port the system gave.
      address = await started.app.listen({ host: config.host, port: config.port });
    } catch (error) {
      await started.stop();
      fail(`cannot listen on ${config.host}:${config.port}`, error);
    }
    started.logger.info(`API docs at ${address}/docs`);
  }
  if (config.role !== 'api') started.logger.info('job workers started');
}

/**
 * Graceful shutdown: end event streams, finish in-flight requests, let running jobs finish
 * (pg-boss hands back what does not), close the pools, stop the embedded PostgreSQL last;
 * exit 0. Past SHUTDOWN_TIMEOUT_MS, or on a second signal at least a second after the first
 * (a terminal's Ctrl-C arrives twice within milliseconds, from the terminal and from npm),
 * the rest is cut short (open connections closed, the embedded PostgreSQL stopped) and the
 * exit status is 1.
 */
function shutDown(atrium: Atrium, signal: TerminationSignal): void {
  atrium.logger.info({ signal, timeoutMs: config.shutdownTimeoutMs }, 'shutting down');
  const deadline = setTimeout(() => {
    atrium.logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'shutdown took too long: stopping at once');
    stopAtOnce(atrium);
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
      stopAtOnce(atrium);
    },
  );
}

function stopAtOnce(atrium: Atrium | undefined): void {
  if (!atrium) process.exit(1);
  void atrium.abort().finally(() => process.exit(1));
}
