import type { Auth } from '../../platform/auth/auth.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { MISSING_REFERENCE } from '../../platform/database/existence.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import { invalid, notFound, type FieldErrors } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord, type Listing } from '../../platform/result-controls/listing.ts';
import type { ControlsQuery, Presented } from '../../platform/result-controls/result-controls.ts';
import type { AuditAction } from '../../platform/audit/actions.ts';
import { changesBetween } from '../../platform/audit/audit.ts';
import { audit, recordChanges, type RequestContext } from '../audit-events/record.ts';
import { deleteSourcesFilling, sourcesCopyingFromRefusal } from '../default-value-sources/rules.ts';
import { replaceSubjectLists, storedSubjectLists, type SubjectLists } from '../entity-permissions/queries.ts';
import { missingSubjects } from '../entity-permissions/rules.ts';
import {
  deleteExecution,
  deleteParent,
  deleteSubmission,
  fieldIdsOf,
  findForm,
  findOwnSubmission,
  holdSubmissionExecution,
  findTaskTemplate,
  insertExecution,
  insertField,
  insertFieldsAndPermissions,
  insertForm,
  insertSubmission,
  insertTaskTemplate,
  nextFieldSortNumber,
  reassignExecution,
  replaceSubmissionValues,
  softDeleteField,
  submissionWithId,
  updateField,
  updatedForm,
  updatedTaskTemplate,
  updateForm,
  updateTaskTemplate,
  type FieldInput,
  type FormRow,
  type SubmissionRow,
  type TaskTemplateRow,
} from './queries.ts';
import {
  assignmentErrors,
  canAdminister,
  checkSubmission,
  fieldOptionsErrors,
  fieldParent,
  parentInputErrors,
  requireAdministeredExecution,
  requireAdministrable,
  requireAdministrableField,
  requireVisibleExecution,
  resubmissionErrors,
  submissionParent,
} from './rules.ts';
import { forms, taskExecutions, taskTemplates, type ParentType } from './table.ts';
import {
  fieldListing,
  fieldView,
  formListing,
  SHOW_RELATIONS,
  submissionListing,
  submissionView,
  taskExecutionListing,
  taskExecutionView,
  taskTemplateListing,
} from './view.ts';

/** 422 naming every problem, when there is one. */
function refuse(errors: FieldErrors): void {
  if (Object.keys(errors).length > 0) throw invalid(errors);
}

/** Forms and task templates: the same operations over two kinds of parent of fields. */
interface Parent<Row extends { id: number }, Input, Change> {
  type: ParentType;
  /** Its events in the audit trail: `<audit>.created`, `.updated`, `.deleted`. */
  audit: 'form' | 'task_template';
  what: string;
  /** The key of a refusal to delete it (409). */
  key: string;
  /** Its table, whose row an update or delete locks first (`lockRecord`). */
  table: typeof forms | typeof taskTemplates;
  listing: Listing<Row, Auth>;
  insert(tx: Tx, tenantId: number, input: Input): Promise<Row>;
  find(tx: Tx, id: number): Promise<Row | undefined>;
  update(tx: Tx, id: number, change: Change, options: { changed: boolean }): Promise<Row>;
  /** The row as `update` leaves it with `change`. */
  updated(row: Row, change: Change): Row;
}

const FORM: Parent<FormRow, Parameters<typeof insertForm>[2], Parameters<typeof updateForm>[2]> = {
  type: 'form',
  audit: 'form',
  what: 'The form',
  key: 'form',
  table: forms,
  listing: formListing,
  insert: insertForm,
  find: findForm,
  update: updateForm,
  updated: updatedForm,
};
const TASK_TEMPLATE: Parent<TaskTemplateRow, Parameters<typeof insertTaskTemplate>[2], Parameters<typeof updateTaskTemplate>[2]> = {
  type: 'taskTemplate',
  audit: 'task_template',
  what: 'The task template',
  key: 'task_template',
  table: taskTemplates,
  listing: taskTemplateListing,
  insert: insertTaskTemplate,
  find: findTaskTemplate,
  update: updateTaskTemplate,
  updated: updatedTaskTemplate,
};

/** A form, task template or field as the audit trail names it: by its name, or its label. */
function auditTarget(type: string, record: Record<string, unknown>) {
  const label = record.name ?? record.title ?? record.label ?? null;
  return { type, id: record.id as number, label: typeof label === 'string' ? label : null };
}

/** Records the event of a parent's or field's write. */
async function auditWrite(
  tx: Tx,
  ctx: RequestContext,
  type: string,
  what: 'created' | 'updated' | 'deleted',
  before: Record<string, unknown> | null,
  after: Record<string, unknown> | null,
) {
  const changes = recordChanges(before, after);
  if (what === 'updated' && Object.keys(changes).length === 0) return;
  await audit(tx, ctx, { action: `${type}.${what}` as AuditAction, target: auditTarget(type, (after ?? before)!), changes });
}

/** A submission's fields as the trail keeps them, by the API's names. */
const submissionFields = (row: SubmissionRow) => ({
  form_id: row.formId,
  task_template_id: row.taskTemplateId,
  task_execution_id: row.taskExecutionId,
  user_id: row.userId,
  values: row.values,
});

/**
 * Records the event of a submission's write (`form_submission.*`), none for a resubmission
 * that changes no value. The values themselves stay out of the trail: they are the
 * person's own data, which a blackout clears from the submission but would not from an
 * event; the trail says that `values` changed and which fields (`details.field_ids`).
 */
async function auditSubmission(
  tx: Tx,
  ctx: RequestContext,
  what: 'created' | 'updated' | 'deleted',
  before: SubmissionRow | null,
  after: SubmissionRow | null,
) {
  // The field ids (keys of `values`) whose value differs, compared as every change of the trail is.
  const fieldIds = Object.keys(changesBetween(before?.values ?? {}, after?.values ?? {})).sort((a, b) => Number(a) - Number(b));
  const changes = changesBetween(before && submissionFields(before), after && submissionFields(after), ['values']);
  if (what === 'updated' && Object.keys(changes).length === 0) return;
  await audit(tx, ctx, {
    action: `form_submission.${what}`,
    target: { type: 'form_submission', id: (after ?? before)!.id, label: null },
    changes,
    details: { field_ids: fieldIds },
  });
}

/** Creates the parent, its fields and its entity permissions; answers it with `SHOW_RELATIONS`. */
async function createParent<Row extends { id: number }, Input, Change>(
  db: Database,
  ctx: RequestContext & { auth: Auth },
  parent: Parent<Row, Input, Change>,
  input: Input & { fields?: FieldInput[]; entity_permissions?: Partial<SubjectLists> },
): Promise<Presented> {
  const { auth } = ctx;
  return db.tenant(auth.tenantId, async (tx) => {
    refuse(await parentInputErrors(tx, input));
    const row = await parent.insert(tx, auth.tenantId, input);
    await insertFieldsAndPermissions(tx, auth.tenantId, parent.type, row.id, input.fields ?? [], input.entity_permissions);
    const [record] = await presentAll(parent.listing.view, tx, [row], auth, SHOW_RELATIONS);
    await auditWrite(tx, ctx, parent.audit, 'created', null, record!);
    return record!;
  });
}

/** One parent the caller may administer, with `SHOW_RELATIONS` by default; otherwise 404, as for a missing one. */
function showParent<Row extends { id: number }, Input, Change>(db: Database, auth: Auth, parent: Parent<Row, Input, Change>, query: ControlsQuery, id: number) {
  const find = async (tx: Tx) => {
    await requireAdministrable(tx, auth, parent.type, id, parent.what);
    return parent.find(tx, id);
  };
  return showRecord(db, auth.tenantId, parent.listing, query, auth, find, parent.what, { defaultRelations: SHOW_RELATIONS });
}

/**
 * Updates a parent the caller administers (otherwise 404): its own keys, and its entity
 * permissions when sent (replacing all three lists). Naming subjects confers only the
 * right to administer this parent, which the caller holds, so no escalation check applies
 * (docs/tasks-and-default-values.md#life-cycle). Answers it with `SHOW_RELATIONS`.
 */
async function updateParent<Row extends { id: number }, Input, Change>(
  db: Database,
  ctx: RequestContext & { auth: Auth },
  parent: Parent<Row, Input, Change>,
  id: number,
  body: Change & { entity_permissions?: Partial<SubjectLists> },
): Promise<Presented> {
  const { auth } = ctx;
  return db.tenant(auth.tenantId, async (tx) => {
    // A concurrent update or delete of the same parent waits, or is waited for.
    if (!(await lockRecord(tx, parent.table, id))) throw notFound(parent.what);
    await requireAdministrable(tx, auth, parent.type, id, parent.what);
    const current = await parent.find(tx, id);
    if (!current) throw notFound(parent.what);
    const [before] = await presentAll(parent.listing.view, tx, [current], auth, SHOW_RELATIONS);
    const { entity_permissions: permissions, ...change } = body;
    if (permissions) refuse(await missingSubjects(tx, permissions, 'entity_permissions', before!.entity_permissions as SubjectLists));
    // Judged before the write, on the parent as it is answered (its fields as they are, the lists sent as they are
    // stored): one that changes nothing (the parent sent back as it was read) leaves updated_at as it was.
    const [shown] = await presentAll(parent.listing.view, null, [parent.updated(current, change as Change)], auth);
    const after = { ...before!, ...shown!, ...(permissions ? { entity_permissions: storedSubjectLists(permissions) } : {}) };
    const row = await parent.update(tx, id, change as Change, { changed: Object.keys(recordChanges(before!, after)).length > 0 });
    if (permissions) await replaceSubjectLists(tx, auth.tenantId, parent.type, id, permissions);
    const [record] = await presentAll(parent.listing.view, tx, [row], auth, SHOW_RELATIONS);
    await auditWrite(tx, ctx, parent.audit, 'updated', before!, after);
    return record!;
  });
}

/**
 * Deletes a parent the caller administers (otherwise 404) with everything that hangs off
 * it; 409 (and nothing deleted) while default value sources of other parents copy from
 * its fields.
 */
async function deleteParentRecord<Row extends { id: number }, Input, Change>(
  db: Database,
  ctx: RequestContext & { auth: Auth },
  parent: Parent<Row, Input, Change>,
  id: number,
): Promise<void> {
  const { auth } = ctx;
  await db.tenant(auth.tenantId, async (tx) => {
    if (!(await lockRecord(tx, parent.table, id))) throw notFound(parent.what);
    await requireAdministrable(tx, auth, parent.type, id, parent.what);
    const current = await parent.find(tx, id);
    const fieldIds = await fieldIdsOf(tx, parent.type, id);
    await deleteParent(tx, parent.type, id);
    const refusal = await sourcesCopyingFromRefusal(tx, auth, fieldIds, parent.key, parent.what);
    if (refusal) throw refusal;
    // A delete changes no field (docs/audit.md): its event names what went, by its label.
    if (current) await audit(tx, ctx, { action: `${parent.audit}.deleted` as AuditAction, target: auditTarget(parent.audit, { ...current }) });
  });
}

export const formHandlers = {
  async createForm(ctx) {
    const {
      body,
      services: { db },
    } = ctx;
    return { status: 201, body: await createParent(db, ctx, FORM, body) };
  },

  async listForms({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, FORM.listing, query, auth) };
  },

  async getForm({ auth, query, params, services: { db } }) {
    return { status: 200, body: await showParent(db, auth, FORM, query, params.form) };
  },

  async updateForm(ctx) {
    const {
      body,
      params,
      services: { db },
    } = ctx;
    return { status: 200, body: await updateParent(db, ctx, FORM, params.form, body) };
  },

  async deleteForm(ctx) {
    const {
      params,
      services: { db },
    } = ctx;
    await deleteParentRecord(db, ctx, FORM, params.form);
    return { status: 204 };
  },

  async createTaskTemplate(ctx) {
    const {
      body,
      services: { db },
    } = ctx;
    return { status: 201, body: await createParent(db, ctx, TASK_TEMPLATE, body) };
  },

  async listTaskTemplates({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, TASK_TEMPLATE.listing, query, auth) };
  },

  async getTaskTemplate({ auth, query, params, services: { db } }) {
    return { status: 200, body: await showParent(db, auth, TASK_TEMPLATE, query, params.taskTemplate) };
  },

  async updateTaskTemplate(ctx) {
    const {
      body,
      params,
      services: { db },
    } = ctx;
    return { status: 200, body: await updateParent(db, ctx, TASK_TEMPLATE, params.taskTemplate, body) };
  },

  async deleteTaskTemplate(ctx) {
    const {
      params,
      services: { db },
    } = ctx;
    await deleteParentRecord(db, ctx, TASK_TEMPLATE, params.taskTemplate);
    return { status: 204 };
  },

  async listFormFields({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, fieldListing, query, auth) };
  },

  async createFormField(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const parent = fieldParent(body);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const errors = fieldOptionsErrors(body.field_type, body.options, 'options');
      // A parent hidden from the caller "does not exist", exactly like a missing one.
      if ((await canAdminister(tx, auth, parent.type, parent.id, { hold: true })) !== true) errors[parent.key] = [MISSING_REFERENCE];
      refuse(errors);
      const sortNumber = body.sort_number ?? (await nextFieldSortNumber(tx, parent.type, parent.id));
      const field = await insertField(tx, auth.tenantId, parent.type, parent.id, body, sortNumber);
      const [presented] = await presentAll(fieldView, null, [field], auth);
      await auditWrite(tx, ctx, 'form_field', 'created', null, presented!);
      return field;
    });
    const [record] = await presentAll(fieldView, null, [created], auth);
    return { status: 201, body: record! };
  },

  async getFormField({ auth, query, params, services: { db } }) {
    const find = (tx: Tx) => requireAdministrableField(tx, auth, params.formField);
    return { status: 200, body: await showRecord(db, auth.tenantId, fieldListing, query, auth, find, 'The field') };
  },

  async updateFormField(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      const field = await requireAdministrableField(tx, auth, params.formField, 'update');
      if (body.options !== undefined) refuse(fieldOptionsErrors(field.fieldType, body.options, 'options'));
      const row = await updateField(tx, field, body);
      const [before, after] = await presentAll(fieldView, null, [field, row], auth);
      await auditWrite(tx, ctx, 'form_field', 'updated', before!, after!);
      return row;
    });
    const [record] = await presentAll(fieldView, null, [updated], auth);
    return { status: 200, body: record! };
  },

  async deleteFormField(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      const field = await requireAdministrableField(tx, auth, params.formField, 'update');
      const [before] = await presentAll(fieldView, null, [field], auth);
      // The sources filling the field go with it; those copying from it block the delete.
      await softDeleteField(tx, field.id);
      await deleteSourcesFilling(tx, [field.id]);
      const refusal = await sourcesCopyingFromRefusal(tx, auth, [field.id], 'form_field', 'The field');
      if (refusal) throw refusal;
      await audit(tx, ctx, { action: 'form_field.deleted', target: auditTarget('form_field', before!) });
    });
    return { status: 204 };
  },

  async createTaskExecution(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const record = await db.tenant(auth.tenantId, async (tx) => {
      refuse(await assignmentErrors(tx, auth, body));
      const execution = await insertExecution(tx, auth.tenantId, { taskTemplateId: body.task_template_id, userId: body.user_id });
      const [presented] = await presentAll(taskExecutionView, null, [execution], auth);
      await auditWrite(tx, ctx, 'task_execution', 'created', null, presented!);
      return presented!;
    });
    return { status: 201, body: record };
  },

  async listTaskExecutions({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, taskExecutionListing, query, auth) };
  },

  async getTaskExecution({ auth, query, params, services: { db } }) {
    const find = (tx: Tx) => requireVisibleExecution(tx, auth, params.taskExecution);
    return { status: 200, body: await showRecord(db, auth.tenantId, taskExecutionListing, query, auth, find, 'The task execution') };
  },

  async updateTaskExecution(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const record = await db.tenant(auth.tenantId, async (tx) => {
      if (!(await lockRecord(tx, taskExecutions, params.taskExecution))) throw notFound('The task execution');
      const execution = await requireAdministeredExecution(tx, auth, params.taskExecution);
      refuse(await assignmentErrors(tx, auth, { task_template_id: execution.taskTemplateId, user_id: body.user_id }));
      const row = await reassignExecution(tx, execution.id, body.user_id);
      const [before, after] = await presentAll(taskExecutionView, null, [execution, row], auth);
      // Reassigned to the same user: nothing changed, no event.
      await auditWrite(tx, ctx, 'task_execution', 'updated', before!, after!);
      return after!;
    });
    return { status: 200, body: record };
  },

  async deleteTaskExecution(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      // A second delete of the execution waits for the first, then finds nothing (404).
      if (!(await lockRecord(tx, taskExecutions, params.taskExecution))) throw notFound('The task execution');
      const execution = await requireAdministeredExecution(tx, auth, params.taskExecution);
      await deleteExecution(tx, execution.id);
      const [before] = await presentAll(taskExecutionView, null, [execution], auth);
      await auditWrite(tx, ctx, 'task_execution', 'deleted', before!, null);
    });
    return { status: 204 };
  },

  async createSubmission(ctx) {
    const {
      auth,
      body,
      services: { db },
    } = ctx;
    const parent = submissionParent(body);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      const { errors, target } = await checkSubmission(tx, auth, parent, body.values);
      refuse(errors);
      const submission = await insertSubmission(tx, auth.tenantId, auth.userId, target!, body.values);
      await auditSubmission(tx, ctx, 'created', null, submission);
      return submission;
    });
    const [record] = await presentAll(submissionView, null, [created], auth);
    return { status: 201, body: record! };
  },

  async listSubmissions({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, submissionListing, query, auth) };
  },

  async getSubmission({ auth, query, params, services: { db } }) {
    return {
      status: 200,
      body: await showRecord(db, auth.tenantId, submissionListing, query, auth, submissionWithId(params.formSubmission), 'The submission'),
    };
  },

  async updateSubmission(ctx) {
    const {
      auth,
      body,
      params,
      services: { db },
    } = ctx;
    const updated = await db.tenant(auth.tenantId, async (tx) => {
      // Its execution next, as the execution's delete takes it (`holdSubmissionExecution`).
      await holdSubmissionExecution(tx, auth, params.formSubmission);
      const submission = await findOwnSubmission(tx, auth, params.formSubmission);
      if (!submission) throw notFound('The submission');
      refuse(await resubmissionErrors(tx, auth, submission, body.values));
      const row = await replaceSubmissionValues(tx, submission.id, body.values);
      await auditSubmission(tx, ctx, 'updated', submission, row);
      return row;
    });
    const [record] = await presentAll(submissionView, null, [updated], auth);
    return { status: 200, body: record! };
  },

  async deleteSubmission(ctx) {
    const {
      auth,
      params,
      services: { db },
    } = ctx;
    await db.tenant(auth.tenantId, async (tx) => {
      const submission = await findOwnSubmission(tx, auth, params.formSubmission);
      if (!submission) throw notFound('The submission');
      await deleteSubmission(tx, submission.id);
      await auditSubmission(tx, ctx, 'deleted', submission, null);
    });
    return { status: 204 };
  },
} satisfies Partial<Handlers>;
