/**
 * Password hashing (Argon2id). The native library is loaded on the first hash or check, not
 * at start: a process that never signs anyone in never holds it
 * (docs/performance.md#memory-of-a-started-process).
 */
const argon2 = () => import('@node-rs/argon2');

/** Argon2id with the library's defaults (m=19 MiB, t=2, p=1: the OWASP baseline). */
export async function hashPassword(password: string): Promise<string> {
  const { hash, Algorithm } = await argon2();
  return hash(password, { algorithm: Algorithm.Argon2id });
}

/** A hash of a random password, verified against when the user is unknown so that
 * "no such user" and "wrong password" take the same time. */
let dummyHash: Promise<string> | undefined;

export async function verifyPassword(passwordHash: string | null | undefined, password: string): Promise<boolean> {
  const { verify } = await argon2();
  if (!passwordHash) {
    dummyHash ??= hashPassword('atrium-timing-equaliser');
    await verify(await dummyHash, password).catch(() => false);
    return false;
  }
  try {
    return await verify(passwordHash, password);
  } catch {
    return false;
  }
}
