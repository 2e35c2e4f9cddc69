/**
 * Places shared between tenants (src/platform/tenant-shares.ts,
 * docs/tenancy-and-security.md#sharing-between-tenants), as the request pool's connections
 * use them: a place freed goes to the waiting tenant that holds the fewest, and no tenant
 * takes the last free one while others are about.
 */
import t from 'tap';
import { TenantShares } from '../../src/platform/tenant-shares.ts';

/** Enters `tenant` and records when it got its place. */
function enterAs(shares: TenantShares, tenant: number, admitted: string[], label: string): Promise<void> {
  const entering = shares.enter(tenant);
  if (!entering) {
    admitted.push(label);
    return Promise.resolve();
  }
  return entering.then(() => {
    admitted.push(label);
  });
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

t.test('a tenant alone takes the whole pool; while another took a connection within the last second, not its last one', async (t) => {
  let now = 0;
  const shares = new TenantShares(4, () => now);
  t.equal(shares.perTenant, 3);
  const admitted: string[] = [];
  for (const label of ['a1', 'a2', 'a3', 'a4']) void enterAs(shares, 1, admitted, label);
  await settle();
  t.strictSame(admitted, ['a1', 'a2', 'a3', 'a4'], 'no other tenant is about: all four');
  void enterAs(shares, 2, admitted, 'b1');
  await settle();
  t.strictSame(admitted.slice(4), [], 'the pool is full');
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(4), ['b1'], 'the first place given back goes to the other tenant, which holds none');
  now = 500;
  void enterAs(shares, 1, admitted, 'a5');
  shares.leave(2);
  await settle();
  t.strictSame(admitted.slice(5), [], "b1 took its place half a second ago: A's fourth waits, a connection stays free");
  void enterAs(shares, 2, admitted, 'b2');
  await settle();
  t.strictSame(admitted.slice(5), ['b2'], 'and the other tenant takes it at once');
  now = 600;
  shares.leave(2);
  await settle();
  t.strictSame(admitted.slice(6), [], 'B took one a moment ago');
  now = 1_700;
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(6), ['a5'], 'once a place is given back, A, below its share, takes it');
  void enterAs(shares, 1, admitted, 'a6');
  await settle();
  t.strictSame(admitted.slice(7), ['a6'], 'B has taken none for more than a second: A takes the last connection too');
});

t.test('a place freed goes to the waiting tenant that holds the fewest; among equals, they take turns', async (t) => {
  // All within one instant: every tenant is about.
  const shares = new TenantShares(4, () => 0);
  const admitted: string[] = [];
  for (const label of ['a1', 'a2', 'a3']) void enterAs(shares, 1, admitted, label);
  void enterAs(shares, 2, admitted, 'b1');
  await settle();
  // The pool is full: A holds 3, B 1. A queues more first, then B and C.
  for (const label of ['a4', 'a5']) void enterAs(shares, 1, admitted, label);
  void enterAs(shares, 2, admitted, 'b2');
  void enterAs(shares, 3, admitted, 'c1');
  void enterAs(shares, 3, admitted, 'c2');
  await settle();
  t.strictSame(admitted, ['a1', 'a2', 'a3', 'b1']);
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(4), ['c1'], 'C holds none: it goes first, though A and B waited before it');
  // Now A holds 2, B and C 1 each.
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(5), ['a4'], 'all hold one: A, whose transactions have waited longest');
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(6), ['b2'], 'again all hold one: B, whose turn comes before A takes another');
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(7), ['a5'], 'A holds none now: its next, in the order they came');
  shares.leave(1);
  await settle();
  t.strictSame(admitted.slice(8), ['c2'], 'then C');
});

t.test('pools of one or two keep nothing back, though another tenant is about', async (t) => {
  for (const size of [1, 2]) {
    const shares = new TenantShares(size, () => 0);
    t.equal(shares.enter(9), undefined);
    shares.leave(9);
    const admitted: string[] = [];
    for (let i = 0; i < size; i++) void enterAs(shares, 1, admitted, `a${i}`);
    await settle();
    t.equal(admitted.length, size, `a pool of ${size} is all one tenant's`);
  }
  t.equal(new TenantShares(3).perTenant, 2, 'from three up, one is kept back');
});

t.test('a transaction kept waiting for the other tenants goes in once their second has passed, with no place given back', async (t) => {
  let now = 0;
  const shares = new TenantShares(3, () => now);
  t.equal(shares.enter(2), undefined);
  shares.leave(2);
  const admitted: string[] = [];
  for (const label of ['a1', 'a2', 'a3']) void enterAs(shares, 1, admitted, label);
  await settle();
  t.strictSame(admitted, ['a1', 'a2'], 'B took one a moment ago: the third connection is kept for it');
  // Nobody gives a place back; B does not come again. The look at the waiting is set for B's second's end (real time).
  now = 1_000;
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  t.strictSame(admitted, ['a1', 'a2', 'a3'], 'the third goes in once the second has passed');
});

t.test('transactions without a tenant share as tenant 0, and keep nothing back for themselves', async (t) => {
  const shares = new TenantShares(3, () => 0);
  t.equal(shares.enter(0), undefined);
  shares.leave(0);
  for (let i = 0; i < 3; i++) t.equal(shares.enter(7), undefined, 'tenant 0 took one a moment ago: tenant 7 still takes all three');
  for (let i = 0; i < 3; i++) shares.leave(7);
  t.equal(shares.enter(5), undefined);
  shares.leave(5);
  t.equal(shares.enter(0), undefined);
  t.equal(shares.enter(0), undefined);
  t.ok(shares.enter(0) instanceof Promise, 'the third waits: tenant 5 took one a moment ago');
  t.equal(shares.enter(5), undefined);
  shares.leave(5);
  t.equal(shares.enter(5), undefined, 'given back and taken again synchronously');
});

t.test('run gives its place back when its work fails', async (t) => {
  const shares = new TenantShares(1, () => 0);
  await t.rejects(
    shares.run(1, () => Promise.reject(new Error('failed'))),
    /failed/,
  );
  t.equal(await shares.run(2, () => Promise.resolve('next')), 'next', 'the place is free again');
});
