import t, { type Test } from 'tap';
import { sql } from 'drizzle-orm';
import { SMTPServer } from 'smtp-server';
import { emailDispatch } from '../../../src/resources/notifications/email.job.ts';
import { pendingEmailCopies } from '../../../src/resources/notifications/queries.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

interface Received {
  from: string;
  to: string[];
  raw: string;
}

/** A real SMTP server on loopback that keeps every message it receives. */
const received: Received[] = [];
/** A message to `address` the server takes its time over: it answers it once `until` settles (`reached` is called first). */
let holdNext: { address: string; until: Promise<void>; reached: () => void } | undefined;
const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  // A sender the server will not take: 550 to MAIL FROM.
  onMailFrom(address, _session, callback) {
    callback(address.address.startsWith('refused') ? Object.assign(new Error('Sender not allowed'), { responseCode: 550 }) : undefined);
  },
  // A recipient the server will not take (a mistyped address, say): 550 to RCPT TO.
  onRcptTo(address, _session, callback) {
    callback(address.address.startsWith('refused') ? Object.assign(new Error('No such user'), { responseCode: 550 }) : undefined);
  },
  onData(stream, session, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', async () => {
      // A recipient refused only once the message is sent (a full mailbox, a policy): 550 after DATA.
      if (session.envelope.rcptTo.some((r) => r.address.startsWith('bounced'))) {
        callback(Object.assign(new Error('Mailbox full'), { responseCode: 550 }));
        return;
      }
      // A server that took the message and never answers: the client must give up.
      if (session.envelope.rcptTo.some((r) => r.address.startsWith('stalled'))) return;
      const hold = holdNext;
      if (hold && session.envelope.rcptTo.some((r) => r.address === hold.address)) {
        holdNext = undefined;
        hold.reached();
        await hold.until;
      }
      received.push({
        from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
        to: session.envelope.rcptTo.map((r) => r.address),
        raw: Buffer.concat(chunks).toString('utf8'),
      });
      callback();
    });
  },
});
await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
t.teardown(() => new Promise<void>((resolve) => smtp.close(() => resolve())));
const port = (smtp.server.address() as { port: number }).port;

const api = await startTestApi(t, { role: 'all', smtpUrl: `smtp://127.0.0.1:${port}`, smtpFrom: 'Atrium <atrium@example.test>' });
const tenant = await api.createTenant('emails');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });

t.test('e-mail copies go to recipients who want them and have an address, once', async (t) => {
  const wants = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'wants@example.test', firstName: 'Wanda' } });
  const noAddress = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: null } });
  const declines = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: false, email: 'declines@example.test' } });
  const group = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'group@example.test', groupAccount: true } });
  const res = await api.call(t, 'createNotification', {
    token: sender.token,
    body: {
      title: 'Canteen closed',
      body: '<p>Closed <b>today</b><script>alert(1)</script></p>',
      url: 'https://intranet.example.test/canteen',
      user_ids: [wants.id, noAddress.id, declines.id, group.id],
    },
  });
  t.equal(res.status, 202);
  const emailed = await eventually(
    async () =>
      (
        await api.db.owner.execute<{ n: number }>(
          sql`select count(*)::int as n from notifications where tenant_id = ${tenant.tenantId} and emailed_at is not null`,
        )
      )[0]!.n,
    (n) => n === 1,
  );
  t.equal(emailed, 1);
  const finished = await eventually(
    async () => (await api.db.owner.execute<{ state: string }>(sql`select state from pgboss.job where name = 'notifications.email'`)).map((r) => r.state),
    (states) => states.length > 0 && states.every((s) => s === 'completed'),
  );
  t.strictSame(finished, ['completed']);
  t.equal(received.length, 1, 'one message');
  const message = received[0]!;
  t.strictSame(message.to, ['wants@example.test']);
  t.equal(message.from, 'atrium@example.test');
  t.match(message.raw, /Subject: Canteen closed/);
  t.match(message.raw, /To: Wanda [^\r\n]*<wants@example.test>/);
  t.match(message.raw, /Closed today/, 'plain-text part');
  t.match(message.raw, /https:\/\/intranet.example.test\/canteen/);
  t.notMatch(message.raw, /<script|alert\(1\)/, 'the sanitized body is sent');

  const dispatchId = (await api.db.owner.execute<{ id: string }>(sql`select id from notification_dispatches where tenant_id = ${tenant.tenantId}`))[0]!.id;
  const again = await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId });
  t.equal(again, 0, 'a retried e-mail job sends nothing twice');
  t.equal(received.length, 1);
});

/**
 * A notification to `users` whose e-mail copies have all been sent, then made owed again (as
 * if its job had not run yet): its dispatch id, for a test to run the job itself.
 */
async function owedDispatch(t: Test, users: { id: number }[], title: string): Promise<string> {
  const before = received.length;
  const res = await api.call(t, 'createNotification', {
    token: sender.token,
    body: { title, body: '<p>x</p>', url: '/x', user_ids: users.map((user) => user.id) },
  });
  t.equal(res.status, 202);
  const [{ dispatchId } = { dispatchId: '' }] = await eventually(
    () =>
      api.db.owner.execute<{ dispatchId: string }>(
        sql`select dispatch_id as "dispatchId" from notifications where tenant_id = ${tenant.tenantId} and notifiable_id = ${users[0]!.id} and emailed_at is not null`,
      ),
    (rows) => rows.length === 1,
  );
  await eventually(
    async () => received.length,
    (n) => n === before + users.length,
  );
  // Every copy recorded as sent before they are made owed again: the mail server has a message before the job's
  // record of it commits, and a record committed after the reset below took that copy out of the test's dispatch.
  await eventually(
    async () =>
      (
        await api.db.owner.execute<{ n: number }>(sql`select count(*)::int as n from notifications where dispatch_id = ${dispatchId} and emailed_at is null`)
      )[0]!.n,
    (n) => n === 0,
  );
  await api.db.owner.execute(sql`update notifications set emailed_at = null where dispatch_id = ${dispatchId}`);
  return dispatchId;
}

t.test('a copy still to be sent when its recipient is deactivated or deleted is not sent', async (t) => {
  // A retried job (SMTP away for a while) sends its copies long after the notification was stored.
  const before = received.length;
  const staying = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'staying@example.test' } });
  const leaving = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'leaving@example.test' } });
  const deleted = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'deleted@example.test' } });
  const dispatchId = await owedDispatch(t, [staying, leaving, deleted], 'After hours');
  // Meanwhile one recipient was deactivated, one deleted.
  await api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: leaving.id }, body: { active: false } }).then((r) => t.equal(r.status, 200));
  await api.call(t, 'deleteUser', { token: tenant.adminToken, params: { user: deleted.id } }).then((r) => t.equal(r.status, 204));
  const sent = await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId });
  t.equal(sent, 1, 'only the active recipient gets a copy');
  t.strictSame(
    received.slice(before + 3).map((message) => message.to),
    [['staying@example.test']],
  );
});

t.test('a process without SMTP_URL fails the job instead of marking copies it never sent', async (t) => {
  const recipient = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'pending@example.test' } });
  const dispatchId = await owedDispatch(t, [recipient], 'Rollout');
  // A worker of a rollout that has not set SMTP_URL yet.
  const withoutSmtp = { ...api.atrium.services, config: { ...api.atrium.services.config, smtpUrl: undefined } };
  await t.rejects(emailDispatch(withoutSmtp, { tenantId: tenant.tenantId, dispatchId }), /SMTP_URL is not set in this process/);
  const [pending] = await api.db.owner.execute<{ emailed: boolean }>(
    sql`select emailed_at is not null as emailed from notifications where dispatch_id = ${dispatchId}`,
  );
  t.equal(pending!.emailed, false, 'the copy is still owed');
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 1, 'a worker with SMTP_URL sends it');
});

for (const [kind, address, smallestId] of [
  ['at RCPT TO', 'refused', '00000000-0000-4000-8000-000000000000'],
  ['after DATA', 'bounced', '00000000-0000-4000-8000-000000000001'],
] as const) {
  t.test(`a recipient the mail server refuses (${kind}) keeps no other copy from being sent; the retry offers only that one`, async (t) => {
    const before = received.length;
    const refused = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `${address}@example.test` } });
    const first = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `first-${address}@example.test` } });
    const second = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `second-${address}@example.test` } });
    const dispatchId = await owedDispatch(t, [first, second], 'Refused');
    // The refused recipient's notification of the same dispatch, owed too (the dispatch above sent the others once),
    // with the smallest id: copies are sent in id order, so the refusal comes first, before the others.
    await owedCopyFirst(dispatchId, refused, smallestId);
    const sentBefore = received.length;
    await t.rejects(emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), /refused 1 of the dispatch's e-mail copies; 2 were sent/);
    t.strictSame(
      received
        .slice(sentBefore)
        .flatMap((message) => message.to)
        .sort(),
      [`first-${address}@example.test`, `second-${address}@example.test`],
      'both others got their copy, after the refused one',
    );
    const owed = await api.db.owner.execute<{ notifiable_id: number }>(
      sql`select notifiable_id::int from notifications where dispatch_id = ${dispatchId} and emailed_at is null`,
    );
    t.strictSame(
      owed.map((row) => row.notifiable_id),
      [refused.id],
      'only the refused copy is still owed',
    );
    await t.rejects(emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), /refused 1 .* 0 were sent/, 'the retry offers it alone');
    t.equal(received.length, sentBefore + 2, 'nobody got a second copy');
    t.ok(before <= sentBefore);
  });
}

t.test('a server that refuses the sender (not a recipient) fails the job at its first copy', async (t) => {
  const one = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'one@example.test' } });
  const two = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'two@example.test' } });
  const dispatchId = await owedDispatch(t, [one, two], 'Sender refused');
  const before = received.length;
  // The same server, asked with a sender it refuses at MAIL FROM.
  const refusingSender = { ...api.atrium.services, config: { ...api.atrium.services.config, smtpFrom: 'refused-sender@example.test' } };
  const failure = await emailDispatch(refusingSender, { tenantId: tenant.tenantId, dispatchId }).then(
    () => null,
    (error: unknown) => error as { command?: string },
  );
  t.equal(failure?.command, 'MAIL FROM', "the server's refusal of the sender fails the job");
  t.equal(received.length, before, 'nothing sent');
  const owed = await api.db.owner.execute<{ n: number }>(
    sql`select count(*)::int as n from notifications where dispatch_id = ${dispatchId} and emailed_at is null`,
  );
  t.equal(owed[0]!.n, 2, 'both still owed: one try, not one per recipient');
});

t.test("a dispatch's e-mail copies hold its contents once, whatever the number of recipients", async (t) => {
  const before = received.length;
  const recipients = await Promise.all(
    Array.from({ length: 12 }, (_, i) => api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `many-${i}@example.test` } })),
  );
  const dispatchId = await owedDispatch(t, recipients, 'To many');
  const copies = await api.db.tenant(tenant.tenantId, (tx) => pendingEmailCopies(tx, dispatchId));
  t.equal(copies.length, 12);
  t.ok(
    copies.every((copy) => copy.data === copies[0]!.data),
    'one copy of the contents for all the e-mails (5000 recipients of a long body would otherwise hold gigabytes)',
  );
  t.equal(copies[0]!.data.title, 'To many');
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 12);
  const sent = received.slice(before + 12);
  t.strictSame(sent.map((message) => message.to[0]).sort(), recipients.map((_, i) => `many-${i}@example.test`).sort());
  t.ok(
    sent.every((message) => /Subject: To many/.test(message.raw)),
    'every copy has the contents',
  );
});

t.test("a notification deleted while its dispatch's copies are read takes only its own copy with it", async (t) => {
  const before = received.length;
  const recipients = await Promise.all(
    Array.from({ length: 3 }, (_, i) => api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `reset-${i}@example.test` } })),
  );
  const dispatchId = await owedDispatch(t, recipients, 'Partly reset');
  const [first] = await api.db.owner.execute<{ id: string; notifiable_id: string }>(
    sql`select id, notifiable_id from notifications where dispatch_id = ${dispatchId} order by id limit 1`,
  );
  // The copies' first notification, whose contents the job reads, is deleted (its recipient's reset) once the job's
  // read of the copies is answered, and committed before its next statement.
  let deletes = 0;
  const deleteFirst = async <T>(rows: T) => {
    deletes++;
    await api.db.owner.execute(sql`delete from notifications where id = ${first!.id}::uuid`);
    return rows;
  };
  /** The query `builder` builds (`from` answers another builder), whose answer waits for the delete. */
  const answeredThenDeleted = (builder: object): object =>
    new Proxy(builder, {
      get(target, key) {
        const value = Reflect.get(target, key, target) as unknown;
        if (typeof value !== 'function') return value;
        if (key === 'then') {
          return (resolve: (rows: unknown) => unknown, reject: (error: unknown) => unknown) =>
            (value as (ok: (rows: unknown) => unknown) => Promise<unknown>).call(target, deleteFirst).then(resolve, reject);
        }
        return (...args: unknown[]) => {
          const built = (value as (...args: unknown[]) => unknown).apply(target, args);
          return typeof built === 'object' && built !== null ? answeredThenDeleted(built) : built;
        };
      },
    });
  let selects = 0;
  const copies = await api.db.tenant(tenant.tenantId, (tx) =>
    pendingEmailCopies(
      new Proxy(tx, {
        get(target, key) {
          const value = Reflect.get(target, key, target) as unknown;
          if (typeof value !== 'function') return value;
          if (key !== 'select') return value.bind(target);
          return (...args: unknown[]) => {
            const builder = (value as (...args: unknown[]) => object).apply(target, args);
            return selects++ === 0 ? answeredThenDeleted(builder) : builder;
          };
        },
      }) as typeof tx,
      dispatchId,
    ),
  );
  t.equal(deletes, 1, 'the delete came between the two reads');
  t.strictSame(
    copies.map((copy) => copy.email).sort(),
    recipients.flatMap((user, i) => (user.id === Number(first!.notifiable_id) ? [] : [`reset-${i}@example.test`])).sort(),
    "the others' copies are still owed",
  );
  t.ok(
    copies.every((copy) => copy.data.title === 'Partly reset'),
    'with the contents',
  );
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 2, 'and sent');
  t.equal(received.length, before + 3 + 2);
});

/** Inserts an owed copy of `dispatchId` for `user` with the notification id `id`: copies are sent in id order. */
async function owedCopyFirst(dispatchId: string, user: { id: number }, id: string): Promise<void> {
  await api.db.owner.execute(
    sql`insert into notifications (id, tenant_id, type, notifiable_type, notifiable_id, data, dispatch_id)
      select ${id}::uuid, tenant_id, type, notifiable_type, ${user.id}, data, dispatch_id
      from notifications where dispatch_id = ${dispatchId} limit 1`,
  );
}

/** When the e-mail job queued for `dispatchId` to run later (a follow-up for claims that lapse) starts; null when none is. */
async function followUpAfter(dispatchId: string): Promise<Date | null> {
  const [job] = await api.db.owner.execute<{ start_after: Date }>(
    sql`select start_after from pgboss.job where name = 'notifications.email' and singleton_key = ${dispatchId} and state = 'created' and start_after > now()`,
  );
  return job ? new Date(job.start_after) : null;
}

t.test('a run that lost its lease sends no copy that the retry sends', async (t) => {
  const slow = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'slow@example.test' } });
  const others = await Promise.all(
    [0, 1].map((i) => api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: `lease-${i}@example.test` } })),
  );
  const dispatchId = await owedDispatch(t, others, 'Lease lost');
  await owedCopyFirst(dispatchId, slow, '00000000-0000-4000-8000-000000000002');
  const before = received.length;
  // The first run is held up by the server at its first copy (as a worker frozen mid-send, or cut off from the
  // database, whose lease expires meanwhile), and the job's retry starts beside it.
  let release!: () => void;
  const reached = new Promise<void>((resolve) => {
    holdNext = { address: 'slow@example.test', until: new Promise<void>((done) => (release = done)), reached: resolve };
  });
  const first = emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId });
  await reached;
  t.equal(
    await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }),
    2,
    'the retry sends the copies nobody holds, and leaves the held one to its run',
  );
  t.ok(await followUpAfter(dispatchId), 'and queues a job for when its claim lapses');
  release();
  t.equal(await first, 1, 'the first run sends the copy it held, and none the retry sent');
  t.strictSame(
    received
      .slice(before)
      .flatMap((message) => message.to)
      .sort(),
    ['lease-0@example.test', 'lease-1@example.test', 'slow@example.test'],
    'each recipient got one copy',
  );
  const [state] = await api.db.owner.execute<{ owed: number; claimed: number }>(
    sql`select count(*) filter (where emailed_at is null)::int as owed, count(email_claim)::int as claimed from notifications where dispatch_id = ${dispatchId}`,
  );
  t.strictSame(state, { owed: 0, claimed: 0 }, 'all sent, no claim left');
});

t.test("a copy another run holds is left to it until that run's claim lapses", async (t) => {
  const recipient = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'held@example.test' } });
  const dispatchId = await owedDispatch(t, [recipient], 'Held');
  const before = received.length;
  // A run that died while sending it (its claim outlasts the longest a send may take).
  await api.db.owner.execute(
    sql`update notifications set email_claim = gen_random_uuid(), email_claimed_until = now() + interval '1 minute' where dispatch_id = ${dispatchId}`,
  );
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 0, 'the job succeeds: it spends no retry waiting');
  t.equal(received.length, before, 'not sent while held');
  const followUp = await followUpAfter(dispatchId);
  t.ok(followUp && followUp.getTime() >= Date.now() + 50_000, 'a job is queued for when the claim lapses');
  await api.db.owner.execute(sql`update notifications set email_claimed_until = now() - interval '1 second' where dispatch_id = ${dispatchId}`);
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 1, 'sent once the claim lapsed');
  t.strictSame(
    received.slice(before).map((message) => message.to),
    [['held@example.test']],
  );
});

t.test('a server that stops answering is given up after SMTP_TIMEOUT_MS; the copy stays owed, and claimed until its claim lapses', async (t) => {
  const stalled = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'stalled@example.test' } });
  const other = await api.createUser(tenant.tenantId, { values: { wantsEmailNotifications: true, email: 'after-stalled@example.test' } });
  const dispatchId = await owedDispatch(t, [other], 'Stalled');
  await owedCopyFirst(dispatchId, stalled, '00000000-0000-4000-8000-000000000003');
  const before = received.length;
  const impatient = { ...api.atrium.services, config: { ...api.atrium.services.config, smtpTimeoutMs: 300 } };
  const failure = await emailDispatch(impatient, { tenantId: tenant.tenantId, dispatchId }).then(
    () => null,
    (error: unknown) => error as { code?: string },
  );
  t.equal(failure?.code, 'EABORT', 'the send is abandoned, which fails the job (it is retried)');
  t.equal(received.length, before, 'nothing sent after it');
  const owed = await api.db.owner.execute<{ email: string; claimed: boolean }>(
    sql`select u.email, n.email_claim is not null as claimed from notifications n join users u on u.tenant_id = n.tenant_id and u.id = n.notifiable_id
      where n.dispatch_id = ${dispatchId} and n.emailed_at is null order by u.email`,
  );
  t.strictSame(
    [...owed],
    [
      { email: 'after-stalled@example.test', claimed: false },
      { email: 'stalled@example.test', claimed: true },
    ],
    'both still owed; the abandoned one stays claimed, since the server may have taken it',
  );
  // The job's retry sends the others, and leaves the abandoned copy until its claim lapses.
  t.equal(await emailDispatch(api.atrium.services, { tenantId: tenant.tenantId, dispatchId }), 1);
  t.strictSame(
    received.slice(before).map((message) => message.to),
    [['after-stalled@example.test']],
  );
  t.ok(await followUpAfter(dispatchId), 'a job is queued for when its claim lapses');
});
