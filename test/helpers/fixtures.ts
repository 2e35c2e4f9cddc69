/**
 * Fixtures shared by the test files: rows written and counted as the database owner
 * (assertions bypass tenancy), request bodies and small waiting helpers. A helper that a
 * second test file needs belongs here, not in a copy.
 */
import { randomUUID } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import type { Test } from 'tap';
import type { Database } from '../../src/platform/database/database.ts';
import { departments, departmentUsers } from '../../src/resources/departments/table.ts';
import { notifications } from '../../src/resources/notifications/table.ts';
import { roles } from '../../src/resources/roles/table.ts';
import type { TestApi } from './atrium.ts';
import { CITUS_ENV } from './citus.ts';
import { eventually } from './eventually.ts';
import { multipart } from './multipart.ts';

/** How many rows `table` holds (those matching `where`, when given), across all tenants. */
export async function rowCount(db: Database, table: string, where?: SQL): Promise<number> {
  const condition = where ? sql` where ${where}` : sql``;
  const [row] = await db.owner.execute<{ n: number }>(sql`select count(*)::int as n from ${sql.identifier(table)}${condition}`);
  return row!.n;
}

/**
 * Sets the `updated_at` of the row `id` of `table` to a time well before the test's
 * requests, so that an update that moves it shows whatever the clock's resolution, and
 * answers that time as the API shows it.
 */
export async function backdateUpdatedAt(db: Database, table: string, id: number): Promise<string> {
  const past = '2026-01-02T03:04:05.678Z';
  await db.owner.execute(sql`update ${sql.identifier(table)} set updated_at = ${past} where id = ${id}`);
  return past;
}

/** A department of the tenant with `memberIds` as its members, written directly. */
export async function createDepartment(db: Database, tenantId: number, name: string, memberIds: number[] = []) {
  const [department] = await db.owner.insert(departments).values({ tenantId, name }).returning();
  if (memberIds.length) await db.owner.insert(departmentUsers).values(memberIds.map((userId) => ({ tenantId, departmentId: department!.id, userId })));
  return department!;
}

/** The tenant's role called `name` (such as the seeded "Administrator" and "Employee"). */
export async function roleNamed(db: Database, tenantId: number, name: string) {
  const [role] = await db.owner
    .select()
    .from(roles)
    .where(sql`${roles.tenantId} = ${tenantId} and ${roles.name} = ${name}`);
  if (!role) throw new Error(`tenant ${tenantId} has no role ${JSON.stringify(name)}`);
  return role;
}

/**
 * Makes valid createUser bodies: personal accounts of the role `roleId` named `<prefix>-1`,
 * `<prefix>-2`, …; `extra` adds or overrides keys. A string `roleId` suits multipart forms.
 */
export function newUserBodies<R extends number | string>(roleId: R, prefix = 'new') {
  let counter = 0;
  return <E extends object = object>(extra: E = {} as E) => {
    const n = ++counter;
    return { username: `${prefix}-${n}`, password: 'a long enough password', first_name: 'New', last_name: `User ${n}`, role_id: roleId, ...extra };
  };
}

/**
 * Three entities whose entity permissions name a department or a role: the survey form
 * "Salaries" (the department `formDepartmentId`), the task template "Audit" (the role
 * `templateRoleId`) and the menu link "Minutes" (the department `menuDepartmentId`).
 * Answers the three create answers, for the caller to check.
 */
export async function createEntitiesNaming(
  api: TestApi,
  t: Test,
  token: string,
  names: { formDepartmentId: number; templateRoleId: number; menuDepartmentId: number },
) {
  const form = await api.call(t, 'createForm', {
    token,
    body: {
      title: 'Salaries',
      form_type: 'survey',
      fields: [{ name: 'Salary', field_type: 'number' }],
      entity_permissions: { department_ids: [names.formDepartmentId] },
    },
  });
  const template = await api.call(t, 'createTaskTemplate', { token, body: { title: 'Audit', entity_permissions: { role_ids: [names.templateRoleId] } } });
  const item = await api.call(t, 'createMenuItem', {
    token,
    body: {
      icon_id: 3,
      menu_identifier: 'main',
      type: 'link',
      title: 'Minutes',
      link: 'https://board.example.com/',
      entity_permissions: { department_ids: [names.menuDepartmentId] },
    },
  });
  return [form, template, item] as const;
}

/** Form fields of every field type, for forms and task templates. */
export const FIELDS_OF_EVERY_TYPE = [
  { name: 'Name', field_type: 'text' },
  { name: 'Count', field_type: 'number' },
  { name: 'Start', field_type: 'date' },
  { name: 'Flag', field_type: 'boolean' },
  { name: 'Size', field_type: 'select', options: ['S', 'M'] },
] as const;

/** Posts `csv` to importUsersCsv as the file `users.csv`, beside the other form `fields`. */
export async function importUsersCsv(api: TestApi, t: Test, token: string, csv: string | Buffer, fields: Record<string, string> = {}) {
  const form = await multipart({
    ...fields,
    user_data_csv: { content: Buffer.isBuffer(csv) ? csv : Buffer.from(csv), fileName: 'users.csv', type: 'text/csv' },
  });
  return api.call(t, 'importUsersCsv', { token, ...form });
}

/** The stored state of a one-time login token. */
export async function loginTokenRow(db: Database, uuid: string) {
  const [row] = await db.owner.execute<{ used_at: Date | null; deleted_at: Date | null; expires_at: Date; token_hash: Buffer }>(
    sql`select used_at, deleted_at, expires_at, token_hash from user_login_tokens where uuid = ${uuid}`,
  );
  return row;
}

/** Request headers that present `token` as the bearer access token. */
export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Waits `ms` milliseconds (to wait for a condition, poll it with `eventually`). */
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What `promise` rejects with, or null when it fulfils. */
export const rejection = <E = unknown>(promise: Promise<unknown>): Promise<E | null> =>
  promise.then(
    () => null,
    (error: unknown) => error as E,
  );

/** Waits until every notification dispatch of the tenant is delivered; answers how many are still pending when the time is up. */
export const waitForDispatches = (db: Database, tenantId: number) =>
  eventually(
    () => rowCount(db, 'notification_dispatches', sql`tenant_id = ${tenantId} and delivered_at is null`),
    (n) => n === 0,
  );

/** A notification of `userId` written directly, stored at `createdAt` (`customNotification` unless `values` say otherwise). */
export async function storeNotification(
  db: Database,
  tenantId: number,
  userId: number,
  createdAt: Date,
  values: Partial<typeof notifications.$inferInsert> = {},
) {
  const [row] = await db.owner
    .insert(notifications)
    .values({
      tenantId,
      dispatchId: randomUUID(),
      type: 'customNotification',
      notifiableId: userId,
      data: { title: 'Hello', body: '<p>Hi</p>', url: '/x' },
      createdAt,
      updatedAt: createdAt,
      ...values,
    })
    .returning();
  return row!;
}

/**
 * Locks the rows `lock` selects (`… for update`) in an owner transaction of its own and
 * holds them until `release()`: a test of lock order holds one row and sees what a write
 * waiting for it holds meanwhile.
 */
export async function holdRows(db: Database, lock: SQL): Promise<{ release: () => Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let holding!: () => void;
  const held = new Promise<void>((resolve) => (holding = resolve));
  const holder = db.owner.transaction(async (tx) => {
    await tx.execute(lock);
    holding();
    await released;
  });
  await Promise.race([held, holder]);
  return {
    release: async () => {
      release();
      await holder;
    },
  };
}

/**
 * The options of a test that pauses writes (`pauseWrites`): skipped on Citus, which refuses the test's trigger on a
 * distributed table ("triggers are not supported on distributed tables"). Allowed there
 * (`citus.enable_unsafe_triggers`), it would run on the worker of the row's shard, and its advisory lock, and the
 * COMMIT it holds (a PREPARE TRANSACTION there), would be the worker's, not the coordinator's the test holds and reads.
 */
export const PAUSES_WRITES = {
  skip: process.env[CITUS_ENV] ? 'pauses writes with a trigger of the test, which Citus refuses on a distributed table' : false,
};

/**
 * A trigger of the test's own (`trigger`: its kind, name, timing and table, as CREATE takes
 * them) that makes each row write matching `condition` wait for the advisory lock `key`,
 * which the test holds until it releases the answer. Dropped at the test's end. A deferred
 * constraint trigger after an insert into `audit_events` holds a request's COMMIT: its
 * writes are made and their locks held, not yet committed.
 */
export async function pauseWrites(t: Test, db: Database, pause: { name: string; trigger: string; condition: string; key: number }) {
  const table = / on (\w+)/.exec(pause.trigger)![1]!;
  await db.owner.execute(
    sql.raw(`create function ${pause.name}() returns trigger language plpgsql as $$
      begin if ${pause.condition} then perform pg_advisory_xact_lock_shared(${pause.key}); end if; return null; end $$`),
  );
  await db.owner.execute(sql.raw(`create ${pause.trigger} for each row execute function ${pause.name}()`));
  t.teardown(async () => {
    await db.owner.execute(sql.raw(`drop trigger if exists ${pause.name} on ${table}`));
    await db.owner.execute(sql.raw(`drop function if exists ${pause.name}()`));
  });
  return holdRows(db, sql`select pg_advisory_xact_lock(${pause.key})`);
}

/**
 * How many sessions of the database wait for a lock in a statement containing `text` (waiting a while for one). On
 * Citus every node's sessions (`citus_stat_activity`): a row is locked, and waited on, on the worker that holds it,
 * where the statement is the shard's, as Citus wrote it (its keywords in upper case), while the coordinator's session
 * only waits for the worker's answer.
 */
export async function lockWaiters(db: Database, text: string): Promise<number> {
  const activity = sql.raw(process.env[CITUS_ENV] ? 'citus_stat_activity' : 'pg_stat_activity');
  return eventually(
    async () =>
      (
        await db.owner.execute<{ n: number }>(
          sql`select count(*)::int as n from ${activity}
              where wait_event_type = 'Lock' and datname = current_database() and strpos(lower(query), lower(${text})) > 0
                and pid <> pg_backend_pid()`,
        )
      )[0]?.n ?? 0,
    (n) => n > 0,
  );
}
