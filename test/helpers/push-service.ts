/**
 * The receiving side of Web Push, for tests: a browser's subscription keys (ECDH P-256
 * pair and auth secret, node:crypto), RFC 8291 decryption of an aes128gcm message, and
 * the RFC 8292 VAPID check of the `Authorization: vapid t=…, k=…` header with jose.
 */
import { createDecipheriv, createECDH, hkdfSync, randomBytes, type ECDH } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { importJWK, jwtVerify, type JWTPayload } from 'jose';

export interface BrowserSubscription {
  ecdh: ECDH;
  authSecret: Buffer;
  /** What a browser's `PushSubscription.toJSON().keys` holds. */
  keys: { p256dh: string; auth: string };
}

export function browserSubscription(): BrowserSubscription {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  const authSecret = randomBytes(16);
  return { ecdh, authSecret, keys: { p256dh: ecdh.getPublicKey().toString('base64url'), auth: authSecret.toString('base64url') } };
}

/** RFC 8291 §3–4 with RFC 8188 framing: one record, keyid = the sender's public key. */
export function decryptPush(subscription: BrowserSubscription, body: Buffer): string {
  const salt = body.subarray(0, 16);
  const idLength = body.readUInt8(20);
  const senderPublic = body.subarray(21, 21 + idLength);
  const record = body.subarray(21 + idLength);
  const ecdhSecret = subscription.ecdh.computeSecret(senderPublic);
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), subscription.ecdh.getPublicKey(), senderPublic]);
  const ikm = Buffer.from(hkdfSync('sha256', ecdhSecret, subscription.authSecret, keyInfo, 32));
  const cek = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const decipher = createDecipheriv('aes-128-gcm', cek, nonce);
  decipher.setAuthTag(record.subarray(record.length - 16));
  const padded = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()]);
  // The last record ends with the delimiter 0x02, then zero padding.
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end--;
  if (padded[end] !== 2) throw new Error('not a final record');
  return padded.subarray(0, end).toString('utf8');
}

/** Verifies the VAPID header against `publicKey` (base64url, uncompressed P-256); returns the claims and `k`. */
export async function verifyVapid(headers: IncomingHttpHeaders, publicKey: string): Promise<{ claims: JWTPayload; k: string }> {
  const match = /^vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)$/.exec(headers.authorization ?? '');
  if (!match) throw new Error(`no VAPID authorization header: ${headers.authorization}`);
  const point = Buffer.from(publicKey, 'base64url');
  const key = await importJWK(
    { kty: 'EC', crv: 'P-256', x: point.subarray(1, 33).toString('base64url'), y: point.subarray(33, 65).toString('base64url') },
    'ES256',
  );
  const { payload } = await jwtVerify(match[1]!, key, { algorithms: ['ES256'] });
  return { claims: payload, k: match[2]! };
}
