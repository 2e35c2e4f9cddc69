import { asc, eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { roles } from './table.ts';

export type RoleRow = typeof roles.$inferSelect;

export const roleView = defineView<RoleRow, Auth, 'active'>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    active: {},
    permissions: {},
    created_at: { value: (row) => rfc3339(row.createdAt) },
    updated_at: { value: (row) => rfc3339(row.updatedAt) },
  },
  filters: {
    active: (value: boolean) => eq(roles.active, value),
  },
});

/** Roles as the list and show operations answer them, ordered by name and id. */
export const roleListing: Listing<RoleRow, Auth, 'active'> = {
  view: roleView,
  query: (tx: Tx) => tx.select().from(roles),
  tenant: roles.tenantId,
  key: roles.id,
  order: [asc(roles.name), asc(roles.id)],
};
