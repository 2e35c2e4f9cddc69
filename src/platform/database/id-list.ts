import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';

/**
 * `column = any(ids)`, the ids sent as one array parameter: an `in` list binds one
 * parameter per id, and PostgreSQL takes at most 65,535 in a statement, so a list of
 * more users than that failed (and building the list held the process for seconds).
 */
export function inIdList(column: SQLWrapper, ids: readonly number[]): SQL {
  return sql`${column} = any(${`{${ids.map((id) => Math.trunc(id)).join(',')}}`}::bigint[])`;
}
