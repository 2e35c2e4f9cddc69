/**
 * Tenant-scoped locks (src/platform/database/locks.ts). No case depends on timing: a holder
 * keeps its lock until the case lets it go, and "waits" is read from PostgreSQL itself.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { lockTenantScope } from '../../../src/platform/database/locks.ts';
import { eventually } from '../../helpers/eventually.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;
const one = await data.createTenant('locks-one');
const two = await data.createTenant('locks-two');

/** A transaction that takes the lock `purpose` of `tenantId` and keeps it until `release()`. */
function holder(tenantId: number, purpose: string, events: string[], name: string) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const hasLock = new Promise<void>((resolve) => (locked = resolve));
  const done = db.tenant(tenantId, async (tx) => {
    await lockTenantScope(tx, purpose);
    events.push(`${name} locked`);
    locked();
    await released;
    events.push(`${name} done`);
  });
  return { hasLock, release, done };
}

/** How many sessions of this database wait for an advisory lock. */
async function waitingForLock(): Promise<number> {
  const [row] = await db.owner.execute<{ n: number }>(sql`
    select count(*)::int as n from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock' and wait_event = 'advisory'`);
  return row!.n;
}

t.test('a tenant-scoped lock serialises transactions of the same tenant and purpose', async (t) => {
  const events: string[] = [];
  const first = holder(one.tenantId, 'test.purpose', events, 'first');
  await first.hasLock;
  const second = holder(one.tenantId, 'test.purpose', events, 'second');
  t.equal(await eventually(waitingForLock, (n) => n === 1), 1, 'the second waits for the lock');
  t.strictSame(events, ['first locked']);
  first.release();
  await first.done;
  await second.hasLock;
  second.release();
  await second.done;
  t.strictSame(events, ['first locked', 'first done', 'second locked', 'second done']);
});

t.test('other tenants and other purposes are not blocked', async (t) => {
  const events: string[] = [];
  const first = holder(one.tenantId, 'test.purpose', events, 'first');
  await first.hasLock;
  // Were either blocked, it would never finish while the first holds its lock.
  for (const [tenantId, purpose, name] of [
    [two.tenantId, 'test.purpose', 'other tenant'],
    [one.tenantId, 'test.other', 'other purpose'],
  ] as const) {
    const other = holder(tenantId, purpose, events, name);
    other.release();
    await other.done;
  }
  t.strictSame(events, ['first locked', 'other tenant locked', 'other tenant done', 'other purpose locked', 'other purpose done']);
  first.release();
  await first.done;
});

t.test('outside a tenant transaction the lock refuses to run', async (t) => {
  await t.rejects(db.owner.transaction((tx) => lockTenantScope(tx, 'test.purpose')));
});
