/**
 * "These ids name records of the tenant": the one check for ids a request refers to, and
 * the one wording of its field errors (docs/api-conventions.md#missing-references).
 */
import { and, eq, inArray, type SQL } from 'drizzle-orm';
import type { PgColumn, PgTable } from 'drizzle-orm/pg-core';
import { coded, type FieldErrors } from '../http/problem.ts';
import { transactionTenant, type Tx } from './database.ts';
import { inIdList } from './id-list.ts';

/** The field error of an id that names no record. */
export const MISSING = 'does not exist';

/** That field error with its code (`error_codes`): `missing_reference`. */
export const MISSING_REFERENCE = coded('missing_reference', MISSING);

/**
 * The ids of `ids` that name no row of `table` visible in the transaction, among the rows
 * that also match `where` (for example "not deleted"). Row-level security hides other
 * tenants' rows, so their ids are missing like ids nobody uses. One query; none for [].
 * `keep`: the rows found stay until the transaction ends (`FOR KEY SHARE`, as a foreign
 * key holds what it references), for a reference no foreign key keeps: a delete that takes
 * the row's lock first (`lockRecord(…, 'update')`) waits, and then sees the reference.
 * Numeric ids go as one array parameter (`inIdList`), so a list of any length is one
 * statement.
 */
export async function missingIds<Id extends number | string>(
  tx: Tx,
  table: PgTable & { id: PgColumn; tenantId?: PgColumn },
  ids: readonly Id[],
  where?: SQL,
  options: { keep?: boolean } = {},
): Promise<Set<Id>> {
  if (ids.length === 0) return new Set();
  const distinct = [...new Set(ids)];
  const query = tx
    .select({ id: table.id })
    .from(table)
    // Named by its tenant too when locking: Citus locks rows only in a statement that names its shard.
    .where(
      and(
        distinct.every((id) => typeof id === 'number') ? inIdList(table.id, distinct) : inArray(table.id, distinct),
        where,
        options.keep && table.tenantId ? eq(table.tenantId, transactionTenant(tx)!) : undefined,
      ),
    );
  const rows = options.keep ? await query.for('key share') : await query;
  const found = new Set<unknown>(rows.map((row) => row.id));
  return new Set(distinct.filter((id) => !found.has(id)));
}

/** `errors["<path>.<index>"] = ["does not exist"]` for every position of `ids` whose id is in `missing`. */
export function reportMissing<Id extends number | string>(errors: FieldErrors, path: string, ids: readonly Id[], missing: ReadonlySet<Id>): void {
  ids.forEach((id, index) => {
    if (missing.has(id)) errors[`${path}.${index}`] = [MISSING_REFERENCE];
  });
}
