/**
 * The spec's examples cannot rot (docs/api-conventions.md#examples): every example in the
 * bundled document (request bodies, responses, parameters, schemas, components/examples)
 * must satisfy the schema it stands for, judged by the contract checker's Ajv; every
 * operation must carry the examples the reference page shows (a request body per media
 * type, its success answer, a problem document per declared error status, the result
 * controls' `filter`); and a few examples are sent to a running service, whose answers
 * must be what the examples promise on the demo tenant.
 */
import t from 'tap';
import { schemaViolations, servedAnswerViolations, spec } from '../helpers/contract.ts';
import { DEMO_PASSWORD, startTestApi } from '../helpers/atrium.ts';
import type { OperationId } from '../../generated/operations.ts';
import { authSecretProblem, p256dhProblem } from '../../src/resources/push/rules.ts';

type Node = Record<string, unknown>;
interface Example {
  where: string;
  schema: string;
  value: unknown;
}

const document = spec as unknown as Node;
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const escape = (segment: string) => segment.replace(/~/g, '~0').replace(/\//g, '~1');

/** The node at a local reference (`#/components/…`). */
function at(pointer: string): Node {
  let node: unknown = document;
  for (const segment of pointer.replace(/^#\//, '').split('/')) {
    node = (node as Node)[segment.replace(/~1/g, '/').replace(/~0/g, '~')];
    if (node === undefined) throw new Error(`${pointer} does not resolve`);
  }
  return node as Node;
}

/** Follows `$ref`s: the node and the pointer where it really lives. */
function resolve(node: Node, pointer: string): { node: Node; pointer: string } {
  while (typeof node.$ref === 'string') {
    pointer = node.$ref;
    node = at(pointer);
  }
  return { node, pointer };
}

/** The examples of a media type or parameter (`example`, `examples` with their references). */
function ownExamples(node: Node, pointer: string, schema: string): Example[] {
  const found: Example[] = [];
  if ('example' in node) found.push({ where: `${pointer}/example`, schema, value: node.example });
  for (const [name, entry] of Object.entries((node.examples ?? {}) as Record<string, Node>)) {
    const { node: example, pointer: lives } = resolve(entry, `${pointer}/examples/${escape(name)}`);
    t.ok('value' in example, `${lives} has a value`);
    found.push({ where: lives, schema, value: example.value });
  }
  return found;
}

/** Whether a schema (through references, `allOf` and array items) carries schema-level examples. */
function schemaHasExamples(node: Node, pointer: string, depth = 0): boolean {
  const { node: schema, pointer: lives } = resolve(node, pointer);
  if (Array.isArray(schema.examples) && schema.examples.length > 0) return true;
  if (depth > 3) return false;
  if (schema.type === 'array' && schema.items) return schemaHasExamples(schema.items as Node, `${lives}/items`, depth + 1);
  return false;
}

/** Every schema-level `examples` entry in the document, each judged by the schema that holds it. */
function schemaExamples(node: unknown, pointer: string, found: Example[]): Example[] {
  if (Array.isArray(node)) node.forEach((item, i) => schemaExamples(item, `${pointer}/${i}`, found));
  else if (node && typeof node === 'object') {
    const object = node as Node;
    const isSchema = pointer.includes('/schema') || pointer.startsWith('#/components/schemas/');
    if (isSchema && Array.isArray(object.examples) && !pointer.endsWith('/properties')) {
      object.examples.forEach((value, i) => found.push({ where: `${pointer}/examples/${i}`, schema: pointer, value }));
    }
    for (const [key, value] of Object.entries(object)) {
      if (key === 'examples' && isSchema && Array.isArray(value)) continue;
      schemaExamples(value, `${pointer}/${escape(key)}`, found);
    }
  }
  return found;
}

const PLACEHOLDER = /additionalProp|^string$/;
const placeholders = (value: unknown): string[] =>
  typeof value === 'string'
    ? PLACEHOLDER.test(value)
      ? [value]
      : []
    : Array.isArray(value)
      ? value.flatMap(placeholders)
      : value && typeof value === 'object'
        ? Object.entries(value).flatMap(([key, inner]) => [...placeholders(key), ...placeholders(inner)])
        : [];

interface Operation {
  operationId: OperationId;
  method: string;
  path: string;
  pointer: string;
  node: Node;
  parameters: { node: Node; pointer: string }[];
}

const operations: Operation[] = [];
for (const [path, item] of Object.entries(document.paths as Record<string, Node>)) {
  for (const method of METHODS) {
    const node = item[method] as Node | undefined;
    if (!node) continue;
    const pointer = `#/paths/${escape(path)}/${method}`;
    const shared = ((item.parameters ?? []) as Node[]).map((p, i) => resolve(p, `#/paths/${escape(path)}/parameters/${i}`));
    const own = ((node.parameters ?? []) as Node[]).map((p, i) => resolve(p, `${pointer}/parameters/${i}`));
    operations.push({ operationId: node.operationId as OperationId, method, path, pointer, node, parameters: [...shared, ...own] });
  }
}

/** The examples of one operation, and what it lacks. */
function examine(op: Operation): { examples: Example[]; missing: string[] } {
  const examples: Example[] = [];
  const missing: string[] = [];
  if (op.node.requestBody) {
    const { node: body, pointer } = resolve(op.node.requestBody as Node, `${op.pointer}/requestBody`);
    for (const [mediaType, media] of Object.entries(body.content as Record<string, Node>)) {
      const mediaPointer = `${pointer}/content/${escape(mediaType)}`;
      const own = ownExamples(media, mediaPointer, `${mediaPointer}/schema`);
      examples.push(...own);
      if (own.length === 0 && !schemaHasExamples(media.schema as Node, `${mediaPointer}/schema`)) missing.push(`request body ${mediaType}`);
    }
  }
  const responses = op.node.responses as Record<string, Node>;
  const success = Object.keys(responses).filter((status) => status.startsWith('2'));
  for (const [status, declared] of Object.entries(responses)) {
    const { node: response, pointer } = resolve(declared, `${op.pointer}/responses/${status}`);
    for (const [mediaType, media] of Object.entries((response.content ?? {}) as Record<string, Node>)) {
      const mediaPointer = `${pointer}/content/${escape(mediaType)}`;
      const own = ownExamples(media, mediaPointer, `${mediaPointer}/schema`);
      examples.push(...own);
      const binary = (resolve(media.schema as Node, `${mediaPointer}/schema`).node.format as string | undefined) === 'binary';
      const needed = status === success[0] || /^[45]/.test(status);
      if (needed && !binary && own.length === 0 && !(status.startsWith('2') && schemaHasExamples(media.schema as Node, `${mediaPointer}/schema`))) {
        missing.push(`${status} ${mediaType}`);
      }
    }
  }
  for (const { node: parameter, pointer } of op.parameters) {
    const own = ownExamples(parameter, pointer, `${pointer}/schema`);
    examples.push(...own);
    // The reference page fills `filter` in from its schema unless it has an example.
    if (parameter.name === 'filter' && own.length === 0) missing.push(`parameter filter`);
  }
  return { examples, missing };
}

t.test('every example satisfies its schema', async (t) => {
  const all = operations.flatMap((op) => examine(op).examples);
  all.push(...schemaExamples(document.paths, '#/paths', []), ...schemaExamples(document.components, '#/components', []));
  all.push(...schemaExamples(document.webhooks, '#/webhooks', []));
  t.ok(all.length > 200, `${all.length} examples found`);
  for (const example of all) {
    t.strictSame(schemaViolations(example.schema, example.value), [], example.where);
    t.strictSame(placeholders(example.value), [], `${example.where} holds no placeholder`);
  }
});

t.test('every shared example is used, and problem examples name the service’s own problem types', async (t) => {
  const bundled = JSON.stringify(document);
  const known = new Set(
    Object.values((document.components as Node).examples as Record<string, Node>)
      .map((example) => (example.value as { type?: string }).type)
      .filter(Boolean),
  );
  for (const name of Object.keys((document.components as Node).examples as Node)) {
    t.ok(bundled.includes(`"#/components/examples/${escape(name)}"`), `components/examples/${name} is referenced`);
  }
  const { PROBLEM_TYPES } = await import('../../src/platform/http/problem.ts');
  const types = new Set(PROBLEM_TYPES.map(({ name }) => `/problems/${name}`));
  for (const type of known) t.ok(types.has(type as string), `${type} is a problem type the service answers`);
});

t.test('every operation carries its examples', async (t) => {
  for (const op of operations) t.strictSame(examine(op).missing, [], `${op.operationId} (${op.method.toUpperCase()} ${op.path})`);
});

t.test('the examples give the answers they promise on the demo tenant', async (t) => {
  const api = await startTestApi(t);
  const media = (pointer: string) => resolve(at(pointer), pointer).node;
  const example = (node: Node): unknown => {
    if ('example' in node) return node.example;
    const first = Object.values((node.examples ?? {}) as Record<string, Node>)[0];
    if (first) return resolve(first, '').node.value;
    return (resolve(node.schema as Node, '').node.examples as unknown[] | undefined)?.[0];
  };
  const operation = (id: string) => operations.find((op) => op.operationId === id)!;
  const requestExample = (id: OperationId) => example(media(`${operation(id).pointer}/requestBody/content/application~1json`));
  const parameterExamples = (id: OperationId) =>
    Object.fromEntries(
      operation(id)
        .parameters.filter(({ node }) => node.in === 'query' && example(node) !== undefined)
        .map(({ node }) => [node.name as string, example(node)]),
    );

  // Sign in with the login example: it names the demo tenant's administrator.
  const login = requestExample('login') as { tenant: string; username: string; password: string };
  t.match(login, { tenant: 'demo', username: 'admin' });
  const signedIn = await api.call(t, 'login', { body: { ...login, password: DEMO_PASSWORD } });
  t.equal(signedIn.status, 200, 'the login example signs the demo administrator in');
  const token = signedIn.body.access_token as string;

  const created = await api.call(t, 'createDepartment', { token, body: requestExample('createDepartment') });
  t.equal(created.status, 201, 'the department example creates a department');
  t.match(created.body, { name: (requestExample('createDepartment') as { name: string }).name });

  // The create examples build on one another as on a fresh demo tenant: the department
  // above is department 1, which the user, notification, menu item and form examples name.
  const createdIds: Partial<Record<OperationId, unknown>> = {};
  for (const id of ['createUser', 'createNotification', 'createRole', 'createMenuItem', 'createForm', 'createTaskTemplate', 'createAttributeSet', 'createUserLoginToken'] as const) {
    const answer = await api.call(t, id, { token, body: requestExample(id) });
    t.ok(answer.status === 201 || answer.status === 202, `${id} accepts its request example (${answer.status})`);
    createdIds[id] = (answer.body as { id?: unknown }).id;
  }

  // The SCIM PATCH examples, each on its own resource: the user example's user and the department above (a group),
  // whose example adds that user as a member.
  const scimToken = await api.call(t, 'createScimToken', { token, body: requestExample('createScimToken') });
  t.equal(scimToken.status, 201);
  const userId = String(createdIds.createUser);
  const patches = [
    ['patchScimUser', `/scim/v2/Users/${userId}`],
    ['patchScimGroup', `/scim/v2/Groups/${String(created.body.id)}`],
  ] as const;
  for (const [id, url] of patches) {
    // Served outside the operation binding, so not through api.call: judged by the same contract checker.
    const body = example(media(`${operation(id).pointer}/requestBody/content/application~1scim+json`));
    if (id === 'patchScimGroup') t.match(JSON.stringify(body), `"value":"${userId}"`, "the group example adds the example user");
    const answer = await api.atrium.app!.inject({
      method: 'PATCH',
      url,
      headers: { authorization: `Bearer ${scimToken.body.token as string}`, 'content-type': 'application/scim+json' },
      payload: JSON.stringify(body),
    });
    t.strictSame(servedAnswerViolations('PATCH', url, answer), [], `${id} → ${answer.statusCode} honours the spec`);
    t.equal(answer.statusCode, 200, `${id} accepts its request example`);
  }
  // The push subscription's endpoint names a real push service, which a test does not reach: its keys are judged as a create judges them.
  const push = requestExample('createPushSubscription') as { keys: { p256dh: string; auth: string } };
  t.same([p256dhProblem(push.keys.p256dh), authSecretProblem(push.keys.auth)], [null, null], 'the push subscription example holds keys a create accepts');

  const query = parameterExamples('listUsers');
  t.ok(query.filter, 'listUsers has an example filter');
  const users = await api.call(t, 'listUsers', { token, query });
  t.equal(users.status, 200);
  t.ok(
    (users.body as { username: string }[]).some((user) => user.username === 'admin'),
    'the example filter finds the demo administrator',
  );

  const current = await api.call(t, 'getCurrentUser', { token });
  const admin = await api.call(t, 'getUser', { token, params: { user: current.body.id as number }, query: parameterExamples('getUser') });
  t.equal(admin.status, 200, 'the demo administrator is shown with the example parameters');
  t.equal(admin.body.username, 'admin');

  // Every list and read without path parameters answers its examples' query with a 200.
  for (const op of operations) {
    if (op.method !== 'get' || op.path.includes('{') || !op.path.startsWith('/api/') || op.operationId === 'streamNotifications') continue;
    const answer = await api.call(t, op.operationId, { token, query: parameterExamples(op.operationId) });
    t.equal(answer.status, 200, `${op.operationId} answers its example query`);
  }
});
