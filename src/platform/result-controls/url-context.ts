/**
 * The URL context capability (docs/api-conventions.md#url-context): records that have it
 * answer `static_url`, `url` and `url_context` when, and only when, `selects` names them.
 * A record's client route is `/<collection>/<id>`, the same in every tenant (so `url` and
 * `static_url` agree), and `url_context` is `{type: <alias>, id}`: what the route resolves
 * to, for the client's access check. One definition for every resource that has it.
 */
import type { FieldDefinition } from './result-controls.ts';

/** The three computed fields of the URL context capability for records of `alias`, routed under `/<collection>/`. */
export function urlContextFields<Row extends { id: number }>(
  alias: string,
  collection: string,
): Record<'static_url' | 'url' | 'url_context', FieldDefinition<Row>> {
  const route = (row: Row) => `/${collection}/${row.id}`;
  return {
    static_url: { onlyWhenSelected: true, value: route },
    url: { onlyWhenSelected: true, value: route },
    url_context: { onlyWhenSelected: true, value: (row) => ({ type: alias, id: row.id }) },
  };
}
