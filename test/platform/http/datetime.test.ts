/**
 * Dates and datetimes at the edges of the calendar are client input like any other:
 * PostgreSQL has no year 0, and a year-9999 bound must not overflow. 422 or an answer,
 * never a 500.
 */
import t from 'tap';
import { sql } from 'drizzle-orm';
import { isCalendarDate } from '../../../src/platform/http/dates.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('bounds');
const user = await api.createUser(tenant.tenantId, { values: { birthdate: '1990-01-01' } });

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
