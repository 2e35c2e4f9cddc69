import t from 'tap';
import { operations } from '../generated/operations.ts';
import { handlers } from '../src/handlers.ts';
import { PENDING, SEED_ROUTES } from './fixtures/interface-routes.ts';
import { spec } from './helpers/contract.ts';

/** `/api/users/{user}` and `/api/users/{userWithTrashed}` are one OpenAPI path. */
const normalise = (route: string) => route.replace(/\{[^}]+\}/g, '{}');

const specRoutes = new Set(
  Object.entries(spec.paths).flatMap(([path, item]) =>
    Object.keys(item)
      .filter((method) => ['get', 'put', 'post', 'delete', 'patch'].includes(method))
      .map((method) => normalise(`${method.toUpperCase()} ${path}`)),
  ),
);

t.test('every operationId of the spec has a handler, and every handler an operation', async (t) => {
  t.strictSame(Object.keys(handlers).sort(), Object.keys(operations).sort());
  for (const [id, handler] of Object.entries(handlers)) t.type(handler, 'function', id);
});

t.test('every route of the seed document is in the spec or pending in an open issue', async (t) => {
  const pending = new Set(Object.values(PENDING).flat().map(normalise));
  for (const route of SEED_ROUTES) {
    const inSpec = specRoutes.has(normalise(route));
    t.ok(inSpec || pending.has(normalise(route)), `${route} is in the spec or pending`);
    t.notOk(inSpec && pending.has(normalise(route)), `${route}: in the spec, so drop it from PENDING`);
  }
  t.equal(new Set(SEED_ROUTES).size, SEED_ROUTES.length, 'no duplicates in the list');
  t.equal(SEED_ROUTES.length, 52, 'the document has 51 routes; the optional fileName makes 52 paths');
});

t.test('every operation beyond the seed document is marked x-atrium-extension', async (t) => {
  const seed = new Set(SEED_ROUTES.map(normalise));
  for (const [id, meta] of Object.entries(operations)) {
    const route = normalise(`${meta.method} ${meta.path}`);
    t.equal(meta.extension, !seed.has(route), `${id} (${route})`);
  }
});
