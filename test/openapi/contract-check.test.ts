/**
 * The contract check every test's `api.call` makes (test/helpers/contract.ts) is as strict
 * as a validating proxy: a required field missing from an answer fails it, whether the
 * body reaches the test or the server's serializer refused it (a 500); a field `selects`
 * may leave out does not. And the spec keeps its side: an answer that takes no `selects`
 * requires the `id` of the record it answers (docs/api-conventions.md#required-fields), every
 * object nested in an answer requires the fields the service always sends, and every answer
 * declares the `X-Request-Id` header the service sends on it.
 */
import fastJsonStringify from 'fast-json-stringify';
import t from 'tap';
import { operations, servedElsewhere, type OperationId, type ServedElsewhereId } from '../../generated/operations.ts';
import { contractViolations, servedAnswerViolations, servedOperationOf, serializerViolations, spec } from '../helpers/contract.ts';

const department = {
  id: 1,
  name: 'Support',
  user_id: 1,
  tags: [],
  notification_setting_ids: [],
  attribute_set_ids: [],
  attributes: {},
  created_at: '2026-01-31T14:05:00.000Z',
  updated_at: '2026-01-31T14:05:00.000Z',
};

t.test('a create answer without a field it always holds breaks the contract', async (t) => {
  const { id: _id, ...withoutId } = department;
  t.strictSame(contractViolations('createDepartment', 201, 'application/json', department), [], 'the whole record honours it');
  const violations = contractViolations('createDepartment', 201, 'application/json', withoutId);
  t.equal(violations.length, 1);
  t.match(violations[0], /required property 'id'/);
  const { created_at: _created, ...withoutDate } = department;
  t.match(contractViolations('updateDepartment', 200, 'application/json', withoutDate), [/required property 'created_at'/]);
});

t.test('a list or show answer may hold any selection of fields, id included', async (t) => {
  t.strictSame(contractViolations('listDepartments', 200, 'application/json', [{ name: 'Support' }]), []);
  t.strictSame(contractViolations('getDepartment', 200, 'application/json', { tags: [] }), []);
  t.match(contractViolations('getDepartment', 200, 'application/json', { tags: 'support' }), [/must be array/], 'what is there must still match');
});

t.test('fields visibility may hide are not required; the others are', async (t) => {
  const user = {
    id: 2,
    username: 'jdoe',
    first_name: 'Jane',
    last_name: 'Doe',
    full_name: 'Jane Doe',
    lang_id: null,
    group_account: false,
    profile_picture_url: null,
    created_at: '2026-01-31T14:05:00.000Z',
    updated_at: '2026-01-31T14:05:00.000Z',
    deleted_at: null,
    language: null,
  };
  t.strictSame(contractViolations('createUser', 201, 'application/json', user), [], 'no personal or administrative field, no role');
  const { full_name: _name, ...withoutName } = user;
  t.match(contractViolations('updateUser', 200, 'application/json', withoutName), [/required property 'full_name'/]);
  t.match(contractViolations('getCurrentUser', 200, 'application/json', user), [/required property 'email'/], 'one sees every field of one own record');
});

t.test('a status the operation does not declare breaks the contract', async (t) => {
  t.strictSame(contractViolations('createDepartment', 418, 'application/json', {}), ['createDepartment does not declare status 418']);
});

t.test("a 500 is the contract's business when the serializer refused the answer", async (t) => {
  // The wording the check looks for is fast-json-stringify's own: a release that changes it fails here.
  const serialize = fastJsonStringify({ type: 'object', required: ['id'], properties: { id: { type: 'integer' } } });
  const refusal = (() => {
    try {
      serialize({});
      return '';
    } catch (error) {
      return (error as Error).message;
    }
  })();
  t.equal(refusal, '"id" is required!');
  t.match(serializerViolations([refusal]), [/could not send it \(500\): "id" is required!/]);
  t.strictSame(serializerViolations(['connect ECONNREFUSED 127.0.0.1:5432', 'ENOENT: no such file or directory']), [], 'other failures are not');
});

t.test('every answer that takes no selects requires the id of its record', async (t) => {
  type Node = Record<string, any>;
  const document = spec as unknown as Node;
  const resolve = (node: Node): Node => (node?.$ref ? resolve(node.$ref.split('/').slice(1).reduce((at: Node, key: string) => at[key], document)) : node);
  // `id` of a login token is its internal key, answered only when selected; `uuid` names it.
  const exempt = new Set(['createUserLoginToken', 'createUserLoginTokenForEmail']);
  const lacking: string[] = [];
  let checked = 0;
  for (const operationId of Object.keys(operations) as OperationId[]) {
    const meta = operations[operationId];
    const operation = document.paths[meta.path][meta.method.toLowerCase()] as Node;
    const takesSelects = (operation.parameters ?? []).some((parameter: Node) => resolve(parameter).name === 'selects');
    if (takesSelects || exempt.has(operationId)) continue;
    for (const [status, response] of Object.entries<Node>(operation.responses)) {
      if (!status.startsWith('2')) continue;
      let schema = resolve(resolve(response).content?.['application/json']?.schema);
      if (schema?.type === 'array') schema = resolve(schema.items);
      // An envelope ({status, data}) answers its record under `data`.
      if (schema?.properties?.data && !schema.properties.id) schema = resolve(schema.properties.data);
      const members = [schema, ...(schema?.allOf ?? []).map(resolve)];
      if (!members.some((member) => member?.properties?.id)) continue;
      checked++;
      if (!members.some((member) => member?.required?.includes('id'))) lacking.push(`${operationId} ${status}`);
    }
  }
  t.ok(checked >= 20, `${checked} answers of records checked`);
  t.strictSame(lacking, [], 'each requires id');
});

t.test('every answer of every operation declares X-Request-Id', async (t) => {
  type Node = Record<string, any>;
  const document = spec as unknown as Node;
  const resolve = (node: Node): Node => (node?.$ref ? resolve(node.$ref.split('/').slice(1).reduce((at: Node, key: string) => at[key], document)) : node);
  const lacking: string[] = [];
  let checked = 0;
  // The SCIM service's operations too: it answers every request with the id as well.
  const all = { ...operations, ...servedElsewhere };
  for (const operationId of Object.keys(all) as (OperationId | ServedElsewhereId)[]) {
    const meta = all[operationId];
    for (const [status, response] of Object.entries<Node>(document.paths[meta.path][meta.method.toLowerCase()].responses)) {
      checked++;
      const header = resolve(resolve(response).headers?.['X-Request-Id']);
      if (header?.schema?.maxLength !== 128) lacking.push(`${operationId} ${status}`);
    }
  }
  t.ok(checked > 1000, `${checked} answers checked`);
  t.strictSame(lacking, []);
});

/**
 * Every object an answer holds lists as `required` each field the service always sends
 * (docs/api-conventions.md#required-fields): a nested object is answered whole (a relation's
 * records, a configuration, a list of ids), so its fields are there whatever `selects` named.
 * Only the record an answer with `selects` shapes keeps its fields optional. A field left
 * optional below is one the service does not always send, for the reason given.
 */
const NOT_ALWAYS_SENT: Record<string, { fields: string[]; why: string }[]> = {
  UserFull: [
    {
      fields: ['email', 'phone', 'street', 'zipcode', 'city', 'birthdate', 'gender'],
      why: 'personal fields: shown with users.view-personal or on one own record',
    },
    {
      fields: [
        'staff_number',
        'entering_date',
        'leaving_date',
        'active',
        'role_id',
        'request_password_change',
        'prevent_logout',
        'wants_email_notifications',
        'default_route',
        'last_login_at',
        'role',
      ],
      why: 'administrative fields and the role relation: shown with users.view-administrative or on one own record',
    },
    { fields: ['static_url', 'url', 'url_context'], why: 'URL context: answered only when selects names it' },
    { fields: ['departments', 'acceptedPolicies', 'entityPermissions'], why: 'relations not answered by default' },
  ],
  CurrentUser: [
    { fields: ['static_url', 'url', 'url_context'], why: 'URL context: answered only when selects names it' },
    { fields: ['departments', 'acceptedPolicies', 'entityPermissions'], why: 'relations not answered by default' },
  ],
  DepartmentFull: [
    { fields: ['static_url', 'url', 'url_context'], why: 'URL context: answered only when selects names it' },
    { fields: ['users', 'notification_settings', 'attribute_sets'], why: 'relations not answered by default' },
  ],
  MenuItemFull: [{ fields: ['language'], why: 'relation not answered by default' }],
  NotificationFull: [{ fields: ['notifiable', 'targetable'], why: 'relations not answered by default' }],
  WebhookDeliveryFull: [{ fields: ['attempt_log'], why: 'relation not answered by default' }],
  CreatedUserLoginToken: [
    { fields: ['id'], why: 'the internal id: answered only when selects names it' },
    { fields: ['user', 'loginUser'], why: 'relations not answered by default' },
  ],
  // A relation whose records are users: each is the record `selects` shapes for users, its
  // fields as the caller may see them.
  User: [
    {
      fields: Object.keys((spec.components.schemas.User as { properties: object }).properties),
      why: 'user records: fields as the caller may see them (a notification recipient, a department member, a login token user)',
    },
  ],
  AttributeField: [{ fields: ['label'], why: 'optional when the set is written, and answered as written' }],
  'WebhookConfigurationFull.auth': [{ fields: ['basic', 'header', 'secret'], why: 'the credentials answered are those written; `type` says which one is used' }],
  'AuditEvent.details': [
    { fields: ['recipient_count'], why: 'only notification.sent carries it' },
    { fields: ['administrator_id'], why: 'only tenant.created carries it' },
    { fields: ['count'], why: 'only notifications.read and notifications.seen carry it' },
    { fields: ['field_ids'], why: 'only form_submission.* carry it' },
  ],
};

t.test('every object an answer holds requires each field the service always sends', async (t) => {
  type Node = Record<string, any>;
  const document = spec as unknown as Node;
  const resolve = (node: Node): Node => (node?.$ref ? resolve(node.$ref.split('/').slice(1).reduce((at: Node, key: string) => at[key], document)) : node);
  const nameOf = (node: Node, at: string) => (node?.$ref ? node.$ref.split('/').pop()! : at);
  const lacking = new Map<string, Set<string>>();
  const excused = new Set<string>();
  const visited = { shaped: new Set<Node>(), whole: new Set<Node>() };

  /** Walks `node`, named `at`; `shaped`: the record `selects` shapes, whose own fields stay optional. */
  const walk = (reference: Node, at: string, shaped: boolean): void => {
    const name = nameOf(reference, at);
    const node = resolve(reference);
    if (!node || typeof node !== 'object') return;
    const seen = shaped ? visited.shaped : visited.whole;
    if (seen.has(node)) return;
    seen.add(node);
    for (const member of [...(node.oneOf ?? []), ...(node.anyOf ?? [])]) walk(member, name, shaped);
    if (node.items) walk(node.items, name, shaped);
    if (typeof node.additionalProperties === 'object') walk(node.additionalProperties, `${name}.*`, false);
    // allOf members describe one object together: their properties and their required fields add up.
    const members = [node, ...(node.allOf ?? []).map(resolve)];
    const properties = Object.assign({}, ...members.map((member) => member.properties ?? {})) as Record<string, Node>;
    const required = new Set(members.flatMap((member) => member.required ?? []));
    if (!shaped) {
      const optional = Object.keys(properties).filter((field) => !required.has(field));
      const allowed = new Set((NOT_ALWAYS_SENT[name] ?? []).flatMap((entry) => entry.fields));
      for (const field of optional) {
        if (allowed.has(field)) excused.add(`${name}.${field}`);
        else lacking.set(name, (lacking.get(name) ?? new Set()).add(field));
      }
    }
    for (const [field, schema] of Object.entries(properties)) walk(schema, `${name}.${field}`, false);
  };

  let answers = 0;
  for (const operationId of Object.keys(operations) as OperationId[]) {
    const meta = operations[operationId];
    const operation = document.paths[meta.path][meta.method.toLowerCase()] as Node;
    const takesSelects = (operation.parameters ?? []).some((parameter: Node) => resolve(parameter).name === 'selects');
    for (const [status, response] of Object.entries<Node>(operation.responses)) {
      if (!status.startsWith('2')) continue;
      const schema = resolve(response).content?.['application/json']?.schema;
      if (!schema) continue;
      answers++;
      if (!takesSelects) {
        walk(schema, operationId, false);
        continue;
      }
      // The record `selects` shapes: the answer, an item of it, or under an envelope's `data`.
      let record = schema;
      if (resolve(record).type === 'array') record = resolve(record).items;
      if (resolve(record).properties?.data && !resolve(record).properties.id) {
        for (const [field, value] of Object.entries<Node>(resolve(record).properties)) if (field !== 'data') walk(value, `${operationId}.${field}`, false);
        record = resolve(record).properties.data;
        if (resolve(record).type === 'array') record = resolve(record).items;
      }
      walk(record, operationId, true);
    }
  }
  t.ok(answers >= 80, `${answers} answers checked`);
  t.strictSame(
    [...lacking].map(([name, fields]) => `${name}: ${[...fields].join(', ')}`),
    [],
    'each field an answer always holds is required',
  );
  const stale = Object.entries(NOT_ALWAYS_SENT).flatMap(([name, entries]) =>
    entries.flatMap((entry) => entry.fields.filter((field) => !excused.has(`${name}.${field}`)).map((field) => `${name}.${field}`)),
  );
  t.strictSame(stale, [], 'every exception names a field some answer leaves optional');
});

/** An answer of the SCIM service as `app.inject` gives it. */
const answer = (statusCode: number, body: unknown, headers: Record<string, string> = {}) => ({
  statusCode,
  headers: { 'content-type': 'application/scim+json; charset=utf-8', 'x-request-id': 'atrium-test', ...headers },
  body: body === undefined ? '' : JSON.stringify(body),
});
const scimError = (status: number, extra: Record<string, unknown> = {}) => ({
  schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
  status: String(status),
  detail: 'x',
  ...extra,
});
const scimUser = {
  schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
  id: '42',
  userName: 'jane',
  name: { givenName: 'Jane', familyName: 'Doe', formatted: 'Jane Doe' },
  displayName: 'Jane Doe',
  active: true,
  meta: {
    resourceType: 'User',
    created: '2026-01-31T14:05:00.000Z',
    lastModified: '2026-01-31T14:05:00.000Z',
    location: 'http://localhost/scim/v2/Users/42',
  },
};

t.test('a SCIM request finds its operation by method and path template', async (t) => {
  t.equal(servedOperationOf('GET', '/scim/v2/Users?filter=userName%20eq%20%22x%22'), 'listScimUsers');
  t.equal(servedOperationOf('patch', '/scim/v2/Groups/7'), 'patchScimGroup');
  t.equal(servedOperationOf('GET', '/scim/v2/Schemas/urn:ietf:params:scim:schemas:core:2.0:User'), 'getScimSchema');
  t.equal(servedOperationOf('GET', '/scim/v2/Users/42/extra'), null, 'a template matches whole segments only');
  t.equal(servedOperationOf('POST', '/scim/v2/Users/42'), null);
});

t.test('a SCIM answer is judged by its operation: status, media type, body and the headers it sends', async (t) => {
  t.strictSame(servedAnswerViolations('POST', '/scim/v2/Users', answer(201, scimUser, { location: 'http://localhost/scim/v2/Users/42' })), []);
  const { meta: _meta, ...withoutMeta } = scimUser;
  t.match(servedAnswerViolations('POST', '/scim/v2/Users', answer(201, withoutMeta)), [/createScimUser: 201 body .*required property 'meta'/]);
  t.strictSame(servedAnswerViolations('GET', '/scim/v2/Users/42', answer(200, { schemas: scimUser.schemas, id: '42', meta: { resourceType: 'User' } })), [], 'a read may be narrowed');
  t.match(
    servedAnswerViolations('GET', '/scim/v2/Users/42', answer(200, { schemas: scimUser.schemas, id: '42' })),
    [/required property 'meta'/],
    'but never narrowed past meta.resourceType',
  );
  t.match(servedAnswerViolations('GET', '/scim/v2/Users/42', answer(200, { ...scimUser, nickName: 'J' })), [/must NOT have additional properties/]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(400, { ...scimError(400), status: 400 })), [/status must be string/], 'status is a string');
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(400, scimError(400, { scimType: 'wrong' }))), [/scimType must be equal to one of/]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(404, scimError(404))), [/listScimUsers does not declare status 404/]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(400, scimError(400), { 'content-type': 'application/json' })), [/400 answered application\/json/]);
  t.strictSame(
    servedAnswerViolations('GET', '/scim/v2/Users', answer(401, scimError(401), { 'www-authenticate': 'Bearer realm="scim"', 'ratelimit-limit': '600' })),
    [],
  );
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(401, scimError(401), { 'www-authenticate': 'Basic' })), [/header www-authenticate: /]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Users/42', answer(200, scimUser, { etag: 'W/"1"' })), [/200 sends etag, which its response does not declare/]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Users', answer(200, {}, { 'ratelimit-remaining': '-1' })), [/200 body .*required property/, /header ratelimit-remaining: data must be integer/]);
});

t.test('a path no SCIM operation declares must be the 404 error document', async (t) => {
  t.strictSame(servedAnswerViolations('GET', '/scim/v2/Nothing', answer(404, scimError(404))), []);
  t.match(servedAnswerViolations('GET', '/scim/v2/Nothing', answer(200, scimUser)), [/no operation answers GET \/scim\/v2\/Nothing/]);
  t.match(servedAnswerViolations('GET', '/scim/v2/Nothing', answer(404, { detail: 'x' })), [/required property 'schemas'/]);
});
