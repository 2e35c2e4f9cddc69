/** Processes the process tests look at: whether one still runs, and an embedded server's postmaster. */
import { readFileSync } from 'node:fs';
import path from 'node:path';

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The postmaster of the embedded server in `dataDir`: its pid and port (postmaster.pid lines 1 and 4). */
export function postmasterOf(dataDir: string): { pid: number; port: number } {
  const lines = readFileSync(path.join(dataDir, 'pgdata', 'postmaster.pid'), 'utf8').split('\n');
  return { pid: Number(lines[0]), port: Number(lines[3]) };
}
