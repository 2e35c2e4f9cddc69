import { sql, type SQL } from 'drizzle-orm';
import type { AnyPgColumn } from 'drizzle-orm/pg-core';

/**
 * What an update stores in the record's `updated_at` (`column`): the time of the update when
 * it changes a stored value (`changed`), the value the column holds otherwise. A write that
 * changes nothing (the record sent back as it was read, an identity provider's periodic
 * sync) leaves `updated_at` as it was, and what is read from it (SCIM's
 * `meta.lastModified`), as it records no audit event (docs/audit.md). Whether the write
 * changes anything is its caller's to judge, from the changes its event would record; or,
 * where the write reads no row first (an upsert), the statement's, by the condition
 * `changed` on the row it updates. `now`: the time of the update, where `now()` may not
 * stand (an upsert's `DO UPDATE SET` on Citus takes the inserted row's own,
 * `excluded.updated_at`).
 */
export function updateTime(column: AnyPgColumn, changed: boolean | SQL, now: SQL = sql`now()`): SQL {
  if (typeof changed === 'boolean') return changed ? now : sql`${column}`;
  return sql`case when ${changed} then ${now} else ${column} end`;
}
