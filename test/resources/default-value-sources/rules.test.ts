/**
 * The rules of default value sources (src/resources/default-value-sources/rules.ts), called
 * directly: the pure ones on values, the ones that need data in a tenant transaction on
 * rows written as the database owner (the test API only provides the database, the tenant
 * and users; no request is made).
 */
import t from 'tap';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import type { Tx } from '../../../src/platform/database/database.ts';
import { MISSING } from '../../../src/platform/database/existence.ts';
import { coded, ProblemError } from '../../../src/platform/http/problem.ts';
import type { SourceCandidate, SourceRow } from '../../../src/resources/default-value-sources/queries.ts';
import {
  administrableSource,
  COMPATIBLE_SOURCE_TYPES,
  configProblem,
  createdCandidate,
  entityPairErrors,
  sortNumberFor,
  updatedCandidate,
  validateSource,
  variableFits,
} from '../../../src/resources/default-value-sources/rules.ts';
import { defaultValueSources } from '../../../src/resources/default-value-sources/table.ts';
import { entityPermissions } from '../../../src/resources/entity-permissions/table.ts';
import { administrableField, type Caller } from '../../../src/resources/forms/rules.ts';
import { formFields, forms, taskTemplates } from '../../../src/resources/forms/table.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

t.test('configProblem: a formFieldValue source takes {}, a systemVariable source {variable}', async (t) => {
  t.equal(configProblem('formFieldValue', {}), null);
  t.equal(configProblem('formFieldValue', { variable: 'username' }), 'a formFieldValue source takes no options: {}');
  t.equal(configProblem('systemVariable', { variable: 'current_date' }), null);
  for (const config of [{}, { variable: 'password' }, { variable: 'username', extra: 1 }]) {
    t.match(configProblem('systemVariable', config), /^a systemVariable source needs \{variable\}, one of: username, /, JSON.stringify(config));
  }
});

t.test('entityPairErrors: a source_entity_id needs a source_entity_type', async (t) => {
  const refused = { source_entity_type: [coded('required', 'is required when source_entity_id is given')] };
  t.strictSame(entityPairErrors({ sourceEntityId: 5, sourceEntityType: null }), refused);
  t.strictSame(entityPairErrors({ sourceEntityId: 5, sourceEntityType: 'formField' }), {});
  t.strictSame(entityPairErrors({ sourceEntityId: null, sourceEntityType: null }), {});
  t.strictSame(entityPairErrors({ sourceEntityId: null, sourceEntityType: 'formField' }), {}, 'a type alone is judged by the source type');
});

t.test('variableFits and COMPATIBLE_SOURCE_TYPES: which values fill which fields', async (t) => {
  t.ok(variableFits('current_date', 'date') && variableFits('current_date', 'text'));
  t.notOk(variableFits('current_date', 'number'));
  t.ok(variableFits('username', 'text'));
  for (const target of ['number', 'date', 'boolean', 'select'] as const) t.notOk(variableFits('current_datetime', target), `current_datetime into ${target}`);
  t.strictSame(COMPATIBLE_SOURCE_TYPES.text, ['text', 'select'], 'a select value is a string');
  for (const type of ['number', 'date', 'boolean', 'select'] as const) t.strictSame(COMPATIBLE_SOURCE_TYPES[type], [type]);
});

t.test('createdCandidate and updatedCandidate: the source as it is about to be stored', async (t) => {
  t.strictSame(createdCandidate({ type: 'systemVariable', form_field_id: 7, config: { variable: 'email' } }), {
    type: 'systemVariable',
    formFieldId: 7,
    config: { variable: 'email' },
    sourceEntityType: null,
    sourceEntityId: null,
  });
  t.strictSame(createdCandidate({ type: 'formFieldValue', form_field_id: 7, source_entity_type: 'formField', source_entity_id: 8 }), {
    type: 'formFieldValue',
    formFieldId: 7,
    config: {},
    sourceEntityType: 'formField',
    sourceEntityId: 8,
  });
  const current = { type: 'formFieldValue', formFieldId: 7, config: {}, sourceEntityType: 'formField', sourceEntityId: 8, sortNumber: 3 } as SourceRow;
  const kept: SourceCandidate = { type: 'formFieldValue', formFieldId: 7, config: {}, sourceEntityType: 'formField', sourceEntityId: 8 };
  t.strictSame(updatedCandidate(current, {}), kept, 'keys not sent keep their values');
  t.strictSame(updatedCandidate(current, { form_field_id: 9, source_entity_id: 10 }), { ...kept, formFieldId: 9, sourceEntityId: 10 });
  t.strictSame(
    updatedCandidate(current, { source_entity_type: null, source_entity_id: null }),
    { ...kept, sourceEntityType: null, sourceEntityId: null },
    'null clears',
  );
});

// ---- rules that need data ----

const data = await startTestDatabase(t);
const db = data.db;
const { tenantId } = await data.createTenant('dvs-rules');
const manager = await data.createUser(tenantId);
const stranger = await data.createUser(tenantId);

/** The manager administers the template "Managed" and the form "Shared"; nobody but tasks.administer the form "Secret". */
const [managed] = await db.owner.insert(taskTemplates).values({ tenantId, title: 'Managed' }).returning({ id: taskTemplates.id });
const survey = async (title: string) => (await db.owner.insert(forms).values({ tenantId, title, formType: 'survey' }).returning({ id: forms.id }))[0]!;
const shared = await survey('Shared');
const secret = await survey('Secret');
await db.owner.insert(entityPermissions).values([
  { tenantId, entityType: 'taskTemplate', entityId: managed!.id, subjectType: 'user', subjectId: manager.id },
  { tenantId, entityType: 'form', entityId: shared.id, subjectType: 'user', subjectId: manager.id },
]);
const field = async (
  parent: { formId: number } | { taskTemplateId: number },
  name: string,
  fieldType: 'text' | 'number' | 'date',
  deletedAt: Date | null = null,
) =>
  (
    await db.owner
      .insert(formFields)
      .values({ tenantId, ...parent, name, fieldType, sortNumber: 1, deletedAt })
      .returning()
  )[0]!;
const target = await field({ taskTemplateId: managed!.id }, 'Target', 'text');
const other = await field({ taskTemplateId: managed!.id }, 'Other', 'text');
const count = await field({ taskTemplateId: managed!.id }, 'Count', 'number');
const sharedText = await field({ formId: shared.id }, 'Shared text', 'text');
const sharedDate = await field({ formId: shared.id }, 'Shared date', 'date');
const secretText = await field({ formId: secret.id }, 'Secret text', 'text');
const removed = await field({ taskTemplateId: managed!.id }, 'Removed', 'text', new Date());

const caller = (userId: number, permissions: Permission[] = []): Caller => ({ tenantId, userId, permissions: new Set(permissions) });
const inTenant = <T>(work: (tx: Tx) => Promise<T>) => db.tenant(tenantId, work);
const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => undefined,
    (error: unknown) => (error instanceof ProblemError ? error.toDocument() : error),
  );
const variable = (formFieldId: number, name = 'username'): SourceCandidate => ({
  type: 'systemVariable',
  formFieldId,
  config: { variable: name },
  sourceEntityType: null,
  sourceEntityId: null,
});
const copy = (formFieldId: number, sourceId: number): SourceCandidate => ({
  type: 'formFieldValue',
  formFieldId,
  config: {},
  sourceEntityType: 'formField',
  sourceEntityId: sourceId,
});
const validate = (who: Caller, candidate: SourceCandidate, ignore: number | null = null) =>
  refusal(inTenant((tx) => validateSource(tx, who, candidate, ignore)));

t.test('administrableField: a live field whose parent the caller administers; anything else is missing', async (t) => {
  const find = (who: Caller, id: number) => inTenant((tx) => administrableField(tx, who, id));
  t.equal((await find(caller(manager.id), target.id))?.id, target.id);
  t.equal((await find(caller(manager.id), sharedText.id))?.id, sharedText.id, 'a field of a form the caller administers');
  t.equal(await find(caller(manager.id), secretText.id), undefined, 'a field of a form the caller may not administer');
  t.equal(await find(caller(stranger.id), target.id), undefined);
  t.equal(await find(caller(stranger.id, ['tasks.administer']), removed.id), undefined, 'a deleted field');
  t.equal((await find(caller(stranger.id, ['tasks.administer']), secretText.id))?.id, secretText.id, 'tasks.administer');
});

t.test('validateSource: every problem at once; a field the caller may not administer is a missing one', async (t) => {
  const mine = caller(manager.id);
  t.equal(await validate(mine, variable(target.id)), undefined, 'a valid source');
  t.equal(await validate(mine, copy(target.id, sharedText.id)), undefined);
  t.match(await validate(mine, variable(sharedText.id)), { status: 422, errors: { form_field_id: ['must be a field of a task template'] } });
  const hiddenTarget = await validate(caller(stranger.id), variable(target.id));
  t.strictSame(hiddenTarget, await validate(caller(stranger.id), variable(999999)), 'a hidden target is answered like a missing one');
  t.strictSame((hiddenTarget as { errors: unknown }).errors, { form_field_id: [MISSING] }, 'and is judged no further');
  t.strictSame(await validate(mine, copy(target.id, secretText.id)), await validate(mine, copy(target.id, 999999)), 'a hidden source field too');
  t.match(await validate(mine, copy(count.id, sharedText.id)), {
    errors: { source_entity_id: ['a text field cannot fill a number field'] },
    error_codes: { source_entity_id: ['mismatch'] },
  });
  t.match(await validate(mine, copy(count.id, count.id)), {
    errors: { source_entity_id: ['a field cannot take its default value from itself'] },
    error_codes: { source_entity_id: ['cycle'] },
  });
  t.match(await validate(mine, variable(count.id, 'current_date')), {
    errors: { config: ['the variable current_date cannot fill a number field'] },
    error_codes: { config: ['mismatch'] },
  });
  t.strictSame(
    (await validate(mine, { type: 'systemVariable', formFieldId: target.id, config: {}, sourceEntityType: null, sourceEntityId: sharedDate.id })) as object,
    {
      type: '/problems/unprocessable-content',
      title: 'Unprocessable Content',
      status: 422,
      code: 'validation_failed',
      detail: 'The request is invalid.',
      errors: {
        config: [configProblem('systemVariable', {})!],
        source_entity_type: ['is required when source_entity_id is given'],
        source_entity_id: ['must be null for a systemVariable source'],
      },
      error_codes: { config: ['enum'], source_entity_type: ['required'], source_entity_id: ['not_allowed'] },
    },
    'every problem of one source in one answer',
  );
});

t.test("validateSource: a hidden field pre-filled needs its maker to read it of other users (the assignee's answer shows it)", async (t) => {
  const refused = (variableName: string, permissions: Permission[]) => validate(caller(manager.id, permissions), variable(target.id, variableName));
  t.match(await refused('email', []), {
    status: 422,
    errors: { config: ['the variable email needs the permission "users.view" and "users.view-personal"'] },
    error_codes: { config: ['permission_missing'] },
  });
  t.match(await refused('email', ['users.view']), { errors: { config: ['the variable email needs the permission "users.view-personal"'] } });
  t.match(await refused('email', ['users.view-personal']), { errors: { config: ['the variable email needs the permission "users.view"'] } });
  t.match(await refused('staff_number', ['users.view', 'users.view-personal']), {
    errors: { config: ['the variable staff_number needs the permission "users.view-administrative"'] },
  });
  t.equal(await refused('email', ['users.view', 'users.view-personal']), undefined, 'email with both');
  t.equal(await refused('staff_number', ['users.view', 'users.view-administrative']), undefined, 'staff_number with both');
  for (const open of ['username', 'first_name', 'last_name', 'full_name', 'language', 'department_names', 'current_date', 'current_datetime', 'tenant_name']) {
    t.equal(await refused(open, []), undefined, `${open} needs none`);
  }
  t.strictSame(
    ((await validate(caller(stranger.id), variable(target.id, 'email'))) as { errors: unknown }).errors,
    { form_field_id: [MISSING] },
    'a hidden target is still judged no further',
  );
});

t.test('validateSource: no field takes its default from itself through other fields', async (t) => {
  const mine = caller(manager.id);
  const [first] = await db.owner
    .insert(defaultValueSources)
    .values({ tenantId, ...copy(other.id, target.id), sortNumber: 1 })
    .returning();
  t.match(await validate(mine, copy(target.id, other.id)), {
    errors: { source_entity_id: [/would make a cycle/] },
    error_codes: { source_entity_id: ['cycle'] },
  });
  t.equal(await validate(mine, copy(target.id, other.id), first!.id), undefined, 'not when the source closing it is the one being updated');
  await db.owner.delete(defaultValueSources);
});

t.test('administrableSource: the source of a template the caller administers; 404 otherwise, as for a missing one', async (t) => {
  const [source] = await db.owner
    .insert(defaultValueSources)
    .values({ tenantId, ...variable(target.id), sortNumber: 1 })
    .returning();
  t.strictSame(await inTenant((tx) => administrableSource(tx, caller(manager.id), source!.id)), source);
  const hidden = await refusal(inTenant((tx) => administrableSource(tx, caller(stranger.id), source!.id)));
  t.strictSame(hidden, await refusal(inTenant((tx) => administrableSource(tx, caller(stranger.id), 999999))));
  t.match(hidden, { status: 404, detail: 'The default value source does not exist.' });
  await db.owner.delete(defaultValueSources);
});

t.test('sortNumberFor: the number sent, else kept on the same field, else last + 1', async (t) => {
  await db.owner.insert(defaultValueSources).values([
    { tenantId, ...variable(target.id), sortNumber: 4 },
    { tenantId, ...variable(target.id), sortNumber: 9 },
  ]);
  const number = (sent: number | undefined, formFieldId: number, current?: { formFieldId: number; sortNumber: number }) =>
    inTenant((tx) => sortNumberFor(tx, sent, { formFieldId }, current));
  t.equal(await number(2, target.id), 2);
  t.equal(await number(undefined, target.id), 10, 'after the highest of the field');
  t.equal(await number(undefined, other.id), 1, 'the first of a field');
  t.equal(await number(undefined, target.id, { formFieldId: target.id, sortNumber: 4 }), 4, 'a source that stays keeps its number');
  t.equal(await number(undefined, other.id, { formFieldId: target.id, sortNumber: 4 }), 1, 'a source that moves goes last on its new field');
  t.equal(await number(0, other.id, { formFieldId: target.id, sortNumber: 4 }), 0);
  await db.owner.delete(defaultValueSources);
});
