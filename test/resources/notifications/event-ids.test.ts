import t from 'tap';
import { and, asc, eq, sql } from 'drizzle-orm';
import { compareEventIds, eventIdColumn, FIRST_EVENT_ID, isEventId, storedAfter } from '../../../src/resources/notifications/event-ids.ts';
import { notifications } from '../../../src/resources/notifications/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const ID_A = '0a000000-0000-4000-8000-000000000000';
const ID_B = '0b000000-0000-4000-8000-000000000000';
const ID_C = '0c000000-0000-4000-8000-000000000000';

t.test('isEventId: microseconds (at most 16 digits), a dash, a uuid', async (t) => {
  for (const valid of [`1-${ID_A}`, `1704067200000001-${ID_B}`, `12-${ID_A.toUpperCase()}`, FIRST_EVENT_ID]) t.ok(isEventId(valid), valid);
  for (const invalid of ['', 'yesterday', ID_A, `-${ID_A}`, `${'9'.repeat(17)}-${ID_A}`, `1.5-${ID_A}`, `1-${ID_A}x`, `1-${ID_A.slice(0, -1)}`, ` 1-${ID_A}`]) {
    t.notOk(isEventId(invalid), invalid);
  }
});

t.test('compareEventIds orders by time as a number, then by id whatever its case', async (t) => {
  t.equal(compareEventIds(`9-${ID_B}`, `10-${ID_A}`), -1, '9 µs before 10 µs (not text order)');
  t.equal(compareEventIds(`10-${ID_A}`, `9-${ID_B}`), 1);
  t.equal(compareEventIds(`10-${ID_A}`, `10-${ID_B}`), -1, 'same time: by id');
  t.equal(compareEventIds(`10-${ID_B.toUpperCase()}`, `10-${ID_A}`), 1);
  t.equal(compareEventIds(`10-${ID_A.toUpperCase()}`, `10-${ID_A}`), 0);
  t.equal(compareEventIds(FIRST_EVENT_ID, `1-${ID_A}`), -1, 'the first id is below any notification');
});

t.test('PostgreSQL computes the same ids, in the same order, and storedAfter is strictly after, to the microsecond', async (t) => {
  const api = await startTestApi(t, { role: 'api' });
  const tenant = await api.createTenant('event-ids');
  const user = await api.createUser(tenant.tenantId);
  // Microseconds matter, so the times are written in SQL (a JavaScript Date holds milliseconds).
  await api.db.owner.execute(sql`
    insert into notifications (id, tenant_id, dispatch_id, type, notifiable_type, notifiable_id, data, created_at)
    select x.id, ${tenant.tenantId}, gen_random_uuid(), 'custom', 'user', ${user.id}, '{"title":"t","body":"b","url":"/x"}'::jsonb, x.created_at
    from (values (${ID_B}::uuid, '2024-01-01 00:00:00.000001+00'::timestamptz),
                 (${ID_A}::uuid, '2024-01-01 00:00:00.000002+00'::timestamptz),
                 (${ID_C}::uuid, '2024-01-01 00:00:00.000002+00'::timestamptz)) as x(id, created_at)`);
  const own = and(eq(notifications.tenantId, tenant.tenantId), eq(notifications.notifiableId, user.id));
  const ids = async (where = own) =>
    (await api.db.owner.select({ eventId: eventIdColumn }).from(notifications).where(where).orderBy(asc(notifications.createdAt), asc(notifications.id))).map(
      (row) => row.eventId,
    );
  const all = await ids();
  const first = 1704067200000001;
  t.strictSame(all, [`${first}-${ID_B}`, `${first + 1}-${ID_A}`, `${first + 1}-${ID_C}`], 'microseconds since the epoch, then the id');
  t.ok(all.every(isEventId), 'each has the shape clients send back');
  t.strictSame([...all].sort(compareEventIds), all, 'compareEventIds agrees with the database order');
  t.strictSame(await ids(and(own, storedAfter(all[0]!))), all.slice(1), 'after the first: the later two');
  t.strictSame(await ids(and(own, storedAfter(all[1]!))), all.slice(2), 'after the second: the one stored in the same microsecond with a higher id');
  t.strictSame(await ids(and(own, storedAfter(all[2]!))), [], 'after the last: none');
  t.strictSame(await ids(and(own, storedAfter(FIRST_EVENT_ID))), all, 'after the first id: all');
});
