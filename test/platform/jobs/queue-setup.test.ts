/**
 * Processes that start together on a new database (an API and a worker process, the first
 * `docker compose up`) set up the job queue in turns: pg-boss creating the same queue
 * tables at once deadlocks, and one of the processes would stop. On Citus, the database's
 * tenant tables are distributed already, as an operator's are when the processes first start.
 */
import t from 'tap';
import { jobDefinitions } from '../../../src/jobs.ts';
import { Database } from '../../../src/platform/database/database.ts';
import { Jobs, jobQueueConnection } from '../../../src/platform/jobs/jobs.ts';
import { PUSH_JOB_EXPIRE_SECONDS } from '../../../src/resources/push/send-push.job.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { createTestDatabase } from '../../helpers/database.ts';

const database = await createTestDatabase();
t.teardown(() => database.drop());
const db = new Database(database.url);
t.teardown(() => db.close());
await db.migrate();
// A new database: the suite's template carries the job queue already (scripts/test.ts).
await db.ownerSql`drop schema if exists pgboss cascade`;

t.test('three processes start the job queue at once on a database that has none', async (t) => {
  const [before] = await db.ownerSql<{ exists: boolean }[]>`select to_regnamespace('pgboss') is not null as exists`;
  t.equal(before!.exists, false, 'no job queue yet');
  const errors: unknown[] = [];
  const log = { error: (object: unknown) => errors.push(object), warn: () => {} };
  const starts = await Promise.allSettled(
    [1, 2, 3].map(() => Jobs.start(db.sessionUrl, jobDefinitions, log, { schedule: false, leaseSeconds: 15, db: db.owner })),
  );
  for (const start of starts) if (start.status === 'fulfilled') t.teardown(() => start.value.stop());
  t.strictSame(
    starts.map((start) => (start.status === 'rejected' ? String(start.reason) : 'started')),
    ['started', 'started', 'started'],
  );
  t.strictSame(errors, [], 'no job queue error');
  const queues = await db.ownerSql<{ name: string }[]>`select name from pgboss.queue order by name`;
  t.strictSame(
    queues.map((queue) => queue.name),
    jobDefinitions.map((definition) => definition.name).sort(),
    'every queue once',
  );
  if (process.env[CITUS_ENV]) {
    // On Citus (the template's tables distributed before this start) the queue is made on the coordinator alone.
    const workers = await db.ownerSql<{ result: string }[]>`select result from run_command_on_workers($$select to_regnamespace('pgboss') is not null$$)`;
    t.ok(workers.length > 0 && workers.every((worker) => worker.result === 'f'), 'no job queue on any worker');
  }
});

t.test('a queue an older release created is brought to its definition when a process starts', async (t) => {
  // As a release before push jobs had an expiry of their own left it: pg-boss's default (null: 15 minutes).
  await db.ownerSql`update pgboss.queue set expire_seconds = null, retry_limit = 0 where name = 'push.send'`;
  const log = { error: () => {}, warn: () => {} };
  const jobs = await Jobs.start(db.sessionUrl, jobDefinitions, log, { schedule: false, leaseSeconds: 15, db: db.owner });
  t.teardown(() => jobs.stop());
  const [queue] = await db.ownerSql<{ expire_seconds: number | null; retry_limit: number }[]>`
    select expire_seconds, retry_limit from pgboss.queue where name = 'push.send'`;
  t.strictSame({ ...queue }, { expire_seconds: PUSH_JOB_EXPIRE_SECONDS, retry_limit: 3 }, 'the expiry and retry policy of the definition');
});

t.test('a text of several statements that fails inside its transaction leaves the connection usable', async (t) => {
  // pg-boss sends its maintenance so (BEGIN; …; COMMIT): a failure midway (a lock timeout, a deadlock, a server
  // turned read-only by a failover) must not leave the transaction open on the pooled connection.
  const connection = jobQueueConnection(db.sessionUrl, 1);
  t.teardown(() => connection.close());
  const failed = await connection.db.executeSql('begin; select 1 / 0; commit', []).then(
    () => 'no error',
    (error: { code?: string }) => error.code,
  );
  t.equal(failed, '22012', 'the statement that failed is the error');
  const next = await connection.db.executeSql('select $1::int as n', [7]).then(
    (result) => [...result.rows],
    (error: { code?: string }) => error.code,
  );
  t.strictSame(next, [{ n: 7 }], 'the next statement on the connection is answered, not refused (25P02)');
});
