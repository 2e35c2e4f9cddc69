import { asc, eq, getTableColumns, type SQL } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { userProfilePictures, users } from './table.ts';

/** A user row plus the stored picture's file name (never its bytes). */
export type UserRow = typeof users.$inferSelect & { pictureFileName: string | null; pictureEtag: string | null };

/** Users with their picture's file name and ETag (not its bytes), in the transaction's tenant. */
export function selectUsers(tx: Tx) {
  return tx
    .select({ ...getTableColumns(users), pictureFileName: userProfilePictures.fileName, pictureEtag: userProfilePictures.etag })
    .from(users)
    .leftJoin(userProfilePictures, eq(userProfilePictures.userId, users.id));
}

/** Users ordered by last name, first name, id (as `GET /api/users` documents). */
export const USER_ORDER = [asc(users.lastName), asc(users.firstName), asc(users.id)];

export async function findUsers(tx: Tx, where: SQL | undefined, limit?: number): Promise<UserRow[]> {
  const query = selectUsers(tx).where(where).orderBy(...USER_ORDER);
  return limit ? query.limit(limit) : query;
}

/** The user with `id` in the transaction's tenant; soft-deleted ones only when `withTrashed`. */
export async function findUser(tx: Tx, id: number, withTrashed = false): Promise<UserRow | undefined> {
  const [row] = await selectUsers(tx).where(eq(users.id, id));
  if (!row || (!withTrashed && row.deletedAt)) return undefined;
  return row;
}
