/**
 * A session whose user must change their password (`request_password_change`): it may
 * change the password, read its own user and picture, and sign out; every other operation
 * answers 403 `password_change_required`, whichever route reads the token.
 */
import t from 'tap';
import { operations, type OperationId } from '../../../generated/operations.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { GIF_1X1, PNG_1X1, multipart } from '../../helpers/multipart.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('restricted');
const restricted = await api.createUser(tenant.tenantId, { username: 'restricted', permissions: ['users.view'], values: { requestPasswordChange: true } });
const colleague = await api.createUser(tenant.tenantId, { username: 'colleague' });
const ownName = 'mine.png';
const theirName = 'theirs.gif';

type Tt = Parameters<typeof api.call>[0];

/** Gives the restricted user and their colleague a picture each, uploaded by the tenant's administrator. */
async function givePictures(t: Tt): Promise<void> {
  for (const [userId, content, fileName] of [
    [restricted.id, PNG_1X1, ownName],
    [colleague.id, GIF_1X1, theirName],
  ] as const) {
    const form = await multipart({ profile_picture: { content, fileName } });
    t.equal((await api.call(t, 'uploadProfilePicture', { token: tenant.adminToken, params: { user: userId }, ...form })).status, 200, `${fileName} uploaded`);
  }
}

t.test('the session reads its own picture by bearer token, in both forms of the route', async (t) => {
  await givePictures(t);
  const token = restricted.token;
  const plain = await api.call(t, 'getProfilePicture', { token, params: { user: restricted.id } });
  t.equal(plain.status, 200, 'getProfilePicture');
  t.ok(plain.raw.equals(PNG_1X1), 'its bytes');
  const named = await api.call(t, 'getProfilePictureNamed', { token, params: { user: restricted.id, fileName: ownName } });
  t.equal(named.status, 200, 'getProfilePictureNamed');
  t.ok(named.raw.equals(PNG_1X1), 'its bytes');
  // The path's id is read as its number, as every other route reads it.
  const spelled = await api.call(t, 'getProfilePicture', { token, params: { user: `0${restricted.id}` } });
  t.equal(spelled.status, 200, 'by an id spelled 0…');
});

t.test("the session is refused another user's picture, though its role holds users.view", async (t) => {
  await givePictures(t);
  const token = restricted.token;
  for (const res of [
    await api.call(t, 'getProfilePicture', { token, params: { user: colleague.id } }),
    await api.call(t, 'getProfilePictureNamed', { token, params: { user: colleague.id, fileName: theirName } }),
  ]) {
    t.equal(res.status, 403);
    t.equal(res.body.code, 'password_change_required');
  }
  const unrestricted = await api.createUser(tenant.tenantId, { username: 'unrestricted', permissions: ['users.view'] });
  t.equal(
    (await api.call(t, 'getProfilePicture', { token: unrestricted.token, params: { user: colleague.id } })).status,
    200,
    'as it would be without the flag',
  );
});

t.test('every other operation is refused, on oneself too', async (t) => {
  const token = restricted.token;
  // The operations the session may use, with every user: the others are refused whatever the path names.
  const allowed = new Set<string>(['logout', 'getCurrentUser']);
  // Allowed on one's own user only: the pictures above, the user and its password in test/resources/auth/credentials.test.ts,
  // and another user's below.
  const ownOnly = new Set<string>(['getUser', 'updateUser', 'getProfilePicture', 'getProfilePictureNamed']);
  let refused = 0;
  for (const [operationId, meta] of Object.entries(operations) as [OperationId, (typeof operations)[OperationId]][]) {
    if (!meta.secured || allowed.has(operationId) || ownOnly.has(operationId)) continue;
    // Every path parameter names something: the user is the session's own, so that no self rule lets it through.
    const params = Object.fromEntries([...meta.path.matchAll(/\{(\w+)\}/g)].map(([, name]) => [name!, name === 'user' ? restricted.id : 1]));
    const res = await api.call(t, operationId, { token, params });
    t.equal(res.status, 403, `${operationId} is refused`);
    t.equal(res.body?.code, 'password_change_required', `${operationId}: because the password must be changed`);
    refused++;
  }
  t.ok(refused > 90, `${refused} operations refused`);
  for (const operationId of ['getUser', 'updateUser'] as const) {
    const res = await api.call(t, operationId, { token, params: { user: colleague.id }, ...(operationId === 'updateUser' ? { body: { city: 'Bonn' } } : {}) });
    t.equal(res.status, 403, `${operationId} on another user is refused`);
    t.equal(res.body.code, 'password_change_required');
  }
  t.equal((await api.call(t, 'getUser', { token, params: { user: restricted.id } })).status, 200, 'its own user is still read');
});
