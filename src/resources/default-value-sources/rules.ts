/**
 * The rules of default value sources (docs/tasks-and-default-values.md#default-value-sources):
 * who may manage a source, what a source must be, and its sort number. A field, source or
 * template the caller may not administer is answered exactly like a missing one.
 */
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Tx } from '../../platform/database/database.ts';
import { MISSING } from '../../platform/database/existence.ts';
import type { Body } from '../../platform/http/handler.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { administrableBy, fieldParentAdministrableBy, type Caller } from '../forms/rules.ts';
import { formFields, type FieldType } from '../forms/table.ts';
import { closesCycle, nextSortNumber, type SourceCandidate, type SourceRow } from './queries.ts';
import { defaultValueSources, FORM_FIELD_ALIAS, type SourceType } from './table.ts';

/**
 * Which source field types a `formFieldValue` source may copy into a target of each type.
 * A select value is a string, so it fits text; everything else only fits its own type.
 */
export const COMPATIBLE_SOURCE_TYPES: Record<FieldType, readonly FieldType[]> = {
  text: ['text', 'select'],
  number: ['number'],
  date: ['date'],
  boolean: ['boolean'],
  select: ['select'],
};

export const SYSTEM_VARIABLES = [
  'username',
  'first_name',
  'last_name',
  'full_name',
  'email',
  'staff_number',
  'language',
  'department_names',
  'current_date',
  'current_datetime',
  'tenant_name',
] as const;
export type SystemVariable = (typeof SYSTEM_VARIABLES)[number];

/** Target field types a system variable can fill: dates fill date and text fields, the rest text fields. */
export function variableFits(variable: SystemVariable, target: FieldType): boolean {
  return variable === 'current_date' ? target === 'date' || target === 'text' : target === 'text';
}

/** Whether `config` has the shape of its type (the spec checks create bodies; update bodies name no type). */
export function configProblem(type: SourceType, config: Record<string, unknown>): string | null {
  if (type === 'formFieldValue') return Object.keys(config).length === 0 ? null : 'a formFieldValue source takes no options: {}';
  const keys = Object.keys(config);
  if (keys.length !== 1 || !(SYSTEM_VARIABLES as readonly string[]).includes(config.variable as string)) {
    return `a systemVariable source needs {variable}, one of: ${SYSTEM_VARIABLES.join(', ')}`;
  }
  return null;
}

/** `source_entity_id` sent (not null) without `source_entity_type` fails validation, whatever the source type. */
export function entityPairErrors(body: { source_entity_id?: number | null; source_entity_type?: string | null }): FieldErrors {
  if (body.source_entity_id != null && body.source_entity_type == null) {
    return { source_entity_type: ['is required when source_entity_id is given'] };
  }
  return {};
}

/** The source a create body describes (the spec, operationId createDefaultValueSource). */
export function createdCandidate(body: Body<'createDefaultValueSource'>): SourceCandidate {
  return {
    type: body.type,
    formFieldId: body.form_field_id,
    config: body.config ?? {},
    sourceEntityType: body.source_entity_type ?? null,
    sourceEntityId: body.source_entity_id ?? null,
  };
}

/** The source as an update would leave it: every key not sent keeps its current value; the type never changes. */
export function updatedCandidate(current: SourceRow, body: Body<'updateDefaultValueSource'>): SourceCandidate {
  return {
    type: current.type,
    formFieldId: body.form_field_id ?? current.formFieldId,
    config: (body.config as Record<string, unknown> | undefined) ?? current.config,
    sourceEntityType: body.source_entity_type !== undefined ? body.source_entity_type : current.sourceEntityType,
    sourceEntityId: body.source_entity_id !== undefined ? body.source_entity_id : current.sourceEntityId,
  };
}

/**
 * The source's `sort_number`: the one sent; otherwise, for a source that stays on its
 * field, its current one; otherwise one more than the highest of its (new) field ("last + 1").
 */
export async function sortNumberFor(
  tx: Tx,
  sent: number | undefined,
  candidate: Pick<SourceCandidate, 'formFieldId'>,
  current?: Pick<SourceRow, 'formFieldId' | 'sortNumber'>,
): Promise<number> {
  if (sent !== undefined) return sent;
  if (current && current.formFieldId === candidate.formFieldId) return current.sortNumber;
  return nextSortNumber(tx, candidate.formFieldId);
}

/**
 * "May administer this source": the source `id` when the caller may administer its target
 * field's task template; 404 otherwise, the same answer as for a missing source (it does
 * not tell that one exists).
 */
export async function administrableSource(tx: Tx, caller: Caller, id: number): Promise<SourceRow> {
  const [row] = await tx
    .select({
      source: defaultValueSources,
      allowed: sql<boolean>`${administrableBy(caller, sql`'taskTemplate'`, formFields.taskTemplateId)}`,
    })
    .from(defaultValueSources)
    .innerJoin(formFields, eq(formFields.id, defaultValueSources.formFieldId))
    .where(eq(defaultValueSources.id, id));
  if (!row?.allowed) throw notFound('The default value source');
  return row.source;
}

/**
 * Field `id` (not deleted) if `caller` may administer its parent form or task template;
 * undefined otherwise. A field of a parent hidden from the caller is thereby exactly
 * like a missing one: no rule looks at its type, so no answer reveals it or its existence.
 */
export async function administrableField(tx: Tx, caller: Caller, id: number) {
  const [row] = await tx
    .select({
      field: formFields,
      administrable: sql<boolean>`${fieldParentAdministrableBy(caller, formFields.formId, formFields.taskTemplateId)}`,
    })
    .from(formFields)
    .where(and(eq(formFields.id, id), isNull(formFields.deletedAt)));
  return row?.administrable ? row.field : undefined;
}

/**
 * Every rule of a source as it is about to be stored (create, or the merged update): 422
 * with every problem found. A target or source field whose form or task template the
 * caller cannot administer "does not exist", like a missing one, and is judged no further.
 */
export async function validateSource(tx: Tx, caller: Caller, candidate: SourceCandidate, ignoreSourceId: number | null): Promise<void> {
  const errors: FieldErrors = {};
  const found = await administrableField(tx, caller, candidate.formFieldId);
  // Only a field of a task template can be a target: the other rules judge that one alone.
  const target = found?.taskTemplateId != null ? found : undefined;
  if (!found) errors.form_field_id = [MISSING];
  else if (!target) errors.form_field_id = ['must be a field of a task template'];

  const problem = configProblem(candidate.type, candidate.config);
  if (problem) errors.config = [problem];
  Object.assign(errors, entityPairErrors({ source_entity_id: candidate.sourceEntityId, source_entity_type: candidate.sourceEntityType }));

  if (candidate.type === 'formFieldValue') {
    if (candidate.sourceEntityType !== null && candidate.sourceEntityType !== FORM_FIELD_ALIAS) {
      errors.source_entity_type = [`must be ${FORM_FIELD_ALIAS} for a formFieldValue source`];
    }
    if (candidate.sourceEntityType === null && candidate.sourceEntityId === null) {
      errors.source_entity_type = [`is required (${FORM_FIELD_ALIAS}) for a formFieldValue source`];
    }
    if (candidate.sourceEntityId === null) {
      errors.source_entity_id = ['is required for a formFieldValue source'];
    } else if (candidate.sourceEntityId === candidate.formFieldId) {
      errors.source_entity_id = ['a field cannot take its default value from itself'];
    } else {
      const source = await administrableField(tx, caller, candidate.sourceEntityId);
      if (!source) errors.source_entity_id = [MISSING];
      else if (target && !COMPATIBLE_SOURCE_TYPES[target.fieldType].includes(source.fieldType)) {
        errors.source_entity_id = [`a ${source.fieldType} field cannot fill a ${target.fieldType} field`];
      } else if (target && (await closesCycle(tx, candidate.formFieldId, candidate.sourceEntityId, ignoreSourceId))) {
        errors.source_entity_id = ['would make a cycle: this field takes its default value from the target field'];
      }
    }
  } else {
    if (candidate.sourceEntityType !== null) errors.source_entity_type = ['must be null for a systemVariable source'];
    if (candidate.sourceEntityId !== null) errors.source_entity_id = ['must be null for a systemVariable source'];
    const variable = candidate.config.variable as SystemVariable;
    if (!problem && target && !variableFits(variable, target.fieldType)) {
      errors.config = [`the variable ${variable} cannot fill a ${target.fieldType} field`];
    }
  }
  if (Object.keys(errors).length > 0) throw invalid(errors);
}
