import { rfc3339 } from '../../platform/http/datetime.ts';
import type { SourceRow } from './queries.ts';

/** A source as the spec answers it (schema Source): every key, always. */
export const presentSource = (row: SourceRow) => ({
  id: row.id,
  type: row.type,
  form_field_id: row.formFieldId,
  config: row.config,
  source_entity_type: row.sourceEntityType,
  source_entity_id: row.sourceEntityId,
  sort_number: row.sortNumber,
  created_at: rfc3339(row.createdAt)!,
  updated_at: rfc3339(row.updatedAt)!,
});
