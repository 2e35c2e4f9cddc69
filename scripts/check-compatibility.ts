/**
 * The compatibility check (docs/api-versions.md#the-compatibility-check): compares the
 * current contract, generated/openapi.json, with the latest released one,
 * openapi/released/<version>.json, and fails when a change could break a client while the
 * major part of `info.version` stayed. Redocly's `diff` rates each change (its
 * `diff-recommended` rules, scripts/check-compatibility.redocly.yaml): `major` can break
 * a client, `minor` adds, `patch` changes neither. Also checked: `info.version` is a
 * version (MAJOR.MINOR.PATCH) not lower than the released one; a version other than the
 * released one has its section in CHANGELOG.md; the typed client carries `info.version`;
 * while a new major version is open, every breaking change is one that
 * openapi/accepted-breaking-changes.txt accepts, and that file accepts no other.
 *
 * `npm run check:compat` (CI runs it after `generated/` is checked to be fresh). Options
 * for other files: --current FILE, --released FOLDER, --changelog FILE, --client FILE
 * (the client's package.json), --accepted FILE.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs, promisify } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const run = promisify(execFile);

/** One change between the released contract and the current one, as Redocly rated it. */
export interface Change {
  impact: 'major' | 'minor' | 'patch';
  /** Where: `GET /api/departments` (and what), or a JSON pointer outside the paths. */
  where: string;
  /** Redocly's message and rule, or what changed (added, removed, modified). */
  what: string;
}

export interface Verdict {
  ok: boolean;
  /** The latest released version (the name of its file in the released folder). */
  released: string;
  /** `info.version` of the current contract. */
  version: string;
  breaking: Change[];
  compatible: Change[];
  /** Why the check fails; empty when it passes. */
  problems: string[];
}

export interface Files {
  /** The bundled current contract. */
  current: string;
  /** The folder of released contracts, `<version>.json` each. */
  released: string;
  changelog: string;
  /** The typed client's package.json, whose version must be `info.version`; not checked when absent. */
  client?: string;
  /** The breaking changes accepted for the open major version, one `<where>: <what>` a line; none when absent. */
  accepted?: string;
}

export const REPOSITORY_FILES: Files = {
  current: path.join(root, 'generated/openapi.json'),
  released: path.join(root, 'openapi/released'),
  changelog: path.join(root, 'CHANGELOG.md'),
  client: path.join(root, 'clients/typescript/package.json'),
  accepted: path.join(root, 'openapi/accepted-breaking-changes.txt'),
};

type Version = [number, number, number];

/** A file as the report names it: relative to the working folder when inside it. */
const shown = (file: string) => (path.relative(process.cwd(), file).startsWith('..') ? file : path.relative(process.cwd(), file));

function parseVersion(text: string): Version | null {
  const match = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$/.exec(text);
  return match ? [Number(match[1]), Number(match[2]), Number(match[3])] : null;
}

function compare(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

/** The latest version in the released folder, by its files' names. */
export function latestRelease(folder: string): string {
  const versions = readdirSync(folder)
    .filter((name) => name.endsWith('.json'))
    .map((name) => name.slice(0, -'.json'.length))
    .filter((name) => parseVersion(name) !== null)
    .sort((a, b) => compare(parseVersion(a)!, parseVersion(b)!));
  const latest = versions.at(-1);
  if (!latest) throw new Error(`${folder} holds no released contract (<MAJOR.MINOR.PATCH>.json)`);
  return latest;
}

/** Whether CHANGELOG.md has a section for `version` (a line `## 1.2.0 …`). */
export function hasChangelogSection(changelog: string, version: string): boolean {
  const escaped = version.replace(/\./g, '\\.');
  return new RegExp(`^##\\s+\\[?v?${escaped}\\]?(\\s|$)`, 'm').test(changelog);
}

interface RedoclyChange {
  path: string;
  kind: string;
  impact: 'major' | 'minor' | 'patch';
  property?: string;
  verdicts: { ruleId: string; message: string }[];
}

/** `#/paths/~1api~1departments/get/responses/200` → `GET /api/departments responses/200`. */
function describePointer(pointer: string): string {
  const parts = pointer.replace(/^#\//, '').split('/');
  const decoded = parts.map((part) => decodeURIComponent(part).replace(/~1/g, '/').replace(/~0/g, '~'));
  if (decoded[0] !== 'paths' || decoded.length < 2) return pointer;
  const method = decoded[2] && /^(get|put|post|delete|patch|head|options|trace)$/.test(decoded[2]) ? decoded[2].toUpperCase() : null;
  const rest = decoded.slice(method ? 3 : 2).join('/');
  return [method, decoded[1], rest].filter(Boolean).join(' ');
}

/** Runs `redocly diff` on the two contracts and returns its rated changes. */
async function diff(base: string, revision: string): Promise<RedoclyChange[]> {
  const args = ['diff', base, revision, '--config', path.join(root, 'scripts/check-compatibility.redocly.yaml'), '--format', 'json', '--fail-on', 'none'];
  const env = { ...process.env, NO_COLOR: '1', REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', REDOCLY_SUPPRESS_NOTIFICATIONS: 'true' };
  try {
    const { stdout } = await run(path.join(root, 'node_modules/.bin/redocly'), args, { cwd: root, env, maxBuffer: 64 * 1024 * 1024 });
    return (JSON.parse(stdout) as { changes: RedoclyChange[] }).changes;
  } catch (error) {
    const failure = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`redocly diff ${base} ${revision} failed:\n${failure.stderr ?? ''}${failure.stdout ?? failure.message}`, { cause: error });
  }
}

/** What the versions must say, given the changes since the release; see the file's header. */
export interface Versions {
  /** `info.version` of the current contract. */
  version: string;
  /** The latest released version. */
  released: string;
  /** How many changes since the release can break clients. */
  breaking: number;
  /** CHANGELOG.md's text, and how to name the file in a problem. */
  changelog: { text: string; name: string };
  /** The typed client's version and how to name its package.json; not checked when absent. */
  client?: { version: unknown; name: string };
}

/** Why the versions do not fit the changes (empty when they do). */
export function versionProblems({ version, released, breaking, changelog, client }: Versions): string[] {
  const problems: string[] = [];
  if (!hasChangelogSection(changelog.text, released)) problems.push(`${changelog.name} has no section "## ${released}" for the released version`);
  const current = parseVersion(version);
  const last = parseVersion(released)!;
  if (!current) {
    problems.push(`info.version ${JSON.stringify(version)} is not a semantic version MAJOR.MINOR.PATCH`);
  } else if (compare(current, last) < 0) {
    problems.push(`info.version ${version} is lower than the released ${released}`);
  } else {
    if (compare(current, last) > 0 && !hasChangelogSection(changelog.text, version)) {
      problems.push(`info.version is ${version}: ${changelog.name} needs a section "## ${version}" listing its changes`);
    }
    if (breaking > 0 && current[0] <= last[0]) {
      problems.push(
        `${breaking} change(s) since ${released} can break clients: they need a new major version ` +
          `(info.version ${last[0] + 1}.0.0 and its CHANGELOG.md section), or a contract that keeps what ${released} promised`,
      );
    }
  }
  if (client && client.version !== version)
    problems.push(`${client.name}: the client's version ${JSON.stringify(client.version)} is not info.version ${version}`);
  return problems;
}

/** A change as the accepted list and the report name it: `<where>: <what>`. */
export const changeLine = (change: Change): string => `${change.where}: ${change.what}`;

/** The lines of an accepted list: blank lines and `#` comments skipped. */
export function acceptedLines(text: string): string[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

/**
 * Why the breaking changes and the accepted list disagree (empty when they agree). While a
 * new major version is open (`open`), each breaking change must be accepted: a breaking
 * change made after the major version was opened fails until its author lists it there
 * (and in CHANGELOG.md), so none slips in unnoticed. A line that names no change the
 * contract makes fails too, so the list stays the open version's.
 */
export function acceptanceProblems(breaking: Change[], accepted: string[], open: boolean, name: string): string[] {
  const made = new Set(breaking.map(changeLine));
  const listed = new Set(accepted);
  const problems: string[] = [];
  if (open) {
    for (const line of made) {
      if (!listed.has(line)) problems.push(`a change that can break clients is not accepted in ${name} (list it there and in CHANGELOG.md): ${line}`);
    }
  }
  for (const line of listed) if (!made.has(line)) problems.push(`${name} accepts a change the contract does not make (remove the line): ${line}`);
  return problems;
}

/** Compares the current contract with the latest released one; see the file's header. */
export async function checkCompatibility(files: Files): Promise<Verdict> {
  const released = latestRelease(files.released);
  const releasedFile = path.join(files.released, `${released}.json`);
  const read = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as { info?: { version?: unknown }; version?: unknown };
  const version = String(read(files.current).info?.version);
  const changes = (await diff(releasedFile, files.current)).map((change): Change => ({
    impact: change.impact,
    where: describePointer(change.path) + (change.property ? ` · ${change.property}` : ''),
    what: change.verdicts.length > 0 ? change.verdicts.map((verdict) => `${verdict.message} (${verdict.ruleId})`).join('; ') : change.kind,
  }));
  const breaking = changes.filter((change) => change.impact === 'major');
  const compatible = changes.filter((change) => change.impact !== 'major');
  const problems = versionProblems({
    version,
    released,
    breaking: breaking.length,
    changelog: { text: readFileSync(files.changelog, 'utf8'), name: shown(files.changelog) },
    client: files.client ? { version: read(files.client).version, name: shown(files.client) } : undefined,
  });
  const current = parseVersion(version);
  const open = current !== null && current[0] > parseVersion(released)![0];
  const accepted = files.accepted && existsSync(files.accepted) ? acceptedLines(readFileSync(files.accepted, 'utf8')) : [];
  problems.push(...acceptanceProblems(breaking, accepted, open, files.accepted ? shown(files.accepted) : 'the accepted list'));
  const releasedVersion = read(releasedFile).info?.version;
  if (releasedVersion !== released) problems.unshift(`${shown(releasedFile)}: its info.version is ${JSON.stringify(releasedVersion)}, not ${released}`);
  return { ok: problems.length === 0, released, version, breaking, compatible, problems };
}

/** The report `npm run check:compat` prints. */
export function report(verdict: Verdict): string {
  const lines = [`contract ${verdict.version}, last released ${verdict.released}`];
  const list = (changes: Change[]) => changes.map((change) => `  ${change.impact.padEnd(5)}  ${changeLine(change)}`);
  if (verdict.breaking.length > 0) lines.push(`changes that can break clients (${verdict.breaking.length}):`, ...list(verdict.breaking));
  if (verdict.compatible.length > 0) {
    lines.push(`compatible changes (${verdict.compatible.length}; CHANGELOG.md lists them under the version that releases them):`, ...list(verdict.compatible));
  }
  if (verdict.breaking.length + verdict.compatible.length === 0) lines.push(`no change since ${verdict.released}`);
  lines.push(...verdict.problems.map((problem) => `FAILED: ${problem}`));
  if (verdict.ok) lines.push('compatible: ok');
  return lines.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      current: { type: 'string' },
      released: { type: 'string' },
      changelog: { type: 'string' },
      client: { type: 'string' },
      accepted: { type: 'string' },
    },
  });
  let verdict: Verdict;
  try {
    verdict = await checkCompatibility({ ...REPOSITORY_FILES, ...values });
  } catch (error) {
    // A file missing or unreadable (no released folder, a contract that is no JSON): one line saying which, no stack.
    console.log(`FAILED: the check could not compare the contracts: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
    return;
  }
  console.log(report(verdict));
  process.exitCode = verdict.ok ? 0 : 1;
}

// Run by `npm run check:compat`; imported (by its test), it does nothing.
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) await main();
