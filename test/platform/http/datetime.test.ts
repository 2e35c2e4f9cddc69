/**
 * The API's datetime formats (written and read in src/platform/http/datetime.ts), and
 * dates and datetimes at the edges of the calendar, client input like any other:
 * PostgreSQL has no year 0, and a year-9999 bound must not overflow. 422 or an answer,
 * never a 500.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { isCalendarDate } from '../../../src/platform/http/dates.ts';
import {
  NOTIFICATION_DATETIME_PATTERN,
  NOTIFICATION_DATETIME_PROBLEM,
  notificationDatetime,
  parseNotificationDatetime,
  rfc3339,
} from '../../../src/platform/http/datetime.ts';
import { loadSpecification } from '../../../src/platform/http/operations.ts';
import { ProblemError } from '../../../src/platform/http/problem.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('bounds');
const user = await api.createUser(tenant.tenantId, { values: { birthdate: '1990-01-01' } });

t.test('the two datetime formats, written from one Date', async (t) => {
  const date = new Date(Date.UTC(2026, 0, 31, 8, 5, 9, 250));
  t.equal(rfc3339(date), '2026-01-31T08:05:09.250Z');
  t.equal(notificationDatetime(date), '2026-01-31 08:05:09', 'to the second');
  for (const none of [null, undefined]) {
    t.equal(rfc3339(none), null);
    t.equal(notificationDatetime(none), null);
  }
});

/** The status and field errors of what `parseNotificationDatetime` throws for `value`, or 'parsed'. */
function parseErrors(value: string): unknown {
  try {
    parseNotificationDatetime(value, 'filter.created_from');
    return 'parsed';
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    return { status: error.status, errors: error.errors };
  }
}

t.test('notification datetimes read back what they write; impossible ones are a 422 on the field', async (t) => {
  for (const text of ['2026-01-31 08:05:09', '2024-02-29 23:59:59', '0001-01-01 00:00:00', '9999-12-31 23:59:59']) {
    t.equal(notificationDatetime(parseNotificationDatetime(text, 'read_at')), text, text);
  }
  t.equal(parseNotificationDatetime('2026-01-31 08:05:09', 'read_at').getTime(), Date.UTC(2026, 0, 31, 8, 5, 9), 'read as UTC');
  for (const text of ['2026-02-30 00:00:00', '2023-02-29 12:00:00', '2026-01-31 24:00:00', '2026-01-31 08:60:00', '0000-01-01 00:00:00', 'soon']) {
    t.strictSame(parseErrors(text), { status: 422, errors: { 'filter.created_from': [NOTIFICATION_DATETIME_PROBLEM] } }, text);
  }
});

t.test("the spec's notification datetimes carry the pattern whose errors are told the form", async (t) => {
  const schemas = (loadSpecification() as { components: { schemas: Record<string, { pattern?: string }> } }).components.schemas;
  for (const name of ['Datetime', 'NullableDatetime']) t.equal(schemas[name]?.pattern, NOTIFICATION_DATETIME_PATTERN, name);
  t.match(NOTIFICATION_DATETIME_PROBLEM, 'YYYY-MM-DD HH:MM:SS', 'the message names the form');
});

t.test('calendar dates start at year 0001', async (t) => {
  t.notOk(isCalendarDate('0000-01-01'));
  t.ok(isCalendarDate('0001-01-01'));
  t.ok(isCalendarDate('9999-12-31'));
});

t.test('a user date in year 0000 is a 422 and changes nothing', async (t) => {
  const res = await api.call(t, 'updateUser', { token: user.token, params: { user: user.id }, body: { birthdate: '0000-01-01' } });
  t.equal(res.status, 422);
  t.ok(res.body.errors?.birthdate, JSON.stringify(res.body.errors));
  const [row] = await api.db.owner.execute<{ birthdate: string }>(sql`select birthdate::text from users where id = ${user.id}`);
  t.equal(row!.birthdate, '1990-01-01');
});

t.test('notification datetimes in year 0000 are 422, year 9999 bounds answer', async (t) => {
  for (const filter of [{ created_from: '0000-01-01 00:00:00' }, { created_to: '0000-01-01 00:00:00' }]) {
    const list = await api.call(t, 'listNotifications', { token: user.token, query: { filter } });
    t.equal(list.status, 422, JSON.stringify(filter));
    const count = await api.call(t, 'countNotifications', { token: user.token, query: { filter } });
    t.equal(count.status, 422, JSON.stringify(filter));
  }
  const put = await api.call(t, 'updateNotifications', { token: user.token, body: { read_at: '0000-01-01 00:00:00' } });
  t.equal(put.status, 422);
  const upper = await api.call(t, 'listNotifications', { token: user.token, query: { filter: { created_to: '9999-12-31 23:59:59' } } });
  t.equal(upper.status, 200);
  const counted = await api.call(t, 'countNotifications', { token: user.token, query: { filter: { created_to: '9999-12-31 23:59:59' } } });
  t.equal(counted.status, 200);
  t.equal(counted.body, 0);
});
