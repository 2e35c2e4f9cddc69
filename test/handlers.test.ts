import { readFileSync } from 'node:fs';
import t from 'tap';
import { operations, servedElsewhere } from '../generated/operations.ts';
import { handlers } from '../src/handlers.ts';
import { INTERFACE_ROUTES, PENDING_ROUTES } from './fixtures/interface-routes.ts';
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
  const operationIds = new Set(Object.keys(operations));
  const handled = new Set(Object.keys(handlers));
  t.strictSame(
    [...operationIds].filter((id) => !handled.has(id)),
    [],
    'operations without a handler (write it in the resource and spread it into src/handlers.ts)',
  );
  t.strictSame(
    [...handled].filter((id) => !operationIds.has(id)),
    [],
    'handlers without an operation (is it in openapi/, and did npm run generate run?)',
  );
  for (const [id, handler] of Object.entries(handlers)) t.type(handler, 'function', id);
});

t.test('every route of the interface is in the spec or pending', async (t) => {
  const pending = new Set(PENDING_ROUTES.map(normalise));
  for (const route of INTERFACE_ROUTES) {
    const inSpec = specRoutes.has(normalise(route));
    t.ok(inSpec || pending.has(normalise(route)), `${route} is in the spec or pending`);
    t.notOk(inSpec && pending.has(normalise(route)), `${route}: in the spec, so drop it from PENDING_ROUTES`);
  }
  t.equal(new Set(INTERFACE_ROUTES).size, INTERFACE_ROUTES.length, 'no duplicates in the list');
  t.equal(INTERFACE_ROUTES.length, 52, 'the interface has 51 routes; the optional fileName makes 52 paths');
});

t.test('every operation beyond the interface is marked x-atrium-extension', async (t) => {
  const inInterface = new Set(INTERFACE_ROUTES.map(normalise));
  // Those another service serves (SCIM) too: they have no handler, but are operations of the spec.
  for (const [id, meta] of [...Object.entries(operations), ...Object.entries(servedElsewhere)]) {
    const route = normalise(`${meta.method} ${meta.path}`);
    t.equal(meta.extension, !inInterface.has(route), `${id} (${route})`);
  }
});

t.test("docs/interface-coverage.md's table of extensions names exactly the operations marked x-atrium-extension", async (t) => {
  const [, extensions = ''] = readFileSync('docs/interface-coverage.md', 'utf8').split('\n## Extensions\n');
  const listed = new Set(
    extensions
      .split('\n')
      .filter((line) => line.startsWith('| ') && !line.startsWith('| Area'))
      .flatMap((line) => [...(line.split('|')[2] ?? '').matchAll(/`(\w+)`/g)].map((match) => match[1]!)),
  );
  const marked = [...Object.entries(operations), ...Object.entries(servedElsewhere)].filter(([, meta]) => meta.extension).map(([id]) => id);
  t.strictSame(
    marked.filter((id) => !listed.has(id)),
    [],
    'extensions missing from the table',
  );
  t.strictSame(
    [...listed].filter((id) => !marked.includes(id)),
    [],
    'listed operations that are no extension of the spec',
  );
});
