import { once } from 'node:events';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

/**
 * Twelve batches, far more than the socket's buffers hold (each line about 1.5 KB, some
 * 18 MB in all): a client that stops reading holds the export back on the server, a few
 * batches in.
 */
const EVENTS = 12_000;
/** The export's batch (src/resources/audit-events/handlers.ts). */
const BATCH = 1000;

const api = await startTestApi(t);
const tenant = await api.createTenant('audit-export-auth');
const subject = await api.createUser(tenant.tenantId);
const address = await api.atrium.app!.listen({ host: '127.0.0.1', port: 0 });
t.teardown(() => api.atrium.app!.server.close());

// Events about a user, with a personal field (email) among the changes, and a long user agent.
await api.db.owner.execute(sql`
  insert into audit_events (tenant_id, occurred_at, action, actor_type, actor_id, actor_label, target_type, target_id, target_label,
    changes, operation_id, request_id, user_agent)
  select ${tenant.tenantId}, now() - make_interval(secs => n), 'user.updated', 'user', ${tenant.adminUserId}, 'Atrium Administrator',
    'user', ${String(subject.id)}, 'Grace Hopper',
    jsonb_build_object('email', jsonb_build_object('from', 'old' || n || '@example.com', 'to', 'new' || n || '@example.com')),
    'updateUser', gen_random_uuid()::text, repeat('Mozilla/5.0 ', 42)
  from generate_series(1, ${EVENTS}) n`);

const ALL_USER_FIELDS: Permission[] = ['audit.view', 'users.view', 'users.view-personal', 'users.view-administrative'];

interface Reading {
  /** Every whole line received, parsed. */
  events: { changes: Record<string, unknown> }[];
  /** How the answer ended: `complete` (its end), or the error reading it gave. */
  outcome: 'complete' | 'cut';
}

/**
 * Exports the whole trail as `token` the way a slow client does: it takes the first lines,
 * then stops reading while `meanwhile` runs (the server cannot write past the socket's
 * buffers), then reads on to the end.
 */
async function slowExport(t: Test, token: string, meanwhile: () => Promise<void>): Promise<Reading> {
  const about = new URLSearchParams({ 'filter[target_type]': 'user', 'filter[target_id]': String(subject.id) });
  const res = await fetch(`${address}/api/administration/audit-events/export?${about}`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const events: Reading['events'] = [];
  let rest = '';
  const take = (chunk: Uint8Array) => {
    const parts = (rest + decoder.decode(chunk, { stream: true })).split('\n');
    rest = parts.pop()!;
    for (const line of parts) events.push(JSON.parse(line) as Reading['events'][number]);
  };
  while (events.length === 0) {
    const { value, done } = await reader.read();
    if (done) return { events, outcome: 'complete' };
    take(value);
  }
  await meanwhile();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      take(value);
    }
  } catch {
    return { events, outcome: 'cut' };
  }
  t.equal(rest, '', 'a complete answer ends with a whole line');
  return { events, outcome: 'complete' };
}

async function roleOf(userId: number): Promise<number> {
  const [row] = await api.db.owner.execute<{ role_id: number }>(sql`select role_id::int as role_id from users where id = ${userId}`);
  return row!.role_id;
}

/** The export stopped short once the caller no longer held: cut (not a clean end), and far from every event. */
function assertStopped(t: Test, reading: Reading): void {
  t.equal(reading.outcome, 'cut', 'the connection is cut: the client cannot take the answer for the whole selection');
  t.ok(reading.events.length < EVENTS - BATCH, `the export stopped: ${reading.events.length} of ${EVENTS} events sent`);
}

const endings: [string, (t: Test, viewer: { id: number; token: string }) => Promise<void>][] = [
  [
    'audit.view is revoked from their role',
    async (t, viewer) => {
      const res = await api.call(t, 'updateRole', {
        token: tenant.adminToken,
        params: { role: await roleOf(viewer.id) },
        body: { permissions: ['users.view', 'users.view-personal', 'users.view-administrative'] },
      });
      if (res.status !== 200) throw new Error(`updateRole answered ${res.status}`);
    },
  ],
  [
    'their token is revoked (logout)',
    async (t, viewer) => {
      const res = await api.call(t, 'logout', { token: viewer.token });
      if (res.status !== 204) throw new Error(`logout answered ${res.status}`);
    },
  ],
  [
    'they are marked for logout',
    async (t, viewer) => {
      const res = await api.call(t, 'markUserForLogout', { token: tenant.adminToken, params: { user: viewer.id } });
      if (res.status !== 204) throw new Error(`markUserForLogout answered ${res.status}`);
    },
  ],
  [
    'they are deleted',
    async (t, viewer) => {
      const res = await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: viewer.id } });
      if (res.status !== 204) throw new Error(`deleteUser answered ${res.status}`);
    },
  ],
  [
    'they are blacked out',
    async (t, viewer) => {
      const res = await api.call(t, 'blackoutUser', { token: tenant.adminToken, params: { user: viewer.id } });
      if (res.status !== 204) throw new Error(`blackoutUser answered ${res.status}`);
    },
  ],
];

for (const [what, end] of endings) {
  t.test(`an export ends, cut short, when ${what} while it runs`, async (t) => {
    const viewer = await api.createUser(tenant.tenantId, { permissions: ALL_USER_FIELDS });
    const reading = await slowExport(t, viewer.token, () => end(t, viewer));
    assertStopped(t, reading);
  });
}

t.test('a caller who still holds gets every event, each batch as they may now see it', async (t) => {
  const viewer = await api.createUser(tenant.tenantId, { permissions: ALL_USER_FIELDS });
  const reading = await slowExport(t, viewer.token, async () => {
    // Still allowed to read the trail, no longer to see personal fields.
    const res = await api.call(t, 'updateRole', {
      token: tenant.adminToken,
      params: { role: await roleOf(viewer.id) },
      body: { permissions: ['audit.view', 'users.view'] },
    });
    t.equal(res.status, 200);
  });
  t.equal(reading.outcome, 'complete');
  t.equal(reading.events.length, EVENTS, 'every event, once');
  t.match(reading.events[0]!.changes.email, { from: /@example\.com$/ }, 'the first batch was read with users.view-personal');
  t.strictSame(reading.events.at(-1)!.changes.email, { changed: true }, 'the last batch hides the email: the permission was revoked');
});

t.test('a client that stops reading holds the export at the batch it was sent: the next is read and judged once that one has left', async (t) => {
  // Batches of some 12 MB, more than the socket's buffers take.
  const large = await api.createTenant('audit-export-large');
  await api.db.owner.execute(sql`
    insert into audit_events (tenant_id, occurred_at, action, actor_type, actor_id, actor_label, target_type, target_id, target_label,
      changes, operation_id, request_id)
    select ${large.tenantId}, now() - make_interval(secs => n), 'user.updated', 'user', ${large.adminUserId}, 'Atrium Administrator',
      'user', ${String(large.adminUserId)}, 'Atrium Administrator',
      jsonb_build_object('default_route', jsonb_build_object('from', repeat('x', 12000), 'to', null)), 'updateUser', gen_random_uuid()::text
    from generate_series(1, ${2 * BATCH + 500}) n`);
  const before = api.db.queryCount;
  const socket = connect(Number(new URL(address).port), '127.0.0.1');
  t.teardown(() => socket.destroy());
  socket.write(`GET /api/administration/audit-events/export HTTP/1.1\r\nHost: atrium\r\nAuthorization: Bearer ${large.adminToken}\r\n\r\n`);
  await once(socket, 'data');
  socket.pause();
  // The first batch read; whatever the server would read ahead, it reads within moments of writing it.
  await eventually(
    async () => api.db.queryCount - before,
    (n) => n >= 2,
  );
  await sleep(1500);
  // A batch is two statements of its transaction: the setting with BEGIN, and the read.
  t.equal(api.db.queryCount - before, 2, 'one batch read: the second waits until the first has left the process');
});
