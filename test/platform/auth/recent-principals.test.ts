/** The look-ups a process remembers for a second (src/platform/auth/recent-principals.ts). */
import t from 'tap';
import { RecentPrincipals, type Principal } from '../../../src/platform/auth/recent-principals.ts';

const principal: Principal = { tenantId: 1, userId: 2, tokenId: 3, permissions: ['users.view'], passwordChangeRequired: false, userLabel: 'Ann Smith' };
const hash = Buffer.from('a token hash');

t.test('a look-up is remembered for less than a second, then forgotten', async (t) => {
  const recent = new RecentPrincipals();
  recent.set(hash, principal, 10_000);
  t.equal(recent.get(hash, 10_000), principal);
  t.equal(recent.get(hash, 10_999), principal, '999 ms later');
  t.equal(recent.get(hash, 11_000), undefined, 'a second later');
  t.equal(recent.get(hash, 10_500), undefined, 'and not again once forgotten');
});

t.test('clear forgets every look-up; another token’s is not answered', async (t) => {
  const recent = new RecentPrincipals();
  recent.set(hash, principal, 0);
  t.equal(recent.get(Buffer.from('another hash'), 0), undefined);
  recent.clear();
  t.equal(recent.get(hash, 0), undefined);
});
