/**
 * Database refusals as 422s naming the field (src/platform/http/error-handler.ts), from
 * errors shaped as the driver delivers them: a unique or foreign-key violation on plain
 * PostgreSQL carries the constraint's and the table's names as fields; raised on a Citus
 * worker, it reaches the coordinator's client with neither, its message naming the shard's
 * constraint (the schema's name and `_<shard id>`).
 */
import { DrizzleQueryError } from 'drizzle-orm';
import Fastify from 'fastify';
import postgres from 'postgres';
import t from 'tap';
import { registerErrorHandling, violatedConstraint } from '../../../src/platform/http/error-handler.ts';

/** A unique violation as a Citus coordinator passed it on from a worker (Citus 13.2, PostgreSQL 15). */
const fromWorker = (constraint: string, columns = 'tenant_id, name') =>
  new postgres.PostgresError({
    severity_local: 'ERROR',
    severity: 'ERROR',
    code: '23505',
    message: `duplicate key value violates unique constraint "${constraint}"`,
    detail: `Key (${columns})=(7, Sales) already exists.`,
    where: 'while executing command on 127.0.0.1:9702',
    file: 'remote_commands.c',
    line: '319',
    routine: 'ReportResultError',
  } as never);

/** The same violation on plain PostgreSQL. */
const onPostgres = new postgres.PostgresError({
  severity_local: 'ERROR',
  severity: 'ERROR',
  code: '23505',
  message: 'duplicate key value violates unique constraint "departments_tenant_id_name_key"',
  detail: 'Key (tenant_id, name)=(7, Sales) already exists.',
  schema_name: 'public',
  table_name: 'departments',
  constraint_name: 'departments_tenant_id_name_key',
  file: 'nbtinsert.c',
  line: '664',
  routine: '_bt_check_unique',
} as never);

/** The answer of an app whose one route fails with `error` as drizzle wraps it. */
async function answerTo(error: Error) {
  const app = Fastify();
  registerErrorHandling(app);
  app.post('/', () => {
    throw new DrizzleQueryError('insert into "departments" ("tenant_id", "name") values ($1, $2)', [7, 'Sales'], error);
  });
  const res = await app.inject({ method: 'POST', url: '/' });
  await app.close();
  return { status: res.statusCode, body: res.json() as { errors?: Record<string, unknown> } };
}

t.test('a message without a shard constraint, or not from a Citus worker, names the body', async (t) => {
  t.equal(violatedConstraint(fromWorker('departments_tenant_id_name_key')), undefined, 'no shard id');
  t.equal(
    violatedConstraint({ code: '23505', message: 'duplicate key value violates unique constraint "departments_tenant_id_name_key_102049"' }),
    undefined,
    'not a worker’s',
  );
  t.equal(violatedConstraint({ code: '23505', message: 'duplicate key value' }), undefined);
  t.strictSame(Object.keys((await answerTo(fromWorker('departments_tenant_id_name_key'))).body.errors ?? {}), ['body']);
});

t.test('a unique violation on plain PostgreSQL names the field from the constraint', async (t) => {
  const res = await answerTo(onPostgres);
  t.equal(res.status, 422);
  t.strictSame(Object.keys(res.body.errors ?? {}), ['name']);
});

t.test('a unique violation raised on a Citus worker names the field too: the shard suffix is dropped', async (t) => {
  t.strictSame(violatedConstraint(fromWorker('departments_tenant_id_name_key_102049')), { name: 'departments_tenant_id_name_key' });
  const department = await answerTo(fromWorker('departments_tenant_id_name_key_102049'));
  t.equal(department.status, 422);
  t.strictSame(department.body.errors, { name: ['is already taken'] });
  const user = await answerTo(fromWorker('users_tenant_id_username_key_102011', 'tenant_id, username'));
  t.strictSame(Object.keys(user.body.errors ?? {}), ['username']);
});
