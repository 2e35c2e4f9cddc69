import type { Auth } from '../../platform/auth/auth.ts';
import type { Database, Tx } from '../../platform/database/database.ts';
import type { Handlers } from '../../platform/http/handler.ts';
import { invalid, type FieldErrors } from '../../platform/http/problem.ts';
import { listRecords, presentAll, showRecord, type Listing } from '../../platform/result-controls/listing.ts';
import type { ControlsQuery } from '../../platform/result-controls/result-controls.ts';
import type { SubjectLists } from '../entity-permissions/queries.ts';
import {
  findForm,
  findTaskTemplate,
  insertExecution,
  insertFieldsAndPermissions,
  insertForm,
  insertSubmission,
  insertTaskTemplate,
  submissionWithId,
  type FieldInput,
  type FormRow,
  type TaskTemplateRow,
} from './queries.ts';
import { assignmentErrors, parentInputErrors, requireAdministrable, requireVisibleExecution, submissionErrors, submissionParent } from './rules.ts';
import type { ParentType } from './table.ts';
import { formListing, SHOW_RELATIONS, submissionListing, submissionView, taskExecutionListing, taskExecutionView, taskTemplateListing } from './view.ts';

/** 422 naming every problem, when there is one. */
function refuse(errors: FieldErrors): void {
  if (Object.keys(errors).length > 0) throw invalid(errors);
}

/** Forms and task templates: the same operations over two kinds of parent of fields. */
interface Parent<Row extends { id: number }, Input> {
  type: ParentType;
  what: string;
  listing: Listing<Row, Auth>;
  insert(tx: Tx, tenantId: number, input: Input): Promise<Row>;
  find(tx: Tx, id: number): Promise<Row | undefined>;
}

const FORM: Parent<FormRow, Parameters<typeof insertForm>[2]> = { type: 'form', what: 'The form', listing: formListing, insert: insertForm, find: findForm };
const TASK_TEMPLATE: Parent<TaskTemplateRow, Parameters<typeof insertTaskTemplate>[2]> = {
  type: 'taskTemplate',
  what: 'The task template',
  listing: taskTemplateListing,
  insert: insertTaskTemplate,
  find: findTaskTemplate,
};

/** Creates the parent, its fields and its entity permissions; answers it with `SHOW_RELATIONS`. */
async function createParent<Row extends { id: number }, Input>(
  db: Database,
  auth: Auth,
  parent: Parent<Row, Input>,
  input: Input & { fields?: FieldInput[]; entity_permissions?: Partial<SubjectLists> },
): Promise<Record<string, unknown>> {
  return db.tenant(auth.tenantId, async (tx) => {
    refuse(await parentInputErrors(tx, input));
    const row = await parent.insert(tx, auth.tenantId, input);
    await insertFieldsAndPermissions(tx, auth.tenantId, parent.type, row.id, input.fields ?? [], input.entity_permissions);
    const [record] = await presentAll(parent.listing.view, tx, [row], auth, SHOW_RELATIONS);
    return record!;
  });
}

/** One parent the caller may administer, with `SHOW_RELATIONS` by default; otherwise 404, as for a missing one. */
function showParent<Row extends { id: number }, Input>(db: Database, auth: Auth, parent: Parent<Row, Input>, query: ControlsQuery, id: number) {
  const find = async (tx: Tx) => {
    await requireAdministrable(tx, auth, parent.type, id, parent.what);
    return parent.find(tx, id);
  };
  return showRecord(db, auth.tenantId, parent.listing, query, auth, find, parent.what, { defaultRelations: SHOW_RELATIONS });
}

export const formHandlers = {
  async createForm({ auth, body, services: { db } }) {
    return { status: 201, body: await createParent(db, auth, FORM, body) };
  },

  async listForms({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, FORM.listing, query, auth) };
  },

  async getForm({ auth, query, params, services: { db } }) {
    return { status: 200, body: await showParent(db, auth, FORM, query, params.form) };
  },

  async createTaskTemplate({ auth, body, services: { db } }) {
    return { status: 201, body: await createParent(db, auth, TASK_TEMPLATE, body) };
  },

  async listTaskTemplates({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, TASK_TEMPLATE.listing, query, auth) };
  },

  async getTaskTemplate({ auth, query, params, services: { db } }) {
    return { status: 200, body: await showParent(db, auth, TASK_TEMPLATE, query, params.taskTemplate) };
  },

  async createTaskExecution({ auth, body, services: { db } }) {
    const created = await db.tenant(auth.tenantId, async (tx) => {
      refuse(await assignmentErrors(tx, auth, body));
      return insertExecution(tx, auth.tenantId, { taskTemplateId: body.task_template_id, userId: body.user_id });
    });
    const [record] = await presentAll(taskExecutionView, null, [created], auth);
    return { status: 201, body: record! };
  },

  async listTaskExecutions({ auth, query, services: { db } }) {
    return { status: 200, body: await listRecords(db, auth.tenantId, taskExecutionListing, query, auth) };
  },

  async getTaskExecution({ auth, query, params, services: { db } }) {
    const find = (tx: Tx) => requireVisibleExecution(tx, auth, params.taskExecution);
    return { status: 200, body: await showRecord(db, auth.tenantId, taskExecutionListing, query, auth, find, 'The task execution') };
  },

  async createSubmission({ auth, body, services: { db } }) {
    const parent = submissionParent(body);
    const created = await db.tenant(auth.tenantId, async (tx) => {
      refuse(await submissionErrors(tx, parent, body.values));
      return insertSubmission(tx, auth.tenantId, auth.userId, parent.type, parent.id, body.values);
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
} satisfies Partial<Handlers>;
