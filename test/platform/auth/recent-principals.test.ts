/** The look-ups a process remembers for a second (src/platform/auth/recent-principals.ts). */
import t from 'tap';
import { RecentPrincipals, type Principal } from '../../../src/platform/auth/recent-principals.ts';

const principal: Principal = { tenantId: 1, userId: 2, tokenId: 3, permissions: ['users.view'], passwordChangeRequired: false, userLabel: 'Ann Smith' };
const hash = Buffer.from('a token hash');

t.test('a look-up is remembered for less than a second, then forgotten', async (t) => {
  const recent = new RecentPrincipals();
  recent.set(hash, principal, recent.start(10_000));
  t.equal(recent.get(hash, 10_000), principal);
  t.equal(recent.get(hash, 10_999), principal, '999 ms later');
  t.equal(recent.get(hash, 11_000), undefined, 'a second later');
  t.equal(recent.get(hash, 10_500), undefined, 'and not again once forgotten');
});

t.test('clear forgets every look-up; another token’s is not answered', async (t) => {
  const recent = new RecentPrincipals();
  recent.set(hash, principal, recent.start(0));
  t.equal(recent.get(Buffer.from('another hash'), 0), undefined);
  recent.clear();
  t.equal(recent.get(hash, 0), undefined);
});

t.test('a companion keeps another kind of principal, forgotten when either is cleared', async (t) => {
  const recent = new RecentPrincipals();
  const scim = recent.companion<{ tokenId: number }>();
  const other = recent.companion<{ tokenId: number }>();
  const scimPrincipal = { tokenId: 4 };
  const refill = () => {
    recent.set(hash, principal, recent.start(0));
    scim.set(hash, scimPrincipal, scim.start(0));
    other.set(hash, scimPrincipal, other.start(0));
  };

  refill();
  t.equal(recent.get(hash, 0), principal);
  t.equal(scim.get(hash, 0), scimPrincipal, 'each cache answers its own look-ups');
  recent.clear();
  t.equal(scim.get(hash, 0), undefined, 'clearing the first clears its companions');
  t.equal(other.get(hash, 0), undefined);

  refill();
  scim.clear();
  t.equal(recent.get(hash, 0), undefined, 'clearing a companion clears the first');
  t.equal(other.get(hash, 0), undefined, 'and the other companions');
  t.equal(scim.get(hash, 0), undefined);

  scim.set(hash, scimPrincipal, scim.start(10_000));
  t.equal(scim.get(hash, 10_999), scimPrincipal, '999 ms later');
  t.equal(scim.get(hash, 11_000), undefined, 'a second later the companion has forgotten it too');

  const unrelated = new RecentPrincipals();
  unrelated.set(hash, principal, unrelated.start(0));
  recent.clear();
  t.equal(unrelated.get(hash, 0), principal, 'another family keeps its look-ups');
});

t.test('a look-up under way when the family is cleared is not kept: the change it raced holds', async (t) => {
  const recent = new RecentPrincipals();
  const scim = recent.companion<{ tokenId: number }>();
  const started = recent.start(0);
  const scimStarted = scim.start(0);
  recent.clear(); // a write answered while both look-ups ran
  recent.set(hash, principal, started);
  scim.set(hash, { tokenId: 4 }, scimStarted);
  t.equal(recent.get(hash, 1), undefined, 'the answer read before the change is not kept');
  t.equal(scim.get(hash, 1), undefined, 'nor in a companion');
  recent.set(hash, principal, recent.start(5));
  t.equal(recent.get(hash, 6), principal, 'a look-up begun after the change is kept');
});

t.test('a look-up is kept for a second from when it began, not from when it was answered', async (t) => {
  const recent = new RecentPrincipals();
  const started = recent.start(10_000);
  recent.set(hash, principal, started); // answered later; the clock in `get` says when it is asked
  t.equal(recent.get(hash, 10_999), principal);
  t.equal(recent.get(hash, 11_000), undefined, 'a second after the look-up began');
});
