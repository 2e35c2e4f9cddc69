import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import { attributeSets } from './table.ts';

export type AttributeSetRow = typeof attributeSets.$inferSelect;

export const attributeSetView = defineView<AttributeSetRow, Auth>({
  key: (row) => row.id,
  visible: () => true,
  fields: {
    id: {},
    name: {},
    fields: {},
    created_at: { value: (r) => rfc3339(r.createdAt) },
    updated_at: { value: (r) => rfc3339(r.updatedAt) },
  },
});
