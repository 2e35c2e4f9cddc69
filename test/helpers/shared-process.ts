/**
 * Several test files in one process (docs/testing.md#files-sharing-a-process). `npm test`
 * starts a few processes that take the run's files from one queue, so that Node, tsx and
 * Atrium's modules load once a process instead of once a file: most of a small file's time
 * went there.
 *
 * Each file runs as a subtest named by its path, one after the other, with the suite's
 * time limit for a file. Its `import t from 'tap'` gives it that subtest (the resolve hook
 * in `file-test-hooks.mjs`): its cases, `t.teardown`s and `t.setTimeout` are the file's
 * own, and its teardowns run when it ends, before the next file starts. A file that needs
 * a process to itself says so (`OWN_PROCESS`, in scripts/test.ts).
 */
import { closeSync, openSync, readFileSync } from 'node:fs';
import { register } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { exitWhenEnded } from './processes.ts';

/** Where file-test.mjs finds the subtest of the file being imported. */
const FILE_TEST = Symbol.for('atrium.test.file');

/** The suite's time limit for a file, in ms (package.json's `tap.timeout`, as tap hands it to each process). */
const fileTimeout = Number(process.env.TAP_TIMEOUT ?? 120) * 1000;

/**
 * Runs the files of `queueFile` (a JSON list of paths, written by scripts/test.ts), taking
 * one at a time the next that no other process of the run has taken: each process of the
 * run reads the same queue, so all of them end within a file of each other.
 */
export async function runQueue(queueFile: string): Promise<void> {
  register(new URL('./file-test-hooks.mjs', import.meta.url));
  // The files' own limits apply, one file at a time; the process has none of its own.
  t.setTimeout(0);
  exitWhenEnded(t);
  const state = globalThis as { [FILE_TEST]?: unknown };
  const files = JSON.parse(readFileSync(queueFile, 'utf8')) as string[];
  for (const [index, file] of files.entries()) {
    if (!take(`${queueFile}.${index}`)) continue;
    await t.test(path.relative(process.cwd(), file), { timeout: fileTimeout }, async (fileTest) => {
      state[FILE_TEST] = fileTest;
      await import(pathToFileURL(path.resolve(file)).href);
    });
  }
  // The queue is done: so is the process, whatever a file left running (exitWhenEnded).
  t.end();
}

/** Whether this process takes a file of the queue: the one that creates its `mark` first does. */
function take(mark: string): boolean {
  try {
    closeSync(openSync(mark, 'wx'));
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}
