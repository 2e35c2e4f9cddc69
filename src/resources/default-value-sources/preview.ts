/**
 * The source-field preview of `formFieldValue` sources, its filters and their options
 * (docs/tasks-and-default-values.md#source-field-preview-and-filter-options): fields of
 * the forms and task templates the caller may administer, in count-less pages
 * (docs/api-conventions.md#count-less-pagination).
 */
import { containsPattern } from '../../platform/database/text-search.ts';
import { and, asc, eq, ilike, inArray, isNotNull, isNull, or, sql, type SQL } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import type { Body } from '../../platform/http/handler.ts';
import { fieldParentAdministrableBy, type Caller } from '../forms/rules.ts';
import { formFields, forms, taskTemplates, type ParentType } from '../forms/table.ts';
import type { LabelKey, Labels } from './labels.ts';
import { COMPATIBLE_SOURCE_TYPES } from './rules.ts';
import { FORM_FIELD_ALIAS } from './table.ts';

export type PageRequest = NonNullable<Body<'previewFormFieldValueSourceFields'>>;
export type PreviewFilter = NonNullable<PageRequest['filter']>;
export type FilterKey = keyof PreviewFilter;
export type MultiSelectKey = 'form_type' | 'form_id' | 'task_template_id' | 'parent_type' | 'field_type';

export const FILTERS: { key: FilterKey & LabelKey; kind: 'text' | 'multiSelect' | 'number' }[] = [
  { key: 'text', kind: 'text' },
  { key: 'form_type', kind: 'multiSelect' },
  { key: 'form_id', kind: 'multiSelect' },
  { key: 'task_template_id', kind: 'multiSelect' },
  { key: 'parent_type', kind: 'multiSelect' },
  { key: 'field_type', kind: 'multiSelect' },
  { key: 'compatible_with_form_field_id', kind: 'number' },
];

export const DEFAULT_PER_PAGE = 15;

const parentTitle = sql<string>`coalesce(${forms.title}, ${taskTemplates.title})`;
const parentType = sql<ParentType>`case when ${formFields.formId} is not null then 'form' else 'taskTemplate' end`;
const parentId = sql<number>`coalesce(${formFields.formId}, ${formFields.taskTemplateId})`;

const selected = <T>(values: T[] | undefined): values is T[] => values !== undefined && values.length > 0;

/**
 * Fields a `formFieldValue` source of `targetId` may copy from: compatible type, not the
 * target. A target the caller cannot administer matches nothing, like a missing one, so
 * the filter does not reveal the type (or existence) of fields hidden from the caller.
 */
function compatibleWith(caller: Caller, targetId: number): SQL {
  const pairs = Object.entries(COMPATIBLE_SOURCE_TYPES).flatMap(([target, sources]) => sources.map((source) => sql`(${target}, ${source})`));
  const targetAdministrable = fieldParentAdministrableBy(caller, sql`t.form_id`, sql`t.task_template_id`, sql`t.tenant_id`);
  return sql`(${formFields.id} <> ${targetId} and exists (
    select 1 from form_fields t
    where t.tenant_id = ${formFields.tenantId} and t.id = ${targetId} and t.deleted_at is null and ${targetAdministrable}
      and (t.field_type, ${formFields.fieldType}::text) in (${sql.join(pairs, sql`, `)})))`;
}

/** The previewable fields under `filter` (leaving out the filter `omit`), as one condition. */
function previewConditions(caller: Caller, filter: PreviewFilter, omit?: FilterKey): SQL | undefined {
  const conditions: (SQL | undefined)[] = [isNull(formFields.deletedAt), fieldParentAdministrableBy(caller, formFields.formId, formFields.taskTemplateId)];
  const f = { ...filter };
  if (omit) delete f[omit];
  if (f.text !== undefined && f.text.trim() !== '') {
    const pattern = containsPattern(f.text.trim());
    conditions.push(or(ilike(formFields.name, pattern), ilike(parentTitle, pattern)));
  }
  if (selected(f.form_type)) conditions.push(inArray(forms.formType, f.form_type));
  if (selected(f.form_id)) conditions.push(inArray(formFields.formId, f.form_id));
  if (selected(f.task_template_id)) conditions.push(inArray(formFields.taskTemplateId, f.task_template_id));
  if (selected(f.parent_type)) {
    conditions.push(or(...f.parent_type.map((type) => (type === 'form' ? isNotNull(formFields.formId) : isNotNull(formFields.taskTemplateId)))));
  }
  if (selected(f.field_type)) conditions.push(inArray(formFields.fieldType, f.field_type));
  if (f.compatible_with_form_field_id !== undefined) conditions.push(compatibleWith(caller, f.compatible_with_form_field_id));
  return and(...conditions);
}

/** Count-less page: fetch one row more than asked to know whether there is more. */
function pageOf<T>(rows: T[], page: number, perPage: number) {
  return { data: rows.slice(0, perPage), current_page: page, per_page: perPage, has_more: rows.length > perPage, total: null };
}

export async function previewFields(tx: Tx, auth: Auth, request: PageRequest, labels: Labels) {
  const page = request.page ?? 1;
  const perPage = request.per_page ?? DEFAULT_PER_PAGE;
  const rows = await tx
    .select({
      id: formFields.id,
      name: formFields.name,
      fieldType: formFields.fieldType,
      parentType,
      parentId,
      parentTitle,
    })
    .from(formFields)
    .leftJoin(forms, and(eq(forms.tenantId, formFields.tenantId), eq(forms.id, formFields.formId)))
    .leftJoin(taskTemplates, and(eq(taskTemplates.tenantId, formFields.tenantId), eq(taskTemplates.id, formFields.taskTemplateId)))
    .where(previewConditions(auth, request.filter ?? {}))
    .orderBy(sql`${formFields.formId} is null`, asc(parentTitle), asc(parentId), asc(formFields.sortNumber), asc(formFields.id))
    .limit(perPage + 1)
    .offset((page - 1) * perPage);
  const entries = rows.map((row) => ({
    id: row.id,
    title: row.name,
    sub_title: labels[row.parentType],
    description: row.parentTitle,
    field_type: row.fieldType,
    parent_type: row.parentType,
    parent_id: Number(row.parentId),
    source_entity_type: FORM_FIELD_ALIAS,
    source_entity_id: row.id,
  }));
  return pageOf(entries, page, perPage);
}

/** How each multi-select filter's options are produced: value, label and order. */
const OPTION_SOURCES: Record<MultiSelectKey, { value: SQL; label: SQL; order: SQL[]; isId?: true }> = {
  form_id: { value: sql`${forms.id}`, label: sql`${forms.title}`, order: [sql`${forms.title}`, sql`${forms.id}`], isId: true },
  task_template_id: {
    isId: true,
    value: sql`${taskTemplates.id}`,
    label: sql`${taskTemplates.title}`,
    order: [sql`${taskTemplates.title}`, sql`${taskTemplates.id}`],
  },
  form_type: { value: sql`${forms.formType}`, label: sql`${forms.formType}`, order: [sql`${forms.formType}`] },
  field_type: { value: sql`${formFields.fieldType}`, label: sql`${formFields.fieldType}`, order: [sql`${formFields.fieldType}`] },
  parent_type: { value: parentType, label: parentType, order: [sql`${parentType} = 'taskTemplate'`] },
};

/** The options of `key` among the fields the preview shows with the OTHER filters applied. */
export async function filterOptions(tx: Tx, auth: Auth, key: MultiSelectKey, request: PageRequest, labels: Labels) {
  const page = request.page ?? 1;
  const perPage = request.per_page ?? DEFAULT_PER_PAGE;
  const source = OPTION_SOURCES[key];
  // Fields of the other parent kind have no value for form_id / form_type / task_template_id.
  const present =
    key === 'form_id' || key === 'form_type' ? isNotNull(formFields.formId) : key === 'task_template_id' ? isNotNull(formFields.taskTemplateId) : undefined;
  // A parent is joined only when the statement reads it, and as an inner join when only
  // its fields remain (`present`, or the form_type filter): the rows are the same.
  // PostgreSQL drops an outer join that nothing reads and makes one inner when the filter
  // allows; Citus (on PostgreSQL 15 and 16) refuses what is left of such a plan ("outer
  // joins and pseudoconstant quals": the tenant's row-level security condition).
  const filter = request.filter ?? {};
  const titled = filter.text !== undefined && filter.text.trim() !== '';
  const onForm = and(eq(forms.tenantId, formFields.tenantId), eq(forms.id, formFields.formId));
  const onTemplate = and(eq(taskTemplates.tenantId, formFields.tenantId), eq(taskTemplates.id, formFields.taskTemplateId));
  let query = tx
    .select({ value: sql<string | number>`${source.value}`, label: sql<string>`${source.label}` })
    .from(formFields)
    .$dynamic();
  if (key === 'form_id' || key === 'form_type' || selected(filter.form_type)) query = query.innerJoin(forms, onForm);
  else if (titled) query = query.leftJoin(forms, onForm);
  if (key === 'task_template_id') query = query.innerJoin(taskTemplates, onTemplate);
  else if (titled) query = query.leftJoin(taskTemplates, onTemplate);
  const rows = await query
    .where(and(previewConditions(auth, filter, key), present))
    .groupBy(...source.order, source.value, source.label)
    .orderBy(...source.order.map((o) => asc(o)))
    .limit(perPage + 1)
    .offset((page - 1) * perPage);
  const options = rows.map((row) => ({
    // ids arrive as text from raw SQL (bigint); the options answer them as integers
    value: source.isId ? Number(row.value) : row.value,
    label: key === 'parent_type' ? labels[row.label as ParentType] : row.label,
  }));
  return pageOf(options, page, perPage);
}

export const isMultiSelect = (key: string): key is MultiSelectKey => FILTERS.some((f) => f.key === key && f.kind === 'multiSelect');
