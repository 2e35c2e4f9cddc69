/**
 * The compatibility check (scripts/check-compatibility.ts, docs/api-versions.md) on copies
 * of the released contract changed the ways a release may and may not change it: breaking
 * changes fail unless the major version moved and CHANGELOG.md has the new version's
 * section; compatible changes pass. Redocly's `diff` rates the changes, as in CI; what the
 * versions must say given the changes is tried on its own (`versionProblems`).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import {
  changeLine,
  checkCompatibility,
  hasChangelogSection,
  latestRelease,
  REPOSITORY_FILES,
  versionProblems,
  type Change,
  type Files,
} from '../../scripts/check-compatibility.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const released = latestRelease(REPOSITORY_FILES.released);
const releasedSpec = readFileSync(path.join(REPOSITORY_FILES.released, `${released}.json`), 'utf8');
const releasedMajor = Number(released.split('.')[0]);

type Spec = {
  info: { version: string };
  paths: Record<string, Record<string, { parameters?: unknown[] }>>;
  components: { schemas: Record<string, { required?: string[]; properties: Record<string, unknown>; enum?: string[] }> };
};

const folder = mkdtempSync(path.join(tmpdir(), 'atrium-compat-'));
t.teardown(() => rmSync(folder, { recursive: true, force: true }));
mkdirSync(path.join(folder, 'released'));
writeFileSync(path.join(folder, 'released', `${released}.json`), releasedSpec);

/** A case: the released contract changed by `change`, and a changelog with the sections of `sections`. */
function files(name: string, change: (spec: Spec) => void, sections: string[] = [released]): Files {
  const spec = JSON.parse(releasedSpec) as Spec;
  change(spec);
  const current = path.join(folder, `${name}.json`);
  const changelog = path.join(folder, `${name}.md`);
  writeFileSync(current, JSON.stringify(spec, null, 2));
  writeFileSync(changelog, `# Changelog\n\n${sections.map((version) => `## ${version} — 2026-11-28\n\n- …\n`).join('\n')}`);
  return { current, released: path.join(folder, 'released'), changelog };
}

/** Changes that can break a client written against the released contract. */
function breakClients(spec: Spec): void {
  const schemas = spec.components.schemas;
  delete spec.paths['/api/departments']!.get; // an operation removed
  delete schemas.AccessToken!.properties.token_type; // a response field removed
  schemas.AccessToken!.required = schemas.AccessToken!.required!.filter((name) => name !== 'token_type');
  schemas.MenuItemType!.enum = schemas.MenuItemType!.enum!.filter((value) => value !== 'route'); // an enum narrowed
  schemas.DepartmentInput!.required!.push('code'); // a new required request field
  schemas.DepartmentInput!.properties.code = { type: 'string', maxLength: 10 };
  spec.paths['/api/roles']!.get!.parameters!.push({ name: 'scope', in: 'query', required: true, schema: { type: 'string', maxLength: 10 } }); // a new required parameter
}

/** Additions a client written against the released contract does not notice. */
function addToIt(spec: Spec): void {
  spec.components.schemas.Department!.properties.code = { type: 'string', maxLength: 10 }; // an optional field, in answers
  spec.components.schemas.DepartmentInput!.properties.code = { type: 'string', maxLength: 10 }; // and in requests
  spec.paths['/api/departments/codes'] = {
    get: {
      operationId: 'listDepartmentCodes',
      tags: ['Departments'],
      summary: 'The codes of the departments',
      description: 'Every code in use.',
      responses: {
        '200': { description: 'The codes.', content: { 'application/json': { schema: { type: 'array', maxItems: 1000, items: { type: 'string' } } } } },
      },
    },
  } as never;
}

const bump = (version: string) => (spec: Spec) => (spec.info.version = version);
const next = `${releasedMajor + 1}.0.0`;
const rules = (changes: Change[]) => changes.map((change) => /\(([a-z-]+)\)/.exec(change.what)?.[1]).sort();

const noneAccepted = path.join(folder, 'none-accepted.txt');
writeFileSync(noneAccepted, '');

/** `npm run check:compat` on other files: its exit code and what it printed. */
async function checkCompat(files: Files): Promise<{ code: number; stdout: string }> {
  const args = [
    '--import',
    'tsx',
    path.join(root, 'scripts/check-compatibility.ts'),
    '--current',
    files.current,
    '--released',
    files.released,
    '--changelog',
    files.changelog,
    // An accepted list of its own (none, unless the case gives one), not the repository's.
    '--accepted',
    files.accepted ?? noneAccepted,
  ];
  return promisify(execFile)(process.execPath, args, { cwd: root }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (error: { code: number; stdout: string }) => error,
  );
}

// Each check runs Redocly in a process of its own: all of them at once, then the assertions.
const client = path.join(folder, 'package.json');
writeFileSync(client, JSON.stringify({ name: '@atrium/client', version: released }));
const [breaking, major, compatible, cli] = await Promise.all([
  checkCompatibility({ ...files('breaking', breakClients), client }),
  checkCompatibility(files('major', (spec) => (breakClients(spec), bump(next)(spec)), [next, released])),
  checkCompatibility(files('compatible', addToIt)),
  checkCompat(files('cli', breakClients)),
]);

t.test('breaking changes fail while the major version stays', async (t) => {
  t.equal(breaking.ok, false);
  t.equal(breaking.version, released);
  t.strictSame(
    rules(breaking.breaking),
    ['enum-values-removed', 'operation-removed', 'parameter-became-required', 'property-removed', 'required-properties-added', 'required-properties-removed'],
    breaking.breaking.map((change) => `${change.where}: ${change.what}`).join('\n'),
  );
  t.ok(
    breaking.breaking.some((change) => change.where === 'GET /api/departments' && /was removed/.test(change.what)),
    'the removed operation is named by method and path',
  );
  t.equal(breaking.problems.length, 1, 'the client named carries the version');
  t.match(breaking.problems, [new RegExp(`can break clients: they need a new major version \\(info\\.version ${next.replace(/\./g, '\\.')}`)]);
});

t.test('under a new major version with its CHANGELOG section, the same changes pass once each is accepted', async (t) => {
  t.equal(major.ok, false, 'not accepted: a breaking change made while the major version is open is still caught');
  t.equal(major.breaking.length, 6, 'the breaking changes are still listed');
  const lines = major.breaking.map(changeLine);
  t.strictSame(
    major.problems,
    lines.map((line) => `a change that can break clients is not accepted in the accepted list (list it there and in CHANGELOG.md): ${line}`),
  );
  const accepted = path.join(folder, 'accepted.txt');
  writeFileSync(accepted, `# accepted for ${next}\n\n${lines.join('\n')}\n`);
  const majorFiles = files('major-accepted', (spec) => (breakClients(spec), bump(next)(spec)), [next, released]);
  const all = await checkCompatibility({ ...majorFiles, accepted });
  t.equal(all.ok, true, all.problems.join('\n'));
  const stale = path.join(folder, 'stale.txt');
  writeFileSync(stale, [...lines.slice(1), 'GET /api/gone: Operation `GET /api/gone` was removed. (operation-removed)'].join('\n'));
  const partly = await checkCompatibility({ ...majorFiles, accepted: stale });
  t.strictSame(
    partly.problems.map((problem) => problem.replace(folder, '…')),
    [
      `a change that can break clients is not accepted in …/stale.txt (list it there and in CHANGELOG.md): ${lines[0]}`,
      '…/stale.txt accepts a change the contract does not make (remove the line): GET /api/gone: Operation `GET /api/gone` was removed. (operation-removed)',
    ],
  );
  const unchanged = await checkCompatibility({ ...files('unchanged', () => {}), accepted });
  t.equal(unchanged.ok, false, 'lines that name no change the contract makes fail, with no major version open too');
  t.equal(unchanged.problems.length, 6);
});

t.test('compatible additions pass without a new version', async (t) => {
  t.equal(compatible.ok, true, compatible.problems.join('\n'));
  t.strictSame(compatible.breaking, []);
  const minor = (where: string) => compatible.compatible.some((change) => change.where === where && change.impact === 'minor');
  t.ok(minor('/api/departments/codes'), 'a new operation');
  t.ok(minor('GET /api/departments responses/200/content/application/json/schema/items/properties/code'), 'a new field in answers');
  t.ok(minor('POST /api/departments requestBody/content/application/json/schema/properties/code'), 'a new optional field in requests');
});

t.test('what the versions must say, given the changes', async (t) => {
  const changelog = (...versions: string[]) => ({ text: versions.map((version) => `## ${version}\n`).join(''), name: 'CHANGELOG.md' });
  const problems = (version: string, breakingChanges: number, sections: string[], clientVersion: unknown = version) =>
    versionProblems({
      version,
      released: '1.4.2',
      breaking: breakingChanges,
      changelog: changelog(...sections),
      client: { version: clientVersion, name: 'package.json' },
    });
  t.strictSame(problems('1.4.2', 0, ['1.4.2']), [], 'unchanged');
  t.strictSame(problems('1.5.0', 0, ['1.5.0', '1.4.2']), [], 'a new minor version with its section');
  t.strictSame(problems('2.0.0', 3, ['2.0.0', '1.4.2']), [], 'breaking changes in a new major version with its section');
  t.strictSame(problems('3.0.0', 3, ['3.0.0', '1.4.2']), [], 'any later major version');
  t.strictSame(problems('2.0.0', 3, ['1.4.2']), ['info.version is 2.0.0: CHANGELOG.md needs a section "## 2.0.0" listing its changes']);
  t.strictSame(problems('1.5.0', 0, ['1.4.2']), ['info.version is 1.5.0: CHANGELOG.md needs a section "## 1.5.0" listing its changes']);
  t.match(problems('1.5.0', 1, ['1.5.0', '1.4.2']), [/^1 change\(s\) since 1\.4\.2 can break clients: they need a new major version \(info\.version 2\.0\.0 /]);
  t.match(problems('1.4.2', 2, ['1.4.2']), [/^2 change\(s\) since 1\.4\.2 can break clients/]);
  t.strictSame(problems('1.4.1', 0, ['1.4.2']), ['info.version 1.4.1 is lower than the released 1.4.2']);
  t.strictSame(problems('0.9.0', 0, ['1.4.2']), ['info.version 0.9.0 is lower than the released 1.4.2']);
  t.strictSame(problems('1.5.0-beta', 0, ['1.4.2']), ['info.version "1.5.0-beta" is not a semantic version MAJOR.MINOR.PATCH']);
  t.strictSame(problems('1.4.2', 0, []), ['CHANGELOG.md has no section "## 1.4.2" for the released version']);
  t.strictSame(problems('1.4.2', 0, ['1.4.2'], '0.1.0'), ['package.json: the client\'s version "0.1.0" is not info.version 1.4.2']);
  t.strictSame(versionProblems({ version: '1.4.2', released: '1.4.2', breaking: 0, changelog: changelog('1.4.2') }), [], 'no client, not checked');
});

t.test('npm run check:compat without a released folder fails in one line, without a stack', async (t) => {
  const missing = await checkCompat({ ...files('no-release', () => {}), released: path.join(folder, 'nowhere') });
  t.equal(missing.code, 1);
  t.match(missing.stdout, /^FAILED: the check could not compare the contracts: ENOENT[^\n]*nowhere/);
  t.notMatch(missing.stdout, /\n\s+at /, 'no stack trace');
});

t.test('npm run check:compat exits 1 on a breaking change and prints why', async (t) => {
  t.equal(cli.code, 1);
  t.match(cli.stdout, /changes that can break clients \(6\):\n {2}major {2}POST \/api\/auth\/login/);
  t.match(cli.stdout, /\n {2}major {2}GET \/api\/departments: Operation `GET \/api\/departments` was removed\. \(operation-removed\)\n/);
  t.match(cli.stdout, /FAILED: 6 change\(s\) since .* can break clients/);
});

t.test('CHANGELOG sections are found by their heading', async (t) => {
  t.ok(hasChangelogSection('# Changelog\n\n## 1.2.0 — 2027-01-01\n', '1.2.0'));
  t.ok(hasChangelogSection('## [1.2.0]\n', '1.2.0'));
  t.notOk(hasChangelogSection('## 1.2.0\n', '1.2.1'));
  t.notOk(hasChangelogSection('## 11.2.0\n', '1.2.0'));
  t.notOk(hasChangelogSection('## 1.2.00\n', '1.2.0'));
  t.notOk(hasChangelogSection('- 1.2.0 fixed\n', '1.2.0'));
  t.notOk(hasChangelogSection('## 1x2x0\n', '1.2.0'), 'the dots are dots');
});
