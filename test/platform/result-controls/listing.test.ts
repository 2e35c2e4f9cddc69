/**
 * Listings against a real database, through a small view of two tables made for this test
 * (tenant-owned, row-level security like the application's): what list and show endpoints
 * answer, in which order they check, and how many statements they send.
 */
import { and, asc, eq, getTableColumns, inArray, or, sql } from 'drizzle-orm';
import { boolean, integer, pgTable, text } from 'drizzle-orm/pg-core';
import t from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { Database, type Tx } from '../../../src/platform/database/database.ts';
import { tenants } from '../../../src/platform/database/tenancy.ts';
import { nextPageOf } from '../../../src/platform/http/next-page.ts';
import { notFound } from '../../../src/platform/http/problem.ts';
import { ALL_FIELDS, listRecords, presentAll, presentGrouped, selectRecords, showRecord, type Listing } from '../../../src/platform/result-controls/listing.ts';
import { defineView } from '../../../src/platform/result-controls/result-controls.ts';
import { createTestDatabase } from '../../helpers/database.ts';

const database = await createTestDatabase();
const db = new Database(database.url, { appUrl: database.appUrl });
t.teardown(async () => {
  await db.close();
  await database.drop();
});
await db.migrate();

const shelves = pgTable('listing_test_shelves', {
  tenantId: integer('tenant_id').notNull(),
  id: integer('id').primaryKey(),
  name: text('name').notNull(),
});
const books = pgTable('listing_test_books', {
  tenantId: integer('tenant_id').notNull(),
  id: integer('id').primaryKey(),
  shelfId: integer('shelf_id').notNull(),
  title: text('title').notNull(),
  note: text('note'),
  ownerId: integer('owner_id').notNull(),
  hidden: boolean('hidden').notNull().default(false),
  position: integer('position').notNull(),
});

// Keyed by tenant like the application's tables (on Citus a new table is distributed by it as it is created), one statement each.
for (const statement of [
  `create table listing_test_shelves (tenant_id bigint not null references tenants (id), id int not null, name text not null, primary key (tenant_id, id))`,
  `create table listing_test_books (
      tenant_id bigint not null references tenants (id), id int not null, shelf_id int not null,
      title text not null, note text, owner_id int not null, hidden boolean not null default false, position int not null,
      primary key (tenant_id, id), foreign key (tenant_id, shelf_id) references listing_test_shelves (tenant_id, id))`,
  `alter table listing_test_shelves enable row level security`,
  `alter table listing_test_books enable row level security`,
  `create policy own_tenant on listing_test_shelves using (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint)`,
  `create policy own_tenant on listing_test_books using (tenant_id = nullif(current_setting('atrium.tenant_id', true), '')::bigint)`,
  `grant select on listing_test_shelves, listing_test_books to atrium_app`,
]) {
  await db.owner.execute(sql.raw(statement));
}

const [home, away] = await db.owner
  .insert(tenants)
  .values([
    { slug: 'home', name: 'Home' },
    { slug: 'away', name: 'Away' },
  ])
  .returning({ id: tenants.id });
const tenantId = home!.id;

await db.owner.insert(shelves).values([
  { tenantId, id: 1, name: 'Left' },
  { tenantId, id: 2, name: 'Right' },
  { tenantId: away!.id, id: 3, name: 'Elsewhere' },
]);
// Positions out of id order, one tie (broken by id), one hidden book of user 1, one of user 2.
await db.owner.insert(books).values([
  { tenantId, id: 1, shelfId: 1, title: 'Dune', note: 'lent out', ownerId: 1, position: 3 },
  { tenantId, id: 2, shelfId: 2, title: 'Emma', note: 'signed', ownerId: 2, position: 1 },
  { tenantId, id: 3, shelfId: 1, title: 'Ulysses', ownerId: 2, position: 2 },
  { tenantId, id: 4, shelfId: 2, title: 'Beloved', ownerId: 1, position: 2, hidden: true },
  { tenantId, id: 5, shelfId: 2, title: 'Secret', ownerId: 2, position: 0, hidden: true },
  { tenantId: away!.id, id: 6, shelfId: 3, title: 'Foreign', ownerId: 1, position: 0 },
]);

interface Viewer {
  userId: number;
  permissions: ReadonlySet<Permission>;
}
const viewer = (userId: number, ...permissions: Permission[]): Viewer => ({ userId, permissions: new Set(permissions) });
const reader = viewer(1);
const librarian = viewer(9, 'users.view-personal', 'users.view');

type BookRow = typeof books.$inferSelect;
type ShelfRow = typeof shelves.$inferSelect;

const shelfView = defineView<ShelfRow, Viewer>({ key: (row) => row.id, visible: () => true, fields: { id: {}, name: {} } });

const bookView = defineView<BookRow, Viewer, 'title' | 'shelf_id'>({
  key: (row) => row.id,
  // The note is personal: its owner's, or seen with users.view-personal.
  visible: (who, visibility, row) => visibility === 'public' || row?.ownerId === who.userId || who.permissions.has('users.view-personal'),
  fields: {
    id: {},
    title: {},
    position: {},
    note: { visibility: 'personal' },
    code: { onlyWhenSelected: true, value: (row) => `B-${row.id}` },
  },
  relations: {
    shelf: {
      empty: null,
      async load(tx, rows, who) {
        const found = await tx
          .select()
          .from(shelves)
          .where(
            inArray(
              shelves.id,
              rows.map((row) => row.shelfId),
            ),
          );
        const shown = await presentAll(shelfView, null, found, who);
        const byId = new Map(found.map((shelf, i) => [shelf.id, shown[i]]));
        return new Map(rows.map((row) => [row.id, byId.get(row.shelfId)]));
      },
    },
    neighbours: {
      permission: 'users.view',
      empty: [],
      async load(tx, rows) {
        const found = await tx
          .select({ shelfId: books.shelfId, id: books.id })
          .from(books)
          .where(
            inArray(
              books.shelfId,
              rows.map((row) => row.shelfId),
            ),
          )
          .orderBy(asc(books.id));
        return new Map(rows.map((row) => [row.id, found.filter((f) => f.shelfId === row.shelfId && f.id !== row.id).map((f) => f.id)]));
      },
    },
  },
  filters: {
    title: (value: string) => eq(books.title, value),
    shelf_id: (value: number) => eq(books.shelfId, value),
  },
});

/** Hidden books are their owner's alone; the list is ordered by position, then id. */
/** The books a viewer may see: those not hidden, and its own. */
const bookScope = (who: Viewer) => or(eq(books.hidden, false), eq(books.ownerId, who.userId));
const bookListing: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
  view: bookView,
  query: (tx) => tx.select().from(books),
  tenant: books.tenantId,
  scope: bookScope,
  order: [asc(books.position), asc(books.id)],
  defaultRelations: ['shelf', 'neighbours'],
};

/** Rows → records of another shape, with one query per request; `Ulysses` is never shown. */
type LabelledBook = BookRow & { label: string };
const shapeCalls: number[][] = [];
const labelledView = defineView<LabelledBook, Viewer>({ key: (row) => row.id, visible: () => true, fields: { id: {}, label: {} } });
const labelledListing: Listing<BookRow, Viewer, never, LabelledBook> = {
  view: labelledView,
  query: (tx) => tx.select().from(books),
  tenant: books.tenantId,
  order: [asc(books.id)],
  async shape(tx, rows) {
    shapeCalls.push(rows.map((row) => row.id));
    const names = new Map((await tx.select().from(shelves)).map((shelf) => [shelf.id, shelf.name]));
    return rows.filter((row) => row.title !== 'Ulysses').map((row) => ({ ...row, label: `${row.title} (${names.get(row.shelfId)})` }));
  },
};

// A listing whose rows are not what its view presents must say how to shape them.
// @ts-expect-error -- `shape` is missing
const _unshaped: Listing<BookRow, Viewer, never, LabelledBook> = { view: labelledView, query: (tx) => tx.select().from(books), order: [asc(books.id)] };

/** Statements `run` sends on the application pool (the tenant setting included). */
async function statements<T>(run: () => Promise<T>): Promise<{ result: T; count: number }> {
  const before = db.queryCount;
  const result = await run();
  return { result, count: db.queryCount - before };
}

/** `run`'s rejection, with the statements sent until then. */
async function refusal(run: () => Promise<unknown>): Promise<{ status?: number; message: string; errors?: unknown; count: number }> {
  const before = db.queryCount;
  try {
    await run();
  } catch (error) {
    const { status, message, errors } = error as { status?: number; message: string; errors?: unknown };
    return { status, message, errors, count: db.queryCount - before };
  }
  throw new Error('no refusal');
}

const ids = (records: Record<string, unknown>[]) => records.map((record) => record.id);

t.test('listRecords: the tenant’s records within the scope, in list order, with the default relations', async (t) => {
  const { result, count } = await statements(() => listRecords(db, tenantId, bookListing, {}, reader));
  t.strictSame(ids(result), [2, 3, 4, 1], 'position then id; one’s own hidden book, not the other’s; not the other tenant’s');
  t.strictSame(result[0], { id: 2, title: 'Emma', position: 1, shelf: { id: 2, name: 'Right' } }, 'neighbours need users.view: not shown by default');
  t.strictSame(result[2], { id: 4, title: 'Beloved', position: 2, note: null, shelf: { id: 2, name: 'Right' } }, 'the note of one’s own book');
  t.equal(count, 3, 'tenant setting, rows, one relation');
  const other = await listRecords(db, tenantId, bookListing, {}, librarian);
  t.strictSame(ids(other), [2, 3, 1]);
  t.strictSame(other[0], { id: 2, title: 'Emma', position: 1, note: 'signed', shelf: { id: 2, name: 'Right' }, neighbours: [4, 5] });
});

t.test('listRecords: selects, relations, filters, limit and the endpoint’s own condition', async (t) => {
  t.strictSame(await listRecords(db, tenantId, bookListing, { selects: 'code,title', relations: 'shelf', limit: 2 }, reader), [
    { title: 'Emma', code: 'B-2', shelf: { id: 2, name: 'Right' } },
    { title: 'Ulysses', code: 'B-3', shelf: { id: 1, name: 'Left' } },
  ]);
  t.strictSame(ids(await listRecords(db, tenantId, bookListing, { selects: 'id', filter: { shelf_id: 2 } }, librarian)), [2]);
  t.strictSame(ids(await listRecords(db, tenantId, bookListing, { selects: 'id', filter: { shelf_id: 1 } }, reader, { where: eq(books.ownerId, 1) })), [1]);
  t.strictSame(await listRecords(db, tenantId, bookListing, { selects: 'id', filter: { title: 'Nothing' } }, reader), []);
});

t.test('listRecords: offset skips rows in list order; a page that more rows follow is marked with the next offset', async (t) => {
  const page = async (query: { limit?: number; offset?: number }) => {
    const { result, count } = await statements(() => listRecords(db, tenantId, bookListing, { selects: 'id', relations: '', ...query }, reader));
    return { ids: ids(result), next: nextPageOf(result), count };
  };
  t.strictSame(await page({ offset: 1 }), { ids: [3, 4, 1], next: undefined, count: 2 }, 'without limit: the rest, no next page');
  t.strictSame(await page({ limit: 2 }), { ids: [2, 3], next: { offset: 2 }, count: 2 }, 'one query reads the extra row');
  t.strictSame(await page({ limit: 2, offset: 2 }), { ids: [4, 1], next: undefined, count: 2 }, 'the last page, exactly full: not marked');
  t.strictSame(await page({ limit: 3, offset: 1 }), { ids: [3, 4, 1], next: undefined, count: 2 });
  t.strictSame(await page({ limit: 1, offset: 1 }), { ids: [3], next: { offset: 2 }, count: 2 });
  t.strictSame(await page({ limit: 5, offset: 9 }), { ids: [], next: undefined, count: 2 });
  t.match(await refusal(() => listRecords(db, tenantId, bookListing, { offset: -1 }, reader)), { status: 422, errors: { offset: [/at least 0/] }, count: 0 });
  t.match(await refusal(() => listRecords(db, tenantId, bookListing, { offset: 1.5 }, reader)), { status: 422, count: 0 });
});

/** Pages by cursor: the books after the one `before_id` names (within the scope), in list order. */
const cursoredListing: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
  ...bookListing,
  cursor: {
    async after(tx, who, value) {
      const [named] = await tx
        .select({ position: books.position, id: books.id })
        .from(books)
        .where(and(bookScope(who), eq(books.id, Number(value))));
      return named && sql`(${books.position}, ${books.id}) > (${named.position}, ${named.id})`;
    },
    of: (row) => String(row.id),
  },
};

t.test('listRecords with a cursor: the rows after the named one; the next page is marked by cursor, not by offset', async (t) => {
  const page = async (query: { limit?: number; offset?: number; before_id?: string }) => {
    const { result, count } = await statements(() => listRecords(db, tenantId, cursoredListing, { selects: 'id', relations: '', ...query }, reader));
    return { ids: ids(result), next: nextPageOf(result), count };
  };
  t.strictSame(await page({ limit: 2 }), { ids: [2, 3], next: { before_id: '3', offset: undefined }, count: 2 });
  t.strictSame(await page({ limit: 1, before_id: '3' }), { ids: [4], next: { before_id: '4', offset: undefined }, count: 3 }, 'one query more: the cursor');
  t.strictSame(await page({ limit: 1, before_id: '4' }), { ids: [1], next: undefined, count: 3 });
  t.strictSame(await page({ before_id: '2', offset: 1 }), { ids: [4, 1], next: undefined, count: 3 }, 'offset counts from the cursor');
  t.strictSame(await page({ limit: 1, offset: 1 }), { ids: [3], next: { before_id: '3', offset: undefined }, count: 2 });
  const missing: [string, string][] = [
    ['5', 'another user’s hidden book'],
    ['6', 'another tenant’s book'],
    ['99', 'no book'],
  ];
  for (const [before_id, why] of missing) {
    t.match(
      await refusal(() => listRecords(db, tenantId, cursoredListing, { before_id }, reader)),
      { status: 422, errors: { before_id: ['does not exist'] }, count: 2 },
      why,
    );
  }
  t.match(await refusal(() => listRecords(db, tenantId, bookListing, { before_id: '2' }, reader)), {
    status: 422,
    errors: { before_id: ['is not taken by this list'] },
    count: 0,
  });
});

t.test('listRecords: invalid controls are one 422 before any statement, before `before`', async (t) => {
  let called = false;
  const refused = await refusal(() =>
    listRecords(db, tenantId, bookListing, { selects: 'nope', relations: 'neighbours', filter: { owner: 1 } }, reader, {
      before: async () => {
        called = true;
      },
    }),
  );
  t.match(refused, { status: 422, message: 'The result controls are invalid.', count: 0 });
  t.strictSame(Object.keys(refused.errors as object), ['selects', 'relations', 'filter.owner']);
  t.notOk(called);
});

t.test('listRecords: `before` runs first in the transaction; its 404 stops the list', async (t) => {
  const parentMissing = async (tx: Tx) => {
    const [shelf] = await tx.select().from(shelves).where(eq(shelves.id, 3));
    if (!shelf) throw notFound('The shelf');
  };
  t.match(await refusal(() => listRecords(db, tenantId, bookListing, {}, reader, { before: parentMissing })), {
    status: 404,
    message: 'The shelf does not exist.',
    count: 2,
  });
  const { result, count } = await statements(() =>
    listRecords(db, tenantId, bookListing, { relations: '' }, reader, { before: async (tx) => tx.select().from(shelves), where: eq(books.shelfId, 1) }),
  );
  t.strictSame(ids(result), [3, 1]);
  t.equal(count, 3, 'tenant setting, before, rows; relations sent empty replace the defaults');
});

t.test('listRecords: the statement count does not grow with the rows', async (t) => {
  const relations = { relations: 'shelf|neighbours' };
  const few = await statements(() => listRecords(db, tenantId, bookListing, { ...relations, limit: 1 }, librarian));
  const all = await statements(() => listRecords(db, tenantId, bookListing, relations, librarian));
  t.equal(few.result.length, 1);
  t.equal(all.result.length, 3);
  t.equal(all.count, few.count);
  t.equal(all.count, 4, 'tenant setting, rows, one per relation');
  const none = await statements(() => listRecords(db, tenantId, bookListing, { ...relations, filter: { title: 'Nothing' } }, librarian));
  t.equal(none.count, 2, 'no rows: no relation is loaded');
});

t.test('listRecords: each request builds the listing’s select with its own conditions, scope and limit', async (t) => {
  let built = 0;
  const counted: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
    ...bookListing,
    query: (tx) => {
      built++;
      return tx.select().from(books);
    },
  };
  t.strictSame(ids(await listRecords(db, tenantId, counted, { selects: 'id', filter: { shelf_id: 2 } }, librarian)), [2]);
  t.strictSame(await listRecords(db, tenantId, counted, { selects: 'id,title', relations: '', limit: 2 }, reader), [
    { id: 2, title: 'Emma' },
    { id: 3, title: 'Ulysses' },
  ]);
  t.strictSame(ids(await listRecords(db, tenantId, counted, { selects: 'id' }, reader)), [2, 3, 4, 1], 'the scope’s value is bound anew');
  t.equal(built, 3, 'built for each request');

  // A select carrying a bound value of its own answers the same.
  let boundBuilt = 0;
  const bound: Listing<BookRow & { label: string }, Viewer, 'title' | 'shelf_id'> = {
    view: bookView,
    scope: bookListing.scope,
    order: bookListing.order,
    tenant: books.tenantId,
    query: (tx) => {
      boundBuilt++;
      return tx.select({ ...getTableColumns(books), label: sql<string>`${'B-'} || ${books.id}` }).from(books);
    },
  };
  t.strictSame(ids(await listRecords(db, tenantId, bound, { selects: 'id', filter: { shelf_id: 2 } }, librarian)), [2]);
  t.strictSame(ids(await listRecords(db, tenantId, bound, { selects: 'id' }, reader)), [2, 3, 4, 1]);
  t.ok(boundBuilt >= 2, 'built on every request');
});

t.test('a listing whose scope is a Scope: reads without conditions of their own share one select, each binding its own values', async (t) => {
  let built = 0;
  const prepared: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
    ...bookListing,
    scope: { where: or(eq(books.hidden, false), eq(books.ownerId, sql.placeholder('userId')))!, values: (who) => ({ userId: who.userId }) },
    key: books.id,
    query: (tx) => {
      built++;
      return tx.select().from(books);
    },
  };
  const other = viewer(2);
  t.strictSame(ids(await listRecords(db, tenantId, prepared, { selects: 'id' }, reader)), [2, 3, 4, 1]);
  t.strictSame(ids(await listRecords(db, tenantId, prepared, { selects: 'id' }, other)), [5, 2, 3, 1], 'the scope’s value is bound anew');
  t.equal(built, 1, 'one select for both viewers');
  const pages = [];
  for (const [limit, offset] of [
    [2, 0],
    [2, 2],
    [1, 1],
  ] as const) {
    const { result, count } = await statements(() => listRecords(db, tenantId, prepared, { selects: 'id', relations: '', limit, offset }, other));
    pages.push({ ids: ids(result), next: nextPageOf(result), count });
  }
  t.strictSame(pages, [
    { ids: [5, 2], next: { offset: 2 }, count: 2 },
    { ids: [3, 1], next: undefined, count: 2 },
    { ids: [2], next: { offset: 2 }, count: 2 },
  ]);
  t.equal(built, 3, 'one more select for a limit, one for a limit with an offset');

  const show = (who: Viewer, id: number) => showRecord(db, tenantId, prepared, { selects: 'id,title', relations: '' }, who, { key: id }, 'The book');
  t.strictSame(await show(reader, 4), { id: 4, title: 'Beloved' }, 'its own hidden book');
  t.match(await refusal(() => show(other, 4)), { status: 404 }, 'another’s hidden book: out of scope');
  t.strictSame(await show(other, 5), { id: 5, title: 'Secret' });
  t.match(await refusal(() => show(reader, 6)), { status: 404 }, 'another tenant’s');
  t.equal(built, 4, 'one select for every show by key');

  // A condition of the read's own (a filter) builds the select for that read.
  t.strictSame(ids(await listRecords(db, tenantId, prepared, { selects: 'id', filter: { shelf_id: 2 } }, other)), [5, 2]);
  t.strictSame(ids(await listRecords(db, tenantId, prepared, { selects: 'id', filter: { shelf_id: 1 } }, reader)), [3, 1]);
  t.equal(built, 6);

  // A scope without placeholders: one select for every viewer.
  let fixedBuilt = 0;
  const visibleOnly: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
    ...bookListing,
    scope: { where: eq(books.hidden, false) },
    query: (tx) => {
      fixedBuilt++;
      return tx.select().from(books);
    },
  };
  t.strictSame(ids(await listRecords(db, tenantId, visibleOnly, { selects: 'id' }, reader)), [2, 3, 1]);
  t.strictSame(ids(await listRecords(db, tenantId, visibleOnly, { selects: 'id' }, other)), [2, 3, 1]);
  t.equal(fixedBuilt, 1);
});

/**
 * The same books whose `shelf` may ride in the listing's statement: a JSON subquery that
 * answers what the loader answers. `inlineListing` takes the extra columns; `ignoring`
 * does not, so its rows carry nothing and the relation is loaded.
 */
const inlineView = defineView<BookRow, Viewer, 'title' | 'shelf_id'>({
  ...bookView,
  relations: {
    ...bookView.relations,
    shelf: {
      ...bookView.relations!.shelf!,
      inline: sql`(select json_build_object('id', s.id, 'name', s.name) from ${shelves} s where s.tenant_id = ${books.tenantId} and s.id = ${books.shelfId})`,
    },
  },
});
const inlineListing: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = {
  ...bookListing,
  view: inlineView,
  query: (tx, columns) => tx.select({ ...getTableColumns(books), ...columns }).from(books),
  tenant: books.tenantId,
};

t.test('an inline relation rides in the listing’s statement: the same answer, one statement fewer', async (t) => {
  const controls = { relations: 'shelf|neighbours' };
  const loaded = await statements(() => listRecords(db, tenantId, bookListing, controls, librarian));
  const carried = await statements(() => listRecords(db, tenantId, inlineListing, controls, librarian));
  t.strictSame(carried.result, loaded.result, 'the same records, relations included');
  t.match(carried.result[0], { shelf: { id: 2, name: 'Right' }, neighbours: [4, 5] });
  t.equal(carried.count, loaded.count - 1, `${carried.count} statements: the shelf is no query of its own`);
  t.notOk(
    Object.keys(carried.result[0]!).some((key) => key.startsWith('relation:')),
    'the carrying column is not answered',
  );

  // Not asked for: not selected, not answered.
  const without = await statements(() => listRecords(db, tenantId, inlineListing, { selects: 'id', relations: '' }, librarian));
  t.strictSame(without.result, [{ id: 2 }, { id: 3 }, { id: 1 }]);

  // Shown and hidden by the same rules as a loaded relation: a relation the viewer may not use is not answered.
  const byReader = await listRecords(db, tenantId, inlineListing, {}, reader);
  t.strictSame(byReader, await listRecords(db, tenantId, bookListing, {}, reader), 'the defaults, as the loader answers them');

  // Show, and records presented in a transaction.
  const shown = await statements(() => showRecord(db, tenantId, inlineListing, { relations: 'shelf' }, librarian, eq(books.id, 1), 'The book'));
  t.strictSame(shown.result, { id: 1, title: 'Dune', position: 3, note: 'lent out', shelf: { id: 1, name: 'Left' } });
  t.equal(shown.count, 2, 'tenant setting and the row, which carries its shelf');
  const afterFind = await showRecord(db, tenantId, inlineListing, {}, reader, eq(books.id, 4), 'The book', { controlsAfterFind: true });
  t.strictSame(afterFind, { id: 4, title: 'Beloved', position: 2, note: null, shelf: { id: 2, name: 'Right' } });
  const written = await statements(() => db.tenant(tenantId, (tx) => selectRecords(tx, inlineListing, librarian, { where: eq(books.id, 2) })));
  t.strictSame(written.result, [{ id: 2, title: 'Emma', position: 1, note: 'signed', shelf: { id: 2, name: 'Right' }, neighbours: [4, 5] }]);
  t.equal(written.count, 3, 'tenant setting, the rows with their shelves, the neighbours');

  // A query that does not take the columns: the relation is loaded, the answer is the same.
  const ignoring: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = { ...inlineListing, query: (tx) => tx.select().from(books) };
  const fallback = await statements(() => listRecords(db, tenantId, ignoring, controls, librarian));
  t.strictSame(fallback.result, loaded.result);
  t.equal(fallback.count, loaded.count, 'loaded, as without inline');
});

t.test('showRecord by condition: within the scope, or 404; controls judged first', async (t) => {
  const { result, count } = await statements(() => showRecord(db, tenantId, bookListing, { relations: 'shelf' }, reader, eq(books.id, 4), 'The book'));
  t.strictSame(result, { id: 4, title: 'Beloved', position: 2, note: null, shelf: { id: 2, name: 'Right' } });
  t.equal(count, 3, 'tenant setting, row, relation');
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, {}, reader, eq(books.id, 5), 'The book')), {
    status: 404,
    message: 'The book does not exist.',
  });
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, {}, reader, eq(books.id, 6), 'The book')), { status: 404 }, 'another tenant’s');
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, { selects: 'nope' }, reader, eq(books.id, 99), 'The book')), {
    status: 422,
    count: 0,
  });
  t.match(
    await refusal(() => showRecord(db, tenantId, bookListing, { selects: 'note' }, reader, eq(books.id, 4), 'The book')),
    {
      status: 422,
      errors: { selects: ['unknown or not visible: note; allowed: id, title, position, code'] },
    },
    'visibility in general, not on the record, without controlsAfterFind',
  );
});

t.test('showRecord by key: the record `eq` names, in two statements (the tenant setting and the row), within the scope where there is one', async (t) => {
  const unscoped: Listing<BookRow, Viewer, 'title' | 'shelf_id'> = { ...inlineListing, scope: undefined };
  for (const id of [1, 4, 5]) {
    const byKey = await statements(() => showRecord(db, tenantId, unscoped, { relations: 'shelf' }, librarian, eq(books.id, id), 'The book'));
    t.match(byKey.result, { id, shelf: Object }, `book ${id} with its shelf`);
    t.equal(byKey.count, 2, 'tenant setting and the row');
  }
  t.match(await refusal(() => showRecord(db, tenantId, unscoped, {}, librarian, eq(books.id, 6), 'The book')), { status: 404 }, 'another tenant’s');
  t.match(await refusal(() => showRecord(db, tenantId, unscoped, {}, librarian, eq(books.id, 99), 'The book')), { status: 404 }, 'none');
  // A listing with a scope: the key is one more condition within it.
  const shelfOnly = { relations: 'shelf' };
  const scoped = await statements(() => refusal(() => showRecord(db, tenantId, inlineListing, shelfOnly, reader, eq(books.id, 5), 'The book')));
  t.match(scoped, { result: { status: 404 }, count: 2 }, 'out of scope');
  t.match(await showRecord(db, tenantId, inlineListing, shelfOnly, reader, eq(books.id, 4), 'The book'), { id: 4 }, 'within the scope');
});

t.test('showRecord by lookup: the resource’s own query and 404s', async (t) => {
  const find = (id: number) => async (tx: Tx) => {
    const [row] = await tx.select().from(books).where(eq(books.id, id));
    return row;
  };
  t.strictSame(
    await showRecord(db, tenantId, bookListing, { selects: 'id,title' }, reader, find(5), 'The book'),
    {
      id: 5,
      title: 'Secret',
      shelf: { id: 2, name: 'Right' },
    },
    'no scope added; selects leave the default relations',
  );
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, {}, reader, find(99), 'The book')), { status: 404, message: 'The book does not exist.' });
  const own404 = async () => {
    throw notFound('The shelf');
  };
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, {}, reader, own404, 'The book')), { message: 'The shelf does not exist.' });
  t.strictSame(
    await showRecord(db, tenantId, bookListing, {}, librarian, find(3), 'The book', { defaultRelations: [] }),
    { id: 3, title: 'Ulysses', position: 2, note: null },
    'a show may default to other relations than the list',
  );
});

t.test('showRecord with controlsAfterFind: 404 before the controls, which are judged on the record', async (t) => {
  const after = { controlsAfterFind: true };
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, { selects: 'nope' }, reader, eq(books.id, 99), 'The book', after)), {
    status: 404,
    message: 'The book does not exist.',
    count: 2,
  });
  t.strictSame(await showRecord(db, tenantId, bookListing, { selects: 'note' }, reader, eq(books.id, 1), 'The book', after), {
    note: 'lent out',
    shelf: { id: 1, name: 'Left' },
  });
  t.match(await refusal(() => showRecord(db, tenantId, bookListing, { selects: 'note' }, reader, eq(books.id, 2), 'The book', after)), {
    status: 422,
    errors: { selects: ['unknown or not visible: note; allowed: id, title, position, code'] },
  });
});

t.test('shape: once per request for all rows; dropped rows are missing', async (t) => {
  shapeCalls.length = 0;
  const { result, count } = await statements(() => listRecords(db, tenantId, labelledListing, {}, reader));
  t.strictSame(result, [
    { id: 1, label: 'Dune (Left)' },
    { id: 2, label: 'Emma (Right)' },
    { id: 4, label: 'Beloved (Right)' },
    { id: 5, label: 'Secret (Right)' },
  ]);
  t.strictSame(shapeCalls, [[1, 2, 3, 4, 5]]);
  t.equal(count, 3, 'tenant setting, rows, shape');
  t.strictSame(await showRecord(db, tenantId, labelledListing, {}, reader, eq(books.id, 2), 'The book'), { id: 2, label: 'Emma (Right)' });
  t.match(await refusal(() => showRecord(db, tenantId, labelledListing, {}, reader, eq(books.id, 3), 'The book')), {
    status: 404,
    message: 'The book does not exist.',
  });
});

t.test('selectRecords in a transaction: answered like a request without controls, or as told', async (t) => {
  const [written] = await db.tenant(tenantId, (tx) => selectRecords(tx, bookListing, librarian, { where: eq(books.id, 2) }));
  t.strictSame(written, { id: 2, title: 'Emma', position: 1, note: 'signed', shelf: { id: 2, name: 'Right' }, neighbours: [4, 5] });
  const plain = await db.tenant(tenantId, (tx) => selectRecords(tx, bookListing, reader, { where: eq(books.shelfId, 2), presentation: ALL_FIELDS }));
  t.strictSame(
    plain,
    [
      { id: 2, title: 'Emma', position: 1 },
      { id: 4, title: 'Beloved', position: 2, note: null },
    ],
    'within the scope: not the other’s hidden book',
  );
  const cut = await db.tenant(tenantId, (tx) => selectRecords(tx, bookListing, librarian, { presentation: { selects: ['id'], relations: [], limit: 2 } }));
  t.strictSame(cut, [{ id: 2 }, { id: 3 }]);
  t.strictSame(await db.tenant(tenantId, (tx) => selectRecords(tx, bookListing, reader, { where: and(eq(books.id, 2), eq(books.id, 3)) })), []);
});

t.test('presentAll: every visible field; no transaction without relations', async (t) => {
  const rows = await db.owner
    .select()
    .from(books)
    .where(inArray(books.id, [1, 2]))
    .orderBy(asc(books.id));
  const { result, count } = await statements(() => presentAll(bookView, null, rows, reader));
  t.strictSame(result, [
    { id: 1, title: 'Dune', position: 3, note: 'lent out' },
    { id: 2, title: 'Emma', position: 1 },
  ]);
  t.equal(count, 0);
  const withShelf = await statements(() => db.tenant(tenantId, (tx) => presentAll(bookView, tx, rows, librarian, ['shelf', 'neighbours'])));
  t.strictSame(withShelf.result[1], { id: 2, title: 'Emma', position: 1, note: 'signed', shelf: { id: 2, name: 'Right' }, neighbours: [4, 5] });
  t.equal(withShelf.count, 3, 'tenant setting, one per relation');
  const denied = await db.tenant(tenantId, (tx) => presentAll(bookView, tx, rows, reader, ['neighbours']));
  t.strictSame(denied[0], { id: 1, title: 'Dune', position: 3, note: 'lent out' }, 'a relation the viewer may not use is left out');
  t.ok(Object.isFrozen(ALL_FIELDS) && Object.isFrozen(ALL_FIELDS.relations), 'ALL_FIELDS cannot be changed by a caller');
});

t.test('presentGrouped: records of another view grouped by key, in item order, without a query', async (t) => {
  const rows = await db.owner.select().from(books).where(eq(books.tenantId, tenantId)).orderBy(asc(books.id));
  const { result, count } = await statements(() =>
    presentGrouped(
      bookView,
      rows.map((row) => ({ key: row.shelfId, row })),
      reader,
    ),
  );
  t.equal(count, 0);
  t.strictSame([...result.keys()], [1, 2]);
  t.strictSame(result.get(1), [
    { id: 1, title: 'Dune', position: 3, note: 'lent out' },
    { id: 3, title: 'Ulysses', position: 2 },
  ]);
  t.strictSame(ids(result.get(2)!), [2, 4, 5]);
  t.strictSame(await presentGrouped(bookView, [], reader), new Map());
});
