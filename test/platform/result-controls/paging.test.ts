/**
 * Paging of lists through the API (docs/api-conventions.md#paging): `offset` beside
 * `limit` on every list that takes `limit`, the `Link: <…>; rel="next"` header, and the
 * `before_id` cursor of the notification lists, whose head grows while a client pages.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import qs from 'qs';
import t, { type Test } from 'tap';
import { operations, type OperationId } from '../../../generated/operations.ts';
import { nextPageByOffset } from '../../../src/platform/result-controls/listing.ts';
import { MAX_OFFSET } from '../../../src/platform/result-controls/result-controls.ts';
import { users } from '../../../src/resources/users/table.ts';
import { startTestApi, type CallResult } from '../../helpers/atrium.ts';
import { spec } from '../../helpers/contract.ts';
import { roleNamed, storeNotification, waitForDispatches } from '../../helpers/fixtures.ts';

const api = await startTestApi(t, { role: 'all' });
const tenant = await api.createTenant('paging');
const other = await api.createTenant('paging-other');
const sender = await api.createUser(tenant.tenantId, { permissions: ['notifications.send'] });
const alice = await api.createUser(tenant.tenantId);
const bob = await api.createUser(tenant.tenantId);
const outsider = await api.createUser(other.tenantId);

// 23 more users; last names repeat, so the order (last name, first name, id) needs the id.
const role = await roleNamed(api.db, tenant.tenantId, 'Employee');
await api.db.owner.insert(users).values(
  Array.from({ length: 23 }, (_, i) => ({
    tenantId: tenant.tenantId,
    username: `paged${i}`,
    firstName: i % 2 === 0 ? 'Ann' : 'Bo',
    lastName: `Name${i % 4}`,
    roleId: role!.id,
  })),
);

/** `count` notifications of `userId` stored by one statement: one `created_at`, so only the id orders them. */
async function storeAtOnce(userId: number, count: number, tenantId = tenant.tenantId): Promise<void> {
  await api.db.owner.execute(sql`
    insert into notifications (tenant_id, dispatch_id, type, notifiable_id, data)
    select ${tenantId}, gen_random_uuid(), 'customNotification', ${userId}::bigint, jsonb_build_object('title', 'Batch ' || g, 'body', 'b', 'url', '/')
    from generate_series(1, ${count}) g`);
}

/** One stored notification of `userId`, `minutesAgo` old. */
async function storeOne(userId: number, minutesAgo: number, tenantId = tenant.tenantId, targetableType?: string): Promise<string> {
  const row = await storeNotification(api.db, tenantId, userId, new Date(Date.now() - minutesAgo * 60_000), {
    data: { title: `${minutesAgo} minutes ago`, body: 'b', url: '/' },
    ...(targetableType ? { targetableType, targetableId: minutesAgo } : {}),
  });
  return row.id;
}

// Alice: three old ones a minute apart, then seven stored at once (a tie on created_at).
for (const minutesAgo of [30, 20, 10]) await storeOne(alice.id, minutesAgo);
await storeAtOnce(alice.id, 7);
const bobsNotification = await storeOne(bob.id, 5);
const outsidersNotification = await storeOne(outsider.id, 5, other.tenantId);

/** The target of a `Link: <target>; rel="next"` header, or undefined without one. */
function nextTarget(t: Test, res: CallResult): string | undefined {
  const link = res.headers.link;
  if (link === undefined) return undefined;
  const match = /^<([^>]*)>; rel="next"$/.exec(String(link));
  t.ok(match, `Link is one next link: ${String(link)}`);
  return match?.[1];
}

/**
 * Follows the next links from `query` to the end: every page's records and the query of
 * each page. `between` runs after each page that has a next one.
 */
async function pageThrough(
  t: Test,
  operationId: OperationId,
  token: string,
  query: Record<string, unknown>,
  options: { params?: Record<string, string | number>; between?: () => Promise<void> } = {},
) {
  const path = operations[operationId].path.replace(/\{(\w+)\}/g, (_, name: string) => String(options.params![name]));
  const pages: Record<string, unknown>[][] = [];
  const queries: Record<string, unknown>[] = [];
  for (let next: Record<string, unknown> | undefined = query; next !== undefined && pages.length < 100;) {
    queries.push(next);
    const res: CallResult = await api.call(t, operationId, { token, query: next, params: options.params });
    t.equal(res.status, 200);
    pages.push(res.body);
    const target = nextTarget(t, res);
    if (target === undefined) break;
    t.equal(target.split('?')[0], path, 'the link is a relative reference to the same list');
    next = qs.parse(target.split('?')[1] ?? '', { depth: 2 });
    await options.between?.();
  }
  t.ok(pages.length < 100, 'the links end');
  return { pages, queries, records: pages.flat() };
}

const ids = (records: Record<string, unknown>[]) => records.map((record) => record.id);

t.test('bad paging input is a 422 problem naming the parameter', async (t) => {
  const cases: [OperationId, Record<string, unknown>, string][] = [
    ['listUsers', { offset: -1 }, 'offset'],
    ['listUsers', { offset: 1_000_001, limit: 5 }, 'offset'],
    ['listUsers', { offset: 99_999_999_999 }, 'offset'],
    ['listUsers', { offset: '1.5' }, 'offset'],
    ['listUsers', { offset: 'next' }, 'offset'],
    ['listUsers', { offset: '1e3' }, 'offset'],
    ['listRoles', { offset: -5 }, 'offset'],
    ['listNotifications', { offset: -1 }, 'offset'],
    ['listNotifications', { before_id: 'garbage' }, 'before_id'],
    ['listNotifications', { before_id: '' }, 'before_id'],
    ['listNotifications', { before_id: '12345' }, 'before_id'],
    ['listNotificationsByType', { before_id: 'x'.repeat(5000) }, 'before_id'],
  ];
  for (const [operationId, query, key] of cases) {
    const params = operationId === 'listNotificationsByType' ? { targetableType: 'manualEntry' } : undefined;
    const res = await api.call(t, operationId, { token: operationId.startsWith('listNotification') ? alice.token : tenant.adminToken, query, params });
    t.equal(res.status, 422, `${operationId} ${JSON.stringify(query).slice(0, 60)}`);
    t.match(res.headers['content-type'], /^application\/problem\+json/);
    t.ok(res.body.errors?.[key], `errors name ${key}`);
  }
});

t.test('a cursor naming no notification of the caller is a 422, like a missing one', async (t) => {
  const answers = [];
  for (const before_id of [randomUUID(), bobsNotification, outsidersNotification]) {
    const res = await api.call(t, 'listNotifications', { token: alice.token, query: { before_id, limit: 2 } });
    t.equal(res.status, 422);
    t.strictSame(res.body.errors, { before_id: ['does not exist'] });
    answers.push(res.text);
  }
  t.equal(new Set(answers).size, 1, "another user's and another tenant's notification are answered as a missing one");
  const byType = await api.call(t, 'listNotificationsByType', {
    token: alice.token,
    params: { targetableType: 'manualEntry' },
    query: { before_id: bobsNotification },
  });
  t.equal(byType.status, 422);
});

t.test('offset skips rows of the list in its order; without limit there is no Link', async (t) => {
  const all = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { selects: 'id' } });
  t.equal(all.body.length, 27, 'the administrator, the three users, and 23 more');
  t.equal(all.headers.link, undefined);
  const rest = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { selects: 'id', offset: 20 } });
  t.strictSame(rest.body, all.body.slice(20));
  t.equal(rest.headers.link, undefined, 'no limit: the answer is the rest of the list');
  const beyond = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { offset: 1_000_000, limit: 5 } });
  t.strictSame([beyond.status, beyond.body, beyond.headers.link], [200, [], undefined], 'past the end: an empty page, no next link');
});

t.test('no Link names an offset beyond the largest the spec takes: the page whose next would start there has none', async (t) => {
  // Showing it through the API needs a list of more than a million records: the listings' own rule is judged here.
  const largest = (spec.components as unknown as { parameters: { Offset: { schema: { maximum: number } } } }).parameters.Offset.schema.maximum;
  t.equal(MAX_OFFSET, largest, "the bound is the spec's");
  t.strictSame(nextPageByOffset(0, 20), { offset: 20 });
  t.strictSame(nextPageByOffset(largest - 20, 20), { offset: largest }, 'a next page at the largest offset is linked');
  t.equal(nextPageByOffset(largest - 19, 20), undefined, 'one beyond it is not: that link would be a 422');
  t.equal(nextPageByOffset(largest, 1), undefined);
  t.equal(nextPageByOffset(1, largest), undefined, 'nor after a page of the largest limit');
});

t.test('paging through users with limit yields every user once, in list order, keeping the other controls', async (t) => {
  const all = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { selects: 'id' } });
  for (const limit of [1, 5, 9, 27]) {
    const { pages, queries, records } = await pageThrough(t, 'listUsers', tenant.adminToken, { selects: 'id', limit });
    t.strictSame(records, all.body, `limit ${limit}: every user once, in order`);
    t.equal(pages.length, Math.ceil(27 / limit), 'no empty last page: the last full page has no next link');
    t.strictSame(
      queries.map((query) => [query.selects, Number(query.limit), Number(query.offset ?? 0)]),
      pages.map((_, i) => ['id', limit, i * limit]),
    );
  }
  const filtered = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { selects: 'id,username', filter: { text: 'paged1' } } });
  t.ok(filtered.body.length > 2);
  const paged = await pageThrough(t, 'listUsers', tenant.adminToken, { selects: 'id,username', filter: { text: 'paged1' }, limit: 2 });
  t.strictSame(paged.records, filtered.body, 'the filter and selects carry over to every page');
});

t.test('the next link leads to the next page whichever spelling of offset the parser read', async (t) => {
  const app = api.atrium.app!;
  const all = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { selects: 'id' } });
  // The query parser reads `[offset]` and `%5Boffset%5D` as `offset`: a link keeping them beside the new offset would
  // send two, read as an array (422).
  for (const spelling of ['[offset]=0', '%5Boffset%5D=0', '[offset][]=0']) {
    const headers = { authorization: `Bearer ${tenant.adminToken}` };
    const first = await app.inject({ method: 'GET', url: `/api/users?selects=id&limit=5&${spelling}`, headers });
    t.strictSame([first.statusCode, first.json()], [200, all.body.slice(0, 5)], spelling);
    const link = /^<([^>]*)>; rel="next"$/.exec(String(first.headers.link))?.[1];
    t.ok(link, `a next link: ${String(first.headers.link)}`);
    const next = await app.inject({ method: 'GET', url: link!, headers });
    t.strictSame([next.statusCode, next.json()], [200, all.body.slice(5, 10)], `${link}: the next page`);
  }
});

t.test('every list that takes limit takes offset and declares the Link header, marked as extensions', async (t) => {
  interface Declared {
    $ref?: string;
    name?: string;
    headers?: Record<string, Declared>;
    'x-atrium-extension'?: boolean;
  }
  const components = spec.components as unknown as Record<'parameters' | 'responses' | 'headers', Record<string, Declared>>;
  /** A component `$ref` resolved (one level, as the bundle writes them). */
  const resolve = (object: Declared | undefined) => (object?.$ref ? components[object.$ref.split('/')[2] as 'parameters'][object.$ref.split('/')[3]!] : object);
  let lists = 0;
  for (const [path, item] of Object.entries(spec.paths)) {
    const operation = item.get as { operationId: string; parameters?: Declared[]; responses: Record<string, Declared> } | undefined;
    if (!operation) continue;
    const names = (operation.parameters ?? []).map((parameter) => resolve(parameter)?.name);
    if (!names.includes('limit')) {
      t.notOk(names.includes('offset'), `${operation.operationId}: offset only where limit is`);
      continue;
    }
    lists++;
    t.ok(names.includes('offset'), `${operation.operationId} (${path}) takes offset`);
    const link = resolve(resolve(operation.responses['200'])?.headers?.Link);
    t.equal(link?.['x-atrium-extension'], true, `${operation.operationId} declares Link, as an extension`);
  }
  t.equal(lists, 19);
  for (const name of ['offset', 'before_id']) {
    t.equal(Object.values(components.parameters).find((parameter) => parameter.name === name)?.['x-atrium-extension'], true, `${name} is an extension`);
  }
});

t.test('notifications page by before_id: notifications arriving between pages leave no gap and no duplicate', async (t) => {
  const before = await api.call(t, 'listNotifications', { token: alice.token, query: { selects: 'id' } });
  t.equal(before.body.length, 10);
  let arrived = 0;
  const arrive = async () => {
    // New notifications arrive at the head, through the API and its delivery job.
    const res = await api.call(t, 'createNotification', {
      token: sender.token,
      body: { title: `New ${++arrived}`, body: 'b', url: '/', user_ids: [alice.id] },
    });
    t.equal(res.status, 202);
    t.equal(await waitForDispatches(api.db, tenant.tenantId), 0);
  };
  const { pages, queries, records } = await pageThrough(t, 'listNotifications', alice.token, { selects: 'id', limit: 3 }, { between: arrive });
  t.strictSame(records, before.body, 'the ten notifications there were when paging began, each once, newest first');
  t.equal(pages.length, 4);
  t.equal(arrived, 3);
  t.strictSame(
    queries.slice(1).map((query) => [query.before_id, query.offset]),
    pages.slice(0, -1).map((page) => [page.at(-1)!.id, undefined]),
    'each next link continues after the last notification answered, by id, not by offset',
  );
  const after = await api.call(t, 'listNotifications', { token: alice.token, query: { selects: 'id' } });
  t.equal(after.body.length, 13);
  t.strictSame(after.body.slice(3), before.body, 'the new ones are at the head');

  // By offset alone the arrivals would push rows already answered onto the next page.
  const first = await api.call(t, 'listNotifications', { token: alice.token, query: { selects: 'id', limit: 3, offset: 3 } });
  t.strictSame(first.body, after.body.slice(3, 6));
  await arrive();
  const firstTarget = qs.parse(nextTarget(t, first)!.split('?')[1]!);
  t.strictSame([firstTarget.before_id, firstTarget.offset], [first.body[2].id, undefined], 'an offset request is continued by cursor too');
  const second = await api.call(t, 'listNotifications', { token: alice.token, query: firstTarget });
  t.strictSame(ids(second.body), ids(after.body.slice(6, 9)), 'and its next page follows it exactly');
});

t.test('the tie on created_at is ordered by id across pages; the type list pages by cursor too', async (t) => {
  const all = await api.call(t, 'listNotifications', { token: alice.token, query: { selects: 'id,created_at' } });
  const tied = all.body.filter((n: { created_at: string }) => n.created_at === all.body.at(-4).created_at);
  // The seven stored at once; notifications that arrived through the API within the same second (to which the list writes times) tie with them too.
  t.ok(tied.length >= 7, `at least seven notifications share one created_at (${tied.length})`);
  for (const limit of [1, 2, 4]) {
    t.strictSame((await pageThrough(t, 'listNotifications', alice.token, { selects: 'id,created_at', limit })).records, all.body, `limit ${limit}`);
  }
  for (const minutesAgo of [3, 2, 1]) await storeOne(alice.id, minutesAgo, tenant.tenantId, 'manualEntry');
  const params = { targetableType: 'manualEntry' };
  const typed = await api.call(t, 'listNotificationsByType', { token: alice.token, params, query: { selects: 'id' } });
  t.equal(typed.body.length, 3);
  const paged = await pageThrough(t, 'listNotificationsByType', alice.token, { selects: 'id', limit: 2 }, { params });
  t.strictSame(paged.records, typed.body);
  t.equal(paged.pages.length, 2);
  t.ok(paged.queries[1]!.before_id, 'continued by cursor');
});

t.test('paged lists cost a constant number of queries', async (t) => {
  const count = async (operationId: OperationId, token: string, query: Record<string, unknown>) => {
    const before = api.db.queryCount;
    const res = await api.call(t, operationId, { token, query });
    t.equal(res.status, 200);
    return { queries: api.db.queryCount - before, rows: res.body.length };
  };
  // Not `language`: its loader sends no query for a page whose users have none.
  const relations = 'role|departments';
  const small = await count('listUsers', tenant.adminToken, { relations, limit: 2, offset: 1 });
  const large = await count('listUsers', tenant.adminToken, { relations, limit: 20, offset: 3 });
  const whole = await count('listUsers', tenant.adminToken, { relations });
  t.strictSame([small.rows, large.rows, whole.rows], [2, 20, 27]);
  t.equal(large.queries, small.queries);
  t.equal(whole.queries, small.queries, 'paging adds no query');

  await storeAtOnce(bob.id, 40);
  const head = await api.call(t, 'listNotifications', { token: bob.token, query: { selects: 'id', limit: 1 } });
  const cursor = head.body[0].id;
  const few = await count('listNotifications', bob.token, { relations: 'notifiable|targetable', limit: 2, before_id: cursor });
  const many = await count('listNotifications', bob.token, { relations: 'notifiable|targetable', limit: 30, before_id: cursor });
  const unpaged = await count('listNotifications', bob.token, { relations: 'notifiable|targetable' });
  t.strictSame([few.rows, many.rows], [2, 30]);
  t.equal(many.queries, few.queries);
  t.equal(few.queries, unpaged.queries + 1, 'the cursor is looked up with one query');
});
