/** The user field map: columns of the keys a write holds, and CSV cells read by kind. */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { columnsOf, IMPORTABLE_KEYS, keepsCurrent, parseCell, USER_FIELDS } from '../../../src/resources/users/fields.ts';
import { USERNAME_PATTERN } from '../../../src/resources/users/rules.ts';

t.test("IMPORTABLE_KEYS: every writable key in the template's order, the password and departments included", async (t) => {
  t.strictSame(IMPORTABLE_KEYS.slice(0, 5), ['username', 'password', 'first_name', 'last_name', 'role_id']);
  t.equal(IMPORTABLE_KEYS.length, 23);
  t.equal(IMPORTABLE_KEYS.at(-1), 'department_ids');
  t.notOk(IMPORTABLE_KEYS.includes('profile_picture' as never), 'a cell cannot carry a picture');
  t.equal(USER_FIELDS.password.column, null, 'stored as a hash, never as sent');
  t.equal(USER_FIELDS.department_ids.column, null, 'stored as memberships');
});

t.test('columnsOf: the user keys sent, under their columns; others and undefined ones are left out', async (t) => {
  t.strictSame(columnsOf({ username: 'ada', first_name: null, role_id: 3, default_route: '/x', staff_number: 'S-1' }), {
    username: 'ada',
    firstName: null,
    roleId: 3,
    defaultRoute: '/x',
    staffNumber: 'S-1',
  });
  t.strictSame(columnsOf({ password: 'secret', old_password: 'x', department_ids: [1], profile_picture: null, city: undefined }), {});
});

t.test('parseCell: text, references, e-mail', async (t) => {
  t.strictSame(parseCell('text', '  Bonn ', false), { value: 'Bonn' }, 'trimmed');
  // Lengths in characters, as the spec's maxLength counts (the API, SCIM and the CSV import agree): an emoji is one.
  t.strictSame(parseCell('text', '😀'.repeat(255), false), { value: '😀'.repeat(255) }, '255 emoji are 255 characters');
  t.strictSame(parseCell('text', '😀'.repeat(256), false), { error: 'must be at most 255 characters long' });
  t.strictSame(parseCell('password', '😀'.repeat(1024), false), { value: '😀'.repeat(1024) }, 'a password of 1024 emoji');
  t.strictSame(parseCell('text', '   ', false), { value: '' });
  t.strictSame(parseCell('text', '   ', true), { value: null }, 'whitespace_to_null');
  t.strictSame(parseCell('text', 'x'.repeat(256), false), { error: 'must be at most 255 characters long' });
  t.strictSame(parseCell('reference', '', false), { value: null });
  t.strictSame(parseCell('reference', ' de-DE ', false), { value: 'de-DE' });
  t.strictSame(parseCell('email', 'a@b.example', false), { value: 'a@b.example' });
  t.strictSame(parseCell('email', '', false), { value: '' });
  t.strictSame(parseCell('email', '', true), { value: null });
  t.strictSame(parseCell('email', 'not-an-address', false), { error: 'must be an e-mail address' });
  // As the API's `format: email` judges them (SCIM's emails too): a value the API refuses is refused here.
  for (const address of ['a"b<c>@x.test', 'g:x@evil.test;', 'a,b@x.test', 'a@b@x.test']) {
    t.strictSame(parseCell('email', address, false), { error: 'must be an e-mail address' }, address);
  }
});

t.test('parseCell: usernames and passwords', async (t) => {
  t.strictSame(parseCell('username', ' ada ', false), { value: 'ada' });
  t.strictSame(parseCell('username', '  ', false), { error: 'is required' });
  // The rules of a new name judge the row once it is known to create a user (userDraftErrors): a row may match a stored name.
  t.strictSame(parseCell('username', 'deleted-user-9', false), { value: 'deleted-user-9' }, 'a reserved name is judged with its row');
  // A quoted cell may hold line breaks; POST /api/users refuses them by the spec's pattern.
  for (const [name, label] of [
    ['a\nb', 'LF'],
    ['a\r\nb', 'CR LF'],
    ['a\u2028b', 'U+2028'],
    ['a\u2029b', 'U+2029'],
  ]) {
    t.match(parseCell('username', name!, false), { error: /^must match pattern/ }, `${label} inside`);
  }
  t.strictSame(parseCell('username', 'a b', false), { value: 'a b' }, 'a space inside is fine');
  const spec = JSON.parse(readFileSync(new URL('../../../generated/openapi.json', import.meta.url), 'utf8')) as {
    components: { schemas: { UserCreate: { properties: { username: { pattern: string } } } } };
  };
  t.equal(USERNAME_PATTERN.source, spec.components.schemas.UserCreate.properties.username.pattern, "the spec's pattern");
  t.strictSame(parseCell('password', ' spaced ', false), { value: ' spaced ' }, 'taken as written');
  t.strictSame(parseCell('password', '', false), { value: null });
  t.strictSame(parseCell('password', 'x'.repeat(1024), false), { value: 'x'.repeat(1024) }, 'longer than other cells');
  t.strictSame(parseCell('password', 'x'.repeat(1025), false), { error: 'must be at most 1024 characters long' });
});

t.test('parseCell: booleans, numbers, dates, genders, routes; empty cells are null', async (t) => {
  for (const [raw, value] of [
    ['true', true],
    ['YES', true],
    ['1', true],
    ['false', false],
    ['no', false],
    ['0', false],
    ['', null],
  ] as const) {
    t.strictSame(parseCell('boolean', raw, false), { value }, raw);
  }
  t.strictSame(parseCell('boolean', 'maybe', false), { error: 'must be true, false, 1, 0, yes or no' });
  t.strictSame(parseCell('integer', '42', false), { value: 42 });
  t.strictSame(parseCell('integer', '', false), { value: null });
  t.strictSame(parseCell('integer', '-1', false), { error: 'must be a whole number' });
  t.strictSame(parseCell('integer', '1'.repeat(16), false), { error: 'must be a whole number' });
  t.strictSame(parseCell('date', '2024-02-29', false), { value: '2024-02-29' });
  t.strictSame(parseCell('date', '2023-02-29', false), { error: 'must be a date YYYY-MM-DD' }, 'no such day');
  t.strictSame(parseCell('date', '', false), { value: null });
  t.strictSame(parseCell('gender', 'diverse', false), { value: 'diverse' });
  t.strictSame(parseCell('gender', 'other', false), { error: 'must be one of: female, male, diverse' });
  t.strictSame(parseCell('route', '/dashboard', false), { value: '/dashboard' });
  t.strictSame(parseCell('route', '', false), { value: null });
  t.ok('error' in parseCell('route', 'javascript:alert(1)', false), 'the rule of the API');
});

t.test('parseCell: department IDs separated by |, in the cell order; an empty cell is none', async (t) => {
  t.strictSame(parseCell('ids', '4|1', false), { value: [4, 1] });
  t.strictSame(parseCell('ids', ' 7 | 2 ', false), { value: [7, 2] }, 'spaces around IDs are ignored');
  t.strictSame(parseCell('ids', '', false), { value: [] });
  t.strictSame(parseCell('ids', '  ', true), { value: [] }, 'also with whitespace_to_null');
  for (const raw of ['1,4', '1||4', '0', '-1', '1.5', 'x', '1|', '1234567890123456']) {
    t.strictSame(parseCell('ids', raw, false), { error: 'must list IDs separated by |, e.g. 1|4' }, raw);
  }
  t.strictSame(parseCell('ids', '3|3', false), { error: 'must not list an ID twice' });
  const many = Array.from({ length: 1000 }, (_, i) => i + 1);
  t.strictSame(parseCell('ids', many.join('|'), false), { value: many }, 'up to 1000 IDs, longer than other cells');
  t.strictSame(parseCell('ids', [...many, 1001].join('|'), false), { error: 'must list at most 1000 IDs' });
});

t.test('keepsCurrent: an empty boolean or role_id cell leaves the stored value', async (t) => {
  t.equal(keepsCurrent('active', null), true);
  t.equal(keepsCurrent('role_id', null), true);
  t.equal(keepsCurrent('active', false), false);
  t.equal(keepsCurrent('city', null), false, 'an empty text cell (with whitespace_to_null) clears it');
  t.equal(keepsCurrent('entering_date', null), false, 'an empty date cell clears it');
});
