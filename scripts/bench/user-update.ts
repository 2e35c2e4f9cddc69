/**
 * Benchmark: what the audit trail costs a write. PUT /api/users/{id} (a change of
 * `last_name` to a value of its own in each request, so every request changes the user and
 * records its audit event) on this build, beside the SAME request on the build before the
 * audit trail: a second checkout of the repository (`BEFORE_TREE`, e.g.
 * `git worktree add /tmp/atrium-before <commit before the trail>` with its node_modules),
 * each Atrium on a throwaway database of its own, in one process. The two run in
 * alternating rounds (the order alternating too) at 10 connections; prints each side's
 * median throughput, p50 and p99, the median of the rounds' ratios and the TARGET line
 * (with the event: at least 0.9 of the throughput without it).
 *   BEFORE_TREE=/tmp/atrium-before npx tsx scripts/bench/user-update.ts [seconds per slice, default 3] [rounds, default 3 or ROUNDS]
 * For figures: a quiet machine, BENCH_COMPILED=1 (after `npm run build` in both trees),
 * three runs of the script, the median of each figure (docs/performance.md).
 */
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { benchAtrium, comparePair, printTargets, slices, target, throwawayDatabase, type BenchRequests } from './support.ts';

type Support = { benchAtrium: typeof benchAtrium; throwawayDatabase: typeof throwawayDatabase };

const beforeTree = process.env.BEFORE_TREE;
if (!beforeTree) {
  console.error('BEFORE_TREE must name a checkout of the build before the audit trail (see the head of this file).');
  process.exit(2);
}
// The target's baseline is the build before the trail: the line says which build this one was.
console.log(`before: ${beforeTree} at ${execFileSync('git', ['-C', beforeTree, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()}`);
const before = (await import(new URL(`file://${beforeTree.replace(/\/$/, '')}/scripts/bench/support.ts`).href)) as Support;

const { seconds, rounds } = slices();

/** An Atrium of one build on a database of its own, a user to update and the administrator's token. */
async function side(support: Support) {
  const database = await support.throwawayDatabase();
  const atrium = await support.benchAtrium(database.url);
  const app = atrium.app!;
  const login = await app.inject({ method: 'POST', url: '/api/auth/login', payload: { tenant: 'demo', username: 'admin', password: 'benchmark-password' } });
  const headers = { authorization: `Bearer ${login.json<{ access_token: string }>().access_token}`, 'content-type': 'application/json' };
  const roles = await app.inject({ method: 'GET', url: '/api/roles', headers });
  const employee = roles.json<{ id: number; name: string }[]>().find((role) => role.name === 'Employee')!;
  const created = await app.inject({
    method: 'POST',
    url: '/api/users',
    headers,
    payload: { username: 'bench-target', password: 'benchmark-password', first_name: 'Bench', last_name: 'A', role_id: employee.id },
  });
  if (created.statusCode !== 201) throw new Error(`creating the user answered ${created.statusCode}: ${created.body}`);
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  return { database, atrium, headers, url: `${address}/api/users/${created.json<{ id: number }>().id}` };
}

const withTrail = await side({ benchAtrium, throwawayDatabase });
const without = await side(before);
// Both builds answer the write alike before anything is timed (the fields both present).
for (const last of ['C', 'A']) {
  const answers = [];
  for (const s of [withTrail, without]) {
    const response = await fetch(s.url, { method: 'PUT', headers: s.headers, body: JSON.stringify({ last_name: last }) });
    const body = (await response.json()) as Record<string, unknown>;
    answers.push({
      status: response.status,
      username: body.username,
      first_name: body.first_name,
      last_name: body.last_name,
      role_id: body.role_id,
      active: body.active,
    });
  }
  assert.deepStrictEqual(answers[0], answers[1], 'both builds answer the PUT alike');
  assert.equal(answers[0]!.status, 200);
}
// A last name of its own in every request: with two alternating values, the connections often sent the name the
// user already had, a PUT that changes nothing and records no event, which left part of the trail's cost untimed.
const requests: BenchRequests = [{ method: 'PUT', body: JSON.stringify({ last_name: 'L{n}' }) }];
const compared = await comparePair(
  'PUT /api/users/{id}',
  { url: withTrail.url, headers: withTrail.headers, requests },
  { url: without.url, headers: without.headers, requests },
  { seconds, rounds, connections: [10], label: 'ratio (with / without the audit trail)', baselineName: 'before  ' },
);
for (const c of compared) target(`${c.name} @${c.connections}`, 'ratio with/without audit', c.ratio, '>=', 0.9);
target(
  compared[0]!.name,
  'non2xx',
  compared.reduce((sum, c) => sum + c.non2xx, 0),
  '=',
  0,
  0,
);
printTargets();

for (const s of [withTrail, without]) {
  await s.atrium.stop();
  await s.database.drop();
}
