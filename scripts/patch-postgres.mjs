// Runs after `npm install`/`npm ci` (package.json "postinstall"). postgres.js 3.4.9 defers
// small writes with setImmediate; when the connection closes before the write runs, its
// `nextWrite` dereferences the nulled socket and throws from the immediate callback, an
// uncaught exception that ends the process (upstream: porsager/postgres issues 1154 and
// 1208, unreleased fix). That happens when the database or a pooler drops connections under
// load (docs/fault-tolerance.md). This applies the upstream fix: a write to a closed
// connection fails its queries with CONNECTION_CLOSED, and closing forgets a pending write.
// Idempotent; a postgres.js version without the defect is left alone.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const MARK = '/* atrium: closed-socket write guard */';
const GUARD = `function nextWrite(fn) {
    ${MARK}
    if (!socket) {
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options))
      return false
    }
    const x = socket.write(chunk, fn)`;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../node_modules/postgres');
for (const file of ['src/connection.js', 'cjs/src/connection.js', 'cf/src/connection.js']) {
  const target = path.join(root, file);
  if (!existsSync(target)) continue;
  const source = readFileSync(target, 'utf8');
  if (source.includes(MARK)) continue;
  const unguarded = 'function nextWrite(fn) {\n    const x = socket.write(chunk, fn)';
  if (!source.includes(unguarded)) continue; // another version: nothing to mend
  const patched = source.replace(unguarded, GUARD).replace(/^ {4}clearImmediate\(nextWriteTimer\)\n/gm, '$&    chunk = nextWriteTimer = null\n');
  writeFileSync(target, patched);
}
