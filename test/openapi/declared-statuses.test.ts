/**
 * Every operation declares the refusals the platform answers it with, whatever its handler
 * does (docs/api-conventions.md#status-codes), each as the shared response of
 * `components/responses`; and the contract check that every test's `api.call` makes
 * refuses any status an operation does not declare, a problem document included.
 */
import t from 'tap';
import { operations, type OperationId } from '../../generated/operations.ts';
import { contractViolations, spec } from '../helpers/contract.ts';
import { defaultCode } from '../../src/platform/http/problem.ts';

type Node = Record<string, any>;
const document = spec as unknown as Node;

/** The shared response each refusal of the platform is declared with. */
const SHARED: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  408: 'RequestTimeout',
  412: 'PreconditionFailed',
  413: 'ContentTooLarge',
  414: 'UriTooLong',
  415: 'UnsupportedMediaType',
  422: 'UnprocessableEntity',
  429: 'TooManyRequests',
  431: 'RequestHeaderFieldsTooLarge',
  500: 'InternalServerError',
  503: 'ServiceUnavailable',
};

/** Operations a session whose user must change their password may always use (src/platform/auth/auth.ts). */
const OPEN_WHILE_PASSWORD_CHANGE_REQUIRED = new Set<OperationId>(['logout', 'getCurrentUser']);
/** Operations that never touch the database, so never find it unreachable. */
const WITHOUT_DATABASE = new Set<OperationId>(['getLiveness', 'getProblemType']);
/** Its one parameter is a string no longer than the router lets through: nothing is left to refuse. */
const NOTHING_TO_VALIDATE = new Set<OperationId>(['getProblemType']);

const resolve = (node: Node): Node => (node?.$ref ? resolve(document.components[node.$ref.split('/')[2]][node.$ref.split('/')[3]]) : node);

/** The refusals the platform gives an operation, each with the reason, from what the operation is. */
function platformRefusals(id: OperationId): Map<number, string> {
  const meta = operations[id];
  const item = document.paths[meta.path];
  const operation = item[meta.method.toLowerCase()];
  const parameters = [...(item.parameters ?? []), ...(operation.parameters ?? [])].map(resolve);
  const inPath = parameters.some((p) => p.in === 'path');
  const inQuery = parameters.some((p) => p.in === 'query');
  const refusals = new Map<number, string>([
    [400, 'a request the HTTP parser cannot read'],
    [408, 'request headers that arrive too slowly'],
    [415, 'a multipart body, which no operation without one reads'],
    [431, 'a request line and headers over 16 KiB'],
    [500, 'an unexpected error'],
  ]);
  if (!meta.path.startsWith('/health/')) refusals.set(429, 'the general rate limit');
  // Readiness answers its own 503, a readiness record.
  if (!WITHOUT_DATABASE.has(id) && id !== 'getReadiness') refusals.set(503, 'the database unreachable for a moment');
  if (meta.secured) {
    refusals.set(401, 'no valid access token');
    if (!OPEN_WHILE_PASSWORD_CHANGE_REQUIRED.has(id)) refusals.set(403, 'a session whose password must be changed');
  }
  if (meta.method !== 'GET') refusals.set(413, 'a body over the limit, which every method but GET reads');
  if (meta.method !== 'GET') refusals.set(412, 'an If-Match naming an entity tag, or If-None-Match: *, on a write');
  if (inPath) {
    refusals.set(404, 'a record that does not exist, or a dot segment a client resolves into another path');
    refusals.set(414, 'a path segment over 1024 characters');
  }
  if ((inPath || inQuery || operation.requestBody) && !NOTHING_TO_VALIDATE.has(id)) refusals.set(422, 'a parameter or body its schema refuses');
  return refusals;
}

const ids = Object.keys(operations) as OperationId[];

t.test('every operation declares the refusals the platform answers it with, as the shared responses', async (t) => {
  const missing: string[] = [];
  const unshared: string[] = [];
  for (const id of ids) {
    const meta = operations[id];
    const responses = document.paths[meta.path][meta.method.toLowerCase()].responses as Record<string, Node>;
    for (const [status, why] of platformRefusals(id)) {
      const declared = responses[String(status)];
      if (!declared) missing.push(`${id} does not declare ${status} (${why})`);
      else if (declared.$ref !== `#/components/responses/${SHARED[status]}`) unshared.push(`${id} ${status} is not ${SHARED[status]}`);
    }
  }
  t.strictSame(missing, [], `${ids.length} operations`);
  t.strictSame(unshared, []);
});

t.test('each shared refusal says when it happens and is a problem document', async (t) => {
  for (const name of Object.values(SHARED)) {
    const response = document.components.responses[name] as Node;
    t.ok(response, `components/responses/${name}`);
    t.ok(String(response.description).length > 40, `${name} says when it happens`);
    t.equal(response.content['application/problem+json'].schema.$ref, '#/components/schemas/Problem', `${name} is a problem document`);
  }
});

const problem = (status: number, type: string, title: string) => ({
  type: `/problems/${type}`,
  title,
  status,
  code: defaultCode(status),
  detail: 'x',
  request_id: 'atrium-test',
});

t.test('the contract check refuses a status the operation does not declare, a problem document included', async (t) => {
  t.strictSame(
    contractViolations('getLiveness', 404, 'application/problem+json', problem(404, 'not-found', 'Not Found')),
    ['getLiveness does not declare status 404'],
    'an undeclared 4xx, a valid problem document',
  );
  t.strictSame(
    contractViolations('getProblemType', 422, 'application/problem+json', problem(422, 'unprocessable-content', 'Unprocessable Content')),
    ['getProblemType does not declare status 422'],
  );
  t.strictSame(contractViolations('getCurrentUser', 201, 'application/json', {}), ['getCurrentUser does not declare status 201'], 'an undeclared 2xx');
  t.strictSame(contractViolations('getLiveness', 503, 'application/problem+json', problem(503, 'service-unavailable', 'Service Unavailable')), [
    'getLiveness does not declare status 503',
  ]);
});

t.test('a declared refusal passes, and its body is still judged', async (t) => {
  t.strictSame(contractViolations('getRole', 414, 'application/problem+json; charset=utf-8', problem(414, 'uri-too-long', 'URI Too Long')), []);
  t.strictSame(contractViolations('getRole', 414, 'application/json', problem(414, 'uri-too-long', 'URI Too Long')), [
    '414 answered application/json, spec declares application/problem+json',
  ]);
  t.match(contractViolations('getRole', 414, 'application/problem+json', { status: 414 }), [/^414 body does not match the spec: /], 'not a problem document');
});
