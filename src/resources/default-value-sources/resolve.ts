/**
 * Resolution of a task execution's default values (the spec, operationId getTaskExecutionDefaultValues):
 * per field of the template, sources in `sort_number` order, the first non-null value that
 * fits the field wins.
 * One query per source kind, whatever the number of fields.
 */
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import { can, type Auth } from '../../platform/auth/auth.ts';
import type { Visibility } from '../../platform/result-controls/result-controls.ts';
import { fullName, userFieldVisible } from '../users/view.ts';
import { fieldParentAdministrableBy, fieldValueProblem } from '../forms/rules.ts';
import { formFields, type FieldType } from '../forms/table.ts';
import type { SourceRow } from './queries.ts';
import { VARIABLE_VISIBILITY, type SystemVariable } from './rules.ts';
import { defaultValueSources, FORM_FIELD_ALIAS } from './table.ts';
/** A stored field value (submissions hold only these, see forms/rules.ts). */
type FieldValue = string | number | boolean | null;

/**
 * `source id → value` of every `formFieldValue` source: the latest submission of the source
 * field's parent by `assigneeId`. Submitted values are the assignee's own, and otherwise
 * readable only by those who may administer the form or task template they were submitted
 * to: for any other viewer such a source has no value (judged now, not when the source was
 * made, so a viewer who stopped administering the form stops seeing its values).
 */
async function formFieldValues(tx: Tx, viewer: Auth, sources: SourceRow[], assigneeId: number): Promise<Map<number, FieldValue>> {
  const ids = sources.filter((s) => s.type === 'formFieldValue' && s.sourceEntityType === FORM_FIELD_ALIAS && s.sourceEntityId !== null).map((s) => s.id);
  if (ids.length === 0) return new Map();
  const readable = viewer.userId === assigneeId ? sql`true` : fieldParentAdministrableBy(viewer, sql`sf.form_id`, sql`sf.task_template_id`, sql`sf.tenant_id`);
  const rows = await tx.execute<{ source_id: string; value: FieldValue }>(sql`
    select s.id as source_id, latest.value
    from default_value_sources s
    join form_fields sf on sf.tenant_id = s.tenant_id and sf.id = s.source_entity_id and sf.deleted_at is null
    cross join lateral (
      select sub.values -> sf.id::text as value
      from form_submissions sub
      where sub.tenant_id = sf.tenant_id and sub.user_id = ${assigneeId}
        and ((sf.form_id is not null and sub.form_id = sf.form_id)
          or (sf.task_template_id is not null and sub.task_template_id = sf.task_template_id))
      order by sub.created_at desc, sub.id desc
      limit 1
    ) latest
    where ${inIdList(sql`s.id`, ids)} and ${readable}`);
  return new Map(rows.map((row) => [Number(row.source_id), row.value ?? null]));
}

/** The most characters a text field's value holds (the spec's `FieldValue`). */
const FIELD_TEXT_MAX_LENGTH = 10_000;

/** Every system variable for `assigneeId`, in one query; blank values count as null. */
async function systemVariables(tx: Tx, assigneeId: number): Promise<Record<SystemVariable, string | null>> {
  const [row] = await tx.execute<{
    username: string;
    first_name: string | null;
    last_name: string | null;
    email: string | null;
    staff_number: string | null;
    lang_id: string | null;
    department_names: string | null;
    tenant_name: string | null;
    today: string;
    now: string;
  }>(sql`
    select u.username, u.first_name, u.last_name, u.email, u.staff_number, u.lang_id,
      -- Cut to the most a text value holds (FieldValue), so the prefilled value can be submitted.
      (select left(string_agg(d.name, ', ' order by d.name), ${FIELD_TEXT_MAX_LENGTH})
         from department_users du join departments d on d.tenant_id = du.tenant_id and d.id = du.department_id
        where du.tenant_id = u.tenant_id and du.user_id = u.id) as department_names,
      (select t.name from tenants t where t.id = u.tenant_id) as tenant_name,
      to_char(now() at time zone 'UTC', 'YYYY-MM-DD') as today,
      to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as now
    from users u where u.id = ${assigneeId}`);
  const blankToNull = (value: string | null | undefined) => (value === undefined || value === null || value === '' ? null : value);
  return {
    username: blankToNull(row?.username),
    first_name: blankToNull(row?.first_name),
    last_name: blankToNull(row?.last_name),
    full_name: row ? blankToNull(fullName({ firstName: row.first_name, lastName: row.last_name })) : null,
    email: blankToNull(row?.email),
    staff_number: blankToNull(row?.staff_number),
    language: blankToNull(row?.lang_id),
    department_names: blankToNull(row?.department_names),
    current_date: blankToNull(row?.today),
    current_datetime: blankToNull(row?.now),
    tenant_name: blankToNull(row?.tenant_name),
  };
}

/**
 * Nulls the variables that describe the assignee where the viewer may not read that field of
 * them (`VARIABLE_VISIBILITY`).
 */
function hideInvisibleVariables(variables: Record<SystemVariable, string | null>, viewer: Auth, assigneeId: number) {
  const mayReadUser = viewer.userId === assigneeId || can(viewer, 'users.view');
  for (const [variable, visibility] of Object.entries(VARIABLE_VISIBILITY) as [SystemVariable, Visibility][]) {
    if (!mayReadUser || !userFieldVisible(viewer, visibility, { id: assigneeId })) variables[variable] = null;
  }
  return variables;
}

export async function resolveDefaultValues(tx: Tx, viewer: Auth, execution: { id: number; taskTemplateId: number; userId: number }) {
  const rows = await tx
    .select({ field: formFields, source: defaultValueSources })
    .from(formFields)
    .leftJoin(defaultValueSources, and(eq(defaultValueSources.tenantId, formFields.tenantId), eq(defaultValueSources.formFieldId, formFields.id)))
    .where(and(eq(formFields.taskTemplateId, execution.taskTemplateId), isNull(formFields.deletedAt)))
    .orderBy(asc(formFields.sortNumber), asc(formFields.id), asc(defaultValueSources.sortNumber), asc(defaultValueSources.id));
  const sources = rows.map((r) => r.source).filter((s): s is SourceRow => s !== null);
  const copied = await formFieldValues(tx, viewer, sources, execution.userId);
  const variables = sources.some((s) => s.type === 'systemVariable')
    ? hideInvisibleVariables(await systemVariables(tx, execution.userId), viewer, execution.userId)
    : null;

  const valueOf = (source: SourceRow): FieldValue =>
    source.type === 'formFieldValue' ? (copied.get(source.id) ?? null) : (variables?.[source.config.variable as SystemVariable] ?? null);

  const byField = new Map<
    number,
    { form_field_id: number; name: string; field_type: FieldType; value: FieldValue; default_value_source_id: number | null; type: SourceRow['type'] | null }
  >();
  for (const { field, source } of rows) {
    let entry = byField.get(field.id);
    if (!entry) {
      entry = { form_field_id: field.id, name: field.name, field_type: field.fieldType, value: null, default_value_source_id: null, type: null };
      byField.set(field.id, entry);
    }
    if (!source || entry.default_value_source_id !== null) continue;
    const value = valueOf(source);
    // A value that does not fit the field (a choice its options lack) could not be
    // submitted as it is: the next source is tried.
    if (value !== null && fieldValueProblem(field, value) === null) Object.assign(entry, { value, default_value_source_id: source.id, type: source.type });
  }
  return { task_execution_id: execution.id, data: [...byField.values()] };
}
