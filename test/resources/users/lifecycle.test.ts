/**
 * What outlives an account: blackout removes the user's devices and credentials and
 * empties what they submitted; deleting a user and marking them for logout revoke the
 * one-time login tokens that would sign them in.
 */
import { eq, sql } from 'drizzle-orm';
import t, { type Test } from 'tap';
import { loadConfig } from '../../../src/config.ts';
import { accountLimitKey } from '../../../src/resources/auth/rules.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { rowCount } from '../../helpers/fixtures.ts';
import { browserSubscription } from '../../helpers/push-service.ts';
import { formSubmissions } from '../../../src/resources/forms/table.ts';
import { pushSubscriptions } from '../../../src/resources/push/table.ts';

// Plain-http push endpoints on loopback are accepted only because the allow-list admits them.
const api = await startTestApi(t, { webhookAllowedCidrs: ['127.0.0.1/32'], pushAllowedCidrs: ['127.0.0.1/32'] });
const tenant = await api.createTenant('lifecycle');
const admin = tenant.adminToken;
let counter = 0;

async function person(_t: Test) {
  const n = ++counter;
  const email = `person-${n}@example.com`;
  const user = await api.createUser(tenant.tenantId, { username: `person-${n}`, values: { email } });
  return { ...user, email };
}

/** A pending one-time login token that signs `email`'s owner in. */
async function loginTokenFor(t: Test, email: string) {
  const res = await api.call(t, 'createUserLoginTokenForEmail', { token: admin, body: { expires_in: 3600, email } });
  t.equal(res.status, 201, 'login token created');
  return res.body as { uuid: string; token: string };
}
const signIn = (t: Test, token: string) => api.call(t, 'loginWithToken', { body: { token } });
const pendingTokens = (userId: number) => rowCount(api.db, 'user_login_tokens', sql`login_user_id = ${userId} and deleted_at is null`);

t.test('blackout leaves no push subscription, no usable login token and no submitted values of the person', async (t) => {
  const user = await person(t);
  const other = await person(t);
  const keys = browserSubscription().keys;
  for (const [who, path] of [
    [user, 'a'],
    [user, 'b'],
    [other, 'c'],
  ] as const) {
    const res = await api.call(t, 'createPushSubscription', { token: who.token, body: { endpoint: `http://127.0.0.1:9/push/${path}`, keys } });
    t.equal(res.status, 201, 'subscription registered');
  }
  const token = await loginTokenFor(t, user.email);
  const othersToken = await loginTokenFor(t, other.email);
  const form = await api.call(t, 'createForm', {
    token: admin,
    body: {
      title: 'Health',
      form_type: 'survey',
      fields: [
        { name: 'Allergies', field_type: 'text' },
        { name: 'Height', field_type: 'number' },
      ],
    },
  });
  const [allergies, height] = form.body.fields.map((f: { id: number }) => String(f.id));
  for (const who of [user, other]) {
    const res = await api.call(t, 'createSubmission', { token: who.token, body: { form_id: form.body.id, values: { [allergies]: 'peanuts', [height]: 182 } } });
    t.equal(res.status, 201, 'submission stored');
  }

  for (const who of [user, other]) {
    t.equal((await api.call(t, 'login', { body: { tenant: 'lifecycle', username: who.username, password: 'wrong password!' } })).status, 401);
  }
  t.equal((await api.call(t, 'blackoutUser', { token: admin, params: { user: user.id } })).status, 204);

  const accountKey = (username: string) => accountLimitKey(loadConfig({}), 'lifecycle', username).key;
  const counted = await api.db.owner.execute<{ key: string }>(
    sql`select key from login_failures where key in (${accountKey(user.username)}, ${accountKey(other.username)}) order by key`,
  );
  t.strictSame(
    counted.map((row) => row.key),
    [accountKey(other.username)],
    'no sign-in count names the person any more',
  );
  const subscriptions = await api.db.owner.select().from(pushSubscriptions).where(eq(pushSubscriptions.tenantId, tenant.tenantId));
  t.strictSame(
    subscriptions.map((s) => s.userId),
    [other.id],
    "only the other user's subscription is left",
  );
  t.equal(await pendingTokens(user.id), 0, 'no pending login token');
  t.equal((await signIn(t, token.token)).status, 401, 'the token signs nobody in');
  const shown = await api.call(t, 'getUserLoginToken', { token: admin, params: { userLoginToken: token.uuid } });
  t.equal(shown.body.state, 'deleted', 'listed as revoked');
  const submissions = await api.db.owner.select().from(formSubmissions).where(eq(formSubmissions.tenantId, tenant.tenantId)).orderBy(formSubmissions.id);
  t.strictSame(
    submissions.map((s) => [s.userId, s.values]),
    [
      [user.id, {}],
      [other.id, { [allergies]: 'peanuts', [height]: 182 }],
    ],
    "the person's submitted values are emptied; the other user's are kept",
  );
  t.equal((await signIn(t, othersToken.token)).status, 200, "another user's token still works");
});

t.test('deleting a user revokes their pending login tokens, so a restore does not revive them', async (t) => {
  const user = await person(t);
  const token = await loginTokenFor(t, user.email);
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: user.id } })).status, 204);
  t.equal(await pendingTokens(user.id), 0);
  t.equal((await api.call(t, 'restoreUser', { token: admin, params: { user: user.id } })).status, 200);
  t.equal((await signIn(t, token.token)).status, 401, 'the token died with the deletion');
});

t.test('marking a user for logout revokes their pending login tokens', async (t) => {
  const user = await person(t);
  const token = await loginTokenFor(t, user.email);
  t.equal((await api.call(t, 'markUserForLogout', { token: admin, params: { user: user.id } })).status, 204);
  t.equal(await pendingTokens(user.id), 0);
  t.equal((await signIn(t, token.token)).status, 401, 'the token no longer signs them in');
  const fresh = await loginTokenFor(t, user.email);
  t.equal((await signIn(t, fresh.token)).status, 200, 'a token created after the marking works');
});

t.test('a refused logout marking revokes nothing', async (t) => {
  const user = await person(t);
  const token = await loginTokenFor(t, user.email);
  const bystander = await api.createUser(tenant.tenantId, { permissions: ['users.view'] });
  t.equal((await api.call(t, 'markUserForLogout', { token: bystander.token, params: { user: user.id } })).status, 403);
  t.equal(await pendingTokens(user.id), 1);
  t.equal((await signIn(t, token.token)).status, 200);
});

t.test('deactivating a user ends their sessions and pending login tokens: reactivation revives neither', async (t) => {
  const user = await person(t);
  const token = await loginTokenFor(t, user.email);
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { active: false } })).status, 200);
  t.equal(await pendingTokens(user.id), 0, 'the login token is revoked');
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { active: true } })).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401, 'the session from before stays ended');
  t.equal((await signIn(t, token.token)).status, 401, 'the login token stays dead');
  const again = await api.call(t, 'login', { body: { tenant: 'lifecycle', username: user.username, password: user.password } });
  t.equal(again.status, 200, 'signing in afresh works');
  t.equal((await api.call(t, 'getCurrentUser', { token: again.body.access_token })).status, 200);
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: user.id }, body: { active: true } })).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: again.body.access_token })).status, 200, 'an update that does not deactivate ends nothing');
});

t.test('deactivating or deleting a user deletes their push subscriptions: a reactivation or restore revives none', async (t) => {
  const keys = browserSubscription().keys;
  const bystander = await person(t);
  const register = async (who: { token: string }, path: string) => {
    const res = await api.call(t, 'createPushSubscription', { token: who.token, body: { endpoint: `http://127.0.0.1:9/push/${path}`, keys } });
    t.equal(res.status, 201, 'subscription registered');
  };
  const subscriptionsOf = (userId: number) => rowCount(api.db, 'push_subscriptions', sql`user_id = ${userId}`);
  await register(bystander, 'bystander');

  const leaver = await person(t);
  await register(leaver, 'leaver');
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: leaver.id }, body: { active: false } })).status, 200);
  t.equal(await subscriptionsOf(leaver.id), 0, 'the deactivation deleted the subscription');
  t.equal((await api.call(t, 'updateUser', { token: admin, params: { user: leaver.id }, body: { active: true } })).status, 200);
  t.equal(await subscriptionsOf(leaver.id), 0, 'the reactivation revives none');

  const deleted = await person(t);
  await register(deleted, 'deleted');
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: deleted.id } })).status, 204);
  t.equal(await subscriptionsOf(deleted.id), 0, 'the deletion deleted the subscription');
  t.equal((await api.call(t, 'restoreUser', { token: admin, params: { user: deleted.id } })).status, 200);
  t.equal(await subscriptionsOf(deleted.id), 0, 'the restore revives none');

  t.equal(await subscriptionsOf(bystander.id), 1, "another user's subscription stays");
});
