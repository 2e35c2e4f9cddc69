/**
 * The driver (postgres.js 3.4.9) with `max_pipeline: 1`, for porsager/postgres#1189: when
 * `BEGIN` is the statement that fills a connection's pipeline, `execute()` short-circuits
 * before `sql.begin()`'s `onexecute` hook, so `BEGIN` reaches the server without the
 * connection being reserved for the transaction (open upstream; fix proposed in #1218).
 *
 * Atrium's transactions do not go through `sql.begin()`: they reserve an idle connection
 * (`sql.reserve()` hands out only connections with nothing in flight) and write
 * `begin; set local …`, the statements and `commit` on it without waiting in between. The
 * first test shows that path keeps every transaction to itself under the pipeline limit;
 * the second records, for contrast, what `sql.begin()` does there.
 */
import postgres from 'postgres';
import t from 'tap';
import { createTestDatabase } from '../../helpers/database.ts';

const database = await createTestDatabase();
t.teardown(() => database.drop());

/** `promise`'s value, its error's code or message, or `'no answer within <ms> ms'`. */
const settled = <T>(promise: Promise<T>, ms = 5_000) =>
  Promise.race([
    promise.then(
      (value) => ({ value }),
      (error: { code?: string; message?: string }) => ({ error: error.code ?? error.message ?? String(error) }),
    ),
    new Promise<string>((resolve) => setTimeout(() => resolve(`no answer within ${ms} ms`), ms).unref()),
  ]);

/** The tenant setting as a statement sees it ('' or null: none). */
const SEEN = `select current_setting('atrium.tenant_id', true) as tenant, pg_backend_pid() as pid`;

for (const max of [1, 2]) {
  t.test(
    `max_pipeline 1, max ${max}: transactions on a reserved connection, written without waiting, each complete with their own setting beside plain statements`,
    async (t) => {
      const sql = postgres(database.url, { max, max_pipeline: 1, onnotice: () => {} } as postgres.Options<Record<string, postgres.PostgresType>>);
      t.teardown(() => sql.end({ timeout: 1 }));

      /** One transaction as Atrium writes it: BEGIN with the setting, the statements, COMMIT, no await in between. */
      const transaction = async (tenant: string) => {
        const c = await sql.reserve();
        try {
          const begin = c.unsafe(`begin; set local atrium.tenant_id = '${tenant}'`);
          const first = c.unsafe<{ tenant: string }[]>(SEEN);
          const second = c<{ tenant: string; inside: boolean }[]>`
          select current_setting('atrium.tenant_id', true) as tenant, now() = statement_timestamp() as fresh, ${tenant}::text as echo`;
          const commit = c.unsafe('commit');
          const [, [one], [two]] = await Promise.all([begin, first, second, commit]);
          return [one?.tenant, two?.tenant];
        } finally {
          c.release();
        }
      };
      /** A plain statement of the pool: it must never run inside someone's transaction. */
      const plain = async () => (await sql.unsafe<{ tenant: string | null }[]>(SEEN))[0]?.tenant ?? null;

      const work: Promise<unknown>[] = Array.from({ length: 120 }, (_, i) => (i % 3 === 2 ? plain() : transaction(String(i))));
      const outcomes = await Promise.all(work.map((promise) => settled(promise, 15_000)));

      const wrong = outcomes.flatMap((outcome: unknown, i) => {
        const answered = outcome as { value?: unknown } | string;
        if (typeof answered === 'string' || !('value' in answered)) return [{ i, outcome }];
        const expected = i % 3 === 2 ? null : [String(i), String(i)];
        const value = i % 3 === 2 ? answered.value || null : answered.value;
        return JSON.stringify(value) === JSON.stringify(expected) ? [] : [{ i, outcome }];
      });
      t.same(wrong, [], `each of ${outcomes.length} (transactions and plain statements) completed and saw only its own setting`);

      // Afterwards no connection is left inside a transaction: plain statements on every connection see no setting.
      const after = await Promise.all(Array.from({ length: 10 }, () => settled(plain())));
      t.same(
        after.filter((outcome) => typeof outcome === 'string' || 'error' in outcome || outcome.value),
        [],
        'plain statements after the commits see no setting',
      );
    },
  );
}

t.test('for contrast, sql.begin() with max_pipeline 1, BEGIN pipelined behind a statement (porsager/postgres#1189)', async (t) => {
  const sql = postgres(database.url, {
    max: 1,
    max_pipeline: 1,
    onnotice: () => {},
    connection: { application_name: 'atrium-pipeline-begin' },
  } as postgres.Options<Record<string, postgres.PostgresType>>);
  const control = postgres(database.url, { max: 1, onnotice: () => {} });
  t.teardown(() => Promise.all([sql.end({ timeout: 1 }), control.end({ timeout: 1 })]));
  await sql`select 1`;

  // The driver's own rollback of the half-made transaction fails outside any promise the
  // caller holds (an unhandled rejection, which tap would count as a failure of this file):
  // collected here while this test runs, and shown.
  const unhandled: string[] = [];
  const listeners = process.listeners('unhandledRejection');
  process.removeAllListeners('unhandledRejection');
  const collect = (reason: unknown) => unhandled.push(String((reason as Error)?.message ?? reason));
  process.on('unhandledRejection', collect);
  t.teardown(() => {
    process.removeListener('unhandledRejection', collect);
    for (const listener of listeners) process.on('unhandledRejection', listener);
  });

  // A statement takes the connection; sql.begin()'s BEGIN is pipelined behind it and fills the pipeline.
  const ahead = sql`select pg_sleep(0.1)`.execute();
  const transaction = sql.begin(async (tx) => {
    await tx`select set_config('atrium.tenant_id', 'begin', true)`;
    return 'committed';
  });
  const [aheadOutcome, outcome] = await Promise.all([settled(ahead), settled(transaction, 3_000)]);
  t.same(aheadOutcome, { value: [{ pg_sleep: '' }] }, 'the statement ahead is answered');
  t.not(JSON.stringify(outcome), JSON.stringify({ value: 'committed' }), `sql.begin() does not complete: ${JSON.stringify(outcome)}`);
  t.comment(`sql.begin() outcome: ${JSON.stringify(outcome)}`);

  // Its BEGIN reached the server anyway: the pool's one connection is left inside that transaction.
  const state = await control<{ state: string }[]>`select state from pg_stat_activity where application_name = 'atrium-pipeline-begin'`;
  t.comment(`the pool's backend: ${JSON.stringify(state)}`);
  const next = await settled(sql`select now() = statement_timestamp() as fresh, pg_current_xact_id_if_assigned() is null as none`, 3_000);
  t.comment(`a plain statement of the pool afterwards: ${JSON.stringify(next)}`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.comment(`unhandled rejections from the driver meanwhile: ${JSON.stringify(unhandled)}`);
  t.same(
    state.map((row) => row.state),
    ['idle in transaction'],
    'the BEGIN left the connection idle in transaction, back in the pool',
  );
  t.same(next, { value: [{ fresh: false, none: true }] }, 'and the next plain statement of the pool runs inside that transaction (now() is its start)');
});
