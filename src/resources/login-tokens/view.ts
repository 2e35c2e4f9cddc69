import { desc } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { presentUsersById } from '../users/view.ts';
import type { LoginTokenRow } from './queries.ts';
import { loginTokenState } from './rules.ts';
import { userLoginTokens } from './table.ts';

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
      const byId = await presentUsersById(
        tx,
        rows.map((row) => row[column]),
        viewer,
      );
      return new Map(rows.map((row) => [row.id, byId.get(row[column])]));
    },
  } as const;
}

export const loginTokenView = defineView<LoginTokenRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    // The internal id only when selected; the uuid is the route key (the spec, schema UserLoginToken).
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

/** Every token of the tenant, used and deleted ones too, newest first (docs/api-conventions.md#list-order). */
export const loginTokenListing: Listing<LoginTokenRow, Auth> = {
  view: loginTokenView,
  query: (tx) => tx.select().from(userLoginTokens),
  tenant: userLoginTokens.tenantId,
  key: userLoginTokens.uuid,
  order: [desc(userLoginTokens.createdAt), desc(userLoginTokens.id)],
};
