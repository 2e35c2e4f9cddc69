/**
 * Benchmark: SCIM provisioning (docs/scim.md), in two parts.
 *
 * 1. An initial sync of USERS users (default 10,000) into GROUP_COUNT groups (default 50) the way
 *    an identity provider does it, timed from the first request to the last answer: for
 *    each user `GET /scim/v2/Users?filter=userName eq "…"` (not found) and
 *    `POST /scim/v2/Users` (userName, name, displayName, emails, active, externalId; no
 *    password, as Entra ID sends none); then for each group `POST /scim/v2/Groups` and
 *    `PATCH` adding its members PATCH_SIZE (default 100, as Entra ID) at a time
 *    (`op: Add, path: members`). Baseline: the same users and memberships through the plain
 *    API the simplest way, the writes only: `POST /api/departments` for each department,
 *    then for each user `POST /api/users` with `department_ids` (the API's way of setting
 *    memberships). It looks nothing up: the target compares the SCIM sync, look-ups
 *    included, with the same writes through the API (a look-up through the API's text
 *    filter would cost the API side more than a SCIM look-up by the indexed userName). SYNC_CONCURRENCY (default 4) requests at a
 *    time on each side: identity providers send a few in parallel. Each side syncs into a
 *    fresh tenant of its own in each round (created as `tenant:create` does), so both start
 *    from the same state; the sides alternate, odd rounds SCIM first. Before anything is
 *    timed, both sides sync a small directory and their end states (users, their fields
 *    and role, departments and memberships) must be equal; after each timed round they are
 *    compared again. The API requires a password on create, so each baseline user sends
 *    one; the benchmark's Atrium hashes with the test suite's cost (a hundredth of the
 *    standard Argon2id), so the comparison is of the two paths, not of Argon2. Prints each
 *    round's users per second and ratio (SCIM / API), the median, and the TARGET line
 *    (the sync at ≥ 0.8 of the API's rate).
 * 2. `GET /scim/v2/Users?filter=userName eq "…"` for one of USERS users, beside a bare
 *    Fastify route that answers the same body (compared before timing) from ONE statement
 *    as the owner role (no row-level security): the SCIM token's checks (those of
 *    atrium_authenticate_scim) joined with the user read (by the indexed `username_lower`,
 *    as Atrium reads it) and its externalId, on a pool as
 *    large as Atrium's request pool. Both are asked with the same Host header, since
 *    `meta.location` names it. Alternating rounds at 1 and 10 connections; TARGET lines:
 *    ratio ≥ 0.5 at each, p99 ≤ 3 × p50 at each, no answer other than 2xx.
 *
 *   npx tsx scripts/bench/scim-provisioning.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 *   npm run bench:scim [-- seconds rounds]
 *   USERS=1000 for a quick check (the figures are for 10,000); PART=sync or PART=read runs one part.
 *   BENCH_COMPILED=1: Atrium from the compiled output (dist/, `npm run build` first), as `npm start` runs it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { sql } from 'drizzle-orm';
import Fastify from 'fastify';
import { Pool } from 'undici';
import { hashToken } from '../../src/platform/auth/tokens.ts';
import { createTenant } from '../../src/resources/tenants/create-tenant.ts';
import { baselineSql, benchAtrium, comparePair, median, printTargets, slices, tailTarget, target, throwawayDatabase } from './support.ts';

const { seconds, rounds } = slices();
const userCount = Number(process.env.USERS ?? 10_000);
const groupCount = Number(process.env.GROUP_COUNT ?? 50);
const patchSize = Number(process.env.PATCH_SIZE ?? 100);
const concurrency = Number(process.env.SYNC_CONCURRENCY ?? 4);
const part = process.env.PART ?? 'all';
const PASSWORD = 'benchmark-password';
const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';
const PATCH_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const LIST_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';

const database = await throwawayDatabase();
// The API requires a password on create: hashed at the test suite's cost, so that Argon2 is not what is compared.
const atrium = await benchAtrium(database.url, { passwordHashCost: 'test' });
const { db } = atrium.services;
const address = await atrium.app!.listen({ host: '127.0.0.1', port: 0 });

/** The directory an identity provider holds: user `i` belongs to group `groupOf(i)`. */
const person = (i: number) => {
  const n = String(i).padStart(6, '0');
  return { userName: `person${n}@example.com`, givenName: `Given${n}`, familyName: `Family${n}`, email: `person${n}@example.com`, externalId: `ext-${n}` };
};
const groupOf = (i: number, users: number, groups: number) => Math.floor((i * groups) / users);
const groupName = (g: number) => `Department ${String(g).padStart(3, '0')}`;

/** Runs `work` for 0…count-1, `parallel` at a time. */
async function inParallel(count: number, parallel: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(parallel, count) }, async () => {
      while (next < count) await work(next++);
    }),
  );
}

/** An HTTP client of Atrium with `concurrency` keep-alive connections, as an identity provider holds. */
function client(headers: Record<string, string>) {
  const pool = new Pool(address, { connections: concurrency });
  /** Time from sending to the last byte of the answer, by operation (its path without ids and query). */
  const timings = new Map<string, { n: number; ms: number }>();
  return {
    timings,
    /** Each operation's mean time per request, and how many were sent. */
    summary: () => [...timings].map(([operation, t]) => `${operation} ${(t.ms / t.n).toFixed(1)} ms × ${t.n}`).join(', '),
    async send<T = undefined>(method: 'GET' | 'POST' | 'PATCH' | 'PUT', path: string, expected: number, body?: unknown): Promise<T> {
      const sent = performance.now();
      const res = await pool.request({
        method,
        path,
        headers: body === undefined ? headers : { ...headers, 'content-type': headers['x-body-type'] ?? 'application/json' },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.body.text();
      const operation = `${method} ${path.split('?')[0]!.replace(/\/\d+/g, '/{id}')}`;
      const timing = timings.get(operation) ?? { n: 0, ms: 0 };
      timing.n++;
      timing.ms += performance.now() - sent;
      timings.set(operation, timing);
      if (res.statusCode !== expected) throw new Error(`${method} ${path} answered ${res.statusCode} (expected ${expected}): ${text.slice(0, 400)}`);
      return (text === '' ? undefined : JSON.parse(text)) as T;
    },
    close: () => pool.close(),
  };
}

/** A fresh tenant with its administrator's access token and the Employee role's id. */
let tenants = 0;
async function freshTenant(label: string) {
  const slug = `${label}-${++tenants}`;
  const { tenantId } = await createTenant(db, { slug, name: slug, adminUsername: 'admin', adminPassword: PASSWORD });
  const anonymous = client({});
  const login = await anonymous.send<{ access_token: string }>('POST', '/api/auth/login', 200, { tenant: slug, username: 'admin', password: PASSWORD });
  await anonymous.close();
  const api = client({ authorization: `Bearer ${login.access_token}` });
  const roles = await api.send<{ id: number; name: string }[]>('GET', '/api/roles', 200);
  return { tenantId, api, employeeId: roles.find((role) => role.name === 'Employee')!.id };
}

/** Set-up not timed: the tenant, its default role for provisioned users, a SCIM token. */
async function scimSide() {
  const tenant = await freshTenant('scim');
  await tenant.api.send('PUT', '/api/administration/users/settings', 200, { required_profile_keys: [], default_role_id: tenant.employeeId });
  const minted = await tenant.api.send<{ token: string }>('POST', '/api/administration/scim-tokens', 201, { name: 'Benchmark IdP' });
  await tenant.api.close();
  const { token } = minted;
  return { tenantId: tenant.tenantId, token, scim: client({ authorization: `Bearer ${token}`, 'x-body-type': 'application/scim+json' }) };
}

async function apiSide() {
  const tenant = await freshTenant('api');
  return { tenantId: tenant.tenantId, api: tenant.api, employeeId: tenant.employeeId };
}

/** What one side's sync took: in all, and the part spent on the users (look-ups and creates). */
interface Synced {
  ms: number;
  usersMs: number;
  tenantId: number;
  /** Each operation's mean time per request. */
  requests: string;
}

/** The identity provider's sync of `users` users into `groups` groups. */
async function scimSync(users: number, groups: number): Promise<Synced> {
  const { tenantId, scim } = await scimSide();
  const ids = new Array<string>(users);
  const started = performance.now();
  await inParallel(users, concurrency, async (i) => {
    const p = person(i);
    const found = await scim.send<{ totalResults: number }>('GET', `/scim/v2/Users?filter=${encodeURIComponent(`userName eq "${p.userName}"`)}`, 200);
    if (found.totalResults !== 0) throw new Error(`${p.userName} exists already`);
    const created = await scim.send<{ id: string }>('POST', '/scim/v2/Users', 201, {
      schemas: [USER_SCHEMA],
      userName: p.userName,
      externalId: p.externalId,
      active: true,
      displayName: `${p.givenName} ${p.familyName}`,
      name: { givenName: p.givenName, familyName: p.familyName },
      emails: [{ value: p.email, type: 'work', primary: true }],
    });
    ids[i] = created.id;
  });
  const usersMs = performance.now() - started;
  await inParallel(groups, concurrency, async (g) => {
    const group = await scim.send<{ id: string }>('POST', '/scim/v2/Groups', 201, {
      schemas: [GROUP_SCHEMA],
      displayName: groupName(g),
      externalId: `group-${g}`,
      members: [],
    });
    const members = ids.filter((_, i) => groupOf(i, users, groups) === g);
    for (let from = 0; from < members.length; from += patchSize) {
      await scim.send('PATCH', `/scim/v2/Groups/${group.id}`, 200, {
        schemas: [PATCH_SCHEMA],
        Operations: [{ op: 'Add', path: 'members', value: members.slice(from, from + patchSize).map((value) => ({ value })) }],
      });
    }
  });
  const ms = performance.now() - started;
  await scim.close();
  return { ms, usersMs, tenantId, requests: scim.summary() };
}

/** The same directory through the plain API. */
async function apiSync(users: number, groups: number): Promise<Synced> {
  const { tenantId, api, employeeId } = await apiSide();
  const departmentIds = new Array<number>(groups);
  const started = performance.now();
  await inParallel(groups, concurrency, async (g) => {
    departmentIds[g] = (await api.send<{ id: number }>('POST', '/api/departments', 201, { name: groupName(g) })).id;
  });
  const usersStarted = performance.now();
  await inParallel(users, concurrency, async (i) => {
    const p = person(i);
    await api.send('POST', '/api/users', 201, {
      username: p.userName,
      password: PASSWORD,
      first_name: p.givenName,
      last_name: p.familyName,
      email: p.email,
      role_id: employeeId,
      department_ids: [departmentIds[groupOf(i, users, groups)]],
    });
  });
  const ms = performance.now() - started;
  await api.close();
  return { ms, usersMs: ms - (usersStarted - started), tenantId, requests: api.summary() };
}

/** What a sync leaves: every user but the administrator with its fields and role, every department with its members. */
async function endState(tenantId: number): Promise<string> {
  const [state] = await db.owner.execute<{ users: string; memberships: string; n: number }>(sql`
    select
      (select string_agg(concat_ws('|', u.username, u.first_name, u.last_name, u.email, u.active, r.name, u.group_account, u.deleted_at), E'\n' order by u.username)
         from users u join roles r on r.tenant_id = u.tenant_id and r.id = u.role_id
         where u.tenant_id = ${tenantId} and u.username <> 'admin') as users,
      (select string_agg(concat_ws('|', d.name, u.username), E'\n' order by d.name, u.username)
         from departments d left join department_users du on du.tenant_id = d.tenant_id and du.department_id = d.id
         left join users u on u.tenant_id = du.tenant_id and u.id = du.user_id
         where d.tenant_id = ${tenantId}) as memberships,
      (select count(*)::int from users where tenant_id = ${tenantId} and username <> 'admin') as n`);
  return `${state!.n} users\n${state!.users}\n${state!.memberships}`;
}

async function assertSameEndState(scimTenant: number, apiTenant: number, users: number): Promise<void> {
  const [a, b] = [await endState(scimTenant), await endState(apiTenant)];
  if (a !== b || !a.startsWith(`${users} users\n`)) {
    console.error(`end states differ:\n  SCIM: ${a.slice(0, 600)}\n  API:  ${b.slice(0, 600)}`);
    throw new Error('the SCIM sync and the API left different users or memberships');
  }
}

/** Statistics and a checkpoint before each timed sync, so neither side meets autovacuum's or a checkpoint's work the other did not. */
async function settle(): Promise<void> {
  await db.owner.execute(sql`analyze`);
  await db.owner.execute(sql`checkpoint`);
}

const sqlOwner = baselineSql(database.url);
try {
  if (part === 'all' || part === 'sync') {
    // The check, which also warms both paths up: a small directory, equal end states.
    const checkUsers = 200;
    const checkGroups = 4;
    const check = { scim: await scimSync(checkUsers, checkGroups), api: await apiSync(checkUsers, checkGroups) };
    await assertSameEndState(check.scim.tenantId, check.api.tenantId, checkUsers);
    console.log(
      `same end state on both sides (${checkUsers} users in ${checkGroups} groups)${process.env.BENCH_COMPILED ? '; Atrium compiled' : ''}; ` +
        `sync of ${userCount} users into ${groupCount} groups, ${concurrency} requests at a time, PATCH of ${patchSize} members, ` +
        `${rounds} alternating rounds (odd rounds SCIM first), each side in a fresh tenant`,
    );
    const ratios: number[] = [];
    const rates: { scim: number; api: number }[] = [];
    for (let round = 1; round <= rounds; round++) {
      let s: Synced;
      let a: Synced;
      if (round % 2 === 1) {
        await settle();
        s = await scimSync(userCount, groupCount);
        await settle();
        a = await apiSync(userCount, groupCount);
      } else {
        await settle();
        a = await apiSync(userCount, groupCount);
        await settle();
        s = await scimSync(userCount, groupCount);
      }
      await assertSameEndState(s.tenantId, a.tenantId, userCount);
      const rate = { scim: userCount / (s.ms / 1000), api: userCount / (a.ms / 1000) };
      rates.push(rate);
      ratios.push(rate.scim / rate.api);
      console.log(
        `round ${round}: SCIM ${(s.ms / 1000).toFixed(1)} s (${rate.scim.toFixed(0)} users/s), API ${(a.ms / 1000).toFixed(1)} s ` +
          `(${rate.api.toFixed(0)} users/s); ratio (SCIM / API users per second) ${(rate.scim / rate.api).toFixed(2)}; same end state`,
      );
      console.log(`  SCIM: users ${(s.usersMs / 1000).toFixed(1)} s, groups ${((s.ms - s.usersMs) / 1000).toFixed(1)} s; ${s.requests}`);
      console.log(`  API:  users ${(a.usersMs / 1000).toFixed(1)} s, departments ${((a.ms - a.usersMs) / 1000).toFixed(1)} s; ${a.requests}`);
    }
    console.log(
      `\nsync of ${userCount} users into ${groupCount} groups: SCIM ${median(rates.map((r) => r.scim)).toFixed(0)} users/s, ` +
        `API ${median(rates.map((r) => r.api)).toFixed(0)} users/s (medians); ratio ${median(ratios).toFixed(2)} (median of the rounds); ` +
        `per round: ${ratios.map((r) => r.toFixed(2)).join(' ')}`,
    );
    target(`SCIM sync of ${userCount} users into ${groupCount} groups @${concurrency}`, 'ratio SCIM/API users per second', median(ratios), '>=', 0.8);
  }

  if (part === 'all' || part === 'read') await readBench();
  printTargets();
} finally {
  await sqlOwner.end();
  await atrium.stop();
  await database.drop();
}

/** Part 2: the identity provider's look-up by userName beside a bare route giving the same body. */
async function readBench(): Promise<void> {
  const { tenantId, token, scim } = await scimSide();
  await scim.close();
  // The directory, written directly: USERS users, each with an externalId.
  const [employee] = await db.owner.execute<{ id: number }>(sql`select id::int from roles where tenant_id = ${tenantId} and name = 'Employee'`);
  await db.owner.execute(sql`
    insert into users (tenant_id, username, role_id, first_name, last_name, email)
    select ${tenantId}, 'person' || lpad(g::text, 6, '0') || '@example.com', ${employee!.id}, 'Given' || lpad(g::text, 6, '0'),
           'Family' || lpad(g::text, 6, '0'), 'person' || lpad(g::text, 6, '0') || '@example.com'
    from generate_series(0, ${userCount - 1}) g`);
  await db.owner.execute(sql`
    insert into scim_external_ids (tenant_id, user_id, external_id)
    select tenant_id, id, 'ext-' || substr(username, 7, 6) from users where tenant_id = ${tenantId} and username like 'person%'`);
  await settle();

  const bare = Fastify();
  // The simplest route giving the same answer: the filter read with a pattern, one statement,
  // on the index that serves userName look-ups (`username_lower`).
  bare.get('/scim/v2/Users', async (request, reply) => {
    const presented = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1] ?? '';
    const filter = /^userName eq "([^"]*)"$/i.exec(String((request.query as { filter?: string }).filter ?? ''));
    if (!filter) return reply.code(400).send({ status: '400' });
    const rows = await sqlOwner<BareRow[]>`
      with caller as (
        select t.tenant_id from scim_tokens t
        join users a on a.tenant_id = t.tenant_id and a.id = t.user_id
        join roles r on r.tenant_id = a.tenant_id and r.id = a.role_id
        where t.token_hash = ${hashToken(presented)} and (t.expires_at is null or t.expires_at > now())
          and a.active and a.deleted_at is null and (a.logout_marked_at is null or t.created_at > a.logout_marked_at)
          and r.active and r.permissions @> array['users.administer', 'users.view', 'users.view-personal', 'users.view-administrative'])
      select u.id, u.username, u.first_name, u.last_name, u.email, u.phone, u.street, u.zipcode, u.city, u.lang_id, u.staff_number,
             u.active, u.created_at, u.updated_at, e.external_id
      from caller
      left join users u on u.tenant_id = caller.tenant_id and u.username_lower = lower(${filter[1]!}) and u.deleted_at is null and not u.group_account
      left join scim_external_ids e on e.tenant_id = u.tenant_id and e.user_id = u.id
      order by u.id limit 200`;
    if (rows.length === 0) return reply.code(401).send({ status: '401' });
    const base = `${request.protocol}://${request.host}/scim/v2`;
    const found = rows.filter((row) => row.id !== null);
    void reply.type('application/scim+json; charset=utf-8');
    return {
      schemas: [LIST_SCHEMA],
      totalResults: found.length,
      startIndex: 1,
      itemsPerPage: found.length,
      Resources: found.map((row) => presentBare(row, base)),
    };
  });
  const bareAddress = await bare.listen({ host: '127.0.0.1', port: 0 });

  const wanted = person(Math.floor(userCount / 2)).userName;
  const path = `/scim/v2/Users?filter=${encodeURIComponent(`userName eq "${wanted}"`)}`;
  // Both asked under one name: `meta.location` is built from the Host header.
  const headers = { authorization: `Bearer ${token}`, host: 'scim.example.com' };
  const [subjectBody, bareBody] = [await getText(`${address}${path}`, headers), await getText(`${bareAddress}${path}`, headers)];
  try {
    assert.deepStrictEqual(JSON.parse(bareBody), JSON.parse(subjectBody));
  } catch (error) {
    console.error(`bodies differ:\n  Atrium:   ${subjectBody.slice(0, 800)}\n  baseline: ${bareBody.slice(0, 800)}`);
    throw error;
  }
  const { totalResults } = JSON.parse(subjectBody) as { totalResults: number };
  if (totalResults !== 1) throw new Error(`the look-up found ${totalResults} users`);
  console.log(`\nsame body on both sides (${subjectBody.length} bytes; ${userCount} users in the tenant)`);
  const compared = await comparePair(
    'GET /scim/v2/Users?filter=userName eq',
    { url: `${address}${path}`, headers },
    { url: `${bareAddress}${path}`, headers },
    { seconds, rounds, connections: [1, 10] },
  );
  for (const c of compared) {
    target(`${c.name} @${c.connections}`, 'ratio', c.ratio, '>=', 0.5);
    tailTarget(`${c.name} @${c.connections}`, c.subject);
  }
  target(
    compared[0]!.name,
    'non2xx',
    compared.reduce((sum, c) => sum + c.non2xx, 0),
    '=',
    0,
    0,
  );
  await bare.close();
}

interface BareRow {
  id: string | null;
  username: string;
  first_name: string | null;
  last_name: string | null;
  email: string | null;
  phone: string | null;
  street: string | null;
  zipcode: string | null;
  city: string | null;
  lang_id: string | null;
  staff_number: string | null;
  active: boolean;
  created_at: Date;
  updated_at: Date;
  external_id: string | null;
}

/** The user as a SCIM User (RFC 7643 §4.1), written out. */
function presentBare(row: BareRow, base: string) {
  const names = [row.first_name, row.last_name].filter((part) => part).join(' ');
  const address = row.street !== null || row.zipcode !== null || row.city !== null;
  const enterprise = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
  return {
    schemas: row.staff_number !== null ? [USER_SCHEMA, enterprise] : [USER_SCHEMA],
    id: row.id,
    ...(row.external_id !== null ? { externalId: row.external_id } : {}),
    userName: row.username,
    name: {
      ...(row.first_name !== null ? { givenName: row.first_name } : {}),
      ...(row.last_name !== null ? { familyName: row.last_name } : {}),
      formatted: names,
    },
    displayName: names || row.username,
    active: row.active,
    ...(row.email !== null ? { emails: [{ value: row.email, type: 'work', primary: true }] } : {}),
    ...(row.phone !== null ? { phoneNumbers: [{ value: row.phone, type: 'work', primary: true }] } : {}),
    ...(address
      ? {
          addresses: [
            {
              type: 'work',
              primary: true,
              ...(row.street !== null ? { streetAddress: row.street } : {}),
              ...(row.zipcode !== null ? { postalCode: row.zipcode } : {}),
              ...(row.city !== null ? { locality: row.city } : {}),
            },
          ],
        }
      : {}),
    ...(row.lang_id !== null ? { preferredLanguage: row.lang_id, locale: row.lang_id } : {}),
    ...(row.staff_number !== null ? { [enterprise]: { employeeNumber: row.staff_number } } : {}),
    meta: {
      resourceType: 'User',
      created: row.created_at.toISOString(),
      lastModified: row.updated_at.toISOString(),
      location: `${base}/Users/${row.id}`,
    },
  };
}

/** A GET's body with the given headers, Host included (fetch would replace it). */
function getText(url: string, headers: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`${url} answered ${res.statusCode}: ${text.slice(0, 300)}`))));
      })
      .on('error', reject);
  });
}
