/**
 * Password hashing (Argon2id). The native library is loaded on the first hash or check, not
 * at start: a process that never signs anyone in never holds it
 * (docs/performance.md#memory-of-a-started-process).
 */
const argon2 = () => import('@node-rs/argon2');

/**
 * How much work a new hash costs. `standard` is the library's default (m=19 MiB, t=2, p=1:
 * the OWASP baseline). `test` is a hundredth of it, for the test suite, which hashes the
 * passwords of hundreds of users; the configuration refuses it outside `NODE_ENV=test`
 * (`PASSWORD_HASH_COST`). A check reads the cost from the stored hash, whatever this setting.
 */
export type PasswordHashCost = 'standard' | 'test';

const COSTS = {
  standard: {},
  test: { memoryCost: 256, timeCost: 1, parallelism: 1 },
} as const;

let cost: PasswordHashCost = 'standard';

/** Sets the cost of the hashes this process makes, from its configuration (at start). */
export function setPasswordHashCost(value: PasswordHashCost): void {
  cost = value;
}

export async function hashPassword(password: string): Promise<string> {
  const { hash, Algorithm } = await argon2();
  return hash(password, { algorithm: Algorithm.Argon2id, ...COSTS[cost] });
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
