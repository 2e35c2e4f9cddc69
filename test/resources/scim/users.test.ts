import { connect } from 'node:net';
import t from 'tap';
import { and, count, sql } from 'drizzle-orm';
import postgres from 'postgres';
import { hashToken } from '../../../src/platform/auth/tokens.ts';
import { scimSettings, scimTokens } from '../../../src/resources/scim/table.ts';
import { newScimTokenValue } from '../../../src/resources/scim/tokens.ts';
import { parseFilter, SCIM_USERS } from '../../../src/resources/scim/users.ts';
import { users } from '../../../src/resources/users/table.ts';
import { pushSubscriptions } from '../../../src/resources/push/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { CITUS_ENV } from '../../helpers/citus.ts';
import { wireClient } from '../../helpers/http-client.ts';
import { assertServedAnswer } from '../../helpers/contract.ts';
import { bearer, roleNamed, rowCount, sleep } from '../../helpers/fixtures.ts';
import { browserSubscription } from '../../helpers/push-service.ts';
import { openSse, type SseClient } from '../../helpers/sse.ts';

// SCIM 2.0 Users through HTTP, as identity providers send them: bad input first. The
// streams' heartbeat is ten minutes away: a leaver's stream must end without it.
const api = await startTestApi(t, { streamHeartbeatMs: 600_000 });
// A second service whose rate limit a test reaches: two requests a minute per token.
const limited = await startTestApi(t, { rateLimitPerToken: 2, rateLimitPerAddress: 1_000_000, rateLimitWindowSeconds: 60 });
const limitedWire = await wireClient(limited.atrium.app!);
// A third with one database connection: the statements a test reads there are the ones its requests prepared.
const single = await startTestApi(t, { databasePoolSize: 1 });
const singleWire = await wireClient(single.atrium.app!);
const app = api.atrium.app!;
// SCIM requests go over a real connection, as an identity provider's do.
const wire = await wireClient(app);
const tenant = await api.createTenant('scim-users');
const other = await api.createTenant('scim-users-other');
const admin = tenant.adminToken;

const USER = 'urn:ietf:params:scim:schemas:core:2.0:User';
const ENTERPRISE = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
const PATCH = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

type Tt = Parameters<typeof api.call>[0];

async function mint(tt: Tt, token: string): Promise<string> {
  const res = await api.call(tt, 'createScimToken', { token, body: { name: 'IdP' } });
  return res.body.token;
}

const employee = await roleNamed(api.db, tenant.tenantId, 'Employee');
// Set up as the operations would (they are tested below and in tokens.test.ts).
await api.db.owner.insert(scimSettings).values({ tenantId: tenant.tenantId, defaultRoleId: employee.id });
const scimToken = newScimTokenValue();
await api.db.owner.insert(scimTokens).values({ tenantId: tenant.tenantId, userId: tenant.adminUserId, name: 'IdP', tokenHash: hashToken(scimToken) });

interface Sent {
  status: number;
  body: any;
  headers: Record<string, unknown>;
}

/** One SCIM request (application/scim+json unless told otherwise). */
async function scim(
  method: string,
  url: string,
  body?: unknown,
  options: { token?: string | null; contentType?: string; payload?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<Sent> {
  const token = options.token === undefined ? scimToken : options.token;
  const headers: Record<string, string> = { ...(token ? bearer(token) : {}), ...options.headers };
  let payload = options.payload;
  if (body !== undefined) payload = JSON.stringify(body);
  if (payload !== undefined) headers['content-type'] = options.contentType ?? 'application/scim+json';
  const response = await wire.send({ method: method as never, url: `/scim/v2${url}`, headers, payload });
  assertServedAnswer(method, `/scim/v2${url}`, response);
  return { status: response.statusCode, body: response.body ? response.json() : undefined, headers: response.headers };
}

const userCount = () => rowCount(api.db, 'users', sql`tenant_id = ${tenant.tenantId}`);
const auditCount = () => rowCount(api.db, 'audit_events', sql`tenant_id = ${tenant.tenantId}`);

let serial = 0;
const newUser = (extra: Record<string, unknown> = {}) => ({
  schemas: [USER],
  userName: `scim.user${++serial}@example.com`,
  name: { givenName: 'Sam', familyName: `Provisioned${serial}` },
  emails: [{ value: `sam${serial}@example.com`, type: 'work', primary: true }],
  active: true,
  ...extra,
});

/** The error document of RFC 7644 §3.12. */
function isError(t: Tt, res: Sent, status: number, scimType?: string) {
  t.equal(res.status, status, `answers ${status}`);
  t.same(res.body.schemas, [ERROR]);
  t.equal(res.body.status, String(status), 'status is a string');
  if (scimType) t.equal(res.body.scimType, scimType);
  t.type(res.body.detail, 'string');
  t.match(String(res.headers['content-type']), /^application\/scim\+json/);
}

t.test('a request naming no host (HTTP/1.0 without Host) is a 400 and creates nothing', async (t) => {
  // Every answer states the location of its resources, whose address is the request's Host.
  const { port } = new URL(wire.base);
  const before = await userCount();
  for (const [method, url, body] of [
    ['POST', '/scim/v2/Users', JSON.stringify(newUser())],
    ['GET', '/scim/v2/Users', ''],
    ['GET', '/scim/v2/ServiceProviderConfig', ''],
  ] as const) {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1');
      const chunks: Buffer[] = [];
      socket.on('data', (chunk) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('end', () => resolve(Buffer.concat(chunks).toString()));
      socket.write(
        `${method} ${url} HTTP/1.0\r\nAuthorization: Bearer ${scimToken}\r\n` +
          (body ? `Content-Type: application/scim+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` : '') +
          `\r\n${body}`,
      );
    });
    t.match(answer, /^HTTP\/1\.1 400 /, `${method} ${url}: 400`);
    t.match(answer, /\r\ncontent-type: application\/scim\+json/i, 'a SCIM error document');
    t.notMatch(answer, /undefined/, 'naming no made-up host');
    t.match(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)), { schemas: [ERROR], status: '400', detail: /Host/ });
  }
  t.equal(await userCount(), before, 'no user was created');
});

t.test('without a valid SCIM token every endpoint is a 401 error document', async (t) => {
  for (const token of [null, 'garbage-token-value-1234', admin, 'scim_' + 'A'.repeat(43)]) {
    isError(t, await scim('GET', '/Users', undefined, { token }), 401);
    isError(t, await scim('POST', '/Users', newUser(), { token }), 401);
  }
  isError(t, await scim('GET', '/ServiceProviderConfig', undefined, { token: null }), 401);
});

t.test('a malformed body is invalidSyntax and stores nothing', async (t) => {
  const before = await userCount();
  for (const contentType of ['application/scim+json', 'application/json']) {
    const truncated = await scim('POST', '/Users', undefined, { payload: '{"userName": ', contentType });
    isError(t, truncated, 400, 'invalidSyntax');
    t.equal(truncated.body.detail, 'The request body is not valid JSON.', `${contentType}: named as sent, not as application/json`);
    const poisoned = await scim('POST', '/Users', undefined, { payload: '{"userName": "p", "__proto__": {"x": 1}}', contentType });
    isError(t, poisoned, 400, 'invalidSyntax');
    t.match(poisoned.body.detail, /holds a key "__proto__"/, `${contentType}: the refused key is named, the JSON not called malformed`);
  }
  isError(t, await scim('POST', '/Users', [newUser()]), 400, 'invalidSyntax');
  isError(t, await scim('POST', '/Users', 'a string'), 400, 'invalidSyntax');
  const wrongType = await scim('POST', '/Users', undefined, { payload: 'userName=x', contentType: 'text/plain' });
  t.equal(wrongType.status, 415);
  t.same(wrongType.body.schemas, [ERROR]);
  // Bytes that are not UTF-8 would be stored as U+FFFD; another charset is not read.
  const latin1 = Buffer.concat([
    Buffer.from('{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"caf'),
    Buffer.from([0xe9]),
    Buffer.from('"}'),
  ]);
  isError(t, await scim('POST', '/Users', undefined, { payload: latin1 }), 400, 'invalidSyntax');
  const charset = await scim('POST', '/Users', undefined, { payload: JSON.stringify(newUser()), contentType: 'application/scim+json; charset=iso-8859-1' });
  t.equal(charset.status, 415);
  // A content coding is not decoded: the body would be read as if it had none.
  isError(t, await scim('POST', '/Users', newUser(), { headers: { 'content-encoding': 'br' } }), 415);
  t.equal(await userCount(), before);
});

t.test('values the user rules refuse are invalidValue and store nothing', async (t) => {
  const before = await userCount();
  const audits = await auditCount();
  const bodies = [
    newUser({ userName: undefined }),
    newUser({ userName: '' }),
    newUser({ userName: 42 }),
    newUser({ userName: 'deleted-user-7' }),
    newUser({ name: { givenName: 'Only' } }),
    newUser({ name: 'Sam Doe' }),
    newUser({ emails: [{ value: 'not an address', type: 'work' }] }),
    // What the API's format: email refuses (a mail server refused the first two, and rewrote the third).
    newUser({ emails: [{ value: 'a"b<c>@x.test', type: 'work' }] }),
    newUser({ emails: [{ value: 'g:x@evil.test;', type: 'work' }] }),
    newUser({ emails: [{ value: 'a,b@x.test', type: 'work' }] }),
    newUser({ userName: 'Deleted-User-7' }),
    newUser({ userName: 'sam\u200b' }),
    newUser({ emails: 'sam@example.com' }),
    newUser({ active: 'maybe' }),
    newUser({ password: 'short' }),
    newUser({ preferredLanguage: 'xx' }),
    newUser({ externalId: 7 }),
    newUser({ externalId: 'x'.repeat(256) }),
    newUser({ name: { givenName: 'x'.repeat(256), familyName: 'Doe' } }),
  ];
  for (const body of bodies) isError(t, await scim('POST', '/Users', body), 400, 'invalidValue');
  t.equal(await userCount(), before, 'no user stored');
  t.equal(await auditCount(), audits, 'no event recorded');
});

t.test('a taken userName is a 409 uniqueness error, deleted users included', async (t) => {
  const before = await userCount();
  isError(t, await scim('POST', '/Users', newUser({ userName: 'admin' })), 409, 'uniqueness');
  const deleted = await api.createUser(tenant.tenantId, { values: { deletedAt: new Date() } });
  isError(t, await scim('POST', '/Users', newUser({ userName: deleted.username })), 409, 'uniqueness');
  t.equal(await userCount(), before + 1, 'only the fixture');
});

t.test('a userName another user holds in another case is a 409 too: SCIM has userName unique and not case-exact', async (t) => {
  const holder = await api.createUser(tenant.tenantId, { username: 'Case.Holder@example.com' });
  const before = await userCount();
  isError(t, await scim('POST', '/Users', newUser({ userName: 'case.holder@EXAMPLE.com' })), 409, 'uniqueness');
  const deleted = await api.createUser(tenant.tenantId, { username: 'Deleted.Holder', values: { deletedAt: new Date() } });
  isError(t, await scim('POST', '/Users', newUser({ userName: deleted.username.toUpperCase() })), 409, 'uniqueness');
  t.equal(await userCount(), before + 1, 'nothing created but the fixture');
  const other = (await scim('POST', '/Users', newUser())).body;
  isError(
    t,
    await scim('PATCH', `/Users/${other.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'userName', value: 'CASE.HOLDER@example.com' }] }),
    409,
    'uniqueness',
  );
  isError(t, await scim('PUT', `/Users/${other.id}`, { ...newUser(), userName: 'case.HOLDER@example.com' }), 409, 'uniqueness');
  t.equal((await scim('GET', `/Users/${other.id}`)).body.userName, other.userName, 'the rename changed nothing');
  const own = await scim('PATCH', `/Users/${holder.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'userName', value: 'case.holder@example.com' }],
  });
  t.equal(own.status, 200, 'a user may change the case of their own userName');
  const found = await scim('GET', `/Users?filter=${encodeURIComponent('userName eq "CASE.HOLDER@EXAMPLE.COM"')}`);
  t.equal(found.body.totalResults, 1, 'a filter finds one user');
  const racing = await Promise.all(['Racing.Case', 'racing.case', 'RACING.CASE'].map((userName) => scim('POST', '/Users', newUser({ userName }))));
  t.same(racing.map((res) => res.status).sort(), [201, 409, 409], 'of concurrent creates differing in case, one is kept');
});

t.test("the tenant's required profile keys hold for SCIM as for the API", async (t) => {
  await api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: ['phone'] } });
  const before = await userCount();
  const refused = await scim('POST', '/Users', newUser());
  isError(t, refused, 400, 'invalidValue');
  t.match(refused.body.detail, /phoneNumbers/);
  t.equal(await userCount(), before);
  const accepted = await scim('POST', '/Users', newUser({ phoneNumbers: [{ value: '+41 44 000 00 00', type: 'work' }] }));
  t.equal(accepted.status, 201);
  await api.call(t, 'updateUserSettings', { token: admin, body: { required_profile_keys: [] } });
});

t.test('without a default role SCIM creates nothing', async (t) => {
  const bare = await api.createTenant('scim-no-role');
  const token = await mint(t, bare.adminToken);
  const settings = await api.call(t, 'getUserSettings', { token: bare.adminToken });
  t.equal(settings.body.default_role_id, null);
  isError(t, await scim('POST', '/Users', newUser(), { token }), 400, 'invalidValue');
  const refused = await api.call(t, 'updateUserSettings', { token: bare.adminToken, body: { required_profile_keys: [], default_role_id: 999999 } });
  t.equal(refused.status, 422);
  t.ok(refused.body.errors.default_role_id);
});

t.test("a created user's event records `active` whether it was sent or not, as the API's create does", async (t) => {
  for (const sent of [undefined, true, false]) {
    const { active: _default, ...body } = newUser();
    const created = await scim('POST', '/Users', sent === undefined ? body : { ...body, active: sent });
    t.equal(created.status, 201);
    const [event] = await api.db.owner.execute<{ changes: Record<string, unknown> }>(
      sql`select changes from audit_events where action = 'user.created' and target_type = 'user' and target_id = ${created.body.id}`,
    );
    t.strictSame(event!.changes.active, { from: null, to: sent ?? true }, `active ${String(sent)}`);
  }
});

t.test('POST creates a user mapped to Atrium fields, audited as the token', async (t) => {
  const body = newUser({
    externalId: 'entra-0001',
    phoneNumbers: [{ value: '+41 44 111 11 11', type: 'mobile' }],
    addresses: [{ type: 'work', streetAddress: 'Main 1', postalCode: '8000', locality: 'Zurich' }],
    preferredLanguage: 'de-CH',
    [ENTERPRISE]: { employeeNumber: 'E-17' },
  });
  body.schemas = [USER, ENTERPRISE];
  const created = await scim('POST', '/Users', body);
  t.equal(created.status, 201);
  t.match(String(created.headers['content-type']), /^application\/scim\+json/);
  t.match(created.headers.location, new RegExp(`/scim/v2/Users/${created.body.id}$`));
  t.equal(created.headers.location, created.body.meta.location);
  t.match(created.body, {
    userName: body.userName,
    externalId: 'entra-0001',
    name: { givenName: 'Sam', familyName: body.name.familyName },
    emails: [{ value: body.emails[0]!.value, type: 'work', primary: true }],
    phoneNumbers: [{ value: '+41 44 111 11 11' }],
    addresses: [{ streetAddress: 'Main 1', postalCode: '8000', locality: 'Zurich' }],
    preferredLanguage: 'de-DE',
    active: true,
    [ENTERPRISE]: { employeeNumber: 'E-17' },
    meta: { resourceType: 'User' },
  });
  t.notOk('password' in created.body);
  const user = await api.call(t, 'getUser', { token: admin, params: { user: Number(created.body.id) } });
  t.match(user.body, { username: body.userName, first_name: 'Sam', email: body.emails[0]!.value, phone: '+41 44 111 11 11', city: 'Zurich', zipcode: '8000' });
  t.equal(user.body.role_id, employee.id, "the tenant's default role");
  const [event] = await api.db.owner.execute<{ action: string; actor_type: string; actor_id: string; target_label: string }>(
    sql`select action, actor_type, actor_id, target_label from audit_events where target_type = 'user' and target_id = ${created.body.id}`,
  );
  t.match(event, { action: 'user.created', actor_type: 'scim_token' });
  t.ok(event!.actor_id, 'names the token');
  t.equal(event!.target_label, `Sam ${body.name.familyName}`, 'labelled by the full name, as the API labels a user');
  // Changed and deleted alike.
  await scim('PATCH', `/Users/${created.body.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'name.givenName', value: 'Samuel' }] });
  t.equal((await scim('DELETE', `/Users/${created.body.id}`)).status, 204);
  const later = await api.db.owner.execute<{ action: string; target_label: string }>(
    sql`select action, target_label from audit_events where target_type = 'user' and target_id = ${created.body.id} and action <> 'user.created' order by occurred_at`,
  );
  t.strictSame(
    later.map((row) => [row.action, row.target_label]),
    [
      ['user.updated', `Samuel ${body.name.familyName}`],
      ['user.deleted', `Samuel ${body.name.familyName}`],
    ],
  );

  const plain = await scim('POST', '/Users', newUser(), { contentType: 'application/json' });
  t.equal(plain.status, 201, 'application/json is accepted too');
});

t.test('a User holds exactly its mapped fields, alike whether created, read by id, found by filter or projected', async (t) => {
  const full = newUser({
    externalId: 'exact-0001',
    name: { givenName: 'Ana', familyName: 'O\'Neil "Lima"' },
    phoneNumbers: [{ value: '+41 44 222 22 22', type: 'mobile' }],
    addresses: [{ type: 'work', streetAddress: 'Main 2', postalCode: '8001', locality: 'Zürich' }],
    preferredLanguage: 'de-CH',
    [ENTERPRISE]: { employeeNumber: 'E-18' },
  });
  full.schemas = [USER, ENTERPRISE];
  const minimal = { schemas: [USER], userName: `scim.minimal${++serial}@example.com`, name: { givenName: 'Min', familyName: 'Imal' } };
  // What each should read as, from the API's view of the same user: absent values are left out, never null.
  const expected = async (id: string, location: string) => {
    const { body: user } = await api.call(t, 'getUser', { token: admin, params: { user: Number(id) } });
    // No meta.version: it must equal an ETag (RFC 7643 §3.1), and ETags are not supported.
    const meta = { resourceType: 'User', created: user.created_at, lastModified: user.updated_at, location };
    if (user.username === minimal.userName) {
      const language = user.lang_id === null ? {} : { preferredLanguage: user.lang_id, locale: user.lang_id };
      return {
        schemas: [USER],
        id,
        userName: minimal.userName,
        name: { givenName: 'Min', familyName: 'Imal', formatted: 'Min Imal' },
        displayName: 'Min Imal',
        active: true,
        ...language,
        meta,
      };
    }
    return {
      schemas: [USER, ENTERPRISE],
      id,
      externalId: 'exact-0001',
      userName: full.userName,
      name: { givenName: 'Ana', familyName: 'O\'Neil "Lima"', formatted: 'Ana O\'Neil "Lima"' },
      displayName: 'Ana O\'Neil "Lima"',
      active: true,
      emails: [{ value: full.emails[0]!.value, type: 'work', primary: true }],
      phoneNumbers: [{ value: '+41 44 222 22 22', type: 'work', primary: true }],
      addresses: [{ type: 'work', primary: true, streetAddress: 'Main 2', postalCode: '8001', locality: 'Zürich' }],
      preferredLanguage: user.lang_id,
      locale: user.lang_id,
      [ENTERPRISE]: { employeeNumber: 'E-18' },
      meta,
    };
  };
  for (const sent of [full, minimal]) {
    const created = await scim('POST', '/Users', sent);
    t.equal(created.status, 201, JSON.stringify(created.body));
    const id = String(created.body.id);
    const location = String(created.headers.location);
    t.match(location, new RegExp(`^http://[^/]+/scim/v2/Users/${id}$`));
    const resource = await expected(id, location);
    t.ok(typeof resource.meta.created === 'string' && typeof resource.meta.lastModified === 'string', 'the API presents both instants');
    t.strictSame(created.body, resource, 'as created');
    t.strictSame((await scim('GET', `/Users/${id}`)).body, resource, 'read by id');
    const found = await scim('GET', `/Users?filter=${encodeURIComponent(`userName eq "${sent.userName.toUpperCase()}"`)}`);
    t.strictSame(
      found.body,
      { schemas: ['urn:ietf:params:scim:api:messages:2.0:ListResponse'], totalResults: 1, startIndex: 1, itemsPerPage: 1, Resources: [resource] },
      'found by filter',
    );
    const projected = await scim('GET', `/Users?filter=${encodeURIComponent(`userName eq "${sent.userName}"`)}&attributes=userName,name.formatted`);
    t.strictSame(
      projected.body.Resources,
      [{ schemas: [USER], id, userName: sent.userName, name: { formatted: resource.name.formatted }, meta: { resourceType: 'User' } }],
      'projected',
    );
    const excluded = await scim('GET', `/Users/${id}?excludedAttributes=meta,name`);
    const { meta: _meta, name: _name, ...rest } = resource;
    t.strictSame(excluded.body, { ...rest, meta: { resourceType: 'User' } }, 'without excluded attributes');
  }
});

t.test('GET by id: 404 for unknown ids, other tenants and group accounts', async (t) => {
  const created = await scim('POST', '/Users', newUser());
  const found = await scim('GET', `/Users/${created.body.id}`);
  t.equal(found.status, 200);
  t.equal(found.body.userName, created.body.userName);
  const foreign = await api.createUser(other.tenantId);
  const group = await api.createUser(tenant.tenantId, { values: { groupAccount: true } });
  for (const id of ['999999', 'abc', '0', '-1', String(foreign.id), String(group.id), '1e3']) isError(t, await scim('GET', `/Users/${id}`), 404);
  isError(t, await scim('PUT', `/Users/${foreign.id}`, newUser()), 404);
  isError(t, await scim('PATCH', `/Users/${foreign.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'active', value: false }] }), 404);
  isError(t, await scim('DELETE', `/Users/${foreign.id}`), 404);
  const [row] = await api.db.owner.execute<{ active: boolean; deleted_at: Date | null }>(sql`select active, deleted_at from users where id = ${foreign.id}`);
  t.match(row, { active: true, deleted_at: null }, "another tenant's user is untouched");
});

t.test('filters: bad ones are invalidFilter', async (t) => {
  for (const filter of [
    'userName eq',
    'userName xx "a"',
    'nosuch eq "a"',
    'active co "t"',
    'active eq "maybe"',
    'meta.created gt "yesterday"',
    // Instants JavaScript reads but PostgreSQL's timestamptz cannot hold (or holds only oddly): years 1 to 9999 only.
    'meta.created gt "0000-01-01T00:00:00Z"',
    'meta.lastModified lt "+275760-09-13T00:00:00Z"',
    'meta.created gt "-000001-01-01T00:00:00Z"',
    'meta.created ge "+010000-01-01T00:00:00Z"',
    'userName eq 5',
    '((userName eq "a"',
    // id is compared with eq or ne, whatever the value (one that is no id too).
    'id gt "abc"',
    'id co "1"',
  ]) {
    isError(t, await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`), 400, 'invalidFilter');
  }
  isError(t, await scim('GET', '/Users?startIndex=abc'), 400, 'invalidValue');
  // An integer out of the declared range is refused with the range, not as "not an integer".
  const tooLarge = await scim('GET', '/Users?startIndex=9999999999');
  isError(t, tooLarge, 400, 'invalidValue');
  t.equal(tooLarge.body.detail, 'startIndex must be an integer from -999999999 to 999999999.');
});

t.test('a filter naming what every JavaScript object has is an unknown attribute', async (t) => {
  for (const filter of ['constructor eq "x"', '__proto__ eq "x"', 'constructor pr', 'not (__proto__ pr)']) {
    const res = await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`);
    isError(t, res, 400, 'invalidFilter');
    t.match(res.body.detail, /cannot be filtered on/, filter);
  }
});

t.test('a userName with a backslash is found whether the filter escapes it (RFC 7644: a JSON string) or not', async (t) => {
  const created = await scim('POST', '/Users', newUser({ userName: 'CORP\\jdoe', externalId: 'ext\\jdoe' }));
  t.equal(created.status, 201);
  t.equal(created.body.userName, 'CORP\\jdoe', 'one backslash stored');
  const found = async (filter: string) => (await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`)).body.Resources?.map((r: { id: string }) => r.id);
  t.same(await found('userName eq "CORP\\\\jdoe"'), [created.body.id], 'escaped, as a JSON string');
  t.same(await found('userName eq "CORP\\jdoe"'), [created.body.id], 'sent unescaped, as some identity providers do');
  t.same(await found('externalId eq "ext\\\\jdoe"'), [created.body.id], 'externalId alike');
  t.same(await found('userName eq "CORP\\\\\\\\jdoe"'), [], 'two escaped backslashes are two');
});

t.test('filters: every operator, logical ones and value paths, as SQL with paging', async (t) => {
  const fixtures = [];
  for (const [given, family, email, active] of [
    ['Ann', 'Filterton', 'ann@filter.example', true],
    ['Ben', 'Filterton', 'ben@filter.example', false],
    ['Cleo', 'Filterbach', 'cleo@other.example', true],
  ] as const) {
    const res = await scim(
      'POST',
      '/Users',
      newUser({
        userName: `${given.toLowerCase()}.filter`,
        name: { givenName: given, familyName: family },
        emails: [{ value: email, type: 'work' }],
        active,
        externalId: `ext-${given}`,
      }),
    );
    t.equal(res.status, 201);
    fixtures.push(res.body);
  }
  const names = async (filter: string, extra = '') => {
    const res = await scim('GET', `/Users?filter=${encodeURIComponent(filter)}${extra}`);
    t.equal(res.status, 200, filter);
    return { names: res.body.Resources.map((user: { userName: string }) => user.userName).sort(), body: res.body };
  };
  t.same((await names('userName eq "ANN.FILTER"')).names, ['ann.filter'], 'eq, case-insensitive');
  t.same((await names('name.familyName sw "Filter" and userName ne "ann.filter"')).names, ['ben.filter', 'cleo.filter'], 'sw, ne, and');
  t.same((await names('emails.value co "@filter."')).names, ['ann.filter', 'ben.filter'], 'co');
  t.same((await names('emails.value ew "other.example"')).names, ['cleo.filter'], 'ew');
  t.same((await names('userName eq "ann.filter" or userName eq "cleo.filter"')).names, ['ann.filter', 'cleo.filter'], 'or');
  t.same((await names('name.familyName sw "Filter" and not (active eq true)')).names, ['ben.filter'], 'not');
  t.same((await names('emails[type eq "work"].value eq "cleo@other.example"')).names, ['cleo.filter'], 'value path');
  t.same((await names('emails[type eq "work" and value sw "ben@"]')).names, ['ben.filter'], 'value filter');
  t.same((await names('externalId eq "ext-Ben"')).names, ['ben.filter'], 'externalId');
  t.same((await names('externalId eq "EXT-BEN"')).names, [], 'externalId is case-exact');
  t.same((await names('externalId ne "ext-Ben" and name.familyName sw "Filter"')).names, ['ann.filter', 'cleo.filter'], 'externalId ne');
  t.same((await names('not (externalId eq "ext-Ben") and name.familyName sw "Filter"')).names, ['ann.filter', 'cleo.filter'], 'not externalId eq');
  t.same((await names('externalId sw "ext-" and externalId ew "en"')).names, ['ben.filter'], 'externalId sw, ew');
  t.same((await names('externalId co "Cle"')).names, ['cleo.filter'], 'externalId co');
  t.ok((await names('externalId pr')).names.includes('cleo.filter'), 'pr');
  t.notOk((await names('externalId pr')).names.includes('admin'), 'pr leaves out users without one');
  t.same((await names(`id eq "${fixtures[1].id}"`)).names, ['ben.filter'], 'id');
  t.ok((await names('meta.created gt "2000-01-01T00:00:00Z" and name.familyName sw "Filter"')).names.length === 3, 'gt on a date');
  // A form (the filter but for its values) is prepared once: the same form with other values finds other users.
  for (const fixture of fixtures) t.same((await names(`userName eq "${fixture.userName}"`)).names, [fixture.userName], 'the same form, another value');
  t.same((await names('emails.value ew "filter.example"')).names, ['ann.filter', 'ben.filter'], 'ew with another value');
  t.same((await names(`id eq "${fixtures[2].id}"`)).names, ['cleo.filter'], 'id with another value');
  t.same((await names('id eq "not-a-number"')).names, [], 'id that names no user: another form');
  t.same((await names('name.familyName sw "Filter" and not (active eq false)')).names, ['ann.filter', 'cleo.filter'], 'not, another value');
  t.same((await names('meta.created gt "2999-01-01T00:00:00Z" and name.familyName sw "Filter"')).names, [], 'a date, another value');
  // Instants are kept to the microsecond and shown to the millisecond: a filter compares what is shown, so the
  // value a client read matches with eq, and gt that value (a delta sync's next page) leaves the user out.
  await api.db.owner.execute(sql`update users set updated_at = '2026-01-02T03:04:05.678901Z' where id = ${Number(fixtures[1].id)}`);
  const shown = (await scim('GET', `/Users/${fixtures[1].id}`)).body.meta.lastModified;
  t.equal(shown, '2026-01-02T03:04:05.678Z');
  for (const [op, matches] of [
    ['eq', true],
    ['ne', false],
    ['ge', true],
    ['le', true],
    ['gt', false],
    ['lt', false],
  ] as const) {
    const found = (await names(`meta.lastModified ${op} "${shown}" and userName eq "ben.filter"`)).names;
    t.same(found, matches ? ['ben.filter'] : [], `${op} the instant shown`);
  }
  // The last millisecond of the years a filter takes: the next one is past them, and still no error.
  for (const op of ['eq', 'ne', 'gt', 'le']) {
    const last = await names(`meta.lastModified ${op} "9999-12-31T23:59:59.999Z" and userName eq "ben.filter"`);
    t.same(last.names, op === 'ne' || op === 'le' ? ['ben.filter'] : [], `${op} the last millisecond of 9999`);
  }

  const page = await names('name.familyName sw "Filter"', '&startIndex=2&count=1');
  t.equal(page.body.totalResults, 3);
  t.equal(page.body.startIndex, 2);
  t.equal(page.body.itemsPerPage, 1);
  t.equal(page.body.Resources[0].userName, 'ben.filter', 'ordered by id');
  const pastTheEnd = await names('name.familyName sw "Filter"', '&startIndex=4');
  t.same(pastTheEnd.names, [], 'a page past the last match is empty');
  t.equal(pastTheEnd.body.totalResults, 3, 'and still counts every match');
  t.equal(pastTheEnd.body.itemsPerPage, 0);
  const countOnly = await names('name.familyName sw "Filter"', '&count=0');
  t.same([countOnly.names, countOnly.body.totalResults], [[], 3], 'count=0 answers the total alone');
  const none = await names('userName eq "nobody.filter"');
  t.same([none.names, none.body.totalResults, none.body.itemsPerPage], [[], 0, 0], 'no match: an empty first page and a total of 0');

  const projected = await scim('GET', `/Users?filter=${encodeURIComponent('userName eq "ann.filter"')}&attributes=userName,name.givenName`);
  t.same(Object.keys(projected.body.Resources[0]).sort(), ['id', 'meta', 'name', 'schemas', 'userName']);
  t.same(projected.body.Resources[0].name, { givenName: 'Ann' });
  const excluded = await scim('GET', `/Users?filter=${encodeURIComponent('userName eq "ann.filter"')}&excludedAttributes=emails,name`);
  t.notOk('emails' in excluded.body.Resources[0]);
  t.notOk('name' in excluded.body.Resources[0]);
  t.equal(excluded.body.Resources[0].userName, 'ann.filter');
});

t.test('a value path matches only values present: ne and not find no user without any; pr on complex attributes', async (t) => {
  const withAll = (await scim('POST', '/Users', newUser({ addresses: [{ type: 'work', locality: 'Bern' }], externalId: 'present-1' }))).body;
  const bare = (await scim('POST', '/Users', { schemas: [USER], userName: `bare.${withAll.userName}`, name: { givenName: 'Bare', familyName: 'User' } })).body;
  const found = async (filter: string) => {
    const res = await scim('GET', `/Users?count=200&filter=${encodeURIComponent(filter)}`);
    t.equal(res.status, 200, filter);
    return new Set(res.body.Resources.map((user: { id: string }) => user.id));
  };
  for (const filter of [
    'emails[type ne "home"]',
    'emails[not (type eq "home")]',
    'addresses[type ne "home"]',
    'emails[primary ne false]',
    'emails pr',
    'addresses pr',
  ]) {
    const ids = await found(filter);
    t.ok(ids.has(withAll.id), `${filter} finds the user with values`);
    t.notOk(ids.has(bare.id), `${filter} does not find the user without any`);
  }
  const named = await found('name pr');
  t.ok(named.has(withAll.id) && named.has(bare.id), 'name pr');
});

t.test('a change of externalId alone is audited, without its value', async (t) => {
  const created = await scim('POST', '/Users', newUser({ externalId: 'okta-00u1' }));
  t.equal(created.status, 201);
  const audits = await auditCount();
  const put = await scim('PUT', `/Users/${created.body.id}`, { ...created.body, externalId: 'okta-00u2' });
  t.equal(put.status, 200);
  t.equal(put.body.externalId, 'okta-00u2');
  t.equal(await auditCount(), audits + 1, 'one event');
  const [event] = await api.db.owner.execute<{ action: string; changes: Record<string, unknown> }>(
    sql`select action, changes from audit_events where target_type = 'user' and target_id = ${created.body.id} order by occurred_at desc limit 1`,
  );
  t.same(event, { action: 'user.updated', changes: { external_id: { changed: true } } });
  t.equal((await scim('PUT', `/Users/${created.body.id}`, { ...created.body, externalId: 'okta-00u2' })).status, 200);
  t.equal(await auditCount(), audits + 1, 'a PUT that changes nothing records nothing');
});

/** The plan of the count a `GET /Users?filter=…` runs, as the application in the tenant's transaction. */
async function usersPlan(filter: string): Promise<string> {
  return api.db.tenant(tenant.tenantId, async (tx) => {
    // With this few rows a sequential scan costs less: forbid it, so the plan shows whether an index can serve the filter at all.
    await tx.execute(sql`set local enable_seqscan = off`);
    const rows = await tx.execute<{ 'QUERY PLAN': string }>(
      sql`explain ${tx
        .select({ n: count() })
        .from(users)
        .where(and(SCIM_USERS, parseFilter(filter)))}`,
    );
    return rows.map((row) => row['QUERY PLAN']).join('\n');
  });
}

t.test('filters on userName and externalId are index scans in the tenant', async (t) => {
  const byName = await usersPlan('userName eq "Ann.Filter"');
  t.match(byName, /Index (Only )?Scan using users_tenant_id_username_lower_idx|Bitmap Index Scan on users_tenant_id_username_lower_idx/, byName);
  t.match(byName, /Index Cond: \(\(tenant_id = .*\) AND \(username_lower = /, 'tenant and the lower-case userName are both index conditions');
  const byExternalId = await usersPlan('externalId eq "ext-Ann"');
  t.match(byExternalId, /Index (Only )?Scan using scim_external_ids_external_id_idx|Bitmap Index Scan on scim_external_ids_external_id_idx/, byExternalId);
  t.match(byExternalId, /Index Cond: \(\(tenant_id = .*\) AND \(external_id = /, 'tenant and externalId are both index conditions');
});

// On Citus the list reaches every shard (its tenant is left to row-level security), and Citus gives such a statement no
// generic plan: it is planned for its values on every execution (a custom plan), by design.
const planCached = { skip: process.env[CITUS_ENV] ? 'Citus plans a multi-shard statement for its values on every execution' : false };

t.test('a look-up by userName is planned once per connection, not on every request', planCached, async (t) => {
  const planned = await single.createTenant('scim-plans');
  const role = await roleNamed(single.db, planned.tenantId, 'Employee');
  await single.db.owner.insert(scimSettings).values({ tenantId: planned.tenantId, defaultRoleId: role.id });
  const token = newScimTokenValue();
  await single.db.owner.insert(scimTokens).values({ tenantId: planned.tenantId, userId: planned.adminUserId, name: 'IdP', tokenHash: hashToken(token) });
  // PostgreSQL plans a prepared statement for its values five times before it weighs a generic plan.
  for (let i = 0; i < 12; i++) {
    const filter = encodeURIComponent(`userName eq "planned${i}@example.com"`);
    const url = `/scim/v2/Users?filter=${filter}`;
    const res = await singleWire.send({ method: 'GET', url, headers: bearer(token) });
    assertServedAnswer('GET', url, res);
    t.equal(res.json().totalResults, 0);
  }
  const statements = await single.db.tenant(planned.tenantId, (tx) =>
    tx.execute<{ generic_plans: number; custom_plans: number }>(
      sql`select generic_plans::int, custom_plans::int from pg_prepared_statements where statement like '%count(*) over ()%' and statement like '%username_lower%'`,
    ),
  );
  t.equal(statements.length, 1, 'one statement for the one filter form');
  t.ok(statements[0]!.generic_plans >= 7, `a generic plan for the later executions (${JSON.stringify(statements[0])})`);
  t.ok(statements[0]!.custom_plans <= 5, 'planned for its values only while PostgreSQL weighs a generic plan');
});

t.test('a list costs a constant number of queries', async (t) => {
  const measure = async () => {
    const before = api.db.queryCount;
    const res = await scim('GET', '/Users?count=100');
    t.equal(res.status, 200);
    return api.db.queryCount - before;
  };
  const few = await measure();
  for (let i = 0; i < 5; i++) await scim('POST', '/Users', newUser());
  t.equal(await measure(), few);
});

t.test('PUT replaces the SCIM attributes; PATCH in the forms of Entra ID and Okta', async (t) => {
  const created = (await scim('POST', '/Users', newUser({ phoneNumbers: [{ value: '123', type: 'work' }] }))).body;
  const path = `/Users/${created.id}`;

  const put = await scim('PUT', path, { ...newUser({ userName: created.userName }), name: { givenName: 'Put', familyName: 'Name' } });
  t.equal(put.status, 200);
  t.equal(put.body.name.givenName, 'Put');
  t.notOk('phoneNumbers' in put.body, 'an attribute left out of a PUT is cleared');

  // Entra ID: capitalised op names, "False" strings, paths with value filters.
  const entra = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      { op: 'Replace', path: 'name.givenName', value: 'Entra' },
      { op: 'Replace', path: 'emails[type eq "work"].value', value: 'entra@example.com' },
      { op: 'Add', path: 'externalId', value: 'entra-42' },
      { op: 'Add', path: `${ENTERPRISE}:employeeNumber`, value: 'E-42' },
    ],
  });
  t.equal(entra.status, 200);
  t.match(entra.body, {
    name: { givenName: 'Entra' },
    emails: [{ value: 'entra@example.com' }],
    externalId: 'entra-42',
    [ENTERPRISE]: { employeeNumber: 'E-42' },
  });

  // Okta: a replace without path whose value holds the attributes, dotted keys too.
  const okta = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', value: { 'name.familyName': 'Okta', displayName: 'ignored' } }] });
  t.equal(okta.status, 200);
  t.equal(okta.body.name.familyName, 'Okta');

  const removeEmail = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'emails[type eq "work"]' }] });
  t.equal(removeEmail.status, 200);
  t.notOk('emails' in removeEmail.body);

  const stored = await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } });
  t.match(stored.body, { first_name: 'Entra', last_name: 'Okta', email: null, staff_number: 'E-42' });
});

t.test('a PUT or PATCH that changes nothing (a periodic sync) leaves meta.lastModified and records no event', async (t) => {
  const created = (await scim('POST', '/Users', newUser({ externalId: `sync-${serial}`, [ENTERPRISE]: { employeeNumber: 'E-7' } }))).body;
  const path = `/Users/${created.id}`;
  // A time well before the requests, so that a moved lastModified shows whatever the clock's resolution.
  await api.db.owner.execute(sql`update users set updated_at = '2026-01-02T03:04:05.678Z' where id = ${Number(created.id)}`);
  const before = await auditCount();
  const { meta: _meta, id: _id, ...resource } = (await scim('GET', path)).body;
  const put = await scim('PUT', path, resource);
  t.equal(put.status, 200);
  t.equal(put.body.meta.lastModified, '2026-01-02T03:04:05.678Z', 'a PUT of the resource as read');
  const patch = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      { op: 'replace', path: 'name.givenName', value: created.name.givenName },
      { op: 'replace', path: 'active', value: true },
      { op: 'add', path: 'externalId', value: created.externalId },
    ],
  });
  t.equal(patch.status, 200);
  t.equal(patch.body.meta.lastModified, '2026-01-02T03:04:05.678Z', 'a PATCH of the values it has');
  t.equal(await auditCount(), before, 'and neither records an event');
});

t.test('PATCH paths and value keys name attributes in any case, as RFC 7643 has them case-insensitive', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const patched = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      { op: 'replace', path: 'USERNAME', value: `renamed.${created.userName}` },
      { op: 'replace', value: { NAME: { GIVENNAME: 'Given', FAMILYNAME: 'Keys' } } },
      { op: 'replace', path: 'Name.GivenName', value: 'Upper' },
      { op: 'replace', path: 'EMAILS[TYPE eq "work"].VALUE', value: 'cased@example.com' },
      { op: 'add', path: `${ENTERPRISE.toLowerCase()}:EMPLOYEENUMBER`, value: 'E-7' },
    ],
  });
  t.equal(patched.status, 200);
  t.match(patched.body, {
    userName: `renamed.${created.userName}`,
    name: { givenName: 'Upper', familyName: 'Keys' },
    emails: [{ value: 'cased@example.com' }],
    [ENTERPRISE]: { employeeNumber: 'E-7' },
  });
  for (const key of Object.keys(patched.body)) t.ok(key === key.trim() && !/^(USERNAME|NAME|EMAILS)$/.test(key), `no attribute written beside its own: ${key}`);
  const stored = await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } });
  t.match(stored.body, { username: `renamed.${created.userName}`, first_name: 'Upper', last_name: 'Keys', email: 'cased@example.com', staff_number: 'E-7' });
});

t.test('PATCH as identity providers send it: unkept attributes by path, the extension whole, filtered keys without a path, members in any case', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const storedUser = async () => (await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } })).body;
  const before = await storedUser();
  // Entra ID's default mapping sends `title`; core attributes Atrium does not keep are ignored by path as without one.
  for (const ignored of ['title', 'nickName', 'userType', 'profileUrl', 'timezone', 'roles', `${USER}:title`]) {
    for (const op of ['Add', 'Replace', 'Remove']) {
      const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op, path: ignored, ...(op === 'Remove' ? {} : { value: 'Engineer' }) }] });
      t.equal(res.status, 200, `${op} ${ignored}`);
      t.notOk(ignored in res.body, `${ignored} is not answered`);
    }
  }
  t.same(await storedUser(), before, 'the user is as it was');

  const whole = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: ENTERPRISE, value: { employeeNumber: 'E-6', department: 'Sales' } }],
  });
  t.equal(whole.status, 200);
  t.same(whole.body[ENTERPRISE], { employeeNumber: 'E-6' }, 'the extension by its URN as the path');
  const pathless = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [{ op: 'add', value: { [ENTERPRISE.toUpperCase()]: { EmployeeNumber: 'E-8' } } }],
  });
  t.equal(pathless.status, 200);
  t.same(pathless.body[ENTERPRISE], { employeeNumber: 'E-8' }, 'the extension as a key of a path-less value');

  const filtered = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      {
        op: 'replace',
        value: {
          'emails[type eq "work"].value': 'filtered@example.com',
          'addresses[type eq "work"].locality': 'Berlin',
          'phoneNumbers[type eq "work"].value': '+49 30 1',
          'name.givenName': 'Keyed',
          [`${ENTERPRISE}:employeeNumber`]: 'E-9',
        },
      },
    ],
  });
  t.equal(filtered.status, 200);
  t.match(
    await storedUser(),
    { email: 'filtered@example.com', city: 'Berlin', phone: '+49 30 1', first_name: 'Keyed', staff_number: 'E-9' },
    'every key applied',
  );

  const cased = await scim('PATCH', path, { SCHEMAS: [PATCH], operations: [{ OP: 'REPLACE', PATH: 'name.givenName', VALUE: 'Cased' }] });
  t.equal(cased.status, 200, 'op, path and value in any case');
  t.equal((await storedUser()).first_name, 'Cased');

  // String attributes are not case-exact (RFC 7643 §2.2): a value filter matches a value in another case.
  const typed = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: `${USER}:emails[type eq "WORK"].value`, value: 'Mixed.Case@Example.com' }],
  });
  t.same(
    typed.body.emails.map((email: { value: string }) => email.value),
    ['Mixed.Case@Example.com'],
    'the work e-mail replaced, none added',
  );
  const removed = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'emails[value eq "mixed.case@example.com"]' }] });
  t.equal(removed.status, 200);
  t.notOk('emails' in removed.body, 'the e-mail is removed by its value in another case');
  t.equal((await storedUser()).email, null);

  // So does a filter of several terms, or with another operator, as a read's filter does.
  const restore = (value: string) =>
    scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'add', path: 'emails', value: [{ value, type: 'work', primary: true }] }] });
  for (const filter of [
    'type eq "work" and value eq "bob@example.com"',
    'value co "EXAMPLE"',
    'not (value ne "BOB@EXAMPLE.COM")',
    'value sw "BOB" or type eq "home"',
  ]) {
    t.equal((await restore('Bob@Example.com')).status, 200);
    const found = await scim('GET', `/Users?filter=${encodeURIComponent(`emails[${filter}]`)}`);
    t.ok(
      found.body.Resources.some((user: { id: string }) => user.id === created.id),
      `a read finds the user by emails[${filter}]`,
    );
    const replaced = await scim('PATCH', path, {
      schemas: [PATCH],
      Operations: [{ op: 'replace', path: `emails[${filter}].value`, value: 'bob.b@example.com' }],
    });
    t.equal(replaced.status, 200, `replace emails[${filter}].value`);
    t.same(replaced.body.emails, [{ value: 'bob.b@example.com', type: 'work', primary: true }], 'the one e-mail replaced, none added');
    t.equal((await restore('Bob@Example.com')).status, 200);
    const gone = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: `emails[${filter}]` }] });
    t.equal(gone.status, 200, `remove emails[${filter}]`);
    t.equal((await storedUser()).email, null, 'the e-mail is removed');
  }
  const other = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'emails[value co "nobody"]' }] });
  t.equal(other.status, 200, 'a filter matching nothing removes nothing, and succeeds');

  // And a filter that matches only as written, not ignoring case, matches nothing, as on reads.
  t.equal((await restore('Bob@Example.com')).status, 200);
  const unequal = `emails[value ne "bob@example.com"]`;
  const read = await scim('GET', `/Users?filter=${encodeURIComponent(unequal)}`);
  t.notOk(
    read.body.Resources.some((user: { id: string }) => user.id === created.id),
    'a read does not find the user by it',
  );
  const kept = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: unequal }] });
  t.equal(kept.status, 200, 'its removal succeeds');
  t.equal((await storedUser()).email, 'Bob@Example.com', 'and removes nothing');
});

t.test("another resource's schema URN names no attribute of a User: not in a filter, not in a PATCH's value keys", async (t) => {
  const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';
  const user = (await scim('POST', '/Users', newUser())).body;
  const filtered = await scim('GET', `/Users?filter=${encodeURIComponent(`${GROUP}:userName eq "${user.userName}"`)}`);
  isError(t, filtered, 400, 'invalidFilter');
  const own = await scim('GET', `/Users?filter=${encodeURIComponent(`${USER}:userName eq "${user.userName}"`)}`);
  t.equal(own.body.totalResults, 1, "the User schema's own URN still names userName");
  const patched = await scim('PATCH', `/Users/${user.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', value: { [`${GROUP}:name.givenName`]: 'Renamed' } }],
  });
  isError(t, patched, 400, 'invalidPath');
  t.equal((await scim('GET', `/Users/${user.id}`)).body.name.givenName, user.name.givenName, 'the user is as it was');
  const renamed = await scim('PATCH', `/Users/${user.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', value: { [`${USER}:name.givenName`]: 'Renamed' } }],
  });
  t.equal(renamed.body.name.givenName, 'Renamed', "the User schema's own URN still names it");
  const projected = await scim('GET', `/Users/${user.id}?attributes=${encodeURIComponent(`${GROUP}:userName`)}`);
  t.strictSame(
    projected.body,
    { schemas: [USER], id: user.id, meta: { resourceType: 'User' } },
    "attributes: the Group URN's userName is no attribute of a User",
  );
  const ownProjected = await scim('GET', `/Users/${user.id}?attributes=${encodeURIComponent(`${USER}:userName`)}`);
  t.equal(ownProjected.body.userName, user.userName, "the User schema's own URN names userName");
});

t.test('a value filter matching in another case reaches values holding what paths and filters read specially', async (t) => {
  // A phone number as RFC 7643 writes it (`tel:`), and streets with a line feed, a backslash, `:` and brackets.
  const phone = (await scim('POST', '/Users', newUser({ phoneNumbers: [{ value: 'tel:+1-201-555-0123', type: 'work' }] }))).body;
  const replaced = await scim('PATCH', `/Users/${phone.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'phoneNumbers[type eq "Work"].value', value: 'tel:+1-201-555-0199' }],
  });
  t.equal(replaced.status, 200, 'a tel: number replaced by a filter in another case');
  t.same(replaced.body.phoneNumbers, [{ value: 'tel:+1-201-555-0199', type: 'work', primary: true }]);
  for (const street of ['Main St 1\nFloor 2', 'C:\\Street', 'Unit: 5', 'Bldg [A]', 'Ends\\']) {
    const user = (await scim('POST', '/Users', newUser({ addresses: [{ type: 'work', streetAddress: street, locality: 'Berlin' }] }))).body;
    const moved = await scim('PATCH', `/Users/${user.id}`, {
      schemas: [PATCH],
      Operations: [{ op: 'replace', path: 'addresses[type eq "Work"].locality', value: 'Hamburg' }],
    });
    t.equal(moved.status, 200, `${JSON.stringify(street)}: the locality replaced`);
    t.match(moved.body.addresses, [{ streetAddress: street, locality: 'Hamburg' }]);
    const removed = await scim('PATCH', `/Users/${user.id}`, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'addresses[type eq "WORK"]' }] });
    t.equal(removed.status, 200);
    t.notOk('addresses' in removed.body, `${JSON.stringify(street)}: the address removed`);
  }
});

t.test('a PATCH value filter reads an escaped backslash as one, as a read filter does', async (t) => {
  // RFC 7644 writes a compared text as a JSON string: `"C:\\Street"` compares with `C:\Street`, in a PATCH path too.
  const street = 'C:\\Street';
  const user = (await scim('POST', '/Users', newUser({ addresses: [{ type: 'work', streetAddress: street, locality: 'Berlin' }] }))).body;
  const sent = `addresses[streetAddress eq ${JSON.stringify(street)}]`;
  const moved = await scim('PATCH', `/Users/${user.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: `${sent}.locality`, value: 'Hamburg' }] });
  t.equal(moved.status, 200, 'the locality replaced by a filter with an escaped backslash');
  t.match(moved.body.addresses, [{ streetAddress: street, locality: 'Hamburg' }]);
  const cased = await scim('PATCH', `/Users/${user.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: `addresses[streetAddress eq ${JSON.stringify(street.toUpperCase())}].locality`, value: 'Bremen' }],
  });
  t.equal(cased.status, 200, 'and in another case');
  t.match(cased.body.addresses, [{ streetAddress: street, locality: 'Bremen' }]);
  const removed = await scim('PATCH', `/Users/${user.id}`, { schemas: [PATCH], Operations: [{ op: 'remove', path: sent }] });
  t.equal(removed.status, 200);
  t.notOk('addresses' in removed.body, 'the address removed by it');
});

t.test('an add or replace without a value, or without a path and an object of attributes, is invalidValue and changes nothing', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const audits = await auditCount();
  for (const operation of [
    { op: 'replace' },
    { op: 'add' },
    { op: 'replace', path: 'name.givenName' },
    { op: 'Add', path: 'emails[type eq "work"].value' },
    { op: 'replace', value: 5 },
    { op: 'replace', value: true },
    { op: 'replace', value: [] },
    { op: 'add', value: 'text' },
    { op: 'replace', value: null },
    { op: 'replace', path: ENTERPRISE, value: 'E-1' },
    { op: 'add', value: { [ENTERPRISE]: ['E-1'] } },
  ]) {
    isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [operation] }), 400, 'invalidValue');
  }
  t.same((await scim('GET', path)).body, created, 'the user is as it was');
  t.equal(await auditCount(), audits, 'no event recorded');
});

t.test('a PATCH of locale alone, or a removal of preferredLanguage, changes the language as a PUT does', async (t) => {
  const created = (await scim('POST', '/Users', newUser({ preferredLanguage: 'en-US' }))).body;
  const path = `/Users/${created.id}`;
  const language = async () => (await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } })).body.lang_id;
  const byLocale = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'locale', value: 'de-DE' }] });
  t.equal(byLocale.status, 200);
  t.match(byLocale.body, { preferredLanguage: 'de-DE', locale: 'de-DE' });
  t.equal(await language(), 'de-DE', 'locale alone changes the language');
  const removed = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'preferredLanguage' }] });
  t.equal(removed.status, 200);
  const put = await scim('PUT', path, { ...newUser({ userName: created.userName }), name: created.name, emails: created.emails });
  t.equal(removed.body.preferredLanguage, put.body.preferredLanguage, 'a removal leaves what a PUT without a language leaves');
  t.equal(removed.body.locale, put.body.locale);
});

t.test('a PATCH that adds a primary e-mail makes it the one Atrium keeps', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const patched = await scim('PATCH', `/Users/${created.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'add', path: 'emails', value: [{ value: `new.${created.emails[0].value}`, type: 'work', primary: true }] }],
  });
  t.equal(patched.status, 200);
  t.match(patched.body.emails, [{ value: `new.${created.emails[0].value}`, primary: true }]);
  const stored = await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } });
  t.equal(stored.body.email, `new.${created.emails[0].value}`);
});

t.test('an add of e-mails tells a value too large for a number from null, as scim-patch does', async (t) => {
  // JSON reads 1e999 as Infinity, which JSON.stringify writes as null: the two are different values (fast-deep-equal).
  const created = (await scim('POST', '/Users', newUser())).body;
  const [first, second] = [`first.${created.emails[0].value}`, `second.${created.emails[0].value}`];
  const add = (email: string, display: string) => `{"op": "add", "path": "emails", "value": [{"value": "${email}", "primary": true, "display": ${display}}]}`;
  const patched = await scim('PATCH', `/Users/${created.id}`, undefined, {
    payload: `{"schemas": ["${PATCH}"], "Operations": [${add(first, 'null')}, ${add(second, '"x"')}, ${add(first, '1e999')}]}`,
  });
  t.equal(patched.status, 200);
  const stored = await api.call(t, 'getUser', { token: admin, params: { user: Number(created.id) } });
  t.equal(stored.body.email, first, 'the last primary e-mail added, the first one again, is kept');
});

t.test('a remove whose value filter matches nothing changes nothing and succeeds, with a sub-attribute too', async (t) => {
  // Entra ID removes the mobile and fax numbers of its default mapping when they are cleared at the source;
  // the user's one phone is answered as work, so such a filter matches nothing while the attribute holds a value.
  const created = (await scim('POST', '/Users', newUser({ phoneNumbers: [{ value: '+1 555 0100', type: 'work' }] }))).body;
  const path = `/Users/${created.id}`;
  const before = (await scim('GET', path)).body;
  for (const removal of [
    'phoneNumbers[type eq "fax"].value',
    'emails[type eq "home"].value',
    'addresses[type eq "home"].streetAddress',
    'phoneNumbers[type eq "mobile"]',
  ]) {
    const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'Remove', path: removal }] });
    t.equal(res.status, 200, removal);
  }
  // Beside other changes in one PATCH, as Entra ID sends a user's changes: those are applied.
  const together = await scim('PATCH', path, {
    schemas: [PATCH],
    Operations: [
      { op: 'Remove', path: 'phoneNumbers[type eq "fax"].value' },
      { op: 'Replace', path: 'name.givenName', value: 'Applied' },
    ],
  });
  t.equal(together.status, 200);
  t.equal(together.body.name.givenName, 'Applied');
  t.same(together.body.phoneNumbers, before.phoneNumbers, 'the phone is kept');
  t.same(together.body.emails, before.emails, 'the e-mail is kept');
  // A filter that matches removes what its path names.
  const matched = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove', path: 'phoneNumbers[type eq "work"].value' }] });
  t.equal(matched.status, 200);
  t.notOk('phoneNumbers' in matched.body, 'the work number is removed');
});

t.test('a path-less add or replace of name leaves the sub-attributes it does not name as they are', async (t) => {
  // RFC 7644 §3.5.2.1 and §3.5.2.3: the same as with the path `name`, or with dotted keys.
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const replaced = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', value: { name: { givenName: 'Merged' } } }] });
  t.equal(replaced.status, 200);
  t.same([replaced.body.name.givenName, replaced.body.name.familyName], ['Merged', created.name.familyName]);
  const added = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'Add', value: { Name: { FamilyName: 'Kept' } } }] });
  t.equal(added.status, 200);
  t.same([added.body.name.givenName, added.body.name.familyName], ['Merged', 'Kept']);
});

t.test('a replace whose value filter matches nothing is noTarget and changes nothing', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const refused = await scim('PATCH', `/Users/${created.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'emails[type eq "home"]', value: { value: 'home@example.com', type: 'home' } }],
  });
  isError(t, refused, 400, 'noTarget');
  t.match((await scim('GET', `/Users/${created.id}`)).body, { emails: [{ value: created.emails[0].value }] });
});

t.test('refused PATCHes change nothing', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const audits = await auditCount();
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [] }), 400, 'invalidSyntax');
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'move', path: 'active' }] }), 400, 'invalidSyntax');
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'remove' }] }), 400, 'noTarget');
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'id', value: '1' }] }), 400, 'mutability');
  isError(t, await scim('PUT', path, { ...newUser({ userName: created.userName }), id: '1' }), 400, 'mutability');
  // The first operation is acceptable, the second breaks a rule: neither is applied.
  isError(
    t,
    await scim('PATCH', path, {
      schemas: [PATCH],
      Operations: [
        { op: 'replace', path: 'name.givenName', value: 'Changed' },
        { op: 'remove', path: 'name.familyName' },
      ],
    }),
    400,
    'invalidValue',
  );
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'userName', value: 'admin' }] }), 409, 'uniqueness');
  // `name` is one complex attribute: a value that is not an object is refused, as in a POST or PUT.
  for (const value of [[1], [{ givenName: 'Listed' }], 'Sam', 7]) {
    for (const op of ['replace', 'add']) {
      isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op, path: 'name', value }] }), 400, 'invalidValue');
    }
  }
  const after = await scim('GET', path);
  t.same(after.body, created, 'the user is as it was');
  t.equal(await auditCount(), audits, 'no event recorded');
});

t.test('the token acts with its minter authority: no administering users who can do more', async (t) => {
  const delegate = await api.createUser(tenant.tenantId, {
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative', 'login-tokens.administer'],
  });
  const token = await mint(t, delegate.token);
  const res = await scim(
    'PATCH',
    `/Users/${tenant.adminUserId}`,
    { schemas: [PATCH], Operations: [{ op: 'replace', path: 'active', value: false }] },
    { token },
  );
  t.equal(res.status, 403);
  t.same(res.body.schemas, [ERROR]);
  const [row] = await api.db.owner.execute<{ active: boolean }>(sql`select active from users where id = ${tenant.adminUserId}`);
  t.equal(row!.active, true);
});

const base = wire.base;

/** Whether the stream ended within a guard against a hang far below the heartbeat (ten minutes): only the cut-off can have ended it. */
const endsBeforeHeartbeat = (stream: SseClient) => Promise.race([stream.ended.then(() => true), sleep(10_000).then(() => false)]);

/** A stream of the user's session, once it has its first event (it is registered then). */
async function streamOf(tt: Tt, token: string): Promise<SseClient> {
  const stream = await openSse(tt, `${base}/api/notifications/stream`, bearer(token));
  tt.equal(stream.status, 200);
  await stream.next((e) => e.event === 'count', 5000);
  return stream;
}

t.test('a leaver is cut off at once: session, login token, push subscription and stream', async (t) => {
  const leaver = await api.createUser(tenant.tenantId, { permissions: ['login-tokens.administer'] });
  const loginToken = await api.call(t, 'createUserLoginToken', { token: leaver.token, body: { expires_in: 3600 } });
  t.equal(loginToken.status, 201);
  await api.db.owner
    .insert(pushSubscriptions)
    .values({ tenantId: tenant.tenantId, userId: leaver.id, endpoint: 'https://push.example/leaver', ...browserSubscription().keys });
  const stream = await streamOf(t, leaver.token);

  const res = await scim('PATCH', `/Users/${leaver.id}`, { schemas: [PATCH], Operations: [{ op: 'Replace', path: 'active', value: 'False' }] });
  t.equal(res.status, 200);
  t.equal(res.body.active, false);
  t.ok(await endsBeforeHeartbeat(stream), 'the stream ended at once, not at the heartbeat');

  t.equal((await api.call(t, 'getCurrentUser', { token: leaver.token })).status, 401, 'the session ended');
  t.equal((await api.call(t, 'loginWithToken', { body: { token: loginToken.body.token } })).status, 401, 'the login token is revoked');
  t.equal(await rowCount(api.db, 'push_subscriptions', sql`user_id = ${leaver.id}`), 0, 'the push subscription is gone');

  const back = await scim('PATCH', `/Users/${leaver.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', value: { active: true } }] });
  t.equal(back.body.active, true);
  t.equal((await api.call(t, 'getCurrentUser', { token: leaver.token })).status, 401, 'reactivation revives no session');
  const again = await openSse(t, `${base}/api/notifications/stream`, bearer(leaver.token));
  t.equal(again.status, 401, 'nor a stream of it');
  t.equal((await api.call(t, 'loginWithToken', { body: { token: loginToken.body.token } })).status, 401, 'nor the login token');
});

t.test('PUT with active false ends the leaver’s streams at once; other users’ streams stay', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const token = await api.tokenFor(tenant.tenantId, Number(created.id));
  const stream = await streamOf(t, token);
  const bystander = await api.createUser(tenant.tenantId);
  const bystanderStream = await streamOf(t, bystander.token);

  const res = await scim('PUT', `/Users/${created.id}`, { ...created, active: false });
  t.equal(res.status, 200);
  t.equal(res.body.active, false);
  t.ok(await endsBeforeHeartbeat(stream), 'the stream ended at once, not at the heartbeat');
  t.equal(await Promise.race([bystanderStream.ended.then(() => 'ended'), sleep(300).then(() => 'open')]), 'open', "another user's stream stays open");
  bystanderStream.close();
});

t.test('DELETE soft-deletes and cuts off; the API restores', async (t) => {
  const leaver = await api.createUser(tenant.tenantId);
  const stream = await streamOf(t, leaver.token);
  const audits = await auditCount();
  const res = await scim('DELETE', `/Users/${leaver.id}`);
  t.equal(res.status, 204);
  t.ok(await endsBeforeHeartbeat(stream), 'the stream ended at once, not at the heartbeat');
  isError(t, await scim('GET', `/Users/${leaver.id}`), 404);
  isError(t, await scim('DELETE', `/Users/${leaver.id}`), 404);
  t.equal((await api.call(t, 'getCurrentUser', { token: leaver.token })).status, 401);
  t.equal(await auditCount(), audits + 1, 'one event');
  const restored = await api.call(t, 'restoreUser', { token: admin, params: { user: leaver.id } });
  t.equal(restored.status, 200);
  t.equal((await scim('GET', `/Users/${leaver.id}`)).status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: leaver.token })).status, 401, 'a restore revives no session');
});

t.test("a blackout erases the identity provider's id of the person", async (t) => {
  const created = await scim('POST', '/Users', newUser({ externalId: 'entra-leaver-1' }));
  t.equal(created.status, 201);
  t.equal((await scim('GET', '/Users?filter=externalId eq "entra-leaver-1"')).body.totalResults, 1);
  t.equal((await api.call(t, 'blackoutUser', { token: admin, params: { user: created.body.id } })).status, 204);
  const found = await scim('GET', '/Users?filter=externalId eq "entra-leaver-1"');
  t.equal(found.status, 200);
  t.equal(found.body.totalResults, 0, 'the id no longer finds the anonymised account');
  isError(t, await scim('GET', `/Users/${created.body.id}`), 404);
  t.equal(await rowCount(api.db, 'scim_external_ids', sql`user_id = ${created.body.id}`), 0, 'nothing links the account to it');
});

t.test('discovery: ServiceProviderConfig, ResourceTypes, Schemas', async (t) => {
  const config = await scim('GET', '/ServiceProviderConfig');
  t.equal(config.status, 200);
  t.match(config.body, { patch: { supported: true }, filter: { supported: true }, bulk: { supported: false } });
  const types = await scim('GET', '/ResourceTypes');
  t.same(
    types.body.Resources.map((type: { id: string }) => type.id),
    ['User', 'Group'],
  );
  const schemas = await scim('GET', '/Schemas');
  t.same(schemas.body.Resources.map((schema: { id: string }) => schema.id).sort(), [USER, ENTERPRISE, 'urn:ietf:params:scim:schemas:core:2.0:Group'].sort());
  t.equal((await scim('GET', `/Schemas/${USER}`)).status, 200);
  isError(t, await scim('GET', '/Schemas/urn:nope'), 404);
  // The schemas say what the server does: a user without its name is refused; a group's members are users.
  type Attribute = { name: string; required: boolean; subAttributes?: Attribute[]; referenceTypes?: string[]; canonicalValues?: string[] };
  const attributesOf = (id: string) => (schemas.body.Resources as { id: string; attributes: Attribute[] }[]).find((schema) => schema.id === id)!.attributes;
  const name = attributesOf(USER).find((attribute) => attribute.name === 'name')!;
  t.same([name.required, ...name.subAttributes!.filter((sub) => sub.name !== 'formatted').map((sub) => sub.required)], [true, true, true]);
  isError(t, await scim('POST', '/Users', { schemas: [USER], userName: 'no-name' }), 400, 'invalidValue');
  const members = attributesOf('urn:ietf:params:scim:schemas:core:2.0:Group').find((attribute) => attribute.name === 'members')!;
  t.same(members.subAttributes!.find((sub) => sub.name === '$ref')!.referenceTypes, ['User']);
  t.same(members.subAttributes!.find((sub) => sub.name === 'type')!.canonicalValues, ['User']);
  isError(t, await scim('GET', '/Nothing'), 404);
  // A path served with other methods: 405, and `Allow` names them.
  const wrongMethod = await scim('DELETE', '/ServiceProviderConfig');
  isError(t, wrongMethod, 405);
  t.equal(wrongMethod.headers.allow, 'GET, HEAD');
  // Whatever the body: it is not read, so a malformed one decides nothing.
  for (const payload of ['{', '{}']) {
    const nowhere = await scim('POST', '/Nothing', undefined, { payload });
    isError(t, nowhere, 404);
    t.match(nowhere.body.detail, /is not a SCIM endpoint/, `POST /Nothing with ${payload}`);
    const other = await scim('PUT', '/ServiceProviderConfig', undefined, { payload });
    isError(t, other, 405);
    t.equal(other.headers.allow, 'GET, HEAD', `PUT /ServiceProviderConfig with ${payload}`);
  }
  // An empty id (a trailing slash) names no resource: no endpoint, before the token is even looked at.
  for (const method of ['GET', 'PUT', 'PATCH', 'DELETE'] as const) {
    const trailing = await scim(method, '/Users/', method === 'GET' || method === 'DELETE' ? undefined : { schemas: [USER] });
    isError(t, trailing, 404);
    t.match(trailing.body.detail, /is not a SCIM endpoint/, `${method} /Users/`);
  }
  isError(t, await scim('GET', '/Groups/', undefined, { token: null }), 404);
});

t.test('/Me is not supported: 501 for every method, as RFC 7644 §3.11 has a service provider answer', async (t) => {
  const before = await userCount();
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const) {
    const body = method === 'PATCH' ? { schemas: [PATCH], Operations: [] } : { schemas: [USER], userName: 'me@example.com' };
    const res = await scim(method, '/Me', method === 'GET' || method === 'DELETE' ? undefined : body);
    isError(t, res, 501);
    t.match(res.body.detail, /\/Me/, `${method} /Me says what is not supported`);
  }
  isError(t, await scim('GET', '/Me?attributes=userName'), 501);
  // The token is judged first, as on every SCIM endpoint: without one, a 401.
  isError(t, await scim('GET', '/Me', undefined, { token: null }), 401);
  isError(t, await scim('POST', '/Me', newUser(), { token: null }), 401);
  // A body of a media type no SCIM endpoint takes is refused first (415), whatever the path, as the spec says.
  isError(t, await scim('POST', '/Me', undefined, { payload: 'x', contentType: 'text/plain' }), 415);
  // HEAD, as every GET brings it: the 501's headers, no body.
  const head = await wire.send({ method: 'HEAD', url: '/scim/v2/Me', headers: bearer(scimToken) });
  t.equal(head.statusCode, 501);
  t.match(String(head.headers['content-type']), /^application\/scim\+json/);
  t.equal(head.body, '');
  t.equal(await userCount(), before, 'and creates no one');
});

t.test('HEAD on a SCIM GET endpoint is answered as the GET, without its body, as under /api', async (t) => {
  // The spec declares GET alone, in SCIM and in `/api`: every GET brings HEAD (docs/api-conventions.md).
  const head = (url: string, token: string | null = scimToken) => wire.send({ method: 'HEAD', url, headers: token ? bearer(token) : {} });
  const current = await head('/api/users/current', admin);
  t.equal(current.statusCode, 200, '/api answers HEAD on a GET operation');
  t.equal(current.body, '');
  for (const [url, status] of [
    ['/scim/v2/Users', 200],
    ['/scim/v2/ServiceProviderConfig', 200],
    ['/scim/v2/Users/999999999', 404],
  ] as const) {
    const get = await wire.send({ method: 'GET', url, headers: bearer(scimToken) });
    const answer = await head(url);
    t.equal(answer.statusCode, status, `HEAD ${url}`);
    t.equal(get.statusCode, status, `GET ${url}`);
    t.equal(answer.headers['content-type'], get.headers['content-type'], 'the same media type');
    t.equal(answer.body, '', 'and no body');
  }
  const refused = await head('/scim/v2/Users', null);
  t.equal(refused.statusCode, 401, 'authenticated as the GET is');
  t.equal(refused.body, '');
});

t.test('discovery refuses a filter (403): its answers are never filtered', async (t) => {
  // RFC 7644 §4: the discovery endpoints ignore the list parameters, and refuse a filter, so
  // that a client cannot take an unfiltered answer for the resources that match.
  for (const path of ['/ServiceProviderConfig', '/ResourceTypes', '/ResourceTypes/User', '/Schemas', `/Schemas/${USER}`]) {
    for (const filter of ['id eq "User"', '']) {
      const refused = await scim('GET', `${path}?filter=${encodeURIComponent(filter)}`);
      isError(t, refused, 403);
      t.match(refused.body.detail, /filter/, `${path} names the filter`);
    }
    t.equal((await scim('GET', `${path}?startIndex=2&count=1&sortBy=id`)).status, 200, `${path} ignores the other list parameters`);
  }
  isError(t, await scim('GET', '/Schemas?filter=x', undefined, { token: null }), 401);
});

t.test("a write's If-Match naming an entity tag, or If-None-Match: *, is 412 and changes nothing; If-Match: * holds", async (t) => {
  // Resources carry no entity tag (ServiceProviderConfig: etag unsupported), as under /api.
  const user = await api.createUser(tenant.tenantId, { values: { roleId: employee.id, firstName: 'Kept' } });
  const path = `/Users/${user.id}`;
  const rename = { schemas: [PATCH], Operations: [{ op: 'replace', path: 'name.givenName', value: 'Changed' }] };
  for (const headers of [{ 'if-match': '"abc"' }, { 'if-match': 'W/"1", "2"' }, { 'if-none-match': '*' }] as Record<string, string>[]) {
    const refused = await scim('PATCH', path, rename, { headers });
    isError(t, refused, 412);
    t.match(refused.body.detail, /precondition does not hold/, JSON.stringify(headers));
    isError(t, await scim('PUT', path, newUser({ userName: user.username }), { headers }), 412);
    isError(t, await scim('DELETE', path, undefined, { headers }), 412);
  }
  const before = await scim('GET', '/Users?filter=userName%20eq%20%22precondition.new%40example.com%22');
  isError(t, await scim('POST', '/Users', newUser({ userName: 'precondition.new@example.com' }), { headers: { 'if-none-match': '*' } }), 412);
  const after = await scim('GET', '/Users?filter=userName%20eq%20%22precondition.new%40example.com%22');
  t.strictSame([before.body.totalResults, after.body.totalResults], [0, 0], 'no user was created');
  const kept = await scim('GET', path);
  t.strictSame([kept.status, kept.body.name.givenName], [200, 'Kept'], 'nothing changed, nothing deleted');
  const anyTag = await scim('PATCH', path, rename, { headers: { 'if-match': '*' } });
  t.strictSame([anyTag.status, anyTag.body.name.givenName], [200, 'Changed'], 'If-Match: * holds: the user exists');
  t.equal((await scim('GET', path, undefined, { headers: { 'if-match': '"abc"' } })).status, 200, 'a read ignores If-Match');
  // A path or method no route serves is still its 404 or 405.
  isError(t, await scim('POST', '/Bulk', { schemas: [] }, { headers: { 'if-match': '"abc"' } }), 404);
  const unserved = await scim('PUT', '/Users', newUser(), { headers: { 'if-match': '"abc"' } });
  isError(t, unserved, 405);
  t.ok(unserved.headers.allow, 'with Allow');
});

t.test('a PATCH path with a malformed value filter is invalidPath; null replaces as a remove; no library text leaks', async (t) => {
  const user = await api.createUser(tenant.tenantId, { values: { roleId: employee.id, phone: '+1 555 0100' } });
  const path = `/Users/${user.id}`;
  for (const bad of ['emails[value eq ]', 'emails[type eq "work"', 'emails[type eq "work"]]', 'emails[type eq "work"].value.extra']) {
    const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: bad, value: 'a@b.c' }] });
    isError(t, res, 400, 'invalidPath');
  }
  const cleared = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'phoneNumbers', value: null }] });
  t.equal(cleared.status, 200, 'replace with null removes');
  t.notOk('phoneNumbers' in cleared.body);
  const required = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'name', value: null }] });
  isError(t, required, 400, 'invalidValue');
  t.notMatch(required.body.detail, /undefined|null to object|Cannot/, 'names no internals');
});

t.test('a password sent over SCIM is set under the password rules and ends the sessions', async (t) => {
  const user = await api.createUser(tenant.tenantId);
  const path = `/Users/${user.id}`;
  isError(t, await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'add', path: 'password', value: 'short' }] }), 400, 'invalidValue');
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 200, 'a refused password ends nothing');
  const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'add', path: 'password', value: 'a new long password' }] });
  t.equal(res.status, 200);
  t.notOk('password' in res.body, 'never answered');
  t.equal((await api.call(t, 'getCurrentUser', { token: user.token })).status, 401, 'the old session ended');
  const login = await api.call(t, 'login', { body: { tenant: tenant.slug, username: user.username, password: 'a new long password' } });
  t.equal(login.status, 200, 'the new password signs in');
});

t.test("a password set over SCIM ends the user's sessions, not the SCIM tokens they minted", async (t) => {
  // As a password change through the API: an identity provider that syncs the minter's password must not cut off
  // its own connection (docs/scim.md). It once marked the user for logout, which every token they minted obeys.
  const minter = await api.createUser(tenant.tenantId, {
    permissions: ['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative', 'login-tokens.administer'],
  });
  const minted = await mint(t, minter.token);
  const loginToken = await api.call(t, 'createUserLoginToken', { token: minter.token, body: { expires_in: 3600 } });
  t.equal(loginToken.status, 201);
  const path = `/Users/${minter.id}`;
  const byAnother = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'password', value: 'rotated by the IdP 1' }] });
  t.equal(byAnother.status, 200);
  t.equal((await api.call(t, 'getCurrentUser', { token: minter.token })).status, 401, "the minter's session ended");
  t.equal((await api.call(t, 'loginWithToken', { body: { token: loginToken.body.token } })).status, 401, 'and their login token');
  t.equal((await scim('GET', '/Users?count=1', undefined, { token: minted })).status, 200, 'the token they minted still works');
  const byItself = await scim(
    'PATCH',
    path,
    { schemas: [PATCH], Operations: [{ op: 'replace', path: 'password', value: 'rotated by the IdP 2' }] },
    { token: minted },
  );
  t.equal(byItself.status, 200, "the token may set its own minter's password");
  t.equal((await scim('GET', '/Users?count=1', undefined, { token: minted })).status, 200, 'and still works after');
  const login = await api.call(t, 'login', { body: { tenant: tenant.slug, username: minter.username, password: 'rotated by the IdP 2' } });
  t.equal(login.status, 200, 'the last password signs in');
});

t.test('the enterprise extension removed whole, by its URN, or replaced with null, clears what it held', async (t) => {
  // scim-patch removes nothing by the bare URN: the remove was answered 200 and the employeeNumber stayed.
  for (const operation of [
    { op: 'remove', path: ENTERPRISE },
    { op: 'Remove', path: ENTERPRISE.toUpperCase() },
    { op: 'replace', path: ENTERPRISE, value: null },
    { op: 'replace', value: { [ENTERPRISE]: null } },
  ]) {
    const created = await scim('POST', '/Users', newUser({ schemas: [USER, ENTERPRISE], [ENTERPRISE]: { employeeNumber: 'E-77' } }));
    t.equal(created.status, 201);
    const res = await scim('PATCH', `/Users/${created.body.id}`, { schemas: [PATCH], Operations: [operation] });
    t.equal(res.status, 200, JSON.stringify(operation));
    t.notOk(ENTERPRISE in res.body, 'the answer holds no extension');
    const [stored] = await api.db.owner.execute<{ staff_number: string | null }>(sql`select staff_number from users where id = ${Number(created.body.id)}`);
    t.equal(stored!.staff_number, null, 'the staff number is cleared');
  }
});

t.test("the core schema's URN wrapping a path-less value's attributes is those attributes", async (t) => {
  const created = await scim('POST', '/Users', newUser());
  const res = await scim('PATCH', `/Users/${created.body.id}`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', value: { [USER]: { active: false, name: { givenName: 'Wrapped' } } } }],
  });
  t.equal(res.status, 200);
  t.equal(res.body.active, false, 'active is written, not dropped as an unknown attribute');
  t.equal(res.body.name.givenName, 'Wrapped');
  t.equal((await scim('GET', `/Users/${created.body.id}`)).body.active, false, 'and stored');
});

t.test('a new externalId alone moves meta.lastModified, and a delta query finds the user', async (t) => {
  const created = await scim('POST', '/Users', newUser({ externalId: 'ext-before' }));
  const before = created.body.meta.lastModified as string;
  await api.db.owner.execute(sql`update users set updated_at = updated_at - interval '1 minute' where id = ${Number(created.body.id)}`);
  const backdated = (await scim('GET', `/Users/${created.body.id}`)).body.meta.lastModified as string;
  t.ok(backdated < before, 'set back a minute');
  const res = await scim('PATCH', `/Users/${created.body.id}`, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'externalId', value: 'ext-after' }] });
  t.equal(res.status, 200);
  t.equal(res.body.externalId, 'ext-after');
  t.ok(res.body.meta.lastModified > backdated, 'lastModified moved');
  const delta = await scim('GET', `/Users?filter=${encodeURIComponent(`meta.lastModified gt "${backdated}" and externalId eq "ext-after"`)}`);
  t.equal(delta.body.totalResults, 1, 'a delta query since the last read finds it');
});

t.test('a datetime filter value must be an RFC 3339 date and time: "5" or "May 5" is invalidFilter', async (t) => {
  for (const value of ['5', 'May 5, 2026', '2026-05-05', '2026-05-05T10:00:00']) {
    isError(t, await scim('GET', `/Users?filter=${encodeURIComponent(`meta.created gt "${value}"`)}`), 400, 'invalidFilter');
  }
  t.equal((await scim('GET', `/Users?filter=${encodeURIComponent('meta.created gt "2000-01-01T00:00:00Z"')}`)).status, 200);
  t.equal((await scim('GET', `/Users?filter=${encodeURIComponent('meta.created gt "2000-01-01T00:00:00.5+02:00"')}`)).status, 200);
});

t.test('a projection leaves out a complex attribute it leaves empty, and values it leaves empty', async (t) => {
  // `attributes=name.middleName` answered `"name": {}`, and `addresses.streetAddress` of an address without one `[{}]`.
  const created = await scim('POST', '/Users', newUser({ addresses: [{ type: 'work', locality: 'Kiel' }] }));
  t.equal(created.status, 201);
  const projected = await scim('GET', `/Users/${created.body.id}?attributes=addresses.streetAddress,name.middleName`);
  t.equal(projected.status, 200);
  t.notOk('name' in projected.body, 'no empty name');
  t.notOk('addresses' in projected.body, 'no empty address');
  const excluded = await scim('GET', `/Users/${created.body.id}?excludedAttributes=addresses.type,addresses.locality,addresses.primary`);
  t.notOk('addresses' in excluded.body, 'an address left with nothing is left out');
  t.equal(excluded.body.name.givenName, 'Sam', 'the rest stays');
  const kept = await scim('GET', `/Users/${created.body.id}?attributes=addresses.locality,name.givenName`);
  t.same(kept.body.addresses, [{ locality: 'Kiel' }]);
  t.same(kept.body.name, { givenName: 'Sam' });
});

t.test('hostile input is a 4xx, never a 5xx, and changes nothing', async (t) => {
  const before = await userCount();
  const bodies = [
    newUser({ userName: 'nul\u0000name' }),
    newUser({ name: { givenName: 'Nul\u0000', familyName: 'Doe' } }),
    newUser({ externalId: 'x\u0000' }),
    newUser({ emails: [{ value: 'a@b.c', primary: 'sometimes' }] }),
    newUser({ emails: [null] }),
    newUser({ addresses: [{ locality: 5 }] }),
    newUser({ [ENTERPRISE]: { employeeNumber: ['E-1'] } }),
  ];
  for (const body of bodies) {
    const res = await scim('POST', '/Users', body);
    t.ok(res.status >= 400 && res.status < 500, `${JSON.stringify(body).slice(0, 80)} → ${res.status}`);
    t.same(res.body.schemas, [ERROR]);
  }
  for (const filter of ['userName eq "\u0000"', 'externalId eq "x\u0000"', 'x'.repeat(3000), 'emails[emails[type eq "a"]]', 'members[value eq "1"]']) {
    const res = await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`);
    t.ok(res.status >= 200 && res.status < 500, `filter ${JSON.stringify(filter).slice(0, 40)} → ${res.status}`);
  }
  for (const query of ['count=-5', 'count=99999', 'startIndex=0', 'startIndex=99999999', 'count=1e3']) {
    const res = await scim('GET', `/Users?${query}`);
    t.ok(res.status === 200 || res.status === 400, `${query} → ${res.status}`);
  }
  // Bodies JSON refuses as such are invalidSyntax whichever media type they are sent as.
  const deep = `${'['.repeat(100)}${']'.repeat(100)}`;
  for (const contentType of ['application/scim+json', 'application/json']) {
    for (const payload of [`{"schemas": ${deep}}`, '{"userName": "\\ud800"}', '{"userName": ']) {
      const res = await scim('POST', '/Users', undefined, { contentType, payload });
      isError(t, res, 400, 'invalidSyntax');
    }
  }
  t.equal(await userCount(), before);
});

t.test("a path-less PATCH counts the values of the extension it names: 1000 in all, as any PATCH's", async (t) => {
  const created = (await scim('POST', '/Users', newUser({ [ENTERPRISE]: { employeeNumber: 'E-1000' } }))).body;
  // scim-patch compares each value an add appends with those already there: two such adds of 40,000 held the process for seconds.
  const managers = (from: number) => Array.from({ length: 501 }, (_, i) => ({ value: String(from + i) }));
  const refused = await scim('PATCH', `/Users/${created.id}`, {
    schemas: [PATCH],
    Operations: [
      { op: 'add', value: { [ENTERPRISE]: { employeeNumber: 'E-1001', manager: managers(1_000_000) } } },
      { op: 'add', value: { [ENTERPRISE]: { manager: managers(2_000_000) } } },
    ],
  });
  isError(t, refused, 400, 'invalidValue');
  t.match(refused.body.detail, /at most 1000 values in all its operations/);
  const after = await scim('GET', `/Users/${created.id}`);
  t.equal(after.body[ENTERPRISE].employeeNumber, 'E-1000', 'and changes nothing');
  t.equal(after.body.meta.lastModified, created.meta.lastModified);
});

t.test('a PATCH path or value key naming __proto__, constructor or prototype is refused and pollutes nothing', async (t) => {
  const created = (await scim('POST', '/Users', newUser())).body;
  const path = `/Users/${created.id}`;
  const audits = await auditCount();
  const attacks = [
    { op: 'add', path: '__proto__.polluted', value: 1 },
    { op: 'add', path: 'constructor.prototype.polluted', value: 1 },
    { op: 'replace', path: 'name.__PROTO__.polluted', value: 1 },
    { op: 'add', path: `${ENTERPRISE}:__proto__.polluted`, value: 1 },
    { op: 'add', path: 'emails[type eq "work"].constructor.prototype.polluted', value: 1 },
    // Inside a value filter too, where an operator follows the name.
    { op: 'replace', path: 'emails[__proto__ eq "x"].value', value: 'p@example.com' },
    { op: 'replace', path: 'emails[type eq "work" and not (Constructor pr)].value', value: 'p@example.com' },
    { op: 'remove', path: 'phoneNumbers[prototype eq "x"]' },
    { op: 'add', path: 'unknownAttribute.x', value: 1 },
    { op: 'add', value: { 'constructor.prototype.polluted': 1 } },
    { op: 'replace', value: { name: { Constructor: { prototype: { polluted: 1 } } } } },
  ];
  for (const operation of attacks) {
    const res = await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'replace', path: 'name.givenName', value: 'Changed' }, operation] });
    isError(t, res, 400, 'invalidPath');
    t.equal(({} as Record<string, unknown>).polluted, undefined, `Object.prototype untouched by ${JSON.stringify(operation)}`);
  }
  // A "__proto__" key in the JSON text is refused by the body parser already.
  const payload = `{"schemas":["${PATCH}"],"Operations":[{"op":"add","value":{"__proto__":{"polluted":1}}}]}`;
  isError(t, await scim('PATCH', path, undefined, { payload }), 400, 'invalidSyntax');
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'Object.prototype untouched by a "__proto__" key');
  t.same((await scim('GET', path)).body, created, 'the user is as it was');
  t.equal(await auditCount(), audits, 'no event recorded');
});

t.test('attributes and excludedAttributes shape the answers of POST, PUT and PATCH; meta.resourceType always stays', async (t) => {
  // Bad input first: a refused write is an error document whatever it asked to be answered.
  isError(t, await scim('POST', '/Users?attributes=userName', { schemas: [USER] }), 400, 'invalidValue');

  const posted = await scim('POST', '/Users?attributes=userName', newUser());
  t.equal(posted.status, 201);
  t.strictSame(posted.body, { schemas: posted.body.schemas, id: posted.body.id, userName: posted.body.userName, meta: { resourceType: 'User' } });
  t.match(String(posted.headers.location), new RegExp(`/scim/v2/Users/${posted.body.id}$`), 'Location names the user all the same');
  const path = `/Users/${posted.body.id}`;

  const replacement = newUser({ userName: posted.body.userName });
  const put = await scim('PUT', `${path}?excludedAttributes=name,emails`, replacement);
  t.equal(put.status, 200);
  t.notOk('name' in put.body || 'emails' in put.body, 'the excluded attributes are left out');
  t.equal(put.body.userName, posted.body.userName);

  const patch = await scim('PATCH', `${path}?attributes=name.givenName`, {
    schemas: [PATCH],
    Operations: [{ op: 'replace', path: 'name.givenName', value: 'Narrow' }],
  });
  t.equal(patch.status, 200);
  t.strictSame(patch.body, { schemas: patch.body.schemas, id: posted.body.id, name: { givenName: 'Narrow' }, meta: { resourceType: 'User' } });
  t.match((await scim('GET', path)).body, { name: { givenName: 'Narrow', familyName: replacement.name.familyName } }, 'the write itself is whole');

  const created = await scim('GET', `${path}?attributes=meta.created`);
  t.strictSame(Object.keys(created.body.meta).sort(), ['created', 'resourceType'], 'meta.resourceType comes with meta.created');
  t.equal(created.body.meta.resourceType, 'User');
  const withoutMeta = await scim('GET', `${path}?excludedAttributes=meta`);
  t.strictSame(withoutMeta.body.meta, { resourceType: 'User' }, 'and when meta is excluded');

  // Sub-attributes may be excluded too (RFC 7644 §3.4.2.5), an extension's by its URN.
  await scim('PATCH', path, { schemas: [PATCH], Operations: [{ op: 'add', path: `${ENTERPRISE}:employeeNumber`, value: 'E-9' }] });
  const narrowed = await scim(
    'GET',
    `${path}?excludedAttributes=${encodeURIComponent(`Name.GivenName,emails.type,meta.created,${ENTERPRISE}:employeeNumber`)}`,
  );
  t.equal(narrowed.status, 200);
  t.strictSame(narrowed.body.name, { familyName: replacement.name.familyName, formatted: narrowed.body.name.formatted });
  t.ok(narrowed.body.emails.length > 0 && narrowed.body.emails.every((email: object) => !('type' in email) && 'value' in email), 'emails without type');
  t.notOk('created' in narrowed.body.meta);
  t.ok('lastModified' in narrowed.body.meta);
  t.notOk(ENTERPRISE in narrowed.body, 'an extension left with no attribute is left out');
  t.strictSame(narrowed.body.schemas, [USER], 'and schemas does not name it');
  t.equal(narrowed.body.userName, posted.body.userName);
  t.strictSame((await scim('GET', `${path}?attributes=userName`)).body.schemas, [USER], 'nor when attributes leave it out');
  t.strictSame((await scim('GET', path)).body.schemas, [USER, ENTERPRISE], 'a whole answer names it');
});

t.test("beyond the rate limit SCIM answers 429 with the API's Retry-After and RateLimit headers", async (t) => {
  const limitedTenant = await limited.createTenant('scim-limited');
  const token = newScimTokenValue();
  await limited.db.owner
    .insert(scimTokens)
    .values({ tenantId: limitedTenant.tenantId, userId: limitedTenant.adminUserId, name: 'IdP', tokenHash: hashToken(token) });
  const get = async () => {
    const response = await limitedWire.send({ method: 'GET', url: '/scim/v2/Users?count=1', headers: bearer(token) });
    assertServedAnswer('GET', '/scim/v2/Users?count=1', response);
    return { status: response.statusCode, body: response.json(), headers: response.headers };
  };
  t.equal((await get()).status, 200);
  t.equal((await get()).status, 200);
  const refused = await get();
  isError(t, refused, 429);
  const retryAfter = Number(refused.headers['retry-after']);
  t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 60, `Retry-After is the window's seconds left (${refused.headers['retry-after']})`);
  t.equal(refused.headers['ratelimit-limit'], '2');
  t.equal(refused.headers['ratelimit-remaining'], '0');
  t.equal(refused.headers['ratelimit-reset'], refused.headers['retry-after'], 'RateLimit-Reset says the same');
});

t.test('with the database unreachable for a moment SCIM answers 503 with Retry-After, stores nothing, and serves again after', async (t) => {
  const [database] = await api.db.owner.execute<{ name: string }>(sql`select current_database() as name`);
  // An owner connection to another database, so that it survives what it does to this one.
  const controlUrl = new URL(api.config.databaseUrl!);
  controlUrl.pathname = '/postgres';
  const control = postgres(controlUrl.toString(), { max: 1, onnotice: () => {} });
  const reopen = () => control.unsafe(`alter database "${database!.name}" with allow_connections true`);
  t.teardown(async () => {
    await reopen();
    await control.end({ timeout: 1 });
  });
  const before = await userCount();
  await control.unsafe(`alter database "${database!.name}" with allow_connections false`);
  await control`select pg_terminate_backend(pid) from pg_stat_activity
    where datname = ${database!.name} and pid <> pg_backend_pid() and backend_type = 'client backend'`;

  for (const res of [await scim('GET', '/Users'), await scim('POST', '/Users', newUser()), await scim('GET', '/Groups')]) {
    isError(t, res, 503);
    t.equal(res.headers['retry-after'], '1', 'says when to try again');
    t.notOk('scimType' in res.body);
  }

  await reopen();
  t.equal(await userCount(), before, 'the refused POST stored nothing');
  t.equal((await scim('GET', '/Users?count=1')).status, 200, 'served again once the database is reachable');
});
