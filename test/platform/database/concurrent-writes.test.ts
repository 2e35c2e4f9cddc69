/**
 * Writes of one record sent at the same moment (docs/tenancy-and-security.md#concurrent-writes-of-one-record):
 * they run one after the other, so none answers 5xx, none writes over what another left,
 * and a record deleted meanwhile is not written. Writes of accounts, sessions and SCIM:
 * concurrent-account-writes.test.ts.
 */
import { sql } from 'drizzle-orm';
import t from 'tap';
import { type CallResult } from '../../helpers/atrium.ts';
import { activity, cancel, noServerError, ROUNDS, startConcurrentWrites, statuses, waiterId } from '../../helpers/concurrent-writes.ts';
import { holdRows, lockWaiters, PAUSES_WRITES, pauseWrites, rowCount } from '../../helpers/fixtures.ts';

const { api, tenant, admin, scim, trail, countOf } = await startConcurrentWrites(t, 'concurrent');

t.test('an update and a delete of a form: the update finds the form or answers 404, and the process lives', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const form = await api.call(t, 'createForm', { token: admin, body: { title: `Form ${round}`, form_type: 'survey' } });
    t.equal(form.status, 201);
    const answers = await Promise.all([
      api.call(t, 'deleteForm', { token: admin, params: { form: form.body.id } }),
      api.call(t, 'updateForm', { token: admin, params: { form: form.body.id }, body: { title: 'Renamed' } }),
    ]);
    noServerError(t, answers);
    t.equal(answers[0]!.status, 204, 'the delete goes through');
    t.ok([200, 404].includes(answers[1]!.status), `the update answers 200 (before the delete) or 404 (after): ${answers[1]!.status}`);
    const updates = (await trail('form', form.body.id)).filter((action) => action === 'form.updated');
    t.equal(updates.length, answers[1]!.status === 200 ? 1 : 0, 'an update is recorded only when it went through');
  }
});

t.test('an update and a delete of a department answer 200 or 404, never 500', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Department ${round}` } });
    t.equal(department.status, 201);
    const params = { department: department.body.id };
    const answers = await Promise.all([
      api.call(t, 'deleteDepartment', { token: admin, params }),
      api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Other ${round}` } }),
      api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Department ${round}`, tags: ['x'] } }),
    ]);
    noServerError(t, answers);
    t.same(
      statuses(answers.slice(1)).filter((status) => status !== 200 && status !== 404),
      [],
      `updates answer 200 or 404: ${statuses(answers).join(', ')}`,
    );
  }
});

t.test('concurrent updates of one department or menu item each keep what they changed', async (t) => {
  for (let round = 0; round < ROUNDS; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Kept ${round}` } });
    const params = { department: department.body.id };
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Kept ${round} renamed` } }),
        api.call(t, 'updateDepartment', { token: admin, params, body: { name: `Kept ${round}`, tags: ['kept'] } }),
      ]),
    );
    // An update without `tags` keeps them: whichever went second, the tags the other set stay.
    const stored = await api.call(t, 'getDepartment', { token: admin, params });
    t.same(stored.body.tags, ['kept'], 'the tags are kept');

    const item = await api.call(t, 'createMenuItem', {
      token: admin,
      body: { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Wiki', link: 'https://wiki.example.com/' },
    });
    t.equal(item.status, 201);
    const menuItem = item.body.id;
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { title: 'Handbook' } }),
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { sort_number: 777 } }),
        api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { link: 'https://handbook.example.com/' } }),
      ]),
    );
    const kept = await api.call(t, 'getAdministeredMenuItem', { token: admin, params: { menuItem } });
    t.match(kept.body, { title: 'Handbook', sort_number: 777, link: 'https://handbook.example.com/' }, 'all three changes are stored');

    const [deleted, updated] = await Promise.all([
      api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem } }),
      api.call(t, 'updateMenuItem', { token: admin, params: { menuItem }, body: { title: 'Too late' } }),
    ]);
    t.equal(deleted.status, 204);
    t.ok([200, 404].includes(updated.status), `the update answers 200 (before the delete) or 404 (after): ${updated.status}`);
  }
});

t.test('an automation run while the automation is deleted answers 404, not a broken reference', async (t) => {
  const created = await api.call(t, 'createAutomation', {
    token: admin,
    body: { name: 'leaving hook', config: { url: 'http://93.184.215.14/hook', headers: {} } }, // an IP literal: valid without DNS, never called
  });
  t.equal(created.status, 201);
  const automation = created.body.id as number;
  const deleting = await holdRows(api.db, sql`delete from automations where id = ${automation}`);
  const run = api.call(t, 'runAutomation', { token: admin, params: { automation }, body: {} });
  t.equal(await lockWaiters(api.db, ''), 1, 'the run waits for the delete');
  await deleting.release();
  t.equal((await run).status, 404);
  t.equal(await rowCount(api.db, 'webhook_deliveries', sql`automation_id = ${automation}`), 0, 'no delivery was stored');
});

t.test('a field or task execution created while its form or task template is deleted is refused on the id it sent', async (t) => {
  const assignee = await api.createUser(tenant.tenantId, { username: 'assigned-while-deleted' });
  const cases: [string, 'forms' | 'task_templates', (id: number) => Promise<CallResult>, string][] = [
    [
      'a field of a form',
      'forms',
      (id) => api.call(t, 'createFormField', { token: admin, body: { form_id: id, name: 'Late', field_type: 'text' } }),
      'form_id',
    ],
    [
      'a field of a task template',
      'task_templates',
      (id) => api.call(t, 'createFormField', { token: admin, body: { task_template_id: id, name: 'Late', field_type: 'text' } }),
      'task_template_id',
    ],
    [
      'a task execution',
      'task_templates',
      (id) => api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: id, user_id: assignee.id } }),
      'task_template_id',
    ],
  ];
  for (const [what, table, create, key] of cases) {
    const parent =
      table === 'forms'
        ? await api.call(t, 'createForm', { token: admin, body: { title: `Going ${what}`, form_type: 'survey' } })
        : await api.call(t, 'createTaskTemplate', { token: admin, body: { title: `Going ${what}`, fields: [] } });
    // The parent's delete in flight: its row deleted, not yet committed.
    const deleting = await holdRows(api.db, sql`delete from ${sql.identifier(table)} where id = ${parent.body.id}`);
    let created!: Promise<CallResult>;
    try {
      created = create(parent.body.id);
      t.equal(await lockWaiters(api.db, ''), 1, `${what}: the create waits for the delete`);
    } finally {
      await deleting.release();
    }
    const answer = await created;
    t.equal(answer.status, 422, `${what}: refused`);
    t.strictSame(answer.body.error_codes, { [key]: ['missing_reference'] }, `${what}: on ${key}, as for a parent deleted before`);
  }
});

t.test('fields created at the same moment without a sort number get distinct ones', async (t) => {
  const form = await api.call(t, 'createForm', { token: admin, body: { title: 'Numbered', form_type: 'survey' } });
  const created = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      api.call(t, 'createFormField', { token: admin, body: { form_id: form.body.id, name: `Field ${i}`, field_type: 'text' } }),
    ),
  );
  t.same(
    statuses(created).filter((status) => status !== 201),
    [],
  );
  t.equal(new Set(created.map((field) => field.body.sort_number)).size, created.length, 'every field its own number');
});

t.test('a menu item restricted to a department created while the department is deleted: one of the two is refused', async (t) => {
  for (let round = 0; round < ROUNDS * 2; round++) {
    const department = await api.call(t, 'createDepartment', { token: admin, body: { name: `Audience ${round}` } });
    // Deleted through /api and, every other round, as a SCIM group.
    const viaScim = round % 2 === 1;
    const [item, deleted] = await Promise.all([
      api.call(t, 'createMenuItem', {
        token: admin,
        body: {
          icon_id: 3,
          menu_identifier: 'main',
          type: 'link',
          title: 'Restricted',
          link: 'https://wiki.example.com/',
          entity_permissions: { department_ids: [department.body.id] },
        },
      }),
      viaScim ? scim('DELETE', `/Groups/${department.body.id}`) : api.call(t, 'deleteDepartment', { token: admin, params: { department: department.body.id } }),
    ]);
    // The delete's refusal: 422 through /api, 409 through SCIM.
    const refusedDelete = viaScim ? 409 : 422;
    t.same(
      statuses([item, deleted]).sort(),
      item.status === 201 ? [201, refusedDelete] : [204, 422],
      `one is refused${viaScim ? ' (SCIM)' : ''}: ${item.status}, ${deleted.status}`,
    );
    t.equal(
      await rowCount(api.db, 'entity_permissions', sql`subject_type = 'department' and subject_id = ${department.body.id}`),
      item.status === 201 ? 1 : 0,
      'no permission names a department that is gone',
    );
  }
});

t.test('a default value source updated while its field is deleted: no 5xx, and the source goes with the field', async (t) => {
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Filled', fields: [] } });
  for (let round = 0; round < ROUNDS * 2; round++) {
    const field = await api.call(t, 'createFormField', {
      token: admin,
      body: { task_template_id: template.body.id, name: `Filled ${round}`, field_type: 'text' },
    });
    const source = await api.call(t, 'createDefaultValueSource', {
      token: admin,
      body: { type: 'systemVariable', form_field_id: field.body.id, config: { variable: 'username' } },
    });
    t.equal(source.status, 201);
    const [updated, deleted] = await Promise.all([
      api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource: source.body.id }, body: { config: { variable: 'email' } } }),
      api.call(t, 'deleteFormField', { token: admin, params: { formField: field.body.id } }),
    ]);
    noServerError(t, [updated, deleted]);
    t.equal(deleted.status, 204, 'the field is deleted');
    t.ok([200, 404].includes(updated.status), `the update goes through (before the delete) or finds nothing: ${updated.status}`);
    t.equal(await rowCount(api.db, 'default_value_sources', sql`id = ${source.body.id}`), 0, 'the source went with its field');
  }
});

t.test('a submission stored or changed while its execution or its task template is deleted: no 5xx', async (t) => {
  const assignee = await api.createUser(tenant.tenantId, { username: 'submitting' });
  for (let round = 0; round < ROUNDS * 2; round++) {
    const template = await api.call(t, 'createTaskTemplate', {
      token: admin,
      body: { title: `Submitted ${round}`, fields: [{ name: 'Note', field_type: 'text' }] },
    });
    const field = String(template.body.fields[0].id);
    const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee.id } });
    const taskExecution = execution.body.id;
    // Changed while its execution is deleted (the delete's cascade takes the submission).
    const stored = await api.call(t, 'createSubmission', { token: assignee.token, body: { task_execution_id: taskExecution, values: { [field]: 'first' } } });
    t.equal(stored.status, 201);
    const [changed, executionDeleted] = await Promise.all([
      api.call(t, 'updateSubmission', { token: assignee.token, params: { formSubmission: stored.body.id }, body: { values: { [field]: 'second' } } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
    ]);
    noServerError(t, [changed, executionDeleted]);
    t.equal(executionDeleted.status, 204);
    t.ok([200, 404].includes(changed.status), `the update goes through (before the delete) or finds nothing: ${changed.status}`);
    // Stored while the task template is deleted (the submission's key holds the template).
    const next = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee.id } });
    const [created, templateDeleted] = await Promise.all([
      api.call(t, 'createSubmission', { token: assignee.token, body: { task_execution_id: next.body.id, values: { [field]: 'late' } } }),
      api.call(t, 'deleteTaskTemplate', { token: admin, params: { taskTemplate: template.body.id } }),
    ]);
    noServerError(t, [created, templateDeleted]);
    t.equal(templateDeleted.status, 204);
    t.ok([201, 422].includes(created.status), `the submission is stored (before the delete) or names its execution gone: ${created.status}`);
    t.equal(await rowCount(api.db, 'form_submissions', sql`task_template_id = ${template.body.id}`), 0, 'nothing of the template is left');
  }
});

t.test('task executions, default value sources and attribute sets: an update and two deletes at once', async (t) => {
  const [assignee, next] = await Promise.all(['assignee', 'next-assignee'].map((username) => api.createUser(tenant.tenantId, { username })));
  const template = await api.call(t, 'createTaskTemplate', { token: admin, body: { title: 'Template', fields: [{ name: 'Name', field_type: 'text' }] } });
  t.equal(template.status, 201);
  for (let round = 0; round < ROUNDS; round++) {
    const execution = await api.call(t, 'createTaskExecution', { token: admin, body: { task_template_id: template.body.id, user_id: assignee!.id } });
    const taskExecution = execution.body.id;
    const executions = await Promise.all([
      api.call(t, 'updateTaskExecution', { token: admin, params: { taskExecution }, body: { user_id: next!.id } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
      api.call(t, 'deleteTaskExecution', { token: admin, params: { taskExecution } }),
    ]);
    noServerError(t, executions);
    t.same(statuses(executions.slice(1)).sort(), [204, 404], 'one delete goes through, the other finds nothing');
    t.equal(await countOf('task_execution.deleted', 'task_execution', taskExecution), 1, 'one delete recorded');

    const created = await api.call(t, 'createDefaultValueSource', {
      token: admin,
      body: { type: 'systemVariable', form_field_id: template.body.fields[0].id, config: { variable: 'username' } },
    });
    t.equal(created.status, 201);
    const defaultValueSource = created.body.id;
    noServerError(
      t,
      await Promise.all([
        api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { config: { variable: 'email' } } }),
        api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { sort_number: 100 + round } }),
      ]),
    );
    const kept = await api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: {} });
    t.match(kept.body, { config: { variable: 'email' }, sort_number: 100 + round }, 'both changes are stored');
    const sources = await Promise.all([
      api.call(t, 'updateDefaultValueSource', { token: admin, params: { defaultValueSource }, body: { config: { variable: 'username' } } }),
      api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource } }),
      api.call(t, 'deleteDefaultValueSource', { token: admin, params: { defaultValueSource } }),
    ]);
    noServerError(t, sources);
    t.same(statuses(sources.slice(1)).sort(), [204, 404], 'one delete goes through, the other finds nothing');

    const set = await api.call(t, 'createAttributeSet', { token: admin, body: { name: `Set ${round}`, fields: [{ key: 'budget', type: 'number' }] } });
    const sets = await Promise.all([
      api.call(t, 'deleteAttributeSet', { token: admin, params: { attributeSet: set.body.id } }),
      api.call(t, 'deleteAttributeSet', { token: admin, params: { attributeSet: set.body.id } }),
    ]);
    t.same(statuses(sets).sort(), [204, 404], 'one delete goes through, the other finds nothing');
    t.equal(await countOf('attribute_set.deleted', 'attribute_set', set.body.id), 1, 'one delete recorded');
  }
});

t.test('a write whose statement the database cancels answers 503 and changes nothing', async (t) => {
  // A statement_timeout the operator set, or an operator's pg_cancel_backend, ends the
  // statement (57014): the server's doing, not the request's, so no 500.
  const department = await api.call(t, 'createDepartment', { token: admin, body: { name: 'Cancelled' } });
  const params = { department: department.body.id };
  const held = await holdRows(api.db, sql`select id from departments where tenant_id = ${tenant.tenantId} and id = ${params.department} for update`);
  let answer: CallResult;
  try {
    const pending = api.call(t, 'updateDepartment', { token: admin, params, body: { name: 'Renamed while held' } });
    t.equal(await lockWaiters(api.db, 'departments'), 1, 'the update waits for the row');
    const [waiter] = await api.db.owner.execute<{ pid: number }>(
      sql`select ${waiterId} as pid from ${activity} where wait_event_type = 'Lock' and datname = current_database() and strpos(query, 'departments') > 0`,
    );
    await api.db.owner.execute(cancel(waiter!.pid));
    answer = await pending;
  } finally {
    await held.release();
  }
  t.equal(answer.status, 503, 'a 503');
  t.equal(answer.body.code, 'service_unavailable');
  t.equal(answer.headers['retry-after'], '1', 'with Retry-After');
  const stored = await api.call(t, 'getDepartment', { token: admin, params });
  t.equal(stored.body.name, 'Cancelled', 'the department is unchanged');
  t.same(await trail('department', params.department), ['department.created'], 'no update is recorded');
});

t.test('concurrent updates of the user settings: each event records what the one before left', async (t) => {
  const keys = ['phone', 'city', 'street', 'zipcode', 'staff_number'];
  // Twelve different sets of keys, none of them the tenant's first (none).
  const answers = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: keys.filter((_key, k) => ((i + 1) >> k) % 2 === 1) } }),
    ),
  );
  noServerError(t, answers);
  const events = await api.db.owner.execute<{ changes: { required_profile_keys?: { from: string[]; to: string[] } } }>(
    sql`select changes from audit_events where tenant_id = ${tenant.tenantId} and action = 'user_settings.updated' order by occurred_at, id`,
  );
  const steps = events.map((event) => event.changes.required_profile_keys).filter((step) => step !== undefined);
  t.ok(steps.length > 1, `${steps.length} changes recorded`);
  // Every update asks for other keys: run in turn, each starts from what the one before left,
  // so no two start from the same settings (read before the others, all would start from none).
  const froms = steps.map((step) => JSON.stringify(step.from));
  t.equal(new Set(froms).size, froms.length, `each event starts from other settings: ${froms.join(' ')}`);
});

t.test("a department's delete and a user update naming it answer no 5xx", async (t) => {
  for (let round = 0; round < ROUNDS * 2; round++) {
    const [gone, kept] = await Promise.all(
      ['Leaving', 'Staying'].map((name) => api.call(t, 'createDepartment', { token: admin, body: { name: `${name} ${round}` } })),
    );
    const member = await api.createUser(tenant.tenantId, { username: `moving-${round}` });
    await api.call(t, 'updateUser', { token: admin, params: { user: member.id }, body: { department_ids: [gone!.body.id] } });
    const answers = await Promise.all([
      api.call(t, 'updateUser', { token: admin, params: { user: member.id }, body: { department_ids: [gone!.body.id, kept!.body.id] } }),
      round % 2 === 1 ? scim('DELETE', `/Groups/${gone!.body.id}`) : api.call(t, 'deleteDepartment', { token: admin, params: { department: gone!.body.id } }),
    ]);
    noServerError(t, answers);
    t.ok([200, 422].includes(answers[0]!.status), `the update goes through or names the department gone: ${answers[0]!.status}`);
  }
});

// A delete waiting behind a rename of the same record: its event names the record as the rename left it. A user's
// delete waits at the administration lock, which the rename of another user holds shared until it commits.
for (const [what, targetType, table, key] of [
  ['menu item', 'menu_item', '"menu_items"', 4258],
  ['automation', 'automation', '"automations"', 4259],
  ['user', 'user', 'pg_advisory_xact_lock', 4260],
] as const) {
  t.test(`${what === 'automation' ? 'an' : 'a'} ${what} deleted while it is renamed: the delete's event names it as renamed`, PAUSES_WRITES, async (t) => {
    let id: number;
    let rename: () => Promise<CallResult>;
    let remove: () => Promise<CallResult>;
    if (what === 'menu item') {
      const item = await api.call(t, 'createMenuItem', {
        token: admin,
        body: { icon_id: 3, menu_identifier: 'main', type: 'link', title: 'Old title', link: 'https://old.example.com/' },
      });
      id = item.body.id;
      rename = () => api.call(t, 'updateMenuItem', { token: admin, params: { menuItem: id }, body: { title: 'New title' } });
      remove = () => api.call(t, 'deleteMenuItem', { token: admin, params: { menuItem: id } });
    } else if (what === 'automation') {
      const created = await api.call(t, 'createAutomation', {
        token: admin,
        body: { name: 'Old title', config: { url: 'http://93.184.215.14/hook', headers: {} } },
      });
      id = created.body.id;
      rename = () => api.call(t, 'updateAutomation', { token: admin, params: { automation: id }, body: { name: 'New title' } });
      remove = () => api.call(t, 'deleteAutomation', { token: admin, params: { automation: id } });
    } else {
      id = (await api.createUser(tenant.tenantId, { username: 'renamed-leaver', values: { firstName: 'Old', lastName: 'title' } })).id;
      rename = () => api.call(t, 'updateUser', { token: admin, params: { user: id }, body: { first_name: 'New' } });
      remove = () => api.call(t, 'deleteUser', { token: admin, params: { user: id } });
    }
    const commitHeld = await pauseWrites(t, api.db, {
      name: `test_hold_rename_${key}`,
      trigger: `constraint trigger test_hold_rename_${key} after insert on audit_events deferrable initially deferred`,
      condition: `new.target_type = '${targetType}' and new.target_id = '${id}' and new.action = '${targetType}.updated'`,
      key,
    });
    let renamed!: Promise<CallResult>;
    let deleted!: Promise<CallResult>;
    try {
      renamed = rename();
      t.equal(await lockWaiters(api.db, 'commit'), 1, "the rename's commit waits");
      deleted = remove();
      t.equal(await lockWaiters(api.db, table), 1, `the delete waits for the ${what}`);
    } finally {
      await commitHeld.release();
    }
    t.equal((await renamed).status, 200, 'the rename goes through');
    t.equal((await deleted).status, 204, 'then the delete');
    const [event] = await api.db.owner.execute<{ label: string | null }>(
      sql`select target_label as label from audit_events
          where tenant_id = ${tenant.tenantId} and target_type = ${targetType} and target_id = ${String(id)} and action = ${`${targetType}.deleted`}`,
    );
    t.equal(event?.label, 'New title', 'the delete names it as the rename left it');
  });
}
