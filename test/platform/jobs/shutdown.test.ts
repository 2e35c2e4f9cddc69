/**
 * A worker process told to stop (SIGTERM) while a job runs stops within SHUTDOWN_TIMEOUT_MS:
 * it waits for the job only as long as the budget leaves, hands the job back to be retried,
 * closes what is left in order and exits 0 (docs/operations.md#signals-and-shutdown); another
 * worker then retries the job. Real processes, a webhook whose receiver does not answer.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { deliverWebhook } from '../../../src/resources/automations/deliver-webhook.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { startAtriumProcess } from '../../helpers/processes.ts';
import { startReceiver } from '../../helpers/receiver.ts';

// Room to stop on a loaded machine, and less than the 10 s the job workers used to wait whatever the budget.
const SHUTDOWN_TIMEOUT_MS = 8_000;

// The API only: the worker is the child process below. The webhook receiver is on loopback.
const api = await startTestApi(t, { role: 'api', webhookAllowedCidrs: ['127.0.0.0/8'] });

function startWorker() {
  return startAtriumProcess(t, api, {
    ATRIUM_ROLE: 'worker',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
    SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
    // The request outlasts the shutdown: only the shutdown ends it.
    OUTBOUND_TIMEOUT_MS: '60000',
    LOG_LEVEL: 'info',
  });
}

t.test('SIGTERM while a job runs: the worker stops within SHUTDOWN_TIMEOUT_MS, exits 0 and hands the job back', async (t) => {
  const receiver = await startReceiver(t);
  receiver.script('/slow', ['hang', 200]);
  const worker = startWorker();
  await eventually(
    async () => worker.output(),
    (output) => output.includes('job workers started') || worker.child.exitCode !== null,
    60_000,
  );
  t.match(worker.output(), /job workers started/, 'the worker started');

  const tenant = await api.createTenant('shutdown-hooks');
  const created = await api.call(t, 'createAutomation', {
    token: tenant.adminToken,
    body: { name: 'hook', config: { url: receiver.url('/slow'), headers: {} } },
  });
  t.equal(created.status, 201);
  const run = await api.call(t, 'runAutomation', { token: tenant.adminToken, params: { automation: created.body.id }, body: {} });
  t.equal(run.status, 202);
  await eventually(
    async () => receiver.received('/slow').length,
    (n) => n === 1,
  );

  const signalledAt = Date.now();
  worker.child.kill('SIGTERM');
  const code = await worker.exited;
  const elapsedMs = Date.now() - signalledAt;
  t.equal(code, 0, 'exit status 0');
  t.ok(elapsedMs < SHUTDOWN_TIMEOUT_MS, `stopped ${elapsedMs} ms after the signal (budget ${SHUTDOWN_TIMEOUT_MS} ms)`);
  t.match(worker.output(), /"msg":"stopped"/, 'the shutdown finished');
  t.notMatch(worker.output(), /shutdown took too long/, 'within its budget');
  if (code !== 0) t.comment(worker.output());

  const [job] = await api.db.owner.execute<{ state: string; message: string | null }>(
    sql`select state, output->>'value' as message from pgboss.job where name = ${deliverWebhook.name}`,
  );
  t.equal(job?.state, 'retry', 'the running job is handed back, to be retried');
  t.equal(job?.message, 'pg-boss shut down while active');

  // Another worker retries it: the interrupted attempt is made again, not counted twice.
  startWorker();
  await eventually(
    async () =>
      (await api.db.owner.execute<{ status: string }>(sql`select status from webhook_deliveries where automation_id = ${created.body.id}`))[0]?.status,
    (status) => status === 'succeeded',
    60_000,
  );
  const [delivery] = (await api.call(t, 'listAutomationDeliveries', { token: tenant.adminToken, params: { automation: created.body.id } })).body;
  t.equal(delivery.status, 'succeeded', 'the retry delivered the webhook');
  t.equal(delivery.attempts, 1, 'as its first attempt');
  const requests = receiver.received('/slow');
  t.equal(requests.length, 2, 'the interrupted request and its repetition');
  t.equal(requests[1]!.headers['webhook-id'], requests[0]!.headers['webhook-id'], 'with the same webhook-id');
});
