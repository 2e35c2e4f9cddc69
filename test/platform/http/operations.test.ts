/**
 * Where the binding checks an operation's `x-permission` (src/platform/http/operations.ts
 * `permissionChecks`), for any operation: a plain permission as soon as the caller is
 * known, the `unless-self` form after validation, on the validated path parameter. And
 * which operations it binds: not those another service serves (`x-atrium-served-by`).
 */
import t from 'tap';
import { operations, servedElsewhere } from '../../../generated/operations.ts';
import type { Caller } from '../../../src/platform/auth/auth.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { boundSpecification, loadSpecification, permissionChecks } from '../../../src/platform/http/operations.ts';
import { ProblemError } from '../../../src/platform/http/problem.ts';

const caller = (userId: number, ...permissions: Permission[]): Caller => ({ userId, permissions: new Set(permissions) });

function status(check: () => void): number {
  try {
    check();
    return 200;
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    return error.status;
  }
}

t.test('no x-permission: nothing is checked', async (t) => {
  t.strictSame(permissionChecks({ permission: null, unlessSelf: null }), { onRequest: null, preHandler: null });
});

t.test('a permission key: checked before validation, for every caller, their own record or not', async (t) => {
  const checks = permissionChecks({ permission: 'users.administer', unlessSelf: null });
  t.equal(checks.preHandler, null, 'nothing left for after validation');
  t.equal(
    status(() => checks.onRequest!(caller(3))),
    403,
  );
  t.equal(
    status(() => checks.onRequest!(caller(3, 'users.administer'))),
    200,
  );
});

t.test('the unless-self form: nothing before validation, then self or permission on the named path parameter', async (t) => {
  const checks = permissionChecks({ permission: 'users.view', unlessSelf: 'member' });
  t.equal(checks.onRequest, null, "an invalid request is judged (422) before the caller's right to it");
  const after = checks.preHandler!;
  t.equal(
    status(() => after(caller(3), { member: 3 })),
    200,
    "one's own record",
  );
  t.equal(
    status(() => after(caller(3), { member: '3' })),
    200,
    'the parameter as the path wrote it',
  );
  t.equal(
    status(() => after(caller(3), { member: 4 })),
    403,
    "another's record without the permission",
  );
  t.equal(
    status(() => after(caller(3, 'users.view'), { member: 4 })),
    200,
    "another's record with it",
  );
  t.equal(
    status(() => after(caller(3), { other: 3 })),
    403,
    'only the named parameter says whose record it is',
  );
});

t.test('every unless-self rule of the generated map names a parameter of its path and a permission', async (t) => {
  for (const [id, meta] of Object.entries(operations)) {
    if (meta.unlessSelf === null) continue;
    t.ok(meta.secured, `${id}: secured`);
    t.ok(meta.permission, `${id}: names a permission`);
    t.ok(meta.path.includes(`{${meta.unlessSelf}}`), `${id}: {${meta.unlessSelf}} is in ${meta.path}`);
  }
});

t.test('the binding leaves the operations another service serves alone, and the served document keeps them', async (t) => {
  const document = loadSpecification() as { paths: Record<string, Record<string, { operationId?: string }>> };
  const bound = boundSpecification(document) as typeof document;
  const idsOf = (paths: typeof document.paths) =>
    Object.values(paths)
      .flatMap((item) => Object.values(item))
      .map((operation) => operation.operationId)
      .filter(Boolean)
      .sort();
  t.strictSame(idsOf(bound.paths), Object.keys(operations).sort(), 'exactly the operations of the generated map');
  t.notOk(
    Object.keys(bound.paths).some((path) => path.startsWith('/scim/')),
    'no SCIM path is bound',
  );
  const served = Object.keys(servedElsewhere).sort();
  t.ok(served.length >= 17, `${served.length} operations served elsewhere`);
  t.strictSame(
    idsOf(document.paths).filter((id) => !(id! in operations)),
    served,
    'the document holds them all',
  );
  t.ok(
    Object.values(servedElsewhere).every((meta) => meta.service === 'scim' && meta.path.startsWith('/scim/v2/')),
    'all of them SCIM',
  );
});
