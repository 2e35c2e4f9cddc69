import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { PROBLEM_TYPES, problemDocument } from '../../../src/platform/http/problem.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const app = api.atrium.app!;
const spec = JSON.parse(readFileSync('generated/openapi.json', 'utf8'));

/** Resolves a problem's `type` against the URL of the request it answered, as RFC 9457 says. */
async function resolveType(t: Test, requestUrl: string, type: string) {
  const resolved = new URL(type, new URL(requestUrl, 'http://atrium.test'));
  t.equal(resolved.origin, 'http://atrium.test', `${type} is a URI of the service itself`);
  const name = resolved.pathname.replace(/^\/problems\//, '');
  return api.call(t, 'getProblemType', { params: { name: decodeURIComponent(name) } });
}

t.test('every status a problem can carry names a type that resolves to its description', async (t) => {
  const statuses = new Set<number>();
  for (let status = 400; status < 600; status++) statuses.add(status);
  const types = new Set([...statuses].map((status) => problemDocument(status).type));
  t.strictSame([...types].sort(), PROBLEM_TYPES.map(({ name }) => `/problems/${name}`).sort(), 'the service emits exactly the listed types');
  for (const type of types) {
    const answer = await resolveType(t, '/api/users/7', type);
    t.equal(answer.status, 200, `${type} resolves`);
    t.equal(answer.body.type, type);
    const document = problemDocument(answer.body.status);
    t.strictSame([document.type, document.title], [type, answer.body.title], `${type}: the problem documents of its status carry its type and title`);
  }
});

t.test('every error status the spec declares has its own problem type', async (t) => {
  const declared = new Set<number>();
  for (const item of Object.values<Record<string, any>>(spec.paths)) {
    for (const operation of Object.values<any>(item)) {
      // The SCIM service answers its errors as SCIM error documents (RFC 7644 §3.12), which carry no problem type.
      if (operation?.['x-atrium-served-by'] === 'scim') continue;
      for (const status of Object.keys(operation?.responses ?? {})) if (Number(status) >= 400) declared.add(Number(status));
    }
  }
  const own = new Set(PROBLEM_TYPES.map(({ status }) => status));
  t.strictSame(
    [...declared].filter((status) => !own.has(status)),
    [],
    'no declared error status falls back to its class',
  );
});

t.test('the types of real answers resolve', async (t) => {
  const tenant = await api.createTenant('problems');
  const answers: [string, { status: number; body: any }][] = [
    ['/api/users/current', await api.call(t, 'getCurrentUser')],
    ['/api/users/999999', await api.call(t, 'getUser', { params: { user: 999999 }, token: tenant.adminToken })],
    ['/api/users?limit=0', await api.call(t, 'listUsers', { query: { limit: 0 }, token: tenant.adminToken })],
  ];
  t.strictSame(
    answers.map(([, answer]) => answer.status),
    [401, 404, 422],
  );
  for (const [url, answer] of answers) {
    const resolved = await resolveType(t, url, answer.body.type);
    t.strictSame([resolved.status, resolved.body.status, resolved.body.title], [200, answer.status, answer.body.title], `${answer.body.type} resolves`);
  }
  const unknownRoute = await app.inject({ method: 'GET', url: '/api/nothing-here' });
  const resolved = await resolveType(t, '/api/nothing-here', unknownRoute.json().type);
  t.equal(resolved.body.status, 404);
});

t.test('an unknown problem type is a 404 problem', async (t) => {
  for (const name of ['no-such-problem', 'Not-Found', '__proto__', 'constructor', 'x'.repeat(300), 'not found']) {
    const answer = await api.call(t, 'getProblemType', { params: { name } });
    t.equal(answer.status, 404, name.slice(0, 40));
    t.match(answer.body, { type: '/problems/not-found', status: 404, detail: 'The problem type does not exist.' });
  }
});

t.test('problem types are public', async (t) => {
  const answer = await api.call(t, 'getProblemType', { params: { name: 'forbidden' }, headers: { authorization: 'Bearer not-a-token' } });
  t.strictSame(answer.body, {
    type: '/problems/forbidden',
    title: 'Forbidden',
    status: 403,
    description: PROBLEM_TYPES.find(({ name }) => name === 'forbidden')!.description,
    codes: PROBLEM_TYPES.find(({ name }) => name === 'forbidden')!.codes,
  });
});
