/** The rules of departments (docs/departments.md#departments). */
import { characterCount } from '../../platform/http/validation.ts';
import type { Tx } from '../../platform/database/database.ts';
import { missingIds, reportMissing } from '../../platform/database/existence.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import type { Body } from '../../platform/http/handler.ts';
import { coded, invalid, type FieldErrors, type ProblemError } from '../../platform/http/problem.ts';
import { attributeSetFields } from '../attribute-sets/queries.ts';
import { attributeFieldTypes, mergeAttributeValues } from '../attribute-sets/rules.ts';
import { attributeSets } from '../attribute-sets/table.ts';
import { notificationSettings } from '../notification-settings/table.ts';
import { displayNameProblems, NAME_TAKEN, nameTaken, storedName } from '../roles/names.ts';
import { departmentNames, type DepartmentRow, type DepartmentWrite } from './queries.ts';

export type DepartmentInput = Body<'createDepartment'>;

/** The longest department name: the contract's limit, which the SCIM service (no schema of the API's in front of it) applies here too. */
const NAME_MAX_LENGTH = 255;

/** The stored name (surrounding blanks trimmed, NFC, see ../roles/names.ts) and what is wrong with it, coded. */
export function departmentName(sent: string): { name: string; problems: FieldErrors[string] } {
  const name = storedName(sent.trim());
  if (name.length === 0) return { name, problems: [coded('required', 'must not be blank')] };
  if (characterCount(name) > NAME_MAX_LENGTH) return { name, problems: [coded('max_length', `must be at most ${NAME_MAX_LENGTH} characters long`)] };
  return { name, problems: displayNameProblems(name).map((problem) => coded('pattern', problem)) };
}

/** `[id | {id, sort_number}]` → ordered, de-duplicated assignments (a bare id's sort number is its position). */
export function attributeSetAssignments(items: DepartmentInput['attribute_set_ids']): { id: number; sortNumber: number }[] {
  const seen = new Set<number>();
  const result: { id: number; sortNumber: number }[] = [];
  (items ?? []).forEach((item, index) => {
    const id = typeof item === 'number' ? item : item.id;
    if (seen.has(id)) return;
    seen.add(id);
    result.push({ id, sortNumber: typeof item === 'number' ? index : (item.sort_number ?? index) });
  });
  return result;
}

/**
 * The department as `write` leaves `current`, its id lists as reads answer them (the
 * settings by id, the sets by sort number and id): what an update is compared with to
 * know, before it is stored, whether it changes anything.
 */
export function departmentAfter(current: DepartmentRow, write: DepartmentWrite): DepartmentRow {
  const settingIds = write.notificationSettingIds && [...new Set(write.notificationSettingIds)].sort((a, b) => a - b);
  const sets = write.attributeSets && [...write.attributeSets].sort((a, b) => a.sortNumber - b.sortNumber || a.id - b.id);
  return {
    ...current,
    name: write.name,
    tags: write.tags,
    attributes: write.attributes,
    notificationSettingIds: settingIds ?? current.notificationSettingIds,
    attributeSetIds: sets?.map((set) => set.id) ?? current.attributeSetIds,
  };
}

/** The body's own keys; every other key is an attribute value (read-only fields like `user_id` fail as unknown). */
export const INPUT_KEYS = ['name', 'tags', 'notification_setting_ids', 'attribute_set_ids'];

/** `{count, limit, remaining}`: `limit` and `remaining` null when unlimited, `remaining` never below 0. */
export function departmentAvailability({ count, limit }: { count: number; limit: number | null }) {
  return { count, limit, remaining: limit === null ? null : Math.max(limit - count, 0) };
}

/** The create refusal at the tenant's department limit, or null while a place is free. */
export function departmentLimitRefusal(availability: ReturnType<typeof departmentAvailability>): ProblemError | null {
  if (availability.remaining !== 0) return null;
  return invalid(
    { name: [coded('department_limit_reached', `the tenant's limit of ${availability.limit} departments is reached`)] },
    'The department limit is reached.',
  );
}

/**
 * Validates a create (`current` null) or update body against the tenant's data: the name
 * (no look-alike of another department's, judged under the tenant-scoped lock
 * `departments.name`; a name sent back unchanged is not judged again), the assigned ids
 * (`<key>.<index>: does not exist`, docs/api-conventions.md#missing-references), and the
 * attribute values against the attached sets. All problems at once, as one 422; otherwise
 * what to store.
 */
export async function departmentWrite(tx: Tx, body: DepartmentInput, current: DepartmentRow | null): Promise<DepartmentWrite> {
  const errors: FieldErrors = {};
  const { name, problems } = departmentName(body.name);
  if (problems.length > 0) errors.name = problems;

  const settingIds = body.notification_setting_ids ?? current?.notificationSettingIds ?? [];
  const assignments = body.attribute_set_ids
    ? attributeSetAssignments(body.attribute_set_ids)
    : (current?.attributeSetIds ?? []).map((id, index) => ({ id, sortNumber: index }));
  const sentSetIds = (body.attribute_set_ids ?? []).map((item) => (typeof item === 'number' ? item : item.id));

  // The lock keeps two concurrent requests from both taking look-alike names (the
  // database's unique rule compares names exactly).
  const newName = !current || name !== current.name;
  if (newName) await lockTenantScope(tx, 'departments.name');
  const [others, missingSettings, missingSets] = await Promise.all([
    newName ? departmentNames(tx) : [],
    missingIds(tx, notificationSettings, body.notification_setting_ids ?? []),
    missingIds(tx, attributeSets, sentSetIds),
  ]);
  if (!errors.name && nameTaken(others, name, current?.id)) errors.name = [coded('taken', NAME_TAKEN)];
  reportMissing(errors, 'notification_setting_ids', body.notification_setting_ids ?? [], missingSettings);
  reportMissing(errors, 'attribute_set_ids', sentSetIds, missingSets);
  const { types, conflicts } = attributeFieldTypes(
    await attributeSetFields(
      tx,
      assignments.map((a) => a.id),
    ),
  );
  if (conflicts.length > 0) (errors.attribute_set_ids ??= []).push(coded('mismatch', `the attached sets define ${conflicts.join(', ')} with different types`));
  const attributes = mergeAttributeValues(types, body, current?.attributes ?? {}, errors, INPUT_KEYS);
  if (Object.keys(errors).length > 0) throw invalid(errors);

  return {
    name,
    tags: body.tags ?? current?.tags ?? [],
    attributes,
    notificationSettingIds: !current || body.notification_setting_ids ? settingIds : undefined,
    attributeSets: !current || body.attribute_set_ids ? assignments : undefined,
  };
}

/** How many entities a refused delete names at most. */
export const NAMED_ENTITIES_SHOWN = 5;

/**
 * The refusal of a delete while entity permissions name the department
 * (docs/departments.md#deletion-while-entity-permissions-name-a-department), or null when
 * none does: it names the entities the caller may administer (`shown`, at most
 * `NAMED_ENTITIES_SHOWN`, "…" when that many) and of the others only that there are some.
 */
export function namedByEntityPermissionsRefusal(naming: { shown: { entityType: string; entityId: number }[]; hidden: boolean }): ProblemError | null {
  const { shown, hidden } = naming;
  if (shown.length === 0 && !hidden) return null;
  const parts = shown.map((row) => `${row.entityType} ${row.entityId}`);
  if (shown.length === NAMED_ENTITIES_SHOWN) parts.push('…');
  if (hidden) parts.push('records you cannot administer');
  return invalid(
    { department: [coded('in_use', `is named by entity permissions (${parts.join(', ')}); remove it from them first`)] },
    'The department is still used by entity permissions.',
  );
}
