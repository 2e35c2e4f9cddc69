import { randomBytes } from 'node:crypto';
import { open, unlink, type FileHandle } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * A temporary file nobody else can open: created under the system temp folder (mode 0600)
 * and removed from it at once, it lives as long as its handle, so closing the handle (or
 * the process ending) frees its space and nothing is ever left behind.
 */
export async function anonymousFile(prefix: string): Promise<FileHandle> {
  const name = path.join(os.tmpdir(), `${prefix}-${randomBytes(8).toString('hex')}`);
  const file = await open(name, 'wx+', 0o600);
  try {
    await unlink(name);
  } catch (error) {
    await file.close();
    throw error;
  }
  return file;
}
