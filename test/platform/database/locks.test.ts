import t from 'tap';
import { lockTenantScope } from '../../../src/platform/database/locks.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { sleep } from '../../helpers/fixtures.ts';

const api = await startTestApi(t);
const db = api.atrium.services.db;
const one = await api.createTenant('locks-one');
const two = await api.createTenant('locks-two');

/** Holds the lock `purpose` of `tenantId` for `ms`, recording when it got it. */
const hold = (tenantId: number, purpose: string, ms: number, events: string[], name: string) =>
  db.tenant(tenantId, async (tx) => {
    await lockTenantScope(tx, purpose);
    events.push(`${name} locked`);
    await sleep(ms);
    events.push(`${name} done`);
  });

t.test('a tenant-scoped lock serialises transactions of the same tenant and purpose', async (t) => {
  const events: string[] = [];
  const first = hold(one.tenantId, 'test.purpose', 300, events, 'first');
  await sleep(100);
  await Promise.all([first, hold(one.tenantId, 'test.purpose', 0, events, 'second')]);
  t.strictSame(events, ['first locked', 'first done', 'second locked', 'second done']);
});

t.test('other tenants and other purposes are not blocked', async (t) => {
  const events: string[] = [];
  const first = hold(one.tenantId, 'test.purpose', 400, events, 'first');
  await sleep(100);
  await Promise.all([first, hold(two.tenantId, 'test.purpose', 0, events, 'other tenant'), hold(one.tenantId, 'test.other', 0, events, 'other purpose')]);
  t.equal(events.at(-1), 'first done', 'both others finished while the first held its lock');
});

t.test('outside a tenant transaction the lock refuses to run', async (t) => {
  await t.rejects(db.owner.transaction((tx) => lockTenantScope(tx, 'test.purpose')));
});
