/**
 * `prepared` keeps one statement per owner and form, and no more than a bound of forms per
 * owner, so that forms chosen by clients (SCIM filters) cannot grow the process without end.
 */
import t from 'tap';
import type { Tx } from '../../../src/platform/database/database.ts';
import { prepared } from '../../../src/platform/database/prepared.ts';

/** A stand-in for the drizzle instance: `prepared` only keys its statements by it. */
const tx = {} as Tx;

t.test('a form is built once for its owner and kept; another owner builds its own', async (t) => {
  const owner = {};
  let built = 0;
  const build = () => ({ built: ++built });
  const first = prepared(tx, owner, 'form', build);
  t.equal(prepared(tx, owner, 'form', build), first);
  t.equal(built, 1);
  t.not(prepared(tx, {}, 'form', build), first, 'another owner');
  t.not(prepared(tx, owner, 'another form', build), first, 'another form');
  t.equal(built, 3);
});

t.test('past 100 forms of one owner, a new form is built on each call; the kept ones stay', async (t) => {
  const owner = {};
  let built = 0;
  const build = () => ({ built: ++built });
  const kept = Array.from({ length: 100 }, (_, i) => prepared(tx, owner, `form ${i}`, build));
  t.equal(built, 100);
  const once = prepared(tx, owner, 'form 100', build);
  t.not(prepared(tx, owner, 'form 100', build), once, 'the 101st form is not kept');
  t.equal(built, 102);
  t.equal(prepared(tx, owner, 'form 0', build), kept[0], 'the first forms are still kept');
  t.equal(built, 102);
});
