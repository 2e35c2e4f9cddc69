/** The login-token rules that need no database (the entity-rights check is covered over HTTP). */
import t from 'tap';
import type { Auth } from '../../../src/platform/auth/auth.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { loginTokenState, requireEmailLookup, soleActiveUser, UNUSABLE_EMAIL, unusableTarget } from '../../../src/resources/login-tokens/rules.ts';

const target = (id: number, over: { active?: boolean; deletedAt?: Date | null } = {}) => ({ id, active: true, deletedAt: null, permissions: [], ...over });

t.test('soleActiveUser: exactly one active, not deleted user, else none', async (t) => {
  t.equal(soleActiveUser([]), null, 'no such address');
  t.equal(soleActiveUser([target(1), target(2)])?.id, undefined, 'shared by two');
  t.equal(soleActiveUser([target(1), target(2, { active: false }), target(3, { deletedAt: new Date() })])?.id, 1, 'the others do not count');
  t.equal(soleActiveUser([target(2, { active: false })]), null, 'inactive');
  t.equal(soleActiveUser([target(3, { deletedAt: new Date() })]), null, 'deleted');
});

t.test('unusableTarget: one 422 for every reason, naming no permission', async (t) => {
  const refusal = unusableTarget('email');
  t.equal(refusal.status, 422);
  t.strictSame(refusal.errors, { email: [UNUSABLE_EMAIL] });
  t.notMatch(UNUSABLE_EMAIL, /\.[a-z]/, 'no permission key');
  t.strictSame(unusableTarget('user_id').errors, { user_id: [UNUSABLE_EMAIL] });
  t.strictSame(unusableTarget('user_id').errorCodes, { user_id: ['not_eligible'] });
});

t.test('requireEmailLookup: resolving an address needs users.view-personal (403)', async (t) => {
  const auth = (...permissions: Permission[]) => ({ permissions: new Set(permissions) }) as unknown as Auth;
  t.doesNotThrow(() => requireEmailLookup(auth('users.view-personal')));
  t.throws(() => requireEmailLookup(auth('login-tokens.administer')), { status: 403, message: 'This requires the permission "users.view-personal".' });
});

t.test('loginTokenState: used, then deleted, then expired, else active', async (t) => {
  const now = new Date('2030-01-01T12:00:00Z');
  const later = new Date('2030-01-01T13:00:00Z');
  const earlier = new Date('2030-01-01T11:00:00Z');
  t.equal(loginTokenState({ usedAt: null, deletedAt: null, expiresAt: later }, now), 'active');
  t.equal(loginTokenState({ usedAt: null, deletedAt: null, expiresAt: now }, now), 'expired', 'expired at its expiry time');
  t.equal(loginTokenState({ usedAt: null, deletedAt: earlier, expiresAt: earlier }, now), 'deleted', 'deleted wins over expired');
  t.equal(loginTokenState({ usedAt: earlier, deletedAt: earlier, expiresAt: later }, now), 'used', 'a used token is also deleted');
});
