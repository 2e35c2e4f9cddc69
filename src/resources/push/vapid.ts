/**
 * The VAPID key pair (RFC 8292) that signs every push request: from `VAPID_PUBLIC_KEY` /
 * `VAPID_PRIVATE_KEY` when configured, otherwise generated once and kept as the instance
 * secret `vapid-keys`, so every process and every restart signs with the same key (a new
 * key would orphan every browser's subscription).
 */
import type { Config } from '../../config.ts';
import type { Database } from '../../platform/database/database.ts';
import { instanceSecret } from '../../platform/secrets/secrets.ts';

export interface VapidKeys {
  publicKey: string;
  privateKey: string;
}

const loaded = new WeakMap<Database, Promise<VapidKeys>>();

export function vapidKeys(config: Config, db: Database): Promise<VapidKeys> {
  if (config.vapidPublicKey && config.vapidPrivateKey) {
    return Promise.resolve({ publicKey: config.vapidPublicKey, privateKey: config.vapidPrivateKey });
  }
  let keys = loaded.get(db);
  if (!keys) {
    // The library is loaded only to make the pair, once per installation.
    keys = instanceSecret(db, 'vapid-keys', async () => {
      const { default: webPush } = await import('web-push');
      return JSON.stringify(webPush.generateVAPIDKeys());
    }).then((stored) => JSON.parse(stored) as VapidKeys);
    // A failed read (database briefly down) must not be cached.
    keys.catch(() => loaded.delete(db));
    loaded.set(db, keys);
  }
  return keys;
}
