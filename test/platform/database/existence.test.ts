import t from 'tap';
import { isNull } from 'drizzle-orm';
import { MISSING, MISSING_REFERENCE, missingIds, reportMissing } from '../../../src/platform/database/existence.ts';
import type { FieldErrors } from '../../../src/platform/http/problem.ts';
import { languages } from '../../../src/resources/languages/table.ts';
import { roles } from '../../../src/resources/roles/table.ts';
import { users } from '../../../src/resources/users/table.ts';
import { startTestDatabase } from '../../helpers/tenant-data.ts';

const data = await startTestDatabase(t);
const db = data.db;
const alpha = await data.createTenant('exist-alpha');
const beta = await data.createTenant('exist-beta');
const alphaUser = await data.createUser(alpha.tenantId);
const betaUser = await data.createUser(beta.tenantId);
const deletedUser = await data.createUser(alpha.tenantId, { values: { deletedAt: new Date() } });
await db.owner.insert(languages).values({ tenantId: beta.tenantId, id: 'fr-FR', name: 'Français' });
const unused = 2_000_000_000;

t.test("another tenant's ids are missing, like ids nobody uses", async (t) => {
  const missing = await db.tenant(alpha.tenantId, (tx) => missingIds(tx, users, [alphaUser.id, betaUser.id, unused, alpha.adminUserId]));
  t.strictSame(
    [...missing].sort((x, y) => x - y),
    [betaUser.id, unused].sort((x, y) => x - y),
  );
  const fromBeta = await db.tenant(beta.tenantId, (tx) => missingIds(tx, users, [alphaUser.id, betaUser.id]));
  t.strictSame([...fromBeta], [alphaUser.id], 'the same ids judged from the other tenant');
});

t.test('text ids: a language only the other tenant offers is missing', async (t) => {
  const missing = await db.tenant(alpha.tenantId, (tx) => missingIds(tx, languages, ['en-US', 'fr-FR', 'xx-XX']));
  t.strictSame([...missing], ['fr-FR', 'xx-XX']);
  const fromBeta = await db.tenant(beta.tenantId, (tx) => missingIds(tx, languages, ['en-US', 'fr-FR']));
  t.strictSame([...fromBeta], []);
});

t.test('`where` narrows what counts as existing (users not deleted)', async (t) => {
  const all = await db.tenant(alpha.tenantId, (tx) => missingIds(tx, users, [alphaUser.id, deletedUser.id]));
  t.strictSame([...all], [], 'a deleted user is still a row');
  const live = await db.tenant(alpha.tenantId, (tx) => missingIds(tx, users, [alphaUser.id, deletedUser.id], isNull(users.deletedAt)));
  t.strictSame([...live], [deletedUser.id]);
});

t.test('one query for a list, none for an empty one; repeated ids are asked once and reported once', async (t) => {
  await db.tenant(alpha.tenantId, async (tx) => {
    let before = db.queryCount;
    t.strictSame([...(await missingIds(tx, roles, []))], []);
    t.equal(db.queryCount - before, 0, 'no query for []');
    before = db.queryCount;
    const missing = await missingIds(tx, roles, [unused, unused, unused + 1]);
    t.equal(db.queryCount - before, 1, 'one query');
    t.strictSame([...missing], [unused, unused + 1]);
  });
});

t.test('outside a tenant transaction every id is missing', async (t) => {
  const missing = await db.transaction((tx) => missingIds(tx, users, [alphaUser.id, betaUser.id]));
  t.strictSame([...missing], [alphaUser.id, betaUser.id]);
});

t.test('reportMissing: one "does not exist" per missing position, other errors kept', async (t) => {
  const errors: FieldErrors = { name: ['must not be blank'] };
  reportMissing(errors, 'entity_permissions.user_ids', [7, 8, 7, 9], new Set([7, 9]));
  t.strictSame(errors, {
    name: ['must not be blank'],
    'entity_permissions.user_ids.0': [MISSING_REFERENCE],
    'entity_permissions.user_ids.2': [MISSING_REFERENCE],
    'entity_permissions.user_ids.3': [MISSING_REFERENCE],
  });
  t.equal(MISSING, 'does not exist');
  const none: FieldErrors = {};
  reportMissing(none, 'department_ids', [1, 2], new Set());
  t.strictSame(none, {});
});

t.test('missingIds and reportMissing together, as handlers use them', async (t) => {
  const ids = [alphaUser.id, betaUser.id, deletedUser.id];
  const errors: FieldErrors = {};
  await db.tenant(alpha.tenantId, async (tx) => reportMissing(errors, 'user_ids', ids, await missingIds(tx, users, ids, isNull(users.deletedAt))));
  t.strictSame(errors, { 'user_ids.1': [MISSING_REFERENCE], 'user_ids.2': [MISSING_REFERENCE] });
});
