/**
 * Turn priorities (src/platform/jobs/jobs.ts, docs/outbound-delivery.md#concurrency): workers
 * take the highest priority first, so jobs go in the order of their virtual times.
 */
import t from 'tap';
import { turnPriority } from '../../../src/platform/jobs/jobs.ts';

const at = (seconds: number) => Date.UTC(2026, 11, 4) + seconds * 1000;

t.test("another tenant's job queued during a burst goes between the burst's jobs", async (t) => {
  const burst = [0, 1, 2, 3].map((ahead) => turnPriority(ahead, 10, at(0)));
  const other = turnPriority(0, 10, at(5));
  t.ok(other < burst[0]!, "after the burst's first, queued earlier with none ahead");
  t.ok(other > burst[1]!, 'before its second and every one after');
});

t.test('a job queued later does not overtake one queued earlier with as many ahead', async (t) => {
  t.ok(turnPriority(3, 10, at(0)) > turnPriority(3, 10, at(1)));
  t.ok(turnPriority(0, 60, at(0)) > turnPriority(0, 60, at(0) + 1000));
});

t.test("a burst's last job waits only for what is queued within its pace, not for ever", async (t) => {
  const last = turnPriority(99, 10, at(0));
  t.ok(turnPriority(0, 10, at(989)) > last, 'a job queued before its virtual time goes first');
  t.ok(turnPriority(0, 10, at(991)) < last, 'one queued after it goes after');
});

t.test('priorities stay within PostgreSQL integer for decades', async (t) => {
  const far = turnPriority(1_000_000, 60, Date.UTC(2090, 0, 1));
  t.ok(Number.isSafeInteger(far) && far > -(2 ** 31), String(far));
});
