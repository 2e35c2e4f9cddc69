import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';

/**
 * Integer ids (null for NULL) as one PostgreSQL array literal, bound as one parameter and
 * cast by the statement (`::bigint[]`, `::int[]`): a list of any length then costs one
 * parameter, where PostgreSQL takes at most 65,535 in a statement.
 */
export function idArray(ids: readonly (number | null)[]): string {
  return `{${ids.map((id) => (id === null ? 'NULL' : String(Math.trunc(id)))).join(',')}}`;
}

/** Texts as one PostgreSQL array literal, bound as one parameter and cast by the statement (`::text[]`). */
export const textArray = (values: readonly string[]) =>
  `{${values.map((value) => `"${value.includes('"') || value.includes('\\') ? value.replace(/[\\"]/g, '\\$&') : value}"`).join(',')}}`;

/**
 * `column = any(ids)`, the ids sent as one array parameter (`idArray`): an `in` list binds
 * one parameter per id, so a list of more users than PostgreSQL's limit failed (and
 * building the list held the process for seconds).
 */
export function inIdList(column: SQLWrapper, ids: readonly number[]): SQL {
  return sql`${column} = any(${idArray(ids)}::bigint[])`;
}
