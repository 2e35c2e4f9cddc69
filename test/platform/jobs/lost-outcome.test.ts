/**
 * A job that pg-boss holds as running while no worker vouches for it is retried within a
 * lease's length, not left until its queue's expiration (15 minutes): the worker died
 * between fetching the job and writing its lease, or the job's completion could not be
 * recorded (the database failed over at that moment). See docs/fault-tolerance.md.
 */
import { DrizzleQueryError, sql } from 'drizzle-orm';
import PgBoss from 'pg-boss';
import t from 'tap';
import { Database } from '../../../src/platform/database/database.ts';
import { Jobs, jobQueueConnection, type JobDefinition } from '../../../src/platform/jobs/jobs.ts';
import { createTestDatabase } from '../../helpers/database.ts';
import { eventually } from '../../helpers/eventually.ts';

const LEASE_SECONDS = 2;

const database = await createTestDatabase();
t.teardown(() => database.drop());
const db = new Database(database.url);
t.teardown(() => db.close());
await db.migrate();

/** Each run of a job of the test queue, by the job's `key`. */
const runs: string[] = [];
const probe: JobDefinition<{ key: string }, undefined> = {
  name: 'test.lost-outcome',
  queue: { retryLimit: 3, retryDelay: 1, expireInSeconds: 15 * 60 },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data) {
    runs.push(data.key);
  },
};
/** The same, on a queue that only the sweepers of the last test work on. */
const unattended: JobDefinition<{ key: string }, undefined> = { ...probe, name: 'test.lost-lease' };
/** A job whose work fails as a statement would, its values (a secret) in drizzle's error. */
const failing: JobDefinition<{ key: string }, undefined> = {
  name: 'test.failing',
  queue: { retryLimit: 1, retryDelay: 1, expireInSeconds: 15 * 60 },
  work: { batchSize: 1, pollingIntervalSeconds: 1 },
  async handle(data) {
    if (data.key === 'smtp') {
      // As nodemailer rejects a recipient: the message names the address.
      throw Object.assign(new Error("Can't send mail - all recipients were rejected: 550 5.1.1 <alice@example.com>: Recipient address rejected"), {
        code: 'EENVELOPE',
        responseCode: 550,
        command: 'RCPT TO',
      });
    }
    throw new DrizzleQueryError('update things set secret = $1', [`secret of ${data.key}`], new Error('the statement failed'));
  },
};
const warnings: { object: unknown; message: string }[] = [];
const errors: unknown[] = [];
const log = { error: (object: unknown) => errors.push(object), warn: (object: unknown, message: string) => warnings.push({ object, message }) };
const definitions = [probe, unattended, failing] as unknown as JobDefinition<never, never>[];
const jobs = await Jobs.start(db.sessionUrl, definitions, log, { schedule: true, leaseSeconds: LEASE_SECONDS, db: db.owner });
t.teardown(() => jobs.stop());

/** What pg-boss keeps of a job's failure in its row (`output`), as text. */
const outputOf = async (id: string) =>
  JSON.stringify((await db.owner.execute<{ output: unknown }>(sql`select output from pgboss.job where id = ${id}`))[0]?.output ?? null);
const stateOf = async (id: string) =>
  (await db.owner.execute<{ state: string; retry_count: number }>(sql`select state, retry_count from pgboss.job where id = ${id}`))[0];

// Completion of a job whose data asks for it is refused on its first run, as a server that
// failed over refuses it; its retries complete.
await db.owner.execute(sql`
  create function refuse_first_completion() returns trigger language plpgsql as $$
  begin
    if old.state = 'active' and new.state = 'completed' and old.retry_count = 0 and old.data->>'refuse' = 'first completion' then
      raise exception 'the server refuses writes now' using errcode = '25006';
    end if;
    return new;
  end $$`);
await db.owner.execute(sql`
  create trigger refuse_first_completion before update on pgboss.job for each row execute function refuse_first_completion()`);

/** A job of `queue` fetched by a pg-boss of another worker (pg-boss marks it active), whose connection then goes. */
async function fetchElsewhere(queue: string): Promise<PgBoss.Job<unknown> | undefined> {
  const connection = jobQueueConnection(db.sessionUrl, 1);
  const other = new PgBoss({ db: connection.db, schema: 'pgboss', schedule: false, supervise: false });
  await other.start();
  const [fetched] = await other.fetch(queue);
  await connection.close();
  return fetched;
}

t.test('a job fetched by a worker that vanished before writing its lease is retried', async (t) => {
  const id = await jobs.send(probe as JobDefinition<{ key: string }, unknown>, { key: 'vanished' });
  // Another worker fetches it (pg-boss marks it active) and is gone before its lease.
  const fetched = await fetchElsewhere(probe.name);
  t.equal(fetched?.id, id, 'the other worker fetched the job');
  t.equal((await stateOf(id))?.state, 'active');

  await jobs.work([probe], undefined);
  const after = await eventually(
    () => stateOf(id),
    (row) => row?.state === 'completed',
    30_000,
  );
  t.equal(after?.state, 'completed', 'the job ran here and completed');
  t.equal(after?.retry_count, 1, 'as its first retry');
  t.strictSame(
    runs.filter((key) => key === 'vanished'),
    ['vanished'],
    'the work ran once',
  );
  t.ok(
    warnings.some((warning) => warning.message === 'job lost with its worker; retrying it' && (warning.object as { jobId?: string }).jobId === id),
    'the sweep said so',
  );
});

t.test('a job whose completion could not be recorded is retried, not left running', async (t) => {
  const id = await jobs.send(probe as JobDefinition<{ key: string; refuse: string }, unknown>, { key: 'refused', refuse: 'first completion' });
  const after = await eventually(
    () => stateOf(id),
    (row) => row?.state === 'completed',
    30_000,
  );
  t.equal(after?.state, 'completed', 'the job completed on a retry');
  t.strictSame(
    runs.filter((key) => key === 'refused'),
    ['refused', 'refused'],
    'the work ran again (jobs are safe to run twice)',
  );
  const [lease] = await eventually(
    () => db.owner.execute<{ n: number }>(sql`select count(*)::int as n from job_leases where job_id = ${id}`),
    ([row]) => row?.n === 0,
  );
  t.equal(lease?.n, 0, 'no lease is left behind');
});

t.test('a lease whose worker stopped renewing it is swept once, by one sweeper of several', async (t) => {
  const second = await Jobs.start(db.sessionUrl, definitions, log, { schedule: true, leaseSeconds: LEASE_SECONDS, db: db.owner });
  t.teardown(() => second.stop());
  // A worker of neither Jobs holds the job: fetched with pg-boss, leased as a worker would, then silent.
  const id = await jobs.send(unattended as JobDefinition<{ key: string }, unknown>, { key: 'silent' });
  const fetched = await fetchElsewhere(unattended.name);
  t.equal(fetched?.id, id);
  await db.owner.execute(sql`
    insert into job_leases (job_id, queue, run, holder, expires_at) values (${id}, ${unattended.name}, gen_random_uuid(), 'elsewhere:1', now() + interval '1 second')`);
  const sweepers = [second, await Jobs.start(db.sessionUrl, definitions, log, { schedule: true, leaseSeconds: LEASE_SECONDS, db: db.owner })];
  t.teardown(() => sweepers[1]!.stop());
  await Promise.all(sweepers.map((sweeper) => sweeper.work([unattended], undefined)));
  const after = await eventually(
    () => stateOf(id),
    (row) => row?.state === 'completed',
    30_000,
  );
  t.equal(after?.state, 'completed');
  t.equal(after?.retry_count, 1, 'failed once, by one sweeper');
  t.equal(
    warnings.filter((warning) => (warning.object as { jobId?: string }).jobId === id && (warning.object as { holder?: string }).holder === 'elsewhere:1')
      .length,
    1,
    'one sweep reported it, naming the silent worker',
  );
  t.strictSame(errors, [], 'no job queue error');
});

t.test('a job that fails is logged: a warning while retries are left, an error on the last', async (t) => {
  const id = await jobs.send(failing as JobDefinition<{ key: string }, unknown>, { key: 'logged' });
  await jobs.work([failing], undefined);
  const after = await eventually(
    () => stateOf(id),
    (row) => row?.state === 'failed',
    30_000,
  );
  t.equal(after?.state, 'failed', 'failed for good after its one retry');
  const ofJob = (entries: unknown[]) => entries.filter((entry) => (entry as { jobId?: string }).jobId === id) as Record<string, unknown>[];
  const retried = ofJob(warnings.map((warning) => ({ ...(warning.object as object), message: warning.message })));
  t.match(retried, [{ message: 'job failed; it is retried', queue: failing.name, retryCount: 0 }], 'the first failure is a warning');
  t.match(
    ofJob(errors),
    [{ queue: failing.name, retryCount: 1, databaseError: { query: 'update things set secret = $1' } }],
    'the last is an error, with the query',
  );
  t.notMatch(JSON.stringify([retried, ofJob(errors)]), /secret of logged/, "never the statement's values");
  t.notMatch(await outputOf(id), /secret of logged/, "nor does the job's row keep them");
});

t.test("a job's other errors are logged by kind, codes and call sites, not by a message that may name a person", async (t) => {
  const id = await jobs.send(failing as JobDefinition<{ key: string }, unknown>, { key: 'smtp' });
  await jobs.work([failing], undefined);
  await eventually(
    () => stateOf(id),
    (row) => row?.state === 'failed',
    30_000,
  );
  const logged = [...warnings.map((warning) => warning.object), ...errors].filter((entry) => (entry as { jobId?: string }).jobId === id);
  t.equal(logged.length, 2, 'both failures logged');
  t.match(logged, [{ error: { type: 'Error', code: 'EENVELOPE', responseCode: 550, command: 'RCPT TO', stack: /lost-outcome\.test\.ts/ } }, {}]);
  t.notMatch(JSON.stringify(logged), /alice@example\.com/, 'not the address');
  const output = await outputOf(id);
  t.match(output, /EENVELOPE/, "the job's row keeps the kind and codes");
  t.notMatch(output, /alice@example\.com/, 'not the address');
});
