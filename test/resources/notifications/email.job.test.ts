import t from 'tap';
import { sql } from 'drizzle-orm';
import { SMTPServer } from 'smtp-server';
import { emailDispatch } from '../../../src/resources/notifications/email.job.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';

interface Received {
  from: string;
  to: string[];
  raw: string;
}

/** A real SMTP server on loopback that keeps every message it receives. */
const received: Received[] = [];
const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  onData(stream, session, callback) {
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => {
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
