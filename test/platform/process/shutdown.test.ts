/** Stopping the parts of a process in order, each whatever the one before did (src/platform/process/shutdown.ts). */
import t from 'tap';
import { stopEach } from '../../../src/platform/process/shutdown.ts';

t.test('every step runs, in order, after steps that fail; the failures are answered in order', async (t) => {
  const ran: string[] = [];
  const jobsGone = new Error('the job queue could not stop');
  const closed = new TypeError('already closed');
  const failures = await stopEach([
    async () => {
      ran.push('jobs');
      throw jobsGone;
    },
    () => {
      ran.push('outbound');
      throw closed;
    },
    async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      ran.push('database');
    },
    () => ran.push('embedded server'),
  ]);
  t.strictSame(ran, ['jobs', 'outbound', 'database', 'embedded server'], 'the embedded server is stopped too');
  t.strictSame(failures, [jobsGone, closed]);
});

t.test('no failure, no error; a step may be absent (undefined)', async (t) => {
  const started: { stop(): Promise<void> } | undefined = undefined;
  t.strictSame(await stopEach([() => (started as { stop(): Promise<void> } | undefined)?.stop(), () => undefined]), []);
});
