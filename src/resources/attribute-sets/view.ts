import { asc } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import { rfc3339 } from '../../platform/http/datetime.ts';
import type { Listing } from '../../platform/result-controls/listing.ts';
import { defineView } from '../../platform/result-controls/result-controls.ts';
import type { AttributeSetRow } from './queries.ts';
import { attributeSets } from './table.ts';

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

/** Every set of the tenant, by name and id (docs/api-conventions.md#list-order). */
export const attributeSetListing: Listing<AttributeSetRow, Auth> = {
  view: attributeSetView,
  query: (tx) => tx.select().from(attributeSets),
  tenant: attributeSets.tenantId,
  key: attributeSets.id,
  order: [asc(attributeSets.name), asc(attributeSets.id)],
};
