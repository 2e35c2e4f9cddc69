/**
 * `npm run check:generated`: whether generated/ and the typed client's schema are what
 * `npm run generate` writes from openapi/, neither edited by hand nor left behind the spec.
 * It reads them, empties generated/ (the generator writes all of it; a file it no longer
 * writes must go), runs the generator and reads them again: any file changed, added or
 * removed did not match. The tree is compared with itself, not with git, so a
 * correct change passes before it is committed; on a clean clone (CI) it also catches
 * generated files that were not committed with their spec.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const FOLDERS = ['generated', 'clients/typescript/src'];

/** Every file under the generator's folders, by path relative to the repository, with its content. */
function snapshot(): Map<string, string> {
  const files = new Map<string, string>();
  for (const folder of FOLDERS) {
    for (const entry of readdirSync(path.join(root, folder), { withFileTypes: true, recursive: true })) {
      if (!entry.isFile()) continue;
      const file = path.relative(root, path.join(entry.parentPath, entry.name));
      files.set(file, readFileSync(path.join(root, file), 'utf8'));
    }
  }
  return files;
}

const before = snapshot();
rmSync(path.join(root, 'generated'), { recursive: true, force: true });
execFileSync(process.execPath, ['--import', 'tsx', path.join(root, 'scripts/generate.ts')], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
const after = snapshot();
const differ = [...new Set([...before.keys(), ...after.keys()])].filter((file) => before.get(file) !== after.get(file)).sort();
if (differ.length > 0) {
  process.stderr.write(
    `generated/ did not match openapi/: ${differ.join(', ')}. npm run generate has now written generated/ anew: ` +
      'review and commit the result with the spec (never edit generated/ by hand).\n',
  );
  process.exit(1);
}
