import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { presentUsersById } from '../users/view.ts';
import { userLoginTokens } from './table.ts';

export type LoginTokenRow = typeof userLoginTokens.$inferSelect;

/** used → deleted → expired → active: the first that applies (a used token is also deleted). */
export function loginTokenState(row: LoginTokenRow, now = new Date()): 'active' | 'used' | 'deleted' | 'expired' {
  if (row.usedAt) return 'used';
  if (row.deletedAt) return 'deleted';
  if (row.expiresAt <= now) return 'expired';
  return 'active';
}

/**
 * Users named by `column` of the tokens, presented as the viewer may see them (personal and
 * administrative fields need their permissions); one query. Showing users at all needs
 * `users.view`, as listing them does: without it the relation is refused (422).
 */
function userRelation(column: 'userId' | 'loginUserId') {
  return {
    permission: 'users.view',
    empty: null,
    async load(tx: Tx, rows: LoginTokenRow[], viewer: Auth) {
      const byId = await presentUsersById(tx, rows.map((row) => row[column]), viewer);
      return new Map(rows.map((row) => [row.id, byId.get(row[column])]));
    },
  } as const;
}

export const loginTokenView = defineView<LoginTokenRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    // Decisions §4: the internal id only when selected; the uuid is the route key.
    id: { onlyWhenSelected: true },
    uuid: {},
    user_id: { value: (row) => row.userId },
    login_user_id: { value: (row) => row.loginUserId },
    state: { value: (row) => loginTokenState(row) },
    expires_at: { value: (row) => rfc3339(row.expiresAt) },
    used_at: { value: (row) => rfc3339(row.usedAt) },
    deleted_at: { value: (row) => rfc3339(row.deletedAt) },
    created_at: { value: (row) => rfc3339(row.createdAt) },
  },
  relations: {
    user: userRelation('userId'),
    loginUser: userRelation('loginUserId'),
  },
});
