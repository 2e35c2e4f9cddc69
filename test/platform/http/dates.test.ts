import t from 'tap';
import { isCalendarDate } from '../../../src/platform/http/dates.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { importUsersCsv, roleNamed } from '../../helpers/fixtures.ts';

t.test('isCalendarDate: real YYYY-MM-DD dates only', async (t) => {
  for (const valid of ['2024-02-29', '2023-12-31', '0001-01-01', '1990-01-02']) t.ok(isCalendarDate(valid), valid);
  for (const invalid of [
    '2023-02-29',
    '2023-02-30',
    '2023-04-31',
    '2023-13-01',
    '2023-00-10',
    '2023-1-01',
    '23-01-01',
    '2023-01-01T00:00:00Z',
    ' 2023-01-01',
    '31.12.1999',
    '',
  ]) {
    t.notOk(isCalendarDate(invalid), JSON.stringify(invalid));
  }
});

t.test('the CSV import preview reports 2023-02-30 as an invalid date', async (t) => {
  const api = await startTestApi(t);
  const tenant = await api.createTenant('csv-dates');
  const role = await roleNamed(api.db, tenant.tenantId, 'Employee');
  const csv = `username;first_name;last_name;password;role_id;birthdate;entering_date\nfeb;F;Eb;a long password;${role!.id};2023-02-30;2024-02-29\n`;
  const res = await importUsersCsv(api, t, tenant.adminToken, csv);
  t.equal(res.status, 200);
  const invalid = res.body.invalid_rows as { line: number; errors: Record<string, string[]> }[];
  t.equal(invalid.length, 1);
  t.strictSame(Object.keys(invalid[0]!.errors), ['birthdate'], 'only the impossible date; 2024-02-29 is fine');
});
