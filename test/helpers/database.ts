/**
 * One isolated PostgreSQL database per test file, so tap can run files in parallel:
 * - under `npm test` (scripts/test.ts), a copy of the run's migrated template database on
 *   the run's one server, dropped with the run's other copies when the run ends;
 * - with DATABASE_URL (a file run by `npx tap` directly), a fresh database on that server;
 * - otherwise a fresh embedded cluster under os.tmpdir(), stopped and removed afterwards.
 * With CITUS_DATABASE_URL (a Citus coordinator) each file's database spans the coordinator
 * and its workers instead: a copy of the run's distributed template on every node, or, for
 * a file run alone, a database of its own distributed as an operator would (citus.ts).
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../src/platform/database/embedded.ts';
import { CITUS_ENV, citusNodes, copyCitusDatabase, createCitusTemplate, dropCitusDatabase } from './citus.ts';

/**
 * A test cluster's data lives for one run: nothing needs to survive a crash of the machine,
 * so PostgreSQL does not wait for the disk (each file's database, copied from the template,
 * and every commit would otherwise be flushed).
 */
export const TEST_CLUSTER_SETTINGS = { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off' };

/**
 * The copies a run's files make of its template are named after it, so that the run drops
 * them all when it ends (`runCopies`). A file does not drop its own: `DROP DATABASE` makes
 * the whole server write a checkpoint and waits for it, and with a file ending every
 * second or two those checkpoints made each copy, and the files beside it, wait
 * (docs/testing.md#where-a-runs-time-goes).
 */
const copyName = (template: string) => `${template}_${process.pid}_${randomBytes(4).toString('hex')}`;

/** A `like` pattern for the databases `copyName` names after `template`. */
export const runCopies = (template: string) => `${template.replace(/_/g, '\\_')}\\_%`;

/** Set by scripts/test.ts: the run's server and template (JSON of `TestCluster`). */
export const TEST_CLUSTER_ENV = 'ATRIUM_TEST_CLUSTER';

export interface TestCluster {
  /** Superuser connection string of the run's server. */
  url: string;
  /** A database with every migration applied, to copy. */
  template: string;
  /** Password of `atrium_app`'s own login, when the server is the run's embedded one. */
  appPassword?: string;
  /** On a Citus cluster: the coordinator's server, then every worker's; `template` is on each. */
  citusNodes?: string[];
}

export interface TestDatabase {
  url: string;
  /** The application role's own login, where the server provides one (as the embedded server does). */
  appUrl?: string;
  drop(): Promise<void>;
}

const withDatabase = (url: string, name: string) => {
  const copy = new URL(url);
  copy.pathname = `/${name}`;
  return copy;
};

async function databaseOnServer(serverUrl: string, template?: string, appPassword?: string): Promise<TestDatabase> {
  const name = template ? copyName(template) : `atrium_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(template ? `create database "${name}" template "${template}"` : `create database "${name}"`);
  const appUrl = appPassword ? withDatabase(serverUrl, name) : undefined;
  if (appUrl) {
    appUrl.username = 'atrium_app';
    appUrl.password = appPassword!;
  }
  return {
    url: withDatabase(serverUrl, name).toString(),
    appUrl: appUrl?.toString(),
    async drop() {
      if (template) {
        // A copy of the run's template is dropped when the run ends (scripts/test.ts). Until
        // then it takes no connection, and one the file left open ends now, as the drop would
        // end it: nothing of the file keeps its process (shared with other files) busy.
        await admin.unsafe(`alter database "${name}" with allow_connections false`);
        await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name}`;
      } else {
        await admin.unsafe(`drop database if exists "${name}" with (force)`);
      }
      await admin.end({ timeout: 5 });
    },
  };
}

async function databaseOnCitus(nodes: string[], template?: string, appPassword = randomBytes(12).toString('hex')): Promise<TestDatabase> {
  const name = `atrium_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  if (template) {
    await copyCitusDatabase(nodes, template, name);
  } else {
    const [{ Jobs }, { jobDefinitions }] = await Promise.all([import('../../src/platform/jobs/jobs.ts'), import('../../src/jobs.ts')]);
    await createCitusTemplate(nodes, name, appPassword, (url) => Jobs.install(url, jobDefinitions));
  }
  const appUrl = new URL(withDatabase(nodes[0]!, name));
  appUrl.username = 'atrium_app';
  appUrl.password = appPassword;
  return {
    url: withDatabase(nodes[0]!, name).toString(),
    appUrl: appUrl.toString(),
    drop: () => dropCitusDatabase(nodes, name),
  };
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const cluster = process.env[TEST_CLUSTER_ENV];
  if (cluster) {
    const { url, template, appPassword, citusNodes } = JSON.parse(cluster) as TestCluster;
    if (citusNodes) return databaseOnCitus(citusNodes, template, appPassword);
    return databaseOnServer(url, template, appPassword);
  }
  const citus = process.env[CITUS_ENV];
  if (citus) return databaseOnCitus(await citusNodes(citus));
  const external = process.env.DATABASE_URL;
  if (external) return databaseOnServer(external);
  const dataDir = path.join(os.tmpdir(), `atrium-test-${process.pid}-${randomBytes(4).toString('hex')}`);
  const server = await startEmbeddedPostgres(dataDir, { settings: TEST_CLUSTER_SETTINGS });
  return {
    url: server.url,
    async drop() {
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
