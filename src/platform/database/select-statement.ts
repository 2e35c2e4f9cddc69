/**
 * A drizzle select as one statement to send by itself: its text, its bound values and how
 * its rows (the driver's arrays of column values) become the objects drizzle would answer.
 * For reads that leave as a statement group (`Database.tenantRead`), and for listings whose
 * select is rendered once per process (result-controls/listing.ts).
 */
import { Column, fillPlaceholders, is, SQL } from 'drizzle-orm';
import type { SelectedFieldsOrdered } from 'drizzle-orm/pg-core';
import type { PostgresJsDatabase } from 'drizzle-orm/postgres-js';

/** A statement as text and bound values (what drizzle's dialect renders). */
export interface Statement {
  sql: string;
  params: unknown[];
}

/**
 * What drizzle's select builder (drizzle-orm 0.45) holds at run time beyond its typed
 * surface: `prepare` computes the ordered fields and the null map of joined tables that
 * its own execution uses, without running anything.
 */
interface BuilderInternals {
  toSQL(): Statement;
  prepare(name: string): { fields?: SelectedFieldsOrdered; joinsNotNullableMap?: Record<string, boolean> };
}

/** A select rendered: its statement, and its rows → records as drizzle maps them. */
export interface SelectStatement<Row> {
  statement: Statement;
  /** How drizzle maps the selected columns of a row (decoders, nesting), taken from the builder. */
  fields: SelectedFieldsOrdered;
  joinsNotNullableMap: Record<string, boolean> | undefined;
  /** The same mapping built once, for a flat selection (see `flatRowMapper`); null: only drizzle's own execution maps it. */
  mapRows: ((rows: unknown[][]) => Row[]) | null;
}

/** How a selected value comes from the driver's: a column's or an SQL expression's decoder. */
type Decoder = { mapFromDriverValue(value: unknown): unknown };

/** Whether `decoder` returns what it is given (drizzle's default), so calling it can be skipped. */
const passesThrough = (decoder: Decoder) => decoder.mapFromDriverValue === Column.prototype.mapFromDriverValue;

/**
 * Rows (the driver's arrays) → objects, as drizzle's `mapResultRow` makes them for a
 * selection whose every field is a top-level key (no joined table nested as an object):
 * each key named and each decoder found once, not per row and field. Null when the
 * selection nests or holds a subquery.
 */
function flatRowMapper(fields: SelectedFieldsOrdered): ((rows: unknown[][]) => unknown[]) | null {
  const decoderOf = (field: unknown): Decoder | undefined =>
    is(field, Column)
      ? field
      : is(field, SQL)
        ? (field as unknown as { decoder: Decoder }).decoder
        : is(field, SQL.Aliased)
          ? (field.sql as unknown as { decoder: Decoder }).decoder
          : undefined;
  const found = fields.map(({ field }) => decoderOf(field));
  if (fields.some(({ path }) => path.length !== 1) || found.includes(undefined)) return null;
  const names = fields.map(({ path }) => path[0]!);
  const decoders = (found as Decoder[]).map((decoder) => (passesThrough(decoder) ? null : decoder));
  return (rows) =>
    rows.map((row) => {
      const record: Record<string, unknown> = {};
      for (let i = 0; i < names.length; i++) {
        const raw = row[i];
        const decoder = decoders[i];
        record[names[i]!] = raw === null ? null : decoder ? decoder.mapFromDriverValue(raw) : raw;
      }
      return record;
    });
}

/** `select` (a drizzle select builder, not run) as one statement and its row mapping. */
export function selectStatement<Row>(select: PromiseLike<Row[]>): SelectStatement<Row> {
  const builder = select as unknown as BuilderInternals;
  const statement = builder.toSQL();
  const { fields, joinsNotNullableMap } = builder.prepare('select_statement');
  if (!fields) throw new Error('selectStatement takes a select whose fields are known');
  return { statement, fields, joinsNotNullableMap, mapRows: flatRowMapper(fields) as ((rows: unknown[][]) => Row[]) | null };
}

/**
 * A select built and rendered once per process, its per-request values named by
 * `sql.placeholder(name)`: each use binds the values given instead of building the select
 * again (drizzle spends more on building than PostgreSQL on answering a small read). `db`
 * only builds it, at the first use.
 */
export function preparedSelect<Row, Values extends Record<string, unknown>>(
  build: (db: PostgresJsDatabase) => PromiseLike<Row[]>,
): (db: PostgresJsDatabase, values: Values) => SelectStatement<Row> {
  let built: SelectStatement<Row> | undefined;
  return (db, values) => {
    built ??= selectStatement(build(db));
    return { ...built, statement: { sql: built.statement.sql, params: fillPlaceholders(built.statement.params, values) } };
  };
}
