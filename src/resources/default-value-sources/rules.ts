/**
 * The rules of default value sources (docs/tasks-and-default-values.md#default-value-sources):
 * who may manage a source, what a source must be, and its sort number. A field, source or
 * template the caller may not administer is answered exactly like a missing one.
 */
import { and, asc, eq, sql } from 'drizzle-orm';
import { can } from '../../platform/auth/auth.ts';
import type { Permission } from '../../platform/auth/permissions.ts';
import type { Tx } from '../../platform/database/database.ts';
import { MISSING_REFERENCE } from '../../platform/database/existence.ts';
import { inIdList } from '../../platform/database/id-list.ts';
import type { Body } from '../../platform/http/handler.ts';
import type { Visibility } from '../../platform/result-controls/result-controls.ts';
import { coded, conflict, invalid, notFound, type FieldErrors, type ProblemError } from '../../platform/http/problem.ts';
import { administrableBy, administrableField, type Caller } from '../forms/rules.ts';
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

/**
 * The system variables that describe the assignee, with the kind of user field each shows.
 * They resolve to null unless the caller may read that field of the assignee as in
 * GET /api/users/{user}: their own record, or `users.view` (any user at all) plus the
 * field's permission for personal and administrative fields. A template administrator is
 * not thereby a reader of users: assigning an execution opens nobody's record.
 */
export const VARIABLE_VISIBILITY: Partial<Record<SystemVariable, Visibility>> = {
  username: 'public',
  first_name: 'public',
  last_name: 'public',
  full_name: 'public',
  language: 'public',
  department_names: 'public',
  email: 'personal',
  staff_number: 'administrative',
};

/**
 * The permissions `caller` lacks to read `variable`, a personal or administrative field, of
 * other users, which a source of it needs: what the assignee submits pre-filled is readable
 * by the template's administrators (through a `formFieldValue` source), so a source may
 * pre-fill a hidden field only for a maker who could read it anyway. None for the public
 * fields and the variables that describe no user.
 */
export function permissionsLackedFor(caller: Caller, variable: SystemVariable): Permission[] {
  const visibility = VARIABLE_VISIBILITY[variable];
  if (visibility === undefined || visibility === 'public') return [];
  const needed: Permission[] = ['users.view', visibility === 'personal' ? 'users.view-personal' : 'users.view-administrative'];
  return needed.filter((permission) => !can(caller, permission));
}

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

/**
 * A source with a `source_entity_id` but no `source_entity_type` fails validation, whatever
 * its type: a create as sent, an update as it would leave the source (a key not sent keeps
 * its value).
 */
export function entityPairErrors(candidate: Pick<SourceCandidate, 'sourceEntityId' | 'sourceEntityType'>): FieldErrors {
  if (candidate.sourceEntityId != null && candidate.sourceEntityType == null) {
    return { source_entity_type: [coded('required', 'is required when source_entity_id is given')] };
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
    .innerJoin(formFields, and(eq(formFields.tenantId, defaultValueSources.tenantId), eq(formFields.id, defaultValueSources.formFieldId)))
    .where(eq(defaultValueSources.id, id));
  if (!row?.allowed) throw notFound('The default value source');
  return row.source;
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
  if (!found) errors.form_field_id = [MISSING_REFERENCE];
  else if (!target) errors.form_field_id = ['must be a field of a task template'];

  const problem = configProblem(candidate.type, candidate.config);
  if (problem) errors.config = [coded(candidate.type === 'formFieldValue' ? 'not_allowed' : 'enum', problem)];
  Object.assign(errors, entityPairErrors(candidate));

  if (candidate.type === 'formFieldValue') {
    if (candidate.sourceEntityType !== null && candidate.sourceEntityType !== FORM_FIELD_ALIAS) {
      errors.source_entity_type = [coded('const', `must be ${FORM_FIELD_ALIAS} for a formFieldValue source`)];
    }
    if (candidate.sourceEntityType === null && candidate.sourceEntityId === null) {
      errors.source_entity_type = [coded('required', `is required (${FORM_FIELD_ALIAS}) for a formFieldValue source`)];
    }
    if (candidate.sourceEntityId === null) {
      errors.source_entity_id = [coded('required', 'is required for a formFieldValue source')];
    } else if (candidate.sourceEntityId === candidate.formFieldId) {
      errors.source_entity_id = [coded('cycle', 'a field cannot take its default value from itself')];
    } else {
      const source = await administrableField(tx, caller, candidate.sourceEntityId);
      if (!source) errors.source_entity_id = [MISSING_REFERENCE];
      else if (target && !COMPATIBLE_SOURCE_TYPES[target.fieldType].includes(source.fieldType)) {
        errors.source_entity_id = [coded('mismatch', `a ${source.fieldType} field cannot fill a ${target.fieldType} field`)];
      } else if (target && (await closesCycle(tx, caller.tenantId, candidate.formFieldId, candidate.sourceEntityId, ignoreSourceId))) {
        errors.source_entity_id = [coded('cycle', 'would make a cycle: this field takes its default value from the target field')];
      }
    }
  } else {
    if (candidate.sourceEntityType !== null) errors.source_entity_type = [coded('not_allowed', 'must be null for a systemVariable source')];
    if (candidate.sourceEntityId !== null) errors.source_entity_id = [coded('not_allowed', 'must be null for a systemVariable source')];
    const variable = candidate.config.variable as SystemVariable;
    if (!problem && target && !variableFits(variable, target.fieldType)) {
      errors.config = [coded('mismatch', `the variable ${variable} cannot fill a ${target.fieldType} field`)];
    }
    const lacked = problem || !target ? [] : permissionsLackedFor(caller, variable);
    if (lacked.length > 0) {
      (errors.config ??= []).push(coded('permission_missing', `the variable ${variable} needs the permission ${lacked.map((p) => `"${p}"`).join(' and ')}`));
    }
  }
  if (Object.keys(errors).length > 0) throw invalid(errors);
}

/** How many sources a refusal names by id at most. */
export const BLOCKING_SOURCES_SHOWN = 10;

/**
 * The refusal (409) of deleting fields while default value sources of other fields copy
 * from them, or null when none does. Call it after the delete, inside its transaction:
 * the sources that went with the delete (those filling the deleted fields) are gone, so
 * what remains named by `copiedFrom` blocks it, and the 409 rolls the delete back. It
 * names the sources the caller may administer (at most `BLOCKING_SOURCES_SHOWN`, "…"
 * beyond) and of the others only that there are some, like any record hidden from them.
 */
export async function sourcesCopyingFromRefusal(
  tx: Tx,
  caller: Caller,
  copiedFrom: readonly number[],
  key: string,
  what: string,
): Promise<ProblemError | null> {
  if (copiedFrom.length === 0) return null;
  const rows = await tx
    .select({ id: defaultValueSources.id, shown: sql<boolean>`${administrableBy(caller, sql`'taskTemplate'`, formFields.taskTemplateId)}` })
    .from(defaultValueSources)
    .innerJoin(formFields, and(eq(formFields.tenantId, defaultValueSources.tenantId), eq(formFields.id, defaultValueSources.formFieldId)))
    .where(and(eq(defaultValueSources.sourceEntityType, FORM_FIELD_ALIAS), inIdList(defaultValueSources.sourceEntityId, copiedFrom)))
    .orderBy(asc(defaultValueSources.id));
  if (rows.length === 0) return null;
  const shown = rows.filter((row) => row.shown).map((row) => String(row.id));
  const parts = shown.length > BLOCKING_SOURCES_SHOWN ? [...shown.slice(0, BLOCKING_SOURCES_SHOWN), '…'] : shown;
  if (shown.length < rows.length) parts.push('sources you cannot administer');
  return conflict(
    { [key]: [coded('in_use', `default value sources copy from it (${parts.join(', ')}); delete them or change their source first`)] },
    `${what} is still the source of default value sources.`,
  );
}

/** Deletes the default value sources that fill any of the fields `filled` (they go with the fields). */
export async function deleteSourcesFilling(tx: Tx, filled: readonly number[]): Promise<void> {
  if (filled.length > 0) await tx.delete(defaultValueSources).where(inIdList(defaultValueSources.formFieldId, filled));
}
