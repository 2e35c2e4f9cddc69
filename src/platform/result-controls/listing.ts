/**
 * How endpoints answer records under the result controls (docs/api-conventions.md#result-controls).
 * A resource declares a `Listing` (its view, the query its records come from, the rows every
 * request may see, the list order); its list and show handlers call `listRecords` and
 * `showRecord`, which read the controls (a 422 before any query), run the tenant's
 * transaction and answer presented records, never rows. `listRecords` also pages
 * (docs/api-conventions.md#paging): it applies `offset` and a listing's cursor, and marks
 * a page that more records follow with the query of the next one (http/next-page.ts).
 * Records a handler has just written, or nests in another resource's answer, are
 * presented with `presentAll` / `presentGrouped`.
 */
import { and, eq, fillPlaceholders, is, sql, SQL, type Column, type Placeholder } from 'drizzle-orm';
import { onlyStatement, transactionTenant, type Database, type Tx } from '../database/database.ts';
import { prepared } from '../database/prepared.ts';
import { MISSING_REFERENCE } from '../database/existence.ts';
import { withNextPage, type NextPage } from '../http/next-page.ts';
import { invalid, notFound } from '../http/problem.ts';
import {
  groupBy,
  inlineColumn,
  MAX_OFFSET,
  present,
  readControls,
  splitList,
  type Controls,
  type ControlsQuery,
  type Presented,
  type View,
} from './result-controls.ts';

/** Every visible field, no relations: how written records and nested records are answered. */
export const ALL_FIELDS: Readonly<{ selects: null; relations: readonly string[] }> = Object.freeze({ selects: null, relations: Object.freeze([]) });

/** The controls a listing's records are presented with: `readControls`' answer, or `ALL_FIELDS`. */
export type Presentation = Pick<Controls, 'selects'> & { relations: readonly string[]; limit?: number; offset?: number };

/** A select that can be prepared (drizzle's `.prepare()`), then executed with its placeholders' values. */
interface Preparable<Row> {
  prepare(name: string): { execute(values?: Record<string, unknown>): Promise<Row[]> };
  toSQL(): { sql: string; params: unknown[] };
}

/** An ordered select that can still be cut: at most `limit` rows, `offset` rows skipped. */
type Cuttable<Row> = Preparable<Row> & {
  limit(count: Placeholder): Preparable<Row> & { offset(count: Placeholder): Preparable<Row> };
  offset(count: Placeholder): Preparable<Row>;
};

/** What a listing's `query` is: a drizzle select to which one `where`, one `orderBy`, a `limit` and an `offset` are added. */
export interface RecordQuery<Row> {
  where(condition: SQL | undefined): { orderBy(...order: SQL[]): Cuttable<Row> };
}

/**
 * The rows every request of a listing may see, as one condition whose per-request values
 * are placeholders (`sql.placeholder(name)`), and those values for a viewer: the condition
 * is the same SQL for every viewer, so the listing's statements are prepared once.
 */
export interface Scope<Viewer> {
  where: SQL;
  /** The placeholders' values for `viewer`; none when the condition has no placeholder. */
  values?(viewer: Viewer): Record<string, unknown>;
}

/**
 * A resource's records as its list and show endpoints answer them. `Row` is what the query
 * selects; `Shown` what the view presents (the same unless `shape` turns one into the other).
 */
export interface ListingDefinition<Row, Viewer, FilterKey extends string = never, Shown = Row> {
  view: View<Shown, Viewer, FilterKey>;
  /**
   * Where the records come from (columns, joins), without where, order or limit: those are
   * added. A query that adds `columns` to its selection lets the view's inline relations
   * ride in its statement (`RelationDefinition.inline`); one that ignores them has its
   * relations loaded.
   */
  query(tx: Tx, columns?: Record<string, SQL>): RecordQuery<Row>;
  /**
   * The tenant column of the table the records come from (`<table>.tenantId`): every read
   * names the transaction's tenant there, as a bound value, so that Citus sends it to the
   * one worker holding the tenant instead of every shard (docs/scaling.md). Row-level
   * security still decides what is seen; on one PostgreSQL the condition changes nothing.
   */
  tenant: Column;
  /**
   * The rows any request of this listing may see (e.g. the caller's own); without it, every
   * row of the tenant. A `Scope` (a condition on placeholders) keeps the listing's statements
   * prepared; a function of the viewer, for scopes that depend on more than values (the
   * viewer's permissions), has them built for every request.
   */
  scope?: Scope<Viewer> | ((viewer: Viewer) => SQL | undefined);
  /** The column a show names its record by (`showRecord`'s `{ key }`), such as the id. */
  key?: Column;
  /** List order (docs/api-conventions.md#list-order); ends in a unique column, so it is total. */
  order: SQL[];
  /**
   * Rows → records to present, per request (e.g. links resolved for the caller); a constant
   * number of queries; may drop rows the viewer may not see. Required when a `Row` is not a `Shown`.
   */
  shape?(tx: Tx, rows: Row[], viewer: Viewer): Promise<Shown[]> | Shown[];
  /** Relations shown when `relations` is not sent, each only where the viewer may see it. */
  defaultRelations?: readonly string[];
  /**
   * Paging by cursor (`before_id`), for lists whose head grows while a client pages
   * (docs/api-conventions.md#paging): the next page is linked by the last row answered,
   * not by `offset`. Without it, a list takes no cursor.
   */
  cursor?: {
    /** The rows after the one `value` names, in list order, or undefined when the viewer has no such row. One query. */
    after(tx: Tx, viewer: Viewer, value: string): Promise<SQL | undefined>;
    /** The cursor value naming `row`. */
    of(row: Row): string;
  };
}

/** A listing as resources declare it: `shape` is required when rows are not presentable as they are. */
export type Listing<Row, Viewer, FilterKey extends string = never, Shown = Row> = ListingDefinition<Row, Viewer, FilterKey, Shown> &
  ([Row] extends [Shown] ? unknown : { shape: NonNullable<ListingDefinition<Row, Viewer, FilterKey, Shown>['shape']> });

async function shaped<Row, Viewer, FilterKey extends string, Shown>(
  tx: Tx,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  rows: Row[],
  viewer: Viewer,
): Promise<Shown[]> {
  return listing.shape ? listing.shape(tx, rows, viewer) : (rows as unknown as Shown[]);
}

/**
 * The columns that carry those of `relations` the view can select inline, as JSON text, in
 * the listing's statement: `present` parses a record again only where it differs from the
 * row before's. Only a listing without `shape` presents its rows as they are read.
 */
function inlineColumns<Row, Viewer, FilterKey extends string, Shown>(
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  relations: readonly string[],
): Record<string, SQL> {
  const inline = Object.entries(listing.view.relations ?? {}).filter(([name, relation]) => !listing.shape && relation.inline && relations.includes(name));
  return Object.fromEntries(inline.map(([name, relation]) => [inlineColumn(name), sql`(${relation.inline!})::text`]));
}

/** Which rows a read asks for, besides the listing's scope: a condition, or the record with the listing's `key`. */
type Which = { where?: SQL; key?: undefined } | { where?: undefined; key: unknown };

/**
 * The select of the listing's rows matching `which` within its scope, in list order, cut by
 * `page`; relations asked for ride along where they can (`inline`). It is built with
 * placeholders for the transaction's tenant, the scope's values, the key, `limit` and
 * `offset` (`values`); `key` names its form when it may be reused (a read without a
 * condition of its own: every list without filters, every show by key).
 */
function rowsSelect<Row, Viewer, FilterKey extends string, Shown>(
  tx: Tx,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  viewer: Viewer,
  which: Which,
  page: { limit?: number; offset?: number },
  relations: readonly string[],
): { values: Record<string, unknown>; build: (tx: Tx) => Preparable<Row>; key: string | undefined } {
  const scope = listing.scope;
  const values: Record<string, unknown> = typeof scope === 'object' ? { ...scope.values?.(viewer) } : {};
  // The tenant as Atrium set it on the transaction: Citus routes the statement by it.
  const tenantId = transactionTenant(tx);
  if (tenantId !== undefined) values.$tenant = tenantId;
  if (which.key !== undefined) values.$key = which.key;
  if (page.limit) values.$limit = page.limit;
  if (page.offset) values.$offset = page.offset;
  const inline = inlineColumns(listing, relations);
  const build = (tx: Tx) => {
    // `= any(array[…])`, not `=`: PostgreSQL would merge an equality with the row-level
    // security policy's into a condition without columns, which Citus refuses beside an
    // outer join ("outer joins and pseudoconstant quals"); Citus routes by either form.
    const byTenant = tenantId === undefined ? undefined : sql`${listing.tenant} = any(array[${sql.placeholder('$tenant')}]::bigint[])`;
    const byKey = which.key === undefined ? undefined : eq(listing.key!, sql.placeholder('$key'));
    const scoped = typeof scope === 'function' ? scope(viewer) : scope?.where;
    const ordered = listing
      .query(tx, inline)
      .where(and(byTenant, scoped, which.where, byKey))
      .orderBy(...listing.order);
    const cut = page.limit ? ordered.limit(sql.placeholder('$limit')) : ordered;
    return page.offset ? cut.offset(sql.placeholder('$offset')) : cut;
  };
  const reused = which.where === undefined && typeof scope !== 'function';
  const key = reused ? [Object.keys(inline), tenantId !== undefined, which.key !== undefined, Boolean(page.limit), Boolean(page.offset)].join(';') : undefined;
  return { values, build, key };
}

/** `rowsSelect`'s rows, by a statement prepared once per form where it may be reused. */
function rowsWhere<Row, Viewer, FilterKey extends string, Shown>(
  tx: Tx,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  viewer: Viewer,
  which: Which,
  page: { limit?: number; offset?: number } = {},
  relations: readonly string[] = [],
  last = false,
): Promise<Row[]> {
  const { values, build, key } = rowsSelect(tx, listing, viewer, which, page, relations);
  const prepare = (tx: Tx) => build(tx).prepare('listing');
  const statement = key === undefined ? prepare(tx) : prepared(tx, listing, key, prepare);
  return last ? onlyStatement(tx, () => statement.execute(values)) : statement.execute(values);
}

/**
 * Whether reading a listing's rows is all a request of it asks of the database: no `shape`,
 * and every relation asked for rides in the rows' statement (`inline`). Its transaction
 * can then end with that statement (`onlyStatement`).
 */
function rowsAreAll<Row, Viewer, FilterKey extends string, Shown>(
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  relations: readonly string[],
): boolean {
  return !listing.shape && relations.every((name) => listing.view.relations?.[name]?.inline !== undefined || listing.view.relations?.[name] === undefined);
}

/**
 * The statement a list of `listing` without filters sends in `tx`, with its values, as
 * `listRecords` builds it: for showing its plan (`EXPLAIN`, docs/scaling.md).
 */
export function listStatement<Row, Viewer, FilterKey extends string, Shown>(
  tx: Tx,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  viewer: Viewer,
  page: { limit?: number; offset?: number } = {},
): { sql: string; params: unknown[] } {
  const { values, build } = rowsSelect(tx, listing, viewer, {}, page, []);
  const query = build(tx).toSQL();
  return { sql: query.sql, params: fillPlaceholders(query.params, values) };
}

/**
 * Inside `tx`: the listing's records matching `where` (within its scope), in list order, at
 * most `presentation.limit`, presented. The default presentation is that of a request without
 * controls (every visible field, the default relations): how a record just written is answered.
 * One query, plus `shape`'s and one per relation the statement does not carry (`inline`).
 */
export async function selectRecords<Row, Viewer, FilterKey extends string, Shown>(
  tx: Tx,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  viewer: Viewer,
  options: { where?: SQL; presentation?: Presentation } = {},
): Promise<Presented[]> {
  const presentation = options.presentation ?? { selects: null, relations: listing.defaultRelations ?? [] };
  const rows = await rowsWhere(tx, listing, viewer, { where: options.where }, presentation, presentation.relations);
  return present(listing.view, tx, await shaped(tx, listing, rows, viewer), presentation, viewer);
}

/**
 * A list endpoint: the controls are read (a 422 names every problem) before any query; then,
 * in one tenant transaction, `before` (e.g. a parent's 404) and the records matching the
 * filters and `where`, from `offset` (after the cursor's row when `before_id` is sent),
 * at most `limit`. Query count: the tenant setting, `before`'s, the cursor's, one for the
 * rows, `shape`'s, one per relation the rows do not carry (`inline`), whatever the number of rows.
 *
 * With `limit`, one row more is read: when it exists, the answer is marked with the query
 * of the next page (`withNextPage`), which continues after the last row of this one, by
 * the cursor where the listing has one, otherwise by `offset` as far as the spec takes one
 * (`nextPageByOffset`).
 */
export async function listRecords<Row, Viewer, FilterKey extends string, Shown>(
  db: Database,
  tenantId: number,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  query: ControlsQuery,
  viewer: Viewer,
  options: { where?: SQL; before?: (tx: Tx) => Promise<unknown> } = {},
): Promise<Presented[]> {
  const controls = readControls(listing.view, query, viewer, { defaultRelations: listing.defaultRelations });
  const { limit, offset, cursor } = controls;
  if (cursor !== undefined && !listing.cursor) throw invalid({ before_id: ['is not taken by this list'] }, 'The result controls are invalid.');
  const where = and(options.where, controls.where);
  const page = { limit: limit && limit + 1, offset };
  return db.tenant(tenantId, async (tx) => {
    await options.before?.(tx);
    const after = cursor === undefined ? undefined : await listing.cursor!.after(tx, viewer, cursor);
    if (cursor !== undefined && after === undefined) throw invalid({ before_id: [MISSING_REFERENCE] }, 'The paging cursor names no record of this list.');
    // One row more than `limit`: when it exists, more follow.
    const last = !options.before && cursor === undefined && rowsAreAll(listing, controls.relations);
    const rows = await rowsWhere(tx, listing, viewer, { where: and(where, after) }, page, controls.relations, last);
    const more = limit !== undefined && rows.length > limit;
    const shown = more ? rows.slice(0, limit) : rows;
    const records = await present(listing.view, tx, await shaped(tx, listing, shown, viewer), controls, viewer);
    if (!more) return records;
    const next = listing.cursor ? { before_id: listing.cursor.of(shown.at(-1)!), offset: undefined } : nextPageByOffset(offset, limit);
    return next ? withNextPage(records, next) : records;
  });
}

/**
 * The query of the page after a full one of `limit` records from `offset`, in a listing
 * continued by offset; none when that page would start beyond MAX_OFFSET, which the spec
 * refuses (a 422): a link is never one that fails. Records further down such a list are
 * reached by narrowing it with its filters (docs/api-conventions.md#paging).
 */
export function nextPageByOffset(offset: number, limit: number): NextPage | undefined {
  const next = offset + limit;
  return next <= MAX_OFFSET ? { offset: next } : undefined;
}

/**
 * A show endpoint: the record `which` names (`{ key }`: the one whose `listing.key` is that
 * value, within the listing's scope; a condition within the scope; or a lookup of the
 * resource's own, which may throw its own 404), or 404 `${what} does not exist.`.
 * The controls are read before any query, or, with `controlsAfterFind`, after the record is
 * found, for views whose field visibility depends on the record (one's own user record): a
 * missing record is then a 404 whatever the controls. `defaultRelations` replaces the
 * listing's where a show answers more by default than the list.
 */
export async function showRecord<Row, Viewer, FilterKey extends string, Shown>(
  db: Database,
  tenantId: number,
  listing: ListingDefinition<Row, Viewer, FilterKey, Shown>,
  query: ControlsQuery,
  viewer: Viewer,
  which: { key: unknown } | SQL | ((tx: Tx) => Promise<Row | undefined>),
  what: string,
  options: { controlsAfterFind?: boolean; defaultRelations?: readonly string[] } = {},
): Promise<Presented> {
  const defaultRelations = options.defaultRelations ?? listing.defaultRelations;
  const controlsFor = (subject?: Shown) => readControls(listing.view, query, viewer, { defaultRelations, subject });
  const early = options.controlsAfterFind ? undefined : controlsFor();
  // The relations the answer will likely show, read with the record where they can be (the controls judge them after).
  const relations = early?.relations ?? (query.relations !== undefined ? splitList(query.relations, '|') : (defaultRelations ?? []));
  return db.tenant(tenantId, async (tx) => {
    const row =
      typeof which === 'function'
        ? await which(tx)
        : (await rowsWhere(tx, listing, viewer, is(which, SQL) ? { where: which } : { key: which.key }, {}, relations, rowsAreAll(listing, relations)))[0];
    if (row === undefined) throw notFound(what);
    const [shown] = await shaped(tx, listing, [row], viewer);
    if (shown === undefined) throw notFound(what);
    const [record] = await present(listing.view, tx, [shown], early ?? controlsFor(shown), viewer);
    return record!;
  });
}

/**
 * `rows` with every field the viewer may see, plus `relations` (loaded in `tx`, one query
 * each). Without relations no query is made, so no transaction is needed.
 */
export function presentAll<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  tx: Tx,
  rows: Row[],
  viewer: Viewer,
  relations?: readonly string[],
): Promise<Presented[]>;
export function presentAll<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  tx: null,
  rows: Row[],
  viewer: Viewer,
): Promise<Presented[]>;
export function presentAll<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  tx: Tx | null,
  rows: Row[],
  viewer: Viewer,
  relations: readonly string[] = [],
): Promise<Presented[]> {
  return present(view, tx as Tx, rows, { selects: null, relations }, viewer);
}

/**
 * A to-many relation built from another view: each item's row presented with every field
 * the viewer may see (no relations, no query), grouped by `key` in item order.
 */
export async function presentGrouped<Row, Viewer, FilterKey extends string, Key>(
  view: View<Row, Viewer, FilterKey>,
  items: { key: Key; row: Row }[],
  viewer: Viewer,
): Promise<Map<Key, Record<string, unknown>[]>> {
  const presented = await presentAll(
    view,
    null,
    items.map((item) => item.row),
    viewer,
  );
  return groupBy(
    items.map((item, i) => ({ key: item.key, record: presented[i]! })),
    (item) => item.key,
    (item) => item.record,
  );
}
