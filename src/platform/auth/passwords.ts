/**
 * Password hashing (Argon2id). The native library is loaded on the first hash or check, not
 * at start: a process that never signs anyone in never holds it
 * (docs/performance.md#memory-of-a-started-process).
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import type * as Argon2 from '@node-rs/argon2';
import { TenantShares } from '../tenant-shares.ts';

let argon2Module: Promise<typeof Argon2> | undefined;
/** The library, loaded once: every hash and check then waits for the same load, and they enter `hashing` in the order they came. */
const argon2 = () => (argon2Module ??= import('@node-rs/argon2'));

/**
 * Hashes and checks under way at once, shared between tenants (tenant-shares.ts): one
 * tenant's many password writes (a SCIM sync that sets passwords, a script) wait behind
 * each other, not in front of another tenant's sign-ins. As many as the machine has cores
 * (each is a core's work for tens of milliseconds), and no more than libuv's thread pool
 * holds, which also serves file and DNS work (docs/tenancy-and-security.md#sharing-between-tenants).
 */
const hashing = new TenantShares(Math.max(1, Math.min(os.availableParallelism(), Number(process.env.UV_THREADPOOL_SIZE) || 4)));

/**
 * How much work a new hash costs. `standard` is the library's default, spelled out (m=19 MiB,
 * t=2, p=1: the OWASP baseline). `test` is a hundredth of it, for the test suite, which
 * hashes the passwords of hundreds of users; the configuration refuses it outside
 * `NODE_ENV=test` (`PASSWORD_HASH_COST`). A check reads the cost from the stored hash,
 * whatever this setting; a sign-in then renews a hash of another cost (`needsRehash`).
 */
export type PasswordHashCost = 'standard' | 'test';

const COSTS = {
  standard: { memoryCost: 19456, timeCost: 2, parallelism: 1 },
  test: { memoryCost: 256, timeCost: 1, parallelism: 1 },
} as const;

let cost: PasswordHashCost = 'standard';

/** Sets the cost of the hashes this process makes, from its configuration (at start). */
export function setPasswordHashCost(value: PasswordHashCost): void {
  cost = value;
}

/**
 * The form of a password that is hashed: Unicode's compatibility composition (NFKC), so
 * one password typed on keyboards or systems that encode it differently (`é` as one code
 * point or as `e` and a combining accent, full-width digits) is the same password.
 */
export const normalizedPassword = (password: string): string => password.normalize('NFKC');

/**
 * A password's length as its rules count it (`PASSWORD_MIN_LENGTH`): the code points of its
 * canonical composition (NFC), so an accented letter is one character however it is typed,
 * and a compatibility character that NFKC expands (a ligature, U+FDFA) is one as well.
 */
export const passwordLength = (password: string): number => [...password.normalize('NFC')].length;

/** A new hash of `password` (its `normalizedPassword` form), made in a place of `tenant`'s (0: work of no tenant yet, such as creating one). */
export async function hashPassword(password: string, tenant: number): Promise<string> {
  const { hash, Algorithm } = await argon2();
  return hashing.run(tenant, () => hash(normalizedPassword(password), { algorithm: Algorithm.Argon2id, ...COSTS[cost] }));
}

/**
 * Whether `passwordHash` is not as `hashPassword` makes one now: its PHC string
 * (`$argon2id$v=19$m=…,t=…,p=…$salt$digest`) names another algorithm, version, memory
 * (m), passes (t) or lanes (p) than Argon2id, version 0x13 and the configured cost
 * (`setPasswordHashCost`). A string that is no such hash needs it too.
 */
export function needsRehash(passwordHash: string): boolean {
  const { memoryCost, timeCost, parallelism } = COSTS[cost];
  return !passwordHash.startsWith(`$argon2id$v=19$m=${memoryCost},t=${timeCost},p=${parallelism}$`);
}

/**
 * A hash of `password` (its normalized form) as `hashPassword` makes one now, to store in
 * place of `passwordHash`, which it matched (`checkPassword` answered `outdated`). Its salt
 * is the first 16 bytes of the SHA-256 of `passwordHash` rather than random: as unique, since
 * that hash holds a random salt of its own, and two sign-ins that renew the same hash at once
 * make the same one, so that each finds the user's row holding either hash it knows
 * (`stillSignsIn`) whichever stores it first.
 */
export async function renewedHash(passwordHash: string, password: string, tenant: number): Promise<string> {
  const { hash, Algorithm } = await argon2();
  const salt = createHash('sha256').update(passwordHash).digest().subarray(0, 16);
  return hashing.run(tenant, () => hash(normalizedPassword(password), { algorithm: Algorithm.Argon2id, ...COSTS[cost], salt }));
}

/**
 * The stored hashes `password` is known to match once a check of `passwordHash` found it
 * right (`checkPassword`): that hash and, when the check found it `outdated`, the hash it is
 * renewed to (`renewedHash`), which a sign-in stores and another may have stored meanwhile.
 * A renewed hash that cannot be made is left out (`failed` is told why).
 */
export async function matchedHashes(
  passwordHash: string,
  password: string,
  check: Exclude<PasswordCheck, 'wrong'>,
  tenant: number,
  failed: (error: unknown) => void = () => {},
): Promise<[string] | [string, string]> {
  if (check === 'current') return [passwordHash];
  return renewedHash(passwordHash, password, tenant).then(
    (renewed): [string, string] => [passwordHash, renewed],
    (error: unknown): [string] => (failed(error), [passwordHash]),
  );
}

/**
 * Which form of `password` matches `passwordHash`: its normalized form, or, when that
 * differs, the password as typed, which a hash made before passwords were normalized holds.
 */
async function matches(passwordHash: string, password: string, tenant: number): Promise<'normalized' | 'typed' | null> {
  const { verify } = await argon2();
  const normalized = normalizedPassword(password);
  if (await hashing.run(tenant, () => verify(passwordHash, normalized))) return 'normalized';
  return normalized !== password && (await hashing.run(tenant, () => verify(passwordHash, password))) ? 'typed' : null;
}

/** How many shares sign-ins are spread over, by the tenant name they give (`signInShare`). */
const SIGN_IN_SHARES = 16;

/**
 * The share a sign-in's check takes: one of `SIGN_IN_SHARES`, by a hash of the tenant name
 * it gives, whether or not a tenant has that name (negative numbers, which no tenant id
 * is). Waiting so tells nothing of which names exist, and sign-ins naming made-up tenants,
 * however many names they give, hold no more than these shares: a tenant's own work (a
 * password change, a new user) is one share beside them.
 */
export function signInShare(tenantName: string): number {
  return -1 - (createHash('sha256').update(tenantName).digest().readUInt32BE(0) % SIGN_IN_SHARES);
}

/** A hash of a random password, verified against when the user is unknown so that
 * "no such user" and "wrong password" take the same time. */
let dummyHash: Promise<string> | undefined;

/**
 * What a check of a password found: `wrong`; `current`, a match of a hash as `hashPassword`
 * makes one now; or `outdated`, a match of one made at another cost (`needsRehash`) or of
 * the password as typed, which a sign-in replaces (`renewedHash`).
 */
export type PasswordCheck = 'wrong' | 'current' | 'outdated';

/** How `password` fares against `passwordHash`, checked in a place of `tenant`'s share (a sign-in's: `signInShare`). */
export async function checkPassword(passwordHash: string | null | undefined, password: string, tenant: number): Promise<PasswordCheck> {
  if (!passwordHash) {
    // As many checks as a wrong password of a known user costs (two when its normalized form differs).
    dummyHash ??= hashPassword('atrium-timing-equaliser', 0);
    await matches(await dummyHash, password, tenant).catch(() => null);
    return 'wrong';
  }
  let form: Awaited<ReturnType<typeof matches>>;
  try {
    form = await matches(passwordHash, password, tenant);
  } catch {
    return 'wrong';
  }
  if (form === null) return 'wrong';
  return form === 'typed' || needsRehash(passwordHash) ? 'outdated' : 'current';
}

/** Whether `password` matches `passwordHash` (`checkPassword`), however the hash was made. */
export async function verifyPassword(passwordHash: string | null | undefined, password: string, tenant: number): Promise<boolean> {
  return (await checkPassword(passwordHash, password, tenant)) !== 'wrong';
}
