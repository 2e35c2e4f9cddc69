/**
 * The user rules as functions: the write rules the API and the CSV preview share, one's own
 * record, no escalation, blackout; `requireAdministrableUser` on a real database.
 */
import { characterCount } from '../../../src/platform/http/validation.ts';
import t from 'tap';
import type { Caller } from '../../../src/platform/auth/auth.ts';
import type { Permission } from '../../../src/platform/auth/permissions.ts';
import type { UserReferences } from '../../../src/resources/users/queries.ts';
import { coded } from '../../../src/platform/http/problem.ts';
import {
  addErrors,
  administerRefusal,
  assertMayAdminister,
  assertMayMarkForLogout,
  assertNotSelf,
  assignsRole,
  blackoutValues,
  deriveActive,
  filterVisibilityErrors,
  hiddenKeyErrors,
  isReservedUsername,
  missingReferenceErrors,
  passwordErrors,
  requiredProfileKeyErrors,
  requireAdministrableUser,
  restrictedSelfUpdateErrors,
  roleAssignmentError,
  selfRenameError,
  selfUpdateIgnoredKeys,
  userDraftErrors,
  userReferenceErrors,
  userWriteRefusal,
  REQUIRED_BY_SETTINGS,
  type StoredUser,
} from '../../../src/resources/users/rules.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';
import { roleNamed } from '../../helpers/fixtures.ts';

const caller = (userId: number, ...permissions: Permission[]): Caller => ({ userId, permissions: new Set(permissions) });
const rules = { passwordMinLength: 10 };
const stored: StoredUser = { groupAccount: false, firstName: 'Ada', lastName: 'Lovelace', enteringDate: '2024-01-01', leavingDate: null, roleId: 1 };
const newUser = { username: 'ada', password: 'long enough!', firstName: 'Ada', lastName: 'Lovelace', roleId: 1 };

t.test('deriveActive: false before the entering date and after the leaving date; both days count', async (t) => {
  const today = '2030-06-15';
  t.equal(deriveActive(null, null, today), true);
  t.equal(deriveActive('2030-06-15', null, today), true, 'entering today');
  t.equal(deriveActive('2030-06-16', null, today), false, 'entering tomorrow');
  t.equal(deriveActive(null, '2030-06-15', today), true, 'leaving today is still a working day');
  t.equal(deriveActive(null, '2030-06-14', today), false, 'left yesterday');
});

t.test('requiredProfileKeyErrors: personal accounts only; new ones fill every key, updates may not empty the keys they send', async (t) => {
  const required = ['profile_picture', 'city', 'phone'] as const;
  const missing = (...keys: string[]) => Object.fromEntries(keys.map((key) => [key, [coded('required_by_settings', REQUIRED_BY_SETTINGS)]]));
  t.strictSame(requiredProfileKeyErrors(newUser, []), {}, 'nothing required');
  t.strictSame(requiredProfileKeyErrors({ ...newUser, city: ' ', phone: null }, required), missing('profile_picture', 'city', 'phone'), 'absent, blank, null');
  t.strictSame(requiredProfileKeyErrors({ ...newUser, city: 'Bonn', phone: '1', hasPicture: true }, required), {});
  t.strictSame(requiredProfileKeyErrors({ ...newUser, groupAccount: true }, required), {}, 'a group account is exempt');
  t.strictSame(requiredProfileKeyErrors({ current: stored, firstName: 'Ada' }, required), {}, 'an update is judged on the keys it sends');
  t.strictSame(requiredProfileKeyErrors({ current: stored, city: '', hasPicture: false }, required), missing('profile_picture', 'city'));
  t.strictSame(requiredProfileKeyErrors({ current: { ...stored, city: 'Bonn' }, city: 'Köln' }, required), {});
  const group = { ...stored, groupAccount: true, city: 'Bonn', pictureFileName: 'me.png' };
  t.strictSame(requiredProfileKeyErrors({ current: group, city: null }, required), {}, 'a group account stays exempt');
  t.strictSame(
    requiredProfileKeyErrors({ current: group, groupAccount: false }, required),
    missing('phone'),
    'turned personal: every key, stored values count',
  );
  t.strictSame(userDraftErrors({ ...newUser }, { ...rules, requiredProfileKeys: ['email'] }), missing('email'), 'part of userDraftErrors');
  t.equal(userWriteRefusal(missing('city', 'phone')).message, "The request is invalid. This tenant's settings require: city, phone.");
  t.equal(userWriteRefusal({ city: ['is wrong'] }).message, 'The request is invalid.');
});

t.test('passwords: counted in code points; a new user needs one, an update need not send one', async (t) => {
  t.equal(characterCount('😀😀😀'), 3, 'an emoji is one character');
  t.strictSame(passwordErrors(undefined, rules), {});
  t.strictSame(passwordErrors('0123456789', rules), {});
  t.strictSame(
    passwordErrors('😀'.repeat(9), rules),
    { password: [coded('min_length', 'must be at least 10 characters long')] },
    'nine emoji are 18 UTF-16 units, yet too short',
  );
  t.strictSame(
    passwordErrors('e\u0301'.repeat(9), rules),
    { password: [coded('min_length', 'must be at least 10 characters long')] },
    'nine accented letters, each typed as a letter and a combining accent, are nine characters',
  );
  t.strictSame(passwordErrors('e\u0301'.repeat(10), rules), {});
  t.strictSame(
    passwordErrors('\ufdfa', rules),
    { password: [coded('min_length', 'must be at least 10 characters long')] },
    'one character that NFKC writes as eighteen is one character',
  );
  t.strictSame(userDraftErrors({ ...newUser, password: undefined }, rules), { password: [coded('required', 'is required for new users')] });
  t.strictSame(userDraftErrors({ ...newUser, password: null }, rules), { password: [coded('required', 'is required for new users')] }, 'an empty CSV cell');
  t.strictSame(userDraftErrors({ current: stored }, rules), {}, 'an update that writes nothing');
  t.strictSame(userDraftErrors({ current: stored, password: 'short' }, rules), { password: [coded('min_length', 'must be at least 10 characters long')] });
});

t.test('userDraftErrors: a new user needs a role; usernames of blacked-out accounts are reserved', async (t) => {
  t.strictSame(userDraftErrors(newUser, rules), {});
  t.strictSame(userDraftErrors({ ...newUser, roleId: null }, rules), { role_id: [coded('required', 'is required for new users')] });
  t.strictSame(userDraftErrors({ ...newUser, username: 'deleted-user-12' }, rules), { username: [coded('reserved', 'is reserved for blacked-out accounts')] });
  t.ok(isReservedUsername('deleted-user-1'));
  t.notOk(isReservedUsername('deleted-user-'), 'no id');
  t.notOk(isReservedUsername('deleted-user-1x'));
  t.notOk(isReservedUsername('xdeleted-user-1'));
  t.ok(isReservedUsername('Deleted-User-1'), 'in any letter case, as new names are judged taken');
  // A character that does not show would let a name pass for another one.
  for (const username of ['admin\u200b', '\u202eadmin', 'ad\u00admin', 'a\tb', 'admin\u3164', 'ad\u034fmin']) {
    t.strictSame(
      userDraftErrors({ ...newUser, username }, rules),
      { username: [coded('pattern', 'may not contain control, format or other invisible characters')] },
      JSON.stringify(username),
    );
  }
  const legacy = { current: { ...stored, username: 'legacy\u200b' } };
  t.strictSame(userDraftErrors({ ...legacy, username: 'legacy\u200b' }, rules), {}, 'a stored name sent back as it is is not judged again');
  t.ok(userDraftErrors({ ...legacy, username: 'other\u200b' }, rules).username, 'a new one is');
});

t.test('userDraftErrors: names of personal accounts, as the write would leave them', async (t) => {
  const required = [coded('required', 'is required for personal accounts')];
  t.strictSame(
    userDraftErrors({ ...newUser, firstName: '  ', lastName: null }, rules),
    { first_name: required, last_name: required },
    'blank counts as missing',
  );
  t.strictSame(userDraftErrors({ ...newUser, firstName: undefined, lastName: undefined, groupAccount: true }, rules), {}, 'a group account needs none');
  t.strictSame(userDraftErrors({ current: stored, lastName: '' }, rules), { last_name: required }, 'an update may not empty one');
  t.strictSame(userDraftErrors({ current: stored, defaultRoute: '/home' }, rules), {}, 'and keeps the stored ones when it writes none');
  const team: StoredUser = { ...stored, groupAccount: true, firstName: null, lastName: null };
  t.strictSame(
    userDraftErrors({ current: team, groupAccount: false }, rules),
    { first_name: required, last_name: required },
    'turning a group account personal needs names',
  );
  t.strictSame(userDraftErrors({ current: team, groupAccount: false, firstName: 'T', lastName: 'W' }, rules), {});
});

t.test('userDraftErrors: the leaving date is not before the entering date, stored dates included', async (t) => {
  const early = { leaving_date: [coded('out_of_range', 'must not be before entering_date')] };
  t.strictSame(userDraftErrors({ ...newUser, enteringDate: '2024-05-01', leavingDate: '2024-04-30' }, rules), early);
  t.strictSame(userDraftErrors({ ...newUser, enteringDate: '2024-05-01', leavingDate: '2024-05-01' }, rules), {}, 'the same day');
  t.strictSame(userDraftErrors({ current: stored, leavingDate: '2023-12-31' }, rules), early, 'against the stored entering date');
  t.strictSame(
    userDraftErrors({ current: { ...stored, leavingDate: '2024-02-01' }, enteringDate: '2024-03-01' }, rules),
    early,
    'against the stored leaving date',
  );
  t.strictSame(userDraftErrors({ current: { ...stored, leavingDate: '2024-02-01' }, enteringDate: null }, rules), {}, 'clearing a date');
});

t.test('userDraftErrors: default_route is a same-origin path or an absolute http(s) URL', async (t) => {
  t.strictSame(userDraftErrors({ ...newUser, defaultRoute: '/tasks?tab=open' }, rules), {});
  t.strictSame(userDraftErrors({ ...newUser, defaultRoute: null }, rules), {});
  t.ok(userDraftErrors({ ...newUser, defaultRoute: 'javascript:alert(1)' }, rules).default_route?.length);
  t.ok(userDraftErrors({ ...newUser, defaultRoute: '//evil.example.com/' }, rules).default_route?.length);
});

t.test('userReferenceErrors: role and language must exist; a role the draft assigns may grant only what the caller holds', async (t) => {
  const references: UserReferences = {
    roles: new Map([
      [1, { active: true, permissions: [] }],
      [2, { active: true, permissions: ['users.view', 'automations.administer'] }],
      [3, { active: false, permissions: ['automations.administer'] }],
    ]),
    languages: new Set(['de-DE']),
  };
  const delegate = caller(7, 'users.view', 'users.administer');
  t.strictSame(userReferenceErrors({ roleId: 1, langId: 'de-DE' }, references, delegate), {});
  t.strictSame(userReferenceErrors({ roleId: 9, langId: 'xx-XX' }, references, delegate), {
    role_id: [coded('missing_reference', 'does not exist')],
    lang_id: [coded('missing_reference', 'does not exist')],
  });
  t.strictSame(userReferenceErrors({ roleId: 2 }, references, delegate), {
    role_id: [coded('permission_escalation', 'grants permissions you do not hold: automations.administer')],
  });
  t.strictSame(
    userReferenceErrors({ roleId: 3 }, references, delegate),
    { role_id: [coded('permission_escalation', 'grants permissions you do not hold: automations.administer')] },
    'an inactive role by what it lists',
  );
  t.strictSame(userReferenceErrors({ roleId: 2 }, references, caller(1, 'users.view', 'automations.administer')), {});
  t.strictSame(userReferenceErrors({ roleId: 2, current: { ...stored, roleId: 2 } }, references, delegate), {}, 'the role the user has is not assigned again');
  t.strictSame(missingReferenceErrors({ roleId: 2, langId: null }, references), {}, 'existence only');
  t.equal(assignsRole({ roleId: 2 }), true, "a new user's role");
  t.equal(assignsRole({ roleId: 2, current: { ...stored, roleId: 1 } }), true, 'another role');
  t.equal(assignsRole({ roleId: null }), false);
  t.equal(assignsRole({ current: stored }), false);
});

t.test('addErrors keeps the errors a key has; hiddenKeyErrors and filterVisibilityErrors name the permission', async (t) => {
  t.strictSame(addErrors({ a: ['first'] }, { a: ['second'], b: ['other'] }), { a: ['first'], b: ['other'] });
  const delegate = caller(7, 'users.view', 'users.administer');
  const hidden = hiddenKeyErrors(delegate, { id: 8 }, ['city', 'email', 'role_id', 'first_name', 'password', 'department_ids']);
  t.strictSame(Object.keys(hidden).sort(), ['city', 'email', 'role_id']);
  t.match(hidden.email![0], { code: 'permission_missing', message: /users\.view-personal/ });
  t.match(hidden.role_id![0], { code: 'permission_missing', message: /users\.view-administrative/ });
  t.strictSame(hiddenKeyErrors(delegate, { id: 7 }, ['email', 'role_id']), {}, "one's own record shows every field");
  t.strictSame(hiddenKeyErrors(caller(1, 'users.view-personal', 'users.view-administrative'), { id: 8 }, ['email', 'role_id']), {});
  t.strictSame(filterVisibilityErrors(delegate, { role_id: 1, active: true, text: 'x' }), {
    'filter.role_id': [coded('permission_missing', 'needs the permission "users.view-administrative"')],
    'filter.active': [coded('permission_missing', 'needs the permission "users.view-administrative"')],
  });
  t.strictSame(filterVisibilityErrors(caller(1, 'users.view-administrative'), { role_id: 1 }), {});
  t.strictSame(filterVisibilityErrors(delegate, undefined), {});
});

t.test("one's own record: ignored keys, the restricted session, renaming, deleting, logout marking", async (t) => {
  t.strictSame(selfUpdateIgnoredKeys(caller(1, 'users.administer')), ['role_id', 'active', 'prevent_logout']);
  t.strictSame(selfUpdateIgnoredKeys(caller(1)), ['role_id', 'active', 'prevent_logout', 'department_ids', 'request_password_change', 'group_account']);
  t.strictSame(restrictedSelfUpdateErrors({ passwordChangeRequired: false }, { city: 'x' }), {});
  t.strictSame(restrictedSelfUpdateErrors({ passwordChangeRequired: true }, { password: 'new one', old_password: 'old one' }), {});
  t.strictSame(restrictedSelfUpdateErrors({ passwordChangeRequired: true }, { request_password_change: false }), {
    request_password_change: [coded('password_change_required', 'cannot be changed until your password has been changed')],
    password: [coded('password_change_required', 'is required: your password must be changed first')],
  });
  t.equal(selfRenameError(caller(1), undefined, 'me'), undefined);
  t.equal(selfRenameError(caller(1), 'me', 'me'), undefined, 'the current name is no change');
  t.match(selfRenameError(caller(1), 'you', 'me')?.[0], { code: 'permission_missing', message: /users\.view/ });
  t.equal(selfRenameError(caller(1, 'users.view'), 'you', 'me'), undefined);
  t.throws(() => assertNotSelf(caller(1), 1, 'delete'), { status: 403, message: 'You cannot delete your own account.' });
  t.doesNotThrow(() => assertNotSelf(caller(1), 2, 'delete'));
  t.throws(() => assertMayMarkForLogout(caller(1), { id: 1, preventLogout: true }), {
    status: 403,
    message: 'Your account is protected from logout (prevent_logout).',
  });
  t.doesNotThrow(() => assertMayMarkForLogout(caller(1), { id: 1, preventLogout: false }));
  t.doesNotThrow(() => assertMayMarkForLogout(caller(1, 'users.administer'), { id: 2, preventLogout: true }), 'protection is against oneself only');
});

t.test('no escalation: assigning a role, administering a user who holds more', async (t) => {
  const delegate = caller(7, 'users.view', 'users.administer');
  t.equal(roleAssignmentError(delegate, ['users.view']), undefined);
  t.strictSame(roleAssignmentError(delegate, ['users.view', 'tasks.administer', 'automations.administer']), [
    coded('permission_escalation', 'grants permissions you do not hold: tasks.administer, automations.administer'),
  ]);
  t.equal(administerRefusal(delegate, { id: 8, grantable: ['users.view'] }), undefined);
  t.equal(administerRefusal(delegate, { id: 7, grantable: ['automations.administer'] }), undefined, 'oneself');
  t.equal(
    administerRefusal(delegate, { id: 8, grantable: ['automations.administer'] }),
    'This user holds permissions you do not hold; you cannot administer them.',
  );
  t.equal(
    administerRefusal(caller(7, 'users.view-administrative'), { id: 8, grantable: ['automations.administer'] }),
    'This user holds permissions you do not hold (automations.administer); you cannot administer them.',
    'named to who may see the role',
  );
  t.throws(() => assertMayAdminister(delegate, { id: 8, grantable: ['automations.administer'] }), {
    status: 403,
    message: 'This user holds permissions you do not hold; you cannot administer them.',
  });
});

t.test('blackoutValues: the name becomes deleted-user-<id>; personal and administrative values are cleared', async (t) => {
  const values = blackoutValues(42);
  t.equal(values.username, 'deleted-user-42');
  t.ok(isReservedUsername(values.username!));
  for (const key of [
    'passwordHash',
    'firstName',
    'lastName',
    'email',
    'phone',
    'street',
    'zipcode',
    'city',
    'birthdate',
    'gender',
    'staffNumber',
    'enteringDate',
    'leavingDate',
    'defaultRoute',
    'lastLoginAt',
  ] as const) {
    t.equal(values[key], null, key);
  }
  t.equal(values.active, false);
  t.notOk('roleId' in values, 'the role stays');
  t.ok(values.blackedOutAt && values.deletedAt && values.logoutMarkedAt, 'stamped, deleted and marked for logout');
});

t.test('requireAdministrableUser: the user, or 404, or 403 while their role lists more than the caller holds', async (t) => {
  const data = await startTestDatabase(t);
  const tenant = await data.createTenant('users-rules');
  const delegate = await data.createUser(tenant.tenantId, { permissions: ['users.view', 'users.administer'] });
  const plain = await data.createUser(tenant.tenantId);
  const gone = await data.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  const administrator = await roleNamed(data.db, tenant.tenantId, 'Administrator');
  const boss = await data.createUser(tenant.tenantId, { values: { roleId: administrator.id } });
  const asDelegate = caller(delegate.id, 'users.view', 'users.administer');
  const run = (userId: number, withTrashed = false) =>
    data.db.tenant(tenant.tenantId, (tx) => requireAdministrableUser(tx, asDelegate, userId, { withTrashed }));
  t.equal((await run(plain.id)).id, plain.id);
  t.equal((await run(delegate.id)).id, delegate.id, 'oneself');
  await t.rejects(run(987654), { status: 404, message: 'The user does not exist.' });
  await t.rejects(run(gone.id), { status: 404, message: 'The user does not exist.' }, 'a deleted user, unless asked for');
  t.equal((await run(gone.id, true)).id, gone.id);
  await t.rejects(run(boss.id), { status: 403, message: 'This user holds permissions you do not hold; you cannot administer them.' });
  const other = await data.createTenant('users-rules-other');
  await t.rejects(run(other.adminUserId), { status: 404, message: 'The user does not exist.' }, "another tenant's user is a missing one");
});
