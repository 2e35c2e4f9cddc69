import v8 from 'node:v8';
import vm from 'node:vm';
import t from 'tap';
import { sql } from 'drizzle-orm';
import { startTestApi } from '../../helpers/atrium.ts';

const EVENTS = 100_000;

// A collection on demand: what stays reachable after it is what the export holds (the rest is garbage not yet collected).
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
/** Live heap and buffers after a full collection. */
const live = () => {
  gc();
  const { heapUsed, external, arrayBuffers } = process.memoryUsage();
  return heapUsed + external + arrayBuffers;
};

const api = await startTestApi(t);
const tenant = await api.createTenant('audit-export');

t.test(`the export streams ${EVENTS} events with flat memory`, async (t) => {
  // Events as large as real ones: a change of two fields, a browser's user agent.
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, actor_id, actor_label, target_type, target_id, target_label,
      changes, operation_id, request_id, client_address, user_agent)
    select ${tenant.tenantId}, now() - make_interval(secs => n), 'user.updated', 'user', ${tenant.adminUserId}, 'Atrium Administrator',
      'user', (n % 5000)::text, 'Grace Hopper',
      jsonb_build_object('last_name', jsonb_build_object('from', 'Murray ' || n, 'to', 'Hopper ' || n), 'city', jsonb_build_object('from', null, 'to', 'Arlington')),
      'updateUser', gen_random_uuid()::text, '203.0.113.9',
      'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36'
    from generate_series(1, ${EVENTS}) n`);
  const address = await api.atrium.app!.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => api.atrium.app!.server.close());

  const startLive = live();
  let peakLive = startLive;
  const start = process.memoryUsage().rss;
  let peak = start;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
  const res = await fetch(`${address}/api/administration/audit-events/export`, { headers: { authorization: `Bearer ${tenant.adminToken}` } });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /application\/x-ndjson/);
  // Read as a slow client would, a chunk at a time, keeping only the counts.
  const decoder = new TextDecoder();
  let bytes = 0;
  let lines = 0;
  let previous: string | null = null;
  let ordered = true;
  let rest = '';
  for await (const chunk of res.body!) {
    bytes += chunk.byteLength;
    const text = rest + decoder.decode(chunk, { stream: true });
    const parts = text.split('\n');
    rest = parts.pop()!;
    for (const line of parts) {
      const at = (JSON.parse(line) as { occurred_at: string }).occurred_at;
      if (previous !== null && at > previous) ordered = false;
      previous = at;
      lines++;
      if (lines % 10_000 === 0) peakLive = Math.max(peakLive, live());
    }
  }
  clearInterval(sampler);
  t.equal(rest, '', 'the answer ends with a whole line');
  t.equal(lines, EVENTS, 'every event, once');
  t.ok(ordered, 'newest first');
  const mib = (n: number) => (n / 2 ** 20).toFixed(1);
  const held = peakLive - startLive;
  t.comment(
    `answer ${mib(bytes)} MiB; live memory after collection grew by at most ${mib(held)} MiB; resident memory by ${mib(peak - start)} MiB (uncollected garbage included)`,
  );
  // Held whole, the answer would keep at least its size reachable (several times that as strings and objects).
  t.ok(held < bytes / 4, `memory stays flat: ${mib(held)} MiB held at most, for a ${mib(bytes)} MiB answer`);
});
