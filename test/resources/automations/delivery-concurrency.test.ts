/**
 * A worker makes several outbound deliveries at once (docs/outbound-delivery.md#concurrency):
 * a receiver that hangs holds one of them, not the deliveries of every tenant behind it.
 * The outbound timeout is long here, so the hanging attempt is still open when the other
 * tenant's delivery has been made.
 */
import t from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { startReceiver } from '../../helpers/receiver.ts';
import { OUTBOUND_CONCURRENCY } from '../../../src/platform/outbound/client.ts';

const api = await startTestApi(t, { role: 'all', webhookAllowedCidrs: ['127.0.0.0/8'], outboundTimeoutMs: 60_000, webhookMaxAttempts: 1 });
const receiver = await startReceiver(t);
const slow = await api.createTenant('slow-receiver');
const prompt = await api.createTenant('prompt-receiver');

async function runAutomationAt(token: string, path: string) {
  const created = await api.call(t, 'createAutomation', { token, body: { name: path, config: { url: receiver.url(path), headers: {} } } });
  const run = await api.call(t, 'runAutomation', { token, params: { automation: created.body.id }, body: {} });
  t.equal(run.status, 202);
  return { automationId: created.body.id as number, deliveryId: run.body.id as number };
}

const delivery = async (token: string, run: { automationId: number; deliveryId: number }) =>
  (await api.call(t, 'listAutomationDeliveries', { token, params: { automation: run.automationId } })).body.find(
    (d: { id: number }) => d.id === run.deliveryId,
  );

t.test("one tenant's receiver that hangs does not hold another tenant's delivery", async (t) => {
  receiver.script('/hangs', ['hang']);
  const hanging = await runAutomationAt(slow.adminToken, '/hangs');
  await eventually(
    async () => receiver.received('/hangs').length,
    (n) => n === 1,
  );
  const other = await runAutomationAt(prompt.adminToken, '/answers');
  const made = await eventually(
    () => delivery(prompt.adminToken, other),
    (d) => d?.status === 'succeeded',
  );
  t.equal(made.status, 'succeeded', "the other tenant's webhook was delivered");
  const stillOpen = await delivery(slow.adminToken, hanging);
  t.match(stillOpen, { status: 'pending', completed_at: null, response_status: null }, 'while the hanging attempt was still open');
  receiver.releaseHung();
  t.equal(
    (
      await eventually(
        () => delivery(slow.adminToken, hanging),
        (d) => d?.status === 'succeeded',
      )
    ).status,
    'succeeded',
  );
});

t.test("one tenant's queue of deliveries does not hold another tenant's delivery behind it", async (t) => {
  // docs/outbound-delivery.md#concurrency. Every worker busy with the first tenant's receiver, twelve more of its deliveries
  // queued, then one of another tenant: once the workers are free again, the other tenant's comes before the twelve.
  receiver.script('/backlog', ['hang']);
  const created = await api.call(t, 'createAutomation', {
    token: slow.adminToken,
    body: { name: 'backlog', config: { url: receiver.url('/backlog'), headers: {} } },
  });
  for (let i = 0; i < OUTBOUND_CONCURRENCY + 12; i++) {
    t.equal((await api.call(t, 'runAutomation', { token: slow.adminToken, params: { automation: created.body.id }, body: {} })).status, 202);
  }
  await eventually(
    async () => receiver.received('/backlog').length,
    (n) => n === OUTBOUND_CONCURRENCY,
  );
  const other = await runAutomationAt(prompt.adminToken, '/after-backlog');
  receiver.releaseHung();
  // The workers busy again: the other tenant's delivery is among what they took.
  const busy = await eventually(
    async () => ({ backlog: receiver.received('/backlog').length, other: receiver.received('/after-backlog').length }),
    (seen) => seen.backlog + seen.other >= 2 * OUTBOUND_CONCURRENCY,
  );
  t.equal(busy.other, 1, `the other tenant's delivery was made before the first tenant's next ${busy.backlog - OUTBOUND_CONCURRENCY}`);
  t.equal(
    (
      await eventually(
        () => delivery(prompt.adminToken, other),
        (d) => d?.status === 'succeeded',
      )
    ).status,
    'succeeded',
  );
  // Each of the first tenant's requests hangs until released: released until every delivery is made.
  const made = await eventually(
    async () => {
      receiver.releaseHung();
      return (await api.call(t, 'listAutomationDeliveries', { token: slow.adminToken, params: { automation: created.body.id } })).body as { status: string }[];
    },
    (deliveries) => deliveries.length === OUTBOUND_CONCURRENCY + 12 && deliveries.every((d) => d.status === 'succeeded'),
  );
  t.equal(made.filter((d) => d.status === 'succeeded').length, OUTBOUND_CONCURRENCY + 12, "then every one of the first tenant's");
});
