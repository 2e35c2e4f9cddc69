import type { Config } from '../config.ts';
import type { Database } from './database/database.ts';
import type { Jobs } from './jobs/jobs.ts';
import type { Secrets } from './secrets/secrets.ts';

/** What handlers and jobs are given; built once per process in src/server.ts. */
export interface Services {
  config: Config;
  db: Database;
  jobs: Jobs;
  secrets: Secrets;
}
