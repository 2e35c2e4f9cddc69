/**
 * The result controls (docs/api-conventions.md#result-controls), once for every resource:
 * `selects` (comma list of visible fields), `relations` (pipe list), `limit`, `filter[key]`,
 * and paging (docs/api-conventions.md#paging): `offset` and the cursor `before_id`. A resource describes itself with `defineView`; `readControls` judges the
 * query against it and `present` shapes rows into answers (endpoints use both through
 * listing.ts). Relations load with one query each, whatever the row count; a to-one relation
 * may instead ride in the listing's own statement (`RelationDefinition.inline`).
 */
import { and, type SQL } from 'drizzle-orm';
import type { Permission } from '../auth/permissions.ts';
import type { Tx } from '../database/database.ts';
import { coded, invalid, type FieldErrors } from '../http/problem.ts';

export type Visibility = 'public' | 'personal' | 'administrative';

declare const presented: unique symbol;

/**
 * A record as `present` shaped it: the view's fields and relations, as the viewer may see
 * them. TypeScript cannot tell which fields a view makes, so the handler types accept a
 * `Presented` wherever the spec answers a record (platform/http/handler.ts); what holds the
 * record to its schema is the response serializer, which refuses an answer missing a
 * required field, and the contract check of every answer in the tests. The brand keeps
 * other plain objects from passing as records.
 */
export type Presented = Record<string, unknown> & PresentedMark;

/** The brand alone: what the handler types accept (without an index signature, so they still refuse unknown keys in hand-built answers). */
export interface PresentedMark {
  readonly [presented]: true;
}

export interface FieldDefinition<Row, Viewer = unknown> {
  visibility?: Visibility;
  /** Value of the field; default `row[name]`. The viewer is there for computed fields (e.g. signed URLs). */
  value?: (row: Row, viewer: Viewer) => unknown;
  /** Returned only when named in `selects` (e.g. login-token `id`, user `url`). */
  onlyWhenSelected?: boolean;
}

export interface RelationDefinition<Row, Viewer> {
  /** Like a field's: a relation exposing hidden data needs the same permission (default public). */
  visibility?: Visibility;
  /**
   * A permission the viewer must hold for the relation at all (e.g. a department's `users`
   * need `users.view`): named without it → 422, never shown by default. The viewer is then
   * expected to carry its `permissions` (as `Auth` does).
   */
  permission?: Permission;
  /** One query for all rows; the map is keyed by the row's key. */
  load(tx: Tx, rows: Row[], viewer: Viewer): Promise<Map<unknown, unknown>>;
  /**
   * A to-one relation's record as one JSON value (null: none), a subquery correlated with
   * the listing's row that answers what `load` answers for it. A listing whose query takes
   * extra columns selects it in its own statement when the relation is asked for
   * (`inlineColumn` names it on the row, as JSON text), and `present` reads it there
   * instead of loading (consecutive rows that carry the same text share one parsed value);
   * rows that do not carry it (records presented from elsewhere) are loaded. The JSON must
   * equal the loader's value as answered (PostgreSQL writes timestamps its own way: build
   * them as the API formats them, or keep such a relation loaded).
   */
  inline?: SQL;
  /** Value for rows the loader returned nothing for (null for to-one, [] for to-many). */
  empty: null | [];
}

export interface View<Row, Viewer, FilterKey extends string = never> {
  key: (row: Row) => unknown;
  fields: Record<string, FieldDefinition<Row, Viewer>>;
  relations?: Record<string, RelationDefinition<Row, Viewer>>;
  /**
   * `filter[key]` → SQL condition; the spec has already validated each value's type. The
   * viewer is there so a filter never matches on what the viewer may not see.
   */
  filters?: Record<FilterKey, (value: never, viewer: Viewer) => SQL | undefined>;
  /**
   * Which kinds of fields `viewer` may see on `row` (or, without a row, in general). What the
   * viewer may see in general it may see on every row: `present` asks about a row only for
   * the kinds the viewer may not see in general.
   */
  visible: (viewer: Viewer, visibility: Visibility, row?: Row) => boolean;
}

export const defineView = <Row, Viewer, FilterKey extends string = never>(definition: View<Row, Viewer, FilterKey>) => definition;

/** The largest `offset` a list takes (the spec's `Offset`, common.yaml): a larger one is a 422. */
export const MAX_OFFSET = 1_000_000;

export interface ControlsQuery {
  selects?: string;
  relations?: string;
  limit?: number;
  offset?: number;
  /** The cursor of lists that declare one (the notification lists): the last record the client has. */
  before_id?: string;
  filter?: Record<string, unknown>;
}

export interface Controls {
  /** Explicitly selected fields, or null for "every visible field". */
  selects: string[] | null;
  relations: string[];
  limit: number | undefined;
  /** Rows of the list, in its order, to skip (after the cursor's record, when one is given). */
  offset: number;
  /** `before_id`: the list continues after the record it names. */
  cursor: string | undefined;
  where: SQL | undefined;
}

/** The name under which a row carries the relation `name` selected in its listing's statement (`RelationDefinition.inline`). */
export const inlineColumn = (name: string) => `relation:${name}`;

/** Whether `viewer` may use the relation at all (its `permission`), before any row-wise visibility. */
function relationPermitted(relation: { permission?: Permission } | undefined, viewer: unknown): boolean {
  if (!relation?.permission) return true;
  const permissions = (viewer as { permissions?: ReadonlySet<string> } | null)?.permissions;
  return permissions?.has(relation.permission) === true;
}

/** A comma or pipe list of the controls as its trimmed, non-empty parts. */
export function splitList(raw: string | undefined, separator: string): string[] {
  if (raw === undefined) return [];
  return raw
    .split(separator)
    .map((part) => part.trim())
    .filter((part) => part.length > 0);
}

/** Validates the controls against the view for this viewer; 422 names what is allowed. */
export function readControls<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  query: ControlsQuery,
  viewer: Viewer,
  options: { defaultRelations?: readonly string[]; subject?: Row } = {},
): Controls {
  const errors: FieldErrors = {};
  // What the viewer may name is worked out only when the query names something.
  let selects: string[] | null = null;
  if (query.selects !== undefined) {
    const allowedFields = Object.entries(view.fields)
      .filter(([, field]) => view.visible(viewer, field.visibility ?? 'public', options.subject))
      .map(([name]) => name);
    selects = [...new Set(splitList(query.selects, ','))];
    const unknown = selects.filter((name) => !allowedFields.includes(name));
    if (selects.length === 0) errors.selects = [`must name at least one field; allowed: ${allowedFields.join(', ')}`];
    else if (unknown.length > 0) errors.selects = [`unknown or not visible: ${unknown.join(', ')}; allowed: ${allowedFields.join(', ')}`];
  }
  // Default relations are shown row by row where visible; named ones must be visible.
  let relations: string[];
  if (query.relations !== undefined) {
    const allowedRelations = Object.entries(view.relations ?? {})
      .filter(([, relation]) => relationPermitted(relation, viewer) && view.visible(viewer, relation.visibility ?? 'public', options.subject))
      .map(([name]) => name);
    relations = [...new Set(splitList(query.relations, '|'))];
    const unknownRelations = relations.filter((name) => !allowedRelations.includes(name));
    if (unknownRelations.length > 0) {
      errors.relations = [`unknown or not visible: ${unknownRelations.join(', ')}; allowed: ${allowedRelations.join(', ') || '(none)'}`];
    }
  } else {
    relations = (options.defaultRelations ?? []).filter((name) => relationPermitted(view.relations?.[name], viewer));
  }
  const conditions: SQL[] = [];
  for (const [key, value] of Object.entries(query.filter ?? {})) {
    const filters = view.filters as Record<string, ((value: unknown, viewer: Viewer) => SQL | undefined) | undefined> | undefined;
    const filter = filters && Object.hasOwn(filters, key) ? filters[key] : undefined;
    if (!filter) {
      errors[`filter.${key}`] = [coded('unknown_property', `is not a known filter; allowed: ${Object.keys(view.filters ?? {}).join(', ') || '(none)'}`)];
      continue;
    }
    const condition = filter(value, viewer);
    if (condition) conditions.push(condition);
  }
  // The spec bounds it; never a negative OFFSET for PostgreSQL to refuse, whoever built the query.
  if (query.offset !== undefined && !(Number.isSafeInteger(query.offset) && query.offset >= 0)) errors.offset = ['must be an integer of at least 0'];
  if (Object.keys(errors).length > 0) throw invalid(errors, 'The result controls are invalid.');
  return {
    selects,
    relations,
    limit: query.limit,
    offset: query.offset ?? 0,
    cursor: query.before_id,
    where: conditions.length > 0 ? and(...conditions) : undefined,
  };
}

/** A field `present` shows: its visibility, and how its value is read when it is not `row[name]`. */
interface PlannedField<Row, Viewer> {
  name: string;
  visibility: Visibility;
  compute: ((row: Row, viewer: Viewer) => unknown) | undefined;
}

/** The fields shown for each `selects` (joined by `,`; '' for every field), per view: the same for every request. */
const fieldPlans = new WeakMap<object, Map<string, PlannedField<never, never>[]>>();

/**
 * Plans kept per view. A client chooses `selects` (any subset of the fields, in any order),
 * so past this many the oldest plan goes: no client can make the process keep plans
 * without end, and a plan made again costs a few microseconds.
 */
export const MAX_FIELD_PLANS = 100;

/** How many plans `view` keeps (tests). */
export const fieldPlanCount = (view: object) => fieldPlans.get(view)?.size ?? 0;

/** The view's fields `selects` shows (null: every field but those shown only when selected), in the view's order. */
function plannedFields<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  selects: readonly string[] | null,
): PlannedField<Row, Viewer>[] {
  let plans = fieldPlans.get(view);
  if (!plans) fieldPlans.set(view, (plans = new Map<string, PlannedField<never, never>[]>()));
  const key = selects ? selects.join(',') : '';
  let planned = plans.get(key) as PlannedField<Row, Viewer>[] | undefined;
  if (!planned) {
    const selected = selects ? new Set(selects) : null;
    planned = Object.entries(view.fields)
      .filter(([name, field]) => (selected ? selected.has(name) : !field.onlyWhenSelected))
      .map(([name, field]) => ({ name, visibility: field.visibility ?? 'public', compute: field.value }));
    if (plans.size >= MAX_FIELD_PLANS) plans.delete(plans.keys().next().value!);
    plans.set(key, planned);
  }
  return planned;
}

/**
 * A relation the rows carry as JSON text (`inlineColumn`): parsed anew only when a row's
 * text differs from the row's before, so consecutive rows that name the same record (a
 * list's users of one role) share one value.
 */
function carried(column: string, empty: null | []): (row: unknown) => unknown {
  let lastText: string | undefined;
  let lastValue: unknown;
  return (row) => {
    const text = (row as Record<string, string | null>)[column];
    if (text === null || text === undefined) return empty;
    if (text !== lastText) {
      lastValue = JSON.parse(text);
      lastText = text;
    }
    return lastValue;
  };
}

/** A relation `present` shows: its visibility and its value on a row (carried by the row, or loaded). */
interface PlannedRelation<Row> {
  name: string;
  visibility: Visibility;
  value: (row: Row) => unknown;
}

/**
 * Shapes rows into answers: only visible (and selected) fields, plus requested relations.
 * A relation the rows carry (`inlineColumn`) is read from them; the others load with one
 * query each, sent together (one round trip where the driver pipelines them). Which kinds
 * of fields the viewer may see is asked once per call (per row only for the kinds it may
 * not see in general).
 */
export async function present<Row, Viewer, FilterKey extends string>(
  view: View<Row, Viewer, FilterKey>,
  tx: Tx,
  rows: Row[],
  controls: { selects: readonly string[] | null; relations: readonly string[] },
  viewer: Viewer,
): Promise<Presented[]> {
  const relations: PlannedRelation<Row>[] = [];
  if (controls.relations.length > 0) {
    const wanted = controls.relations.filter((name) => view.relations?.[name] && relationPermitted(view.relations[name], viewer));
    const loaded = new Map<string, Map<unknown, unknown>>();
    if (rows.length > 0) {
      const toLoad = wanted.filter((name) => !(view.relations![name]!.inline && Object.hasOwn(rows[0] as object, inlineColumn(name))));
      // `async`: a loader that throws at once rejects like one that fails later, so a failing
      // loader never leaves another's rejection unhandled (which would end the process).
      const maps = await Promise.all(toLoad.map(async (name) => view.relations![name]!.load(tx, rows, viewer)));
      toLoad.forEach((name, i) => loaded.set(name, maps[i]!));
    }
    // Relations the viewer lacks the permission for are skipped, whoever built the controls.
    for (const name of wanted) {
      const relation = view.relations![name]!;
      const byKey = loaded.get(name);
      const empty = relation.empty;
      const column = inlineColumn(name);
      relations.push({
        name,
        visibility: relation.visibility ?? 'public',
        value: byKey
          ? (row) => {
              const value = byKey.get(view.key(row));
              return value === undefined ? empty : value;
            }
          : carried(column, empty),
      });
    }
  }
  const fields = plannedFields(view, controls.selects);
  const inGeneral: Partial<Record<Visibility, boolean>> = {};
  const everywhere = (visibility: Visibility) => (inGeneral[visibility] ??= view.visible(viewer, visibility));
  let hiddenSomewhere = false;
  for (const item of [...fields, ...relations]) if (!everywhere(item.visibility)) hiddenSomewhere = true;
  return rows.map((row) => {
    // Kinds not visible in general are judged once per row.
    const onRow: Partial<Record<Visibility, boolean>> | null = hiddenSomewhere ? {} : null;
    const visible = (visibility: Visibility) => inGeneral[visibility] || (onRow![visibility] ??= view.visible(viewer, visibility, row));
    const out: Record<string, unknown> = {};
    for (const field of fields) {
      if (onRow && !visible(field.visibility)) continue;
      out[field.name] = field.compute ? field.compute(row, viewer) : (row as Record<string, unknown>)[field.name];
    }
    for (const relation of relations) {
      if (onRow && !visible(relation.visibility)) continue;
      out[relation.name] = relation.value(row);
    }
    return out as Presented;
  });
}

/** Groups rows for a to-many relation: `key` → the `value`s of its rows, in row order. */
export function groupBy<T, V, K = unknown>(items: T[], key: (item: T) => K, value: (item: T) => V): Map<K, V[]> {
  const groups = new Map<K, V[]>();
  for (const item of items) {
    const k = key(item);
    const list = groups.get(k);
    if (list) list.push(value(item));
    else groups.set(k, [value(item)]);
  }
  return groups;
}
