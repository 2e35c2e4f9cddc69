/**
 * The result controls without HTTP: what `readControls` refuses (one 422 naming every
 * problem) and what `present` shows to whom. Views without relations need no transaction.
 */
import { sql } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import t from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import type { Tx } from '../../../src/platform/database/database.ts';
import { ProblemError } from '../../../src/platform/http/problem.ts';
import {
  defineView,
  fieldPlanCount,
  groupBy,
  MAX_FIELD_PLANS,
  present,
  readControls,
  type ControlsQuery,
} from '../../../src/platform/result-controls/result-controls.ts';

interface Viewer {
  userId: number;
  permissions: ReadonlySet<Permission>;
}
interface Row {
  id: number;
  name: string;
  email: string;
  salary: number;
  ownerId: number;
}

const viewer = (userId: number, ...permissions: Permission[]): Viewer => ({ userId, permissions: new Set(permissions) });
const reader = viewer(1);
const administrator = viewer(2, 'users.view-personal', 'users.view-administrative', 'users.view');

/** Relation loads are recorded, so a test can see which ran and with which rows. */
const loads: string[] = [];

const view = defineView<Row, Viewer, 'name' | 'owner_id'>({
  key: (row) => row.id,
  // Personal fields: the owner, or users.view-personal; administrative ones: users.view-administrative.
  visible: (who, visibility, row) =>
    visibility === 'public' ||
    row?.ownerId === who.userId ||
    who.permissions.has(visibility === 'personal' ? 'users.view-personal' : 'users.view-administrative'),
  fields: {
    id: {},
    name: {},
    display: { value: (row, who) => `${row.name} (seen by ${who.userId})` },
    email: { visibility: 'personal' },
    salary: { visibility: 'administrative' },
    link: { onlyWhenSelected: true, value: (row) => `/rows/${row.id}` },
  },
  relations: {
    owner: {
      empty: null,
      async load(_tx, rows) {
        loads.push(`owner:${rows.map((row) => row.id).join(',')}`);
        return new Map(rows.filter((row) => row.ownerId !== 0).map((row) => [row.id, { id: row.ownerId }]));
      },
    },
    history: {
      visibility: 'administrative',
      empty: [],
      async load(_tx, rows) {
        loads.push(`history:${rows.map((row) => row.id).join(',')}`);
        return groupBy(
          rows.filter((row) => row.id !== 3),
          (row) => row.id,
          (row) => ({ at: row.id }),
        );
      },
    },
    audit: {
      permission: 'users.view',
      empty: [],
      async load(_tx, rows) {
        loads.push(`audit:${rows.length}`);
        return new Map(rows.map((row) => [row.id, ['checked']]));
      },
    },
  },
  filters: {
    name: (value: string) => sql`name = ${value}`,
    owner_id: (value: number, who) => (value === who.userId ? sql`owner_id = ${value}` : undefined),
  },
});

const rows: Row[] = [
  { id: 1, name: 'own', email: 'own@example.org', salary: 10, ownerId: 1 },
  { id: 2, name: 'other', email: 'other@example.org', salary: 20, ownerId: 7 },
  { id: 3, name: 'orphan', email: 'orphan@example.org', salary: 30, ownerId: 0 },
];

/** The problem `read` throws, as `{ status, detail, errors }`. */
function refusal(read: () => unknown) {
  try {
    read();
  } catch (error) {
    if (error instanceof ProblemError) return { status: error.status, detail: error.message, errors: error.errors };
    throw error;
  }
  throw new Error('the controls were accepted');
}
const refusalOf = (query: ControlsQuery, who: Viewer = reader, subject?: Row) => refusal(() => readControls(view, query, who, { subject }));

/** Stands in for a transaction where none may be used: any use fails the test. */
const noTransaction = new Proxy({}, { get: (_target, property) => t.fail(`the transaction was used (${String(property)})`) }) as Tx;

t.test('readControls: no controls means every visible field, no relations, no limit, offset, cursor or condition', async (t) => {
  t.strictSame(readControls(view, {}, reader), { selects: null, relations: [], limit: undefined, offset: 0, cursor: undefined, where: undefined });
});

t.test('readControls: offset and cursor are passed on; a negative or fractional offset is a 422', async (t) => {
  t.match(readControls(view, { limit: 5, offset: 10, before_id: 'c' }, reader), { limit: 5, offset: 10, cursor: 'c' });
  for (const offset of [-1, 1.5, Number.NaN, 2 ** 60]) {
    t.match(refusalOf({ offset }), { status: 422, errors: { offset: ['must be an integer of at least 0'] } }, String(offset));
  }
});

t.test('readControls: selects are trimmed, deduplicated, and must name visible fields', async (t) => {
  t.strictSame(readControls(view, { selects: ' id , name,id,,' }, reader).selects, ['id', 'name']);
  t.strictSame(
    readControls(view, { selects: 'salary,link' }, administrator).selects,
    ['salary', 'link'],
    'visible by permission; only-when-selected fields may be named',
  );
  t.strictSame(refusalOf({ selects: ' , ' }), {
    status: 422,
    detail: 'The result controls are invalid.',
    errors: { selects: ['must name at least one field; allowed: id, name, display, link'] },
  });
  t.strictSame(refusalOf({ selects: 'id,salary,nope' }).errors, { selects: ['unknown or not visible: salary, nope; allowed: id, name, display, link'] });
});

t.test('readControls: fields visible on the record itself count when a subject is given', async (t) => {
  t.strictSame(readControls(view, { selects: 'email,salary' }, reader, { subject: rows[0] }).selects, ['email', 'salary'], 'the own record shows all');
  t.strictSame(refusalOf({ selects: 'email' }, reader, rows[1]).errors, { selects: ['unknown or not visible: email; allowed: id, name, display, link'] });
});

t.test('readControls: relations must be known, visible and permitted', async (t) => {
  t.strictSame(readControls(view, { relations: 'owner| owner |' }, reader).relations, ['owner']);
  t.strictSame(readControls(view, { relations: 'owner|history|audit' }, administrator).relations, ['owner', 'history', 'audit']);
  t.strictSame(refusalOf({ relations: 'history|audit|nope' }).errors, { relations: ['unknown or not visible: history, audit, nope; allowed: owner'] });
});

t.test('readControls: default relations drop those lacking their permission, keep row-wise ones for present', async (t) => {
  t.strictSame(readControls(view, {}, reader, { defaultRelations: ['owner', 'history', 'audit'] }).relations, ['owner', 'history']);
  t.strictSame(readControls(view, {}, administrator, { defaultRelations: ['owner', 'audit'] }).relations, ['owner', 'audit']);
  t.strictSame(readControls(view, { relations: 'owner' }, administrator, { defaultRelations: ['audit'] }).relations, ['owner'], 'sent relations replace them');
});

t.test('readControls: filters become one condition; unknown ones (Object members too) are refused', async (t) => {
  const dialect = new PgDialect();
  const controls = readControls(view, { filter: { name: 'own', owner_id: 1 }, limit: 5 }, reader);
  t.equal(controls.limit, 5);
  const { sql: text, params } = dialect.sqlToQuery(controls.where!);
  t.strictSame({ text, params }, { text: '(name = $1 and owner_id = $2)', params: ['own', 1] });
  t.equal(readControls(view, { filter: { owner_id: 7 } }, reader).where, undefined, 'a filter may add no condition for this viewer');
  t.strictSame(refusalOf({ filter: { constructor: 'x', toString: 'y', nope: 1 } }).errors, {
    'filter.constructor': ['is not a known filter; allowed: name, owner_id'],
    'filter.toString': ['is not a known filter; allowed: name, owner_id'],
    'filter.nope': ['is not a known filter; allowed: name, owner_id'],
  });
  const bare = defineView<Row, Viewer>({ key: (row) => row.id, visible: () => true, fields: { id: {} } });
  t.strictSame(refusal(() => readControls(bare, { filter: { id: 1 } }, reader)).errors, { 'filter.id': ['is not a known filter; allowed: (none)'] });
  t.strictSame(refusal(() => readControls(bare, { relations: 'x' }, reader)).errors, { relations: ['unknown or not visible: x; allowed: (none)'] });
});

t.test('readControls: every problem in one 422', async (t) => {
  t.strictSame(Object.keys(refusalOf({ selects: 'salary', relations: 'audit', filter: { nope: 1 } }).errors ?? {}), ['selects', 'relations', 'filter.nope']);
});

t.test('present: each row shows the fields its viewer may see on it', async (t) => {
  const shown = await present(view, noTransaction, rows, { selects: null, relations: [] }, reader);
  t.strictSame(shown, [
    { id: 1, name: 'own', display: 'own (seen by 1)', email: 'own@example.org', salary: 10 },
    { id: 2, name: 'other', display: 'other (seen by 1)' },
    { id: 3, name: 'orphan', display: 'orphan (seen by 1)' },
  ]);
  const all = await present(view, noTransaction, rows.slice(1, 2), { selects: null, relations: [] }, administrator);
  t.strictSame(all, [{ id: 2, name: 'other', display: 'other (seen by 2)', email: 'other@example.org', salary: 20 }], 'only-when-selected fields stay out');
});

t.test('present: selects choose the fields, still only where visible', async (t) => {
  const shown = await present(view, noTransaction, rows.slice(0, 2), { selects: ['link', 'salary'], relations: [] }, reader);
  t.strictSame(shown, [{ salary: 10, link: '/rows/1' }, { link: '/rows/2' }]);
});

t.test('present keeps a bounded number of field plans, however many orders of selects clients send', async (t) => {
  const names = ['id', 'name', 'display', 'email', 'salary', 'link'];
  // Every order of the six fields: 720 distinct `selects`, each answered right.
  const orders = (left: string[]): string[][] =>
    left.length <= 1 ? [left] : left.flatMap((name, i) => orders(left.filter((_, j) => j !== i)).map((rest) => [name, ...rest]));
  const all = orders(names);
  t.equal(all.length, 720);
  const wrong: string[] = [];
  for (const selects of all) {
    const [shown] = await present(view, noTransaction, rows.slice(1, 2), { selects, relations: [] }, administrator);
    if (Object.keys(shown!).sort().join() !== [...names].sort().join()) wrong.push(selects.join(','));
  }
  t.strictSame(wrong, [], 'every order answered with its six fields');
  t.ok(fieldPlanCount(view) <= MAX_FIELD_PLANS, `at most ${MAX_FIELD_PLANS} plans kept (${fieldPlanCount(view)})`);
  t.ok(fieldPlanCount(view) > 0);
});

t.test('present: one load per relation for all rows; empty values; row-wise visibility; permission', async (t) => {
  loads.length = 0;
  const shown = await present(view, noTransaction, rows, { selects: ['id'], relations: ['owner', 'history', 'audit'] }, reader);
  t.strictSame(loads, ['owner:1,2,3', 'history:1,2,3'], 'one load each; the audit relation needs users.view, so it is not loaded');
  t.strictSame(shown, [
    { id: 1, owner: { id: 1 }, history: [{ at: 1 }] },
    { id: 2, owner: { id: 7 } },
    { id: 3, owner: null },
  ]);
  loads.length = 0;
  const administered = await present(view, noTransaction, rows, { selects: ['id'], relations: ['history', 'audit'] }, administrator);
  t.strictSame(administered, [
    { id: 1, history: [{ at: 1 }], audit: ['checked'] },
    { id: 2, history: [{ at: 2 }], audit: ['checked'] },
    { id: 3, history: [], audit: ['checked'] },
  ]);
  loads.length = 0;
  t.strictSame(await present(view, noTransaction, [], { selects: null, relations: ['owner'] }, reader), [], 'no rows: nothing loaded');
  t.strictSame(loads, []);
});

t.test('present asks about a row only for the kinds the viewer may not see in general', async (t) => {
  const asked: string[] = [];
  const counted = defineView<Row, Viewer>({
    ...view,
    filters: {},
    visible: (who, visibility, row) => {
      asked.push(`${visibility}${row ? `@${row.id}` : ''}`);
      return view.visible(who, visibility, row);
    },
  });
  const shown = await present(counted, noTransaction, rows, { selects: null, relations: [] }, reader);
  t.strictSame(
    shown.map((record) => Object.keys(record)),
    [
      ['id', 'name', 'display', 'email', 'salary'],
      ['id', 'name', 'display'],
      ['id', 'name', 'display'],
    ],
    'the own row shows every field; the others only public ones',
  );
  t.strictSame(asked, [
    'public',
    'personal',
    'administrative',
    'personal@1',
    'administrative@1',
    'personal@2',
    'administrative@2',
    'personal@3',
    'administrative@3',
  ]);
  asked.length = 0;
  await present(counted, noTransaction, rows, { selects: null, relations: [] }, administrator);
  t.strictSame(asked, ['public', 'personal', 'administrative'], 'an administrator sees every kind in general: no row is asked about');
});

t.test('present sends the relation loads together, not one after another', async (t) => {
  const events: string[] = [];
  const slowLoad = (name: string) => async () => {
    events.push(`${name} started`);
    await new Promise((resolve) => setImmediate(resolve));
    events.push(`${name} done`);
    return new Map<unknown, unknown>();
  };
  const together = defineView<Row, Viewer>({
    key: (row) => row.id,
    visible: () => true,
    fields: { id: {} },
    relations: { first: { empty: null, load: slowLoad('first') }, second: { empty: [], load: slowLoad('second') } },
  });
  const shown = await present(together, noTransaction, rows.slice(0, 1), { selects: null, relations: ['first', 'second'] }, reader);
  t.strictSame(shown, [{ id: 1, first: null, second: [] }]);
  t.strictSame(events, ['first started', 'second started', 'first done', 'second done']);
});

t.test('groupBy keeps item order within and across keys', async (t) => {
  const groups = groupBy(
    [
      { k: 'b', v: 1 },
      { k: 'a', v: 2 },
      { k: 'b', v: 3 },
    ],
    (item) => item.k,
    (item) => item.v,
  );
  t.strictSame(
    [...groups.entries()],
    [
      ['b', [1, 3]],
      ['a', [2]],
    ],
  );
});

t.test('relation loaders that fail, one at once and one later, fail present and leave no rejection unhandled', async (t) => {
  const unhandled: unknown[] = [];
  const record = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', record);
  t.teardown(() => process.off('unhandledRejection', record));
  const failing = defineView<Row, Viewer>({
    key: (row) => row.id,
    visible: () => true,
    fields: { id: {} },
    relations: {
      later: { empty: [], load: async () => Promise.reject(new Error('the later load failed')) },
      // A loader that is no async function throws while the loads are being started.
      atOnce: {
        empty: [],
        load: () => {
          throw new Error('the load failed at once');
        },
      },
    },
  });
  await t.rejects(present(failing, noTransaction, rows, { selects: ['id'], relations: ['later', 'atOnce'] }, reader), /failed/);
  // An unhandled rejection is reported once the microtasks have run.
  await new Promise((resolve) => setImmediate(resolve));
  t.strictSame(unhandled, [], 'every failing load was awaited');
});
