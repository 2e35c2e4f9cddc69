/** The rules of role administration as functions: no escalation, no locking oneself out, look-alike names. */
import t from 'tap';
import type { Caller } from '../../../src/platform/auth/auth.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import { coded } from '../../../src/platform/http/problem.ts';
import { INVISIBLE_CHARACTER_PROBLEM, NAME_TAKEN, nameTaken } from '../../../src/resources/roles/names.ts';
import { assertMayAdministerRole, newRoleName, roleChangeErrors } from '../../../src/resources/roles/rules.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';
import { rejection, roleNamed } from '../../helpers/fixtures.ts';

const caller = (...permissions: Permission[]): Pick<Caller, 'permissions'> => ({ permissions: new Set(permissions) });
const delegate = caller('users.view', 'users.administer');
const role = (permissions: string[], active = true, ownRole = false) => ({ permissions, active, ownRole });

t.test('roleChangeErrors: granting or revoking a permission the caller lacks', async (t) => {
  t.strictSame(roleChangeErrors(delegate, role([]), { permissions: ['users.view'], active: true }), {});
  t.strictSame(roleChangeErrors(delegate, role([]), { permissions: ['users.view', 'tasks.administer'], active: true }), {
    permissions: [coded('permission_escalation', 'you cannot grant or revoke permissions you do not hold: tasks.administer')],
  });
  t.strictSame(
    roleChangeErrors(delegate, role(['users.view', 'tasks.administer']), { permissions: ['users.view'], active: true }),
    {
      permissions: [coded('permission_escalation', 'you cannot grant or revoke permissions you do not hold: tasks.administer')],
    },
    'revoking too',
  );
  t.strictSame(
    roleChangeErrors(delegate, role(['tasks.administer']), { permissions: ['tasks.administer'], active: true }),
    {},
    'an unheld permission kept as it is',
  );
});

t.test('roleChangeErrors: (de)activating needs every permission the role lists, before and after', async (t) => {
  t.strictSame(roleChangeErrors(delegate, role(['users.view']), { permissions: ['users.view'], active: false }), {});
  t.strictSame(roleChangeErrors(delegate, role(['tasks.administer']), { permissions: ['tasks.administer'], active: false }), {
    active: [coded('permission_escalation', 'you cannot activate or deactivate a role granting permissions you do not hold: tasks.administer')],
  });
  t.strictSame(
    roleChangeErrors(delegate, role(['tasks.administer'], false), { permissions: ['tasks.administer'], active: true }),
    {
      active: [coded('permission_escalation', 'you cannot activate or deactivate a role granting permissions you do not hold: tasks.administer')],
    },
    'reactivating too',
  );
});

t.test("roleChangeErrors: one's own role is never deactivated, nor stripped of users.administer", async (t) => {
  const own = role(['users.view', 'users.administer'], true, true);
  t.strictSame(roleChangeErrors(delegate, own, { permissions: ['users.view', 'users.administer'], active: false }), {
    active: [coded('self_change_forbidden', 'you cannot deactivate your own role')],
  });
  t.strictSame(roleChangeErrors(delegate, own, { permissions: ['users.view'], active: true }), {
    permissions: [coded('self_change_forbidden', 'you cannot remove users.administer from your own role')],
  });
  t.strictSame(roleChangeErrors(delegate, own, { permissions: ['users.view', 'users.administer'], active: true }), {});
  t.strictSame(
    roleChangeErrors(delegate, role(['users.view', 'users.administer']), { permissions: ['users.view'], active: false }),
    {},
    'another role may lose both',
  );
});

t.test('assertMayAdministerRole: a role listing a permission the caller lacks is not theirs to change (403)', async (t) => {
  t.doesNotThrow(() => assertMayAdministerRole(delegate, { permissions: ['users.view'] }));
  t.throws(() => assertMayAdministerRole(delegate, { permissions: ['users.view', 'automations.administer'] }), {
    status: 403,
    message: 'This role grants permissions you do not hold (automations.administer); you cannot change it.',
  });
});

t.test('newRoleName: the name to store, or 422 for blanks at either end, invisible characters and look-alikes', async (t) => {
  const data = await startTestDatabase(t);
  const tenant = await data.createTenant('roles-rules');
  const name = (value: string, exceptId?: number) => data.db.tenant(tenant.tenantId, (tx) => newRoleName(tx, value, exceptId));
  t.equal(await name('Reviewers'), 'Reviewers');
  t.equal(await name('Cafe\u0301'), 'Café', 'stored in NFC');
  const refused = async (value: string) =>
    (await rejection<{ status: number; errors: unknown; errorCodes: unknown }>(name(value))) ?? { status: 200, errors: null, errorCodes: null };
  t.match(await refused(' Reviewers'), { status: 422, errors: { name: ['may not begin or end with whitespace'] }, errorCodes: { name: ['pattern'] } });
  t.match(await refused('Re\u200bviewers'), { status: 422, errors: { name: ['may not contain control, format or other invisible characters'] } });
  // Characters drawn as nothing: a variation selector, the combining grapheme joiner, a Hangul filler, the blank braille pattern.
  for (const hidden of ['\ufe0f', '\u034f', '\u115f', '\u3164', '\u2800', '\u{e0101}']) {
    t.match(await refused(`Reviewers${hidden}`), { status: 422, errors: { name: [INVISIBLE_CHARACTER_PROBLEM] } }, `U+${hidden.codePointAt(0)!.toString(16)}`);
  }
  t.match(await refused('administrator'), { status: 422, errors: { name: [NAME_TAKEN] } }, 'the seeded Administrator, in another case');
  t.match(await refused('ＡＤＭＩＮＩＳＴＲＡＴＯＲ'), { status: 422, errors: { name: [NAME_TAKEN] } }, 'in full-width letters');
  const administrator = await roleNamed(data.db, tenant.tenantId, 'Administrator');
  t.equal(await name('ADMINISTRATOR', administrator.id), 'ADMINISTRATOR', 'a role may take a look-alike of its own name');
});

t.test('nameTaken: a name stored with a character drawn as nothing is the same name as without it', async (t) => {
  // Stored before such characters were refused; a new name is compared with it as UTS #39's skeleton does.
  const stored = [
    { id: 1, name: 'Finance\u034f' },
    { id: 2, name: 'Sup\ufe0fport' },
  ];
  t.ok(nameTaken(stored, 'Finance'));
  t.ok(nameTaken(stored, 'support'));
  t.notOk(nameTaken(stored, 'Finance', 1), 'its own name');
  t.notOk(nameTaken(stored, 'Finances'));
});
