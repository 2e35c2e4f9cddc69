import { createCipheriv, createDecipheriv, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Database } from '../database/database.ts';
import { instanceSecrets } from './table.ts';

/**
 * The value stored under `name`, created with `generate()` the first time. Concurrent
 * first calls from several processes agree on one value (insert … on conflict do nothing,
 * then read).
 */
export async function instanceSecret(db: Database, name: string, generate: () => string | Promise<string>): Promise<string> {
  const [existing] = await db.owner
    .select()
    .from(instanceSecrets)
    .where(sql`${instanceSecrets.name} = ${name}`);
  if (existing) return existing.value;
  await db.owner
    .insert(instanceSecrets)
    .values({ name, value: await generate() })
    .onConflictDoNothing();
  const [stored] = await db.owner
    .select()
    .from(instanceSecrets)
    .where(sql`${instanceSecrets.name} = ${name}`);
  return stored!.value;
}

/**
 * The installation's master key: `ATRIUM_SECRET_KEY` (base64, 32 bytes) when set,
 * otherwise generated once and kept in the database. Sub-keys for each purpose are
 * derived from it, so one key rotates everything.
 */
export class Secrets {
  private constructor(private readonly master: Buffer) {}

  /**
   * The master key, which must be the one the database was first used with: its check value
   * (an HMAC of a constant under it, which reveals nothing of it) is stored then, and a start
   * with another key is refused. Another key (`ATRIUM_SECRET_KEY` set, changed or unset
   * since) would leave every sealed secret undecryptable and every signed link invalid,
   * without a word (docs/operations.md: the key is never changed).
   */
  static async load(db: Database, configured: string | undefined): Promise<Secrets> {
    let master: Buffer;
    if (configured) {
      master = Buffer.from(configured, 'base64');
      if (master.length !== 32) throw new Error('ATRIUM_SECRET_KEY must be 32 bytes, base64 encoded');
    } else {
      master = Buffer.from(await instanceSecret(db, 'master-key', () => randomBytes(32).toString('base64')), 'base64');
    }
    // Outside the `atrium:<purpose>` labels of `key()`: the check is never a purpose's key.
    const check = createHmac('sha256', master).update('key check value').digest('base64url');
    if ((await instanceSecret(db, 'master-key-check', () => check)) !== check) {
      if (!configured) throw new Error("ATRIUM_SECRET_KEY is not set, but this database's secrets were sealed with a key given in it: set that key again.");
      // A database first started without a key keeps the one it generated: its operator never had one to set.
      const [generated] = await db.owner
        .select({ name: instanceSecrets.name })
        .from(instanceSecrets)
        .where(sql`${instanceSecrets.name} = 'master-key'`);
      throw new Error(
        generated
          ? 'ATRIUM_SECRET_KEY is set, but this database was first started without it and keeps a key it generated then: unset ATRIUM_SECRET_KEY (the key is never changed).'
          : "ATRIUM_SECRET_KEY is not the key this database's secrets were sealed with: set the key it was first used with (the key is never changed).",
      );
    }
    return new Secrets(master);
  }

  /** A 32-byte key for one purpose (e.g. `picture-url`, `webhook-secrets`). */
  key(purpose: string): Buffer {
    return createHmac('sha256', this.master).update(`atrium:${purpose}`).digest();
  }

  /** base64url HMAC-SHA256 of `message` under the purpose's key. */
  sign(purpose: string, message: string): string {
    return createHmac('sha256', this.key(purpose)).update(message).digest('base64url');
  }

  verify(purpose: string, message: string, signature: string): boolean {
    const expected = Buffer.from(this.sign(purpose, message));
    const given = Buffer.from(signature);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }

  /** AES-256-GCM; the result is `v1.<iv>.<tag>.<ciphertext>` in base64url. */
  encrypt(purpose: string, plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key(purpose), iv);
    const data = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', iv, cipher.getAuthTag(), data].map((part) => (typeof part === 'string' ? part : part.toString('base64url'))).join('.');
  }

  decrypt(purpose: string, sealed: string): string {
    const [version, iv, tag, data] = sealed.split('.');
    if (version !== 'v1' || !iv || !tag || data === undefined) throw new Error('not an encrypted value');
    const decipher = createDecipheriv('aes-256-gcm', this.key(purpose), Buffer.from(iv, 'base64url'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
  }
}
