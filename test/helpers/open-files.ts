import { readdir, readlink } from 'node:fs/promises';
import type { Test } from 'tap';

/**
 * How many files this process holds open whose path holds `marker` (Linux, /proc/self/fd).
 * Spool files (answers, uploads) are removed from their folder at once, so an open handle
 * is the only trace they leave; none once they are closed.
 */
export async function openFiles(marker: string): Promise<number> {
  const targets = await Promise.all((await readdir('/proc/self/fd')).map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')));
  return targets.filter((target) => target.includes(marker)).length;
}

/** Until `t` ends, the system temp folder (TMPDIR) is one that does not exist: no spool file can be created. */
export function withoutTempFolder(t: Pick<Test, 'teardown'>): void {
  const tmpdir = process.env.TMPDIR;
  process.env.TMPDIR = '/nonexistent/atrium-test';
  t.teardown(() => {
    if (tmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = tmpdir;
  });
}
