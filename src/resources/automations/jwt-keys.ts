/**
 * The installation's RS256 key pair for webhook JWTs (auth.type `jwt`):
 * generated once, kept with the instance secrets, public half served at
 * `GET /.well-known/jwks.json`.
 */
import type { JWK } from 'jose';
import type { Database } from '../../platform/database/database.ts';
import { instanceSecret } from '../../platform/secrets/secrets.ts';

export const WEBHOOK_JWT_ISSUER = 'atrium';
const LIFETIME_SECONDS = 300;

export interface PublicJwk {
  kty: string;
  n: string;
  e: string;
  kid: string;
  alg: 'RS256';
  use: 'sig';
}

interface SigningKey {
  privateKey: CryptoKey | Uint8Array;
  kid: string;
  publicJwk: PublicJwk;
}

const loaded = new WeakMap<Database, Promise<SigningKey>>();

/** The JOSE library, loaded when a key is first needed, not at start (docs/performance.md#memory-of-a-started-process). */
const jose = () => import('jose');

async function loadSigningKey(db: Database): Promise<SigningKey> {
  const { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK } = await jose();
  const stored = await instanceSecret(db, 'webhook-jwt-key', async () => {
    const { privateKey } = await generateKeyPair('RS256', { extractable: true, modulusLength: 2048 });
    return JSON.stringify(await exportJWK(privateKey));
  });
  const jwk = JSON.parse(stored) as JWK;
  const publicPart = { kty: jwk.kty!, n: jwk.n!, e: jwk.e! };
  const kid = await calculateJwkThumbprint(publicPart);
  return { privateKey: await importJWK(jwk, 'RS256'), kid, publicJwk: { ...publicPart, kid, alg: 'RS256', use: 'sig' } };
}

function signingKey(db: Database): Promise<SigningKey> {
  let key = loaded.get(db);
  if (!key) {
    key = loadSigningKey(db);
    loaded.set(db, key);
    key.catch(() => loaded.delete(db));
  }
  return key;
}

export async function webhookJwks(db: Database): Promise<{ keys: PublicJwk[] }> {
  return { keys: [(await signingKey(db)).publicJwk] };
}

/** A bearer token for one webhook request: iss, sub, aud, iat, exp, jti. */
export async function signWebhookJwt(db: Database, claims: { subject: string; audience: string; jti: string }): Promise<string> {
  const key = await signingKey(db);
  const { SignJWT } = await jose();
  return new SignJWT({})
    .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT' })
    .setIssuer(WEBHOOK_JWT_ISSUER)
    .setSubject(claims.subject)
    .setAudience(claims.audience)
    .setIssuedAt()
    .setExpirationTime(`${LIFETIME_SECONDS}s`)
    .setJti(claims.jti)
    .sign(key.privateKey);
}
