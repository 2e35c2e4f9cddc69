import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Auth } from '../../platform/auth/auth.ts';
import type { Tx } from '../../platform/database/database.ts';
import { lockTenantScope } from '../../platform/database/locks.ts';
import { invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { administrableBy } from '../forms/rules.ts';
import { formFields, type FieldType } from '../forms/table.ts';
import { defaultValueSources, type SourceType } from './table.ts';

/** The morph alias of a field as a source entity (seed: "typically `formField`"). */
export const FORM_FIELD_ALIAS = 'formField';

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

export interface SourceCandidate {
  type: SourceType;
  formFieldId: number;
  config: Record<string, unknown>;
  sourceEntityType: string | null;
  sourceEntityId: number | null;
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

/** The seed's rule: `source_entity_id` sent without `source_entity_type` fails validation. */
export function entityPairErrors(body: { source_entity_id?: number | null; source_entity_type?: string | null }): FieldErrors {
  if (body.source_entity_id != null && body.source_entity_type == null) {
    return { source_entity_type: ['is required when source_entity_id is given'] };
  }
  return {};
}

/**
 * Would a `formFieldValue` source of `target` copying from `source` close a cycle? It does
 * when `source` already takes its defaults (directly or through other fields) from
 * `target`. One recursive query; `ignoreSourceId` leaves out the source being updated.
 */
async function closesCycle(tx: Tx, target: number, source: number, ignoreSourceId: number | null): Promise<boolean> {
  // Serialise field-to-field source writes per tenant: two concurrent writes could
  // otherwise each pass this check and together close a cycle.
  await lockTenantScope(tx, 'default_value_sources.cycles');
  const [row] = await tx.execute<{ cycle: boolean }>(sql`
    with recursive reach(field_id) as (
      select ${source}::bigint
      union
      select d.source_entity_id from default_value_sources d join reach r on d.form_field_id = r.field_id
      where d.type = 'formFieldValue' and d.source_entity_type = ${FORM_FIELD_ALIAS}
        and d.source_entity_id is not null and d.id <> ${ignoreSourceId ?? 0}
    )
    select exists (select 1 from reach where field_id = ${target}) as cycle`);
  return row?.cycle === true;
}

/**
 * Field `id` (not deleted) if `auth` may administer its parent form or task template;
 * undefined otherwise. A field of a parent hidden from the caller is thereby exactly
 * like a missing one: no rule looks at its type, so no answer reveals it or its existence.
 */
async function administrableField(tx: Tx, auth: Auth, id: number) {
  const [row] = await tx
    .select({
      field: formFields,
      administrable: sql<boolean>`${administrableBy(
        auth,
        sql`case when ${formFields.formId} is not null then 'form' else 'taskTemplate' end`,
        sql`coalesce(${formFields.formId}, ${formFields.taskTemplateId})`,
      )}`,
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
export async function validateSource(tx: Tx, auth: Auth, candidate: SourceCandidate, ignoreSourceId: number | null): Promise<void> {
  const errors: FieldErrors = {};
  const found = await administrableField(tx, auth, candidate.formFieldId);
  // Only a field of a task template can be a target: the other rules judge that one alone.
  const target = found?.taskTemplateId != null ? found : undefined;
  if (!found) errors.form_field_id = ['does not exist'];
  else if (!target) errors.form_field_id = ['must be a field of a task template'];

  const problem = configProblem(candidate.type, candidate.config);
  if (problem) errors.config = [problem];
  if (candidate.sourceEntityId !== null && candidate.sourceEntityType === null) {
    errors.source_entity_type = ['is required when source_entity_id is given'];
  }

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
      const source = await administrableField(tx, auth, candidate.sourceEntityId);
      if (!source) errors.source_entity_id = ['does not exist'];
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

/** The next `sort_number` of a target field: one more than its highest (decisions: "auto"). */
export async function nextSortNumber(tx: Tx, formFieldId: number): Promise<number> {
  const [row] = await tx
    .select({ next: sql<number>`least(coalesce(max(${defaultValueSources.sortNumber}), 0)::bigint + 1, 2147483647)::int` })
    .from(defaultValueSources)
    .where(eq(defaultValueSources.formFieldId, formFieldId));
  return row?.next ?? 1;
}
