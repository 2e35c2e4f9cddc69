/**
 * A logout mark is the remedy for a compromised account (docs/security.md, "A compromised
 * account"): besides the sessions and login tokens it deletes the user's push
 * subscriptions, so that a subscription registered from a stolen session (the attacker's
 * endpoint and keys) receives none of the user's notifications after it. A refused mark
 * deletes nothing; the user's devices register again once they sign in again.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { rowCount, waitForDispatches } from '../../helpers/fixtures.ts';
import { browserSubscription, decryptPush, type BrowserSubscription } from '../../helpers/push-service.ts';
import { startReceiver } from '../../helpers/receiver.ts';

// Plain-http push endpoints on loopback are accepted only because the allow-list admits them.
const api = await startTestApi(t, { role: 'all', pushAllowedCidrs: ['127.0.0.1/32'] });
const pushService = await startReceiver(t);
const tenant = await api.createTenant('logout-mark');
const otherTenant = await api.createTenant('logout-mark-other');
const admin = tenant.adminToken;
let counter = 0;

const person = (options: { preventLogout?: boolean } = {}) =>
  api.createUser(tenant.tenantId, { username: `person-${++counter}`, values: { preventLogout: options.preventLogout ?? false } });

/** A device of `token`'s user (or of whoever holds that token) registered at a path of its own on the push service. */
async function subscribe(t: Test, token: string): Promise<{ path: string; browser: BrowserSubscription }> {
  const path = `/push/${++counter}-${randomBytes(6).toString('hex')}`;
  const browser = browserSubscription();
  const res = await api.call(t, 'createPushSubscription', { token, body: { endpoint: pushService.url(path), keys: browser.keys } });
  t.equal(res.status, 201, 'subscription registered');
  return { path, browser };
}

const subscriptionsOf = (userId: number) => rowCount(api.db, 'push_subscriptions', sql`user_id = ${userId}`);

/** Sends a notification to `userIds` and waits until every push it caused has been sent. */
async function notifyAndWait(t: Test, userIds: number[], title: string) {
  const res = await api.call(t, 'createNotification', { token: admin, body: { user_ids: userIds, title, body: 'Details inside', url: '/news/1' } });
  t.equal(res.status, 202, 'notification accepted');
  t.equal(await waitForDispatches(api.db, tenant.tenantId), 0, 'the dispatch is delivered');
  const open = await eventually(
    async () => {
      const [row] = await api.db.owner.execute<{ n: number }>(
        sql`select count(*)::int as n from pgboss.job where name = 'push.send' and state not in ('completed', 'failed', 'cancelled')`,
      );
      return row!.n;
    },
    (n) => n === 0,
  );
  t.equal(open, 0, 'every push job has run');
}

/** The titles of the pushes `device` received, decrypted with its keys. */
const titlesReceived = (device: { path: string; browser: BrowserSubscription }) =>
  pushService.received(device.path).map((request) => (JSON.parse(decryptPush(device.browser, request.raw)) as { title: string }).title);

t.test('a refused logout mark deletes no subscription: no permission, a protected self, another tenant, an unknown user', async (t) => {
  const victim = await person();
  const protectedUser = await person({ preventLogout: true });
  const device = await subscribe(t, victim.token);
  await subscribe(t, protectedUser.token);
  const bystander = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  const foreignAdmin = otherTenant.adminToken;

  t.equal((await api.call(t, 'markUserForLogout', { token: bystander.token, params: { user: victim.id } })).status, 403, 'without users.administer');
  t.equal((await api.call(t, 'markUserForLogout', { token: protectedUser.token, params: { user: protectedUser.id } })).status, 403, 'prevent_logout');
  t.equal((await api.call(t, 'markUserForLogout', { token: foreignAdmin, params: { user: victim.id } })).status, 404, "another tenant's user");
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: 2_000_000_000 } })).status, 404, 'no such user');

  t.equal(await subscriptionsOf(victim.id), 1, "the user's subscription stays");
  t.equal(await subscriptionsOf(protectedUser.id), 1, "the protected user's subscription stays");
  t.equal((await api.call(t, 'getCurrentUser', { token: victim.token })).status, 200, 'the session too');
  await notifyAndWait(t, [victim.id], 'Still subscribed');
  t.strictSame(titlesReceived(device), ['Still subscribed'], 'the device still receives pushes');
});

t.test("after a logout mark, no subscription registered before it receives the user's notifications", async (t) => {
  const victim = await person();
  const colleague = await person();
  // The attacker, holding the victim's session, registers an endpoint and keys of their own.
  const attackers = await subscribe(t, victim.token);
  const victims = await subscribe(t, victim.token);
  const colleagues = await subscribe(t, colleague.token);

  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: victim.id } })).status, 204);
  t.equal((await api.call(t, 'getCurrentUser', { token: victim.token })).status, 401, 'the stolen session has ended');
  t.equal(await subscriptionsOf(victim.id), 0, "the user's subscriptions are deleted");
  t.equal(await subscriptionsOf(colleague.id), 1, "another user's subscription stays");

  await notifyAndWait(t, [victim.id, colleague.id], 'Quarterly figures');
  t.strictSame(titlesReceived(attackers), [], "the attacker's endpoint receives nothing");
  t.strictSame(titlesReceived(victims), [], "nor does the user's own device, until it registers again");
  t.strictSame(titlesReceived(colleagues), ['Quarterly figures'], 'the other user still receives pushes');
});

t.test('marking oneself for logout deletes one’s own subscriptions too', async (t) => {
  const user = await person();
  const device = await subscribe(t, user.token);
  t.equal((await api.call(t, 'markUserForLogout', { token: user.token, params: { user: user.id } })).status, 204);
  t.equal(await subscriptionsOf(user.id), 0, 'deleted');
  await notifyAndWait(t, [user.id], 'After the self mark');
  t.strictSame(titlesReceived(device), [], 'nothing pushed');
});

t.test('signing in again after the mark and registering again receives pushes', async (t) => {
  const user = await person();
  const before = await subscribe(t, user.token);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: user.id } })).status, 204);
  const again = await api.call(t, 'login', { body: { tenant: tenant.slug, username: user.username, password: user.password } });
  t.equal(again.status, 200, 'signed in afresh');
  const after = await subscribe(t, again.body.access_token);
  t.equal(await subscriptionsOf(user.id), 1, 'only the new registration');
  await notifyAndWait(t, [user.id], 'Welcome back');
  t.strictSame(titlesReceived(after), ['Welcome back'], 'the device registered again receives the push');
  t.strictSame(titlesReceived(before), [], 'the one from before the mark does not');
});

t.test('the remedy sets a new password before the mark: a new password keeps subscriptions, the mark after it leaves none', async (t) => {
  const victim = await person();
  const signInAsVictim = (password: string) => api.call(t, 'login', { body: { tenant: tenant.slug, username: victim.username, password } });
  const newPassword = 'a new password nobody else knows';

  // Marked first, the account still opens with the old password: the attacker signs in again, registers again, and
  // the new password set afterwards ends that session but keeps the subscription (it belongs to a device).
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: victim.id } })).status, 204);
  const back = await signInAsVictim(victim.password);
  t.equal(back.status, 200, 'the old password still signs in after the mark');
  const attackers = await subscribe(t, back.body.access_token);
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: victim.id }, body: { password: newPassword } })).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: back.body.access_token })).status, 401, 'the new password ends the session');
  t.equal(await subscriptionsOf(victim.id), 1, 'and keeps the subscription registered in between');

  // The documented order: the new password shuts the attacker out, then the mark deletes what they registered.
  t.equal((await signInAsVictim(victim.password)).status, 401, 'the old password signs in no more');
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: victim.id } })).status, 204);
  t.equal(await subscriptionsOf(victim.id), 0, 'the mark after it deletes the subscription');
  await notifyAndWait(t, [victim.id], 'After the remedy');
  t.strictSame(titlesReceived(attackers), [], "the attacker's endpoint receives nothing");
});
