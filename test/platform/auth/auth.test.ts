/**
 * The permission rules every operation's `x-permission` is checked with, on plain callers
 * (no session, no database).
 */
import t from 'tap';
import { can, requirePermission, requirePermissionUnlessSelf, type Caller } from '../../../src/platform/auth/auth.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { ProblemError } from '../../../src/platform/http/problem.ts';

const caller = (userId: number, ...permissions: Permission[]): Caller => ({ userId, permissions: new Set(permissions) });

/** The problem a rule throws, or null when it lets the caller through. */
function refusal(check: () => void): { status: number; detail: string } | null {
  try {
    check();
    return null;
  } catch (error) {
    if (!(error instanceof ProblemError)) throw error;
    return { status: error.status, detail: error.message };
  }
}

t.test('can and requirePermission: the caller holds the permission or the answer is 403 naming it', async (t) => {
  t.ok(can(caller(1, 'users.view'), 'users.view'));
  t.notOk(can(caller(1, 'users.view-personal'), 'users.view'));
  t.equal(
    refusal(() => requirePermission(caller(1, 'users.view'), 'users.view')),
    null,
  );
  t.strictSame(
    refusal(() => requirePermission(caller(1), 'users.view')),
    { status: 403, detail: 'This requires the permission "users.view".' },
  );
});

t.test("requirePermissionUnlessSelf: one's own user needs no permission", async (t) => {
  t.equal(
    refusal(() => requirePermissionUnlessSelf(caller(7), 'users.administer', 7)),
    null,
  );
  t.equal(
    refusal(() => requirePermissionUnlessSelf(caller(7, 'users.administer'), 'users.administer', 7)),
    null,
  );
});

t.test("requirePermissionUnlessSelf: anyone else's needs the permission, refused as requirePermission refuses", async (t) => {
  t.equal(
    refusal(() => requirePermissionUnlessSelf(caller(7, 'users.administer'), 'users.administer', 8)),
    null,
  );
  t.strictSame(
    refusal(() => requirePermissionUnlessSelf(caller(7), 'users.administer', 8)),
    {
      status: 403,
      detail: 'This requires the permission "users.administer".',
    },
  );
  t.strictSame(
    refusal(() => requirePermissionUnlessSelf(caller(7, 'users.view'), 'users.administer', 8)),
    refusal(() => requirePermission(caller(7, 'users.view'), 'users.administer')),
    'another permission does not stand in for it',
  );
  t.ok(
    refusal(() => requirePermissionUnlessSelf(caller(7), 'users.view', Number.NaN)),
    "an id that names no user is no one's own",
  );
});
