import { eq } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
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
