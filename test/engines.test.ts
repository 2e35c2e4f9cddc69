/**
 * The promise of docs/testing.md#nodejs-versions: `npm ci`, with or without dev
 * dependencies, prints no `EBADENGINE` warning on any Node that `engines` in package.json
 * admits. npm warns when the running Node does not satisfy a package's `engines.node`, so
 * every package in package-lock.json must admit the whole supported range, not only the
 * Node this test runs on.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import t from 'tap';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const readJson = (file: string): unknown => JSON.parse(readFileSync(path.join(root, file), 'utf8'));
const supported = (readJson('package.json') as { engines: { node: string } }).engines.node;
const lock = readJson('package-lock.json') as { packages: Record<string, { version?: string; engines?: { node?: string } }> };

/** Whether a package's `engines.node` admits every Node of `supported` (an invalid range admits none). */
function admitsAll(wanted: string, supported: string): boolean {
  return semver.validRange(wanted) !== null && semver.subset(supported, wanted);
}

t.test('the check tells a range that admits every supported Node from one that does not', async (t) => {
  const range = '^20.19.0 || ^22.13.0 || >=24.0.0';
  t.ok(admitsAll('>=20', range));
  t.ok(admitsAll('^20.19.0 || ^22.13.0 || >=24', range));
  t.notOk(admitsAll('>=22', range), 'leaves out Node 20');
  t.notOk(admitsAll('^20.19.0 || ^22.13.0 || >=23.5.0', '^20.19.0 || ^22.12.0 || >=24.0.0'), 'leaves out Node 22.12');
  t.notOk(admitsAll('>=20 <25', range), 'leaves out Node 25 and later');
  t.notOk(admitsAll('node 20', range), 'not a range');
});

t.test('every locked package admits every Node that engines in package.json admits', async (t) => {
  t.equal(lock.packages['']?.engines?.node, supported, 'the lock file was written from this package.json');
  const refusing = Object.entries(lock.packages).flatMap(([where, entry]) => {
    const wanted = entry.engines?.node;
    if (where === '' || wanted === undefined || admitsAll(wanted, supported)) return [];
    return [`${where.replace(/^.*node_modules\//, '')}@${entry.version}: node ${wanted}`];
  });
  t.strictSame(refusing, [], `no package leaves out part of ${supported}`);
});
