/**
 * Conditional writes (src/platform/http/preconditions.ts, docs/api-conventions.md#conditional-requests):
 * records carry no entity tag, so a write whose `If-Match` names one, or whose
 * `If-None-Match` is `*`, is refused with 412 and changes nothing; `If-Match: *` and an
 * `If-None-Match` naming tags hold. Reads ignore both.
 */
import t from 'tap';
import { entityTagList } from '../../../src/platform/http/preconditions.ts';
import { startTestApi } from '../../helpers/atrium.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('preconditions');
const token = tenant.adminToken;

const departmentNamed = async (id: number) => (await api.call(t, 'getDepartment', { token, params: { department: id } })).body.name as string;

t.test('an If-Match naming an entity tag, weak, strong or in a list, is a 412 and changes nothing', async (t) => {
  const created = await api.call(t, 'createDepartment', { token, body: { name: 'Guarded' } });
  const id = created.body.id as number;
  // `"a, *, b"` is one entity tag holding a star, not `*`.
  for (const ifMatch of ['"v1"', 'W/"v1"', '"v1", W/"v2"', '', '"a, *, b"', '"v1", *']) {
    const refused = await api.call(t, 'updateDepartment', {
      token,
      params: { department: id },
      body: { name: 'Overwritten' },
      headers: { 'if-match': ifMatch },
    });
    t.equal(refused.status, 412, `If-Match: ${ifMatch}`);
    t.match(refused.body, { type: '/problems/precondition-failed', code: 'precondition_failed' });
  }
  t.equal(await departmentNamed(id), 'Guarded', 'nothing changed');
  const deleted = await api.call(t, 'deleteDepartment', { token, params: { department: id }, headers: { 'if-match': '"v1"' } });
  t.equal(deleted.status, 412);
  t.equal(await departmentNamed(id), 'Guarded', 'still there');

  const any = await api.call(t, 'updateDepartment', { token, params: { department: id }, body: { name: 'Updated' }, headers: { 'if-match': '*' } });
  t.equal(any.status, 200, 'If-Match: * holds for a record that exists');
  t.equal(await departmentNamed(id), 'Updated');
  const missing = await api.call(t, 'updateDepartment', { token, params: { department: 999999 }, body: { name: 'X' }, headers: { 'if-match': '*' } });
  t.equal(missing.status, 404);
});

t.test('If-None-Match: * on a write is a 412; one naming entity tags holds', async (t) => {
  const before = (await api.call(t, 'listDepartments', { token })).body.length as number;
  const refused = await api.call(t, 'createDepartment', { token, body: { name: 'Only if new' }, headers: { 'if-none-match': '*' } });
  t.equal(refused.status, 412);
  t.equal((await api.call(t, 'listDepartments', { token })).body.length, before, 'nothing created');
  const tagged = await api.call(t, 'createDepartment', { token, body: { name: 'Tagged' }, headers: { 'if-none-match': '"v1"' } });
  t.equal(tagged.status, 201);
});

t.test('the precondition is judged after authentication and validation; reads ignore it', async (t) => {
  const unauthenticated = await api.call(t, 'createDepartment', { body: { name: 'X' }, headers: { 'if-match': '"v1"' } });
  t.equal(unauthenticated.status, 401);
  const invalid = await api.call(t, 'createDepartment', { token, body: { name: 5 }, headers: { 'if-match': '"v1"' } });
  t.equal(invalid.status, 422);
  const read = await api.call(t, 'listDepartments', { token, headers: { 'if-match': '"v1"', 'if-none-match': '*' } });
  t.equal(read.status, 200);
});

t.test('a long header of blanks that ends in no member is no entity-tag list', async (t) => {
  // As long as a request head can be (16 KiB). That the list is read in time proportional to its length
  // is not timed here: the lint's regexp/no-super-linear-backtracking rule refuses a pattern that is not.
  const blanks = ' \t'.repeat(8 * 1024);
  for (const [name, value] of [
    ['blanks, then text', `${blanks}x`],
    ['a tag, a comma, blanks, then text', `"a", ${blanks}x`],
    ['a star, a comma, blanks, then text', `*,${blanks}x`],
  ] as const) {
    t.equal(entityTagList(value), undefined, `${name}: no list`);
  }
  t.strictSame(entityTagList(`"a",${blanks}"b"`), {
    any: false,
    tags: [
      { weak: false, opaque: '"a"' },
      { weak: false, opaque: '"b"' },
    ],
  });
  t.strictSame(entityTagList(`${blanks},*`), { any: true }, 'an empty member of blanks is skipped');
});
