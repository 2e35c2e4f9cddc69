/**
 * `prepared` keeps one statement per owner and form, and no more than a bound of forms per
 * owner (the most recently used), so that forms chosen by clients (SCIM filters) cannot grow
 * the process without end.
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

t.test('past 100 forms of one owner, the least recently used one makes room for a new one', async (t) => {
  const owner = {};
  let built = 0;
  const build = () => ({ built: ++built });
  const kept = Array.from({ length: 100 }, (_, i) => prepared(tx, owner, `form ${i}`, build));
  t.equal(built, 100);
  t.equal(prepared(tx, owner, 'form 0', build), kept[0], 'form 0 used again: now the most recently used');
  const added = prepared(tx, owner, 'form 100', build);
  t.equal(prepared(tx, owner, 'form 100', build), added, 'the 101st form is kept');
  t.equal(built, 101);
  t.equal(prepared(tx, owner, 'form 0', build), kept[0], 'the recently used form stays');
  t.equal(built, 101);
  t.not(prepared(tx, owner, 'form 1', build), kept[1], 'the least recently used form made room: built again');
  t.equal(built, 102);
});
