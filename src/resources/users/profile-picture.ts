/**
 * Profile pictures: JPEG, PNG, WebP or GIF detected from the bytes, at
 * most 5 MiB, stored in PostgreSQL without their metadata (picture-metadata.ts), served by `/users/{user}/profile-picture/{fileName?}`
 * to a signed, expiring URL or a Bearer token.
 */
import { createHash } from 'node:crypto';
import type { Upload } from '../../platform/http/multipart.ts';
import { ProblemError, coded, invalid } from '../../platform/http/problem.ts';
import type { Secrets } from '../../platform/secrets/secrets.ts';
import { UnreadablePicture, gifExtent, sizeReading, withoutMetadata } from './picture-metadata.ts';

export const PICTURE_MAX_BYTES = 5 * 1024 * 1024;
/** The largest picture, in pixels: a side, and in all (a 48-megapixel phone photo fits). */
export const PICTURE_MAX_SIDE = 10_000;
export const PICTURE_MAX_PIXELS = 50_000_000;

/**
 * The media type each detected type is stored and served as, and its file extension. An
 * animated PNG (APNG) is a PNG whose frames sit in chunks that other readers pass over:
 * file-type names it image/apng, but it is stored, stripped and served as image/png.
 */
const PICTURE_TYPES: Record<string, { mediaType: string; extension: string }> = {
  'image/jpeg': { mediaType: 'image/jpeg', extension: 'jpg' },
  'image/png': { mediaType: 'image/png', extension: 'png' },
  'image/apng': { mediaType: 'image/png', extension: 'png' },
  'image/webp': { mediaType: 'image/webp', extension: 'webp' },
  'image/gif': { mediaType: 'image/gif', extension: 'gif' },
};
const SIGNING_PURPOSE = 'profile-picture';
/** URLs are valid until the end of the next full hour: stable for caching, 1–2 h long. */
const URL_WINDOW_SECONDS = 3600;

export interface StoredPicture {
  mediaType: string;
  fileName: string;
  content: Buffer;
  etag: string;
}

/** A file name safe for paths and headers: letters, digits, dot, dash, underscore. */
function safeFileName(original: string | undefined, extension: string): string {
  const base = (original ?? '')
    .replace(/\.[^.]*$/, '')
    .normalize('NFKD')
    .replace(/[^A-Za-z0-9_-]+/g, '-')
    .replace(/^-+|(?<!-)-+$/g, '')
    .slice(0, 100);
  return `${base || 'profile-picture'}.${extension}`;
}

/**
 * Checks an upload and prepares it for storage; 413 when too large (told by its size,
 * before it is read into memory), 422 when not an allowed image.
 */
export async function acceptPicture(upload: Pick<Upload, 'size' | 'content' | 'fileName'>): Promise<StoredPicture> {
  if (upload.size > PICTURE_MAX_BYTES) throw new ProblemError(413, 'The profile picture is larger than 5 MiB.');
  const content = await upload.content();
  const originalName = upload.fileName;
  // Loaded on the first picture, not at start (docs/performance.md#memory-of-a-started-process).
  const { fileTypeFromBuffer } = await import('file-type');
  const detected = await fileTypeFromBuffer(content);
  const type = detected ? PICTURE_TYPES[detected.mime] : undefined;
  const notAnImage = () => invalid({ profile_picture: [coded('unsupported_file_type', 'must be a JPEG, PNG, WebP or GIF image')] });
  if (!type) throw notAnImage();
  // Read from the image's header, never decoded here: a small file may declare a bitmap of gigabytes, which every
  // reader's browser would try to decode. A header that cannot be read is no image.
  const { imageSize } = await import('image-size');
  let size: { width?: number; height?: number; orientation?: number };
  try {
    // A JPEG's header alone: image-size walks every segment before its frame header, each at some cost.
    size = imageSize(sizeReading(content, type.mediaType));
  } catch {
    throw notAnImage();
  }
  let { width = 0, height = 0 } = size;
  if (type.mediaType === 'image/gif') {
    // A GIF's header gives its screen, but a browser grows the screen to fit a larger first frame: the size judged is
    // that of the screen and every frame at its place.
    try {
      ({ width, height } = gifExtent(content));
    } catch (error) {
      if (error instanceof UnreadablePicture) throw notAnImage();
      throw error;
    }
  }
  if (width < 1 || height < 1 || width > PICTURE_MAX_SIDE || height > PICTURE_MAX_SIDE || width * height > PICTURE_MAX_PIXELS) {
    throw invalid({
      profile_picture: [
        coded(
          'out_of_range',
          `must be at least 1 and at most ${PICTURE_MAX_SIDE} pixels a side and ${PICTURE_MAX_PIXELS / 1_000_000} megapixels (it is ${width} × ${height})`,
        ),
      ],
    });
  }
  // Stored and served without the metadata beside the image (a phone photo's GPS position, for one).
  let stored: Buffer;
  try {
    stored = withoutMetadata(content, type.mediaType, size.orientation);
  } catch (error) {
    if (error instanceof UnreadablePicture) throw notAnImage();
    throw error;
  }
  return {
    mediaType: type.mediaType,
    fileName: safeFileName(originalName, type.extension),
    content: stored,
    etag: pictureEtag(stored),
  };
}

/** A stored picture's ETag: the SHA-256 of its bytes (base64url, 32 characters). */
export const pictureEtag = (content: Buffer): string => createHash('sha256').update(content).digest('base64url').slice(0, 32);

const signedMessage = (tenantId: number, userId: number, expires: number) => `${tenantId}.${userId}.${expires}`;

/**
 * Relative (to the service's base URL) signed picture URL, as `profile_picture_url`.
 * `v` (the picture's ETag) changes the URL when the picture changes, so caches keyed by
 * URL never show an old picture; it is not part of the signature.
 */
export function signedPictureUrl(secrets: Secrets, tenantId: number, userId: number, fileName: string, version: string, now = Date.now()): string {
  const expires = (Math.floor(now / 1000 / URL_WINDOW_SECONDS) + 2) * URL_WINDOW_SECONDS;
  const signature = secrets.sign(SIGNING_PURPOSE, signedMessage(tenantId, userId, expires));
  return `/users/${userId}/profile-picture/${encodeURIComponent(fileName)}?tenant=${tenantId}&expires=${expires}&signature=${signature}&v=${version.slice(0, 12)}`;
}

/** True when the signature was made for this tenant and user and has not expired. */
export function pictureSignatureValid(
  secrets: Secrets,
  query: { tenant?: number; expires?: number; signature?: string },
  userId: number,
  now = Date.now(),
): query is { tenant: number; expires: number; signature: string } {
  if (query.tenant === undefined || query.expires === undefined || query.signature === undefined) return false;
  if (query.expires * 1000 <= now) return false;
  return secrets.verify(SIGNING_PURPOSE, signedMessage(query.tenant, userId, query.expires), query.signature);
}

/**
 * `Content-Disposition` naming the download (RFC 6266): a plain ASCII `filename` and the
 * exact name as `filename*` (RFC 8187), whose value allows only attr-chars: what
 * `encodeURIComponent` leaves as it is but `'`, `(`, `)` and `*` is percent-encoded too.
 */
export function inlineDisposition(fileName: string): string {
  const ascii = fileName.replace(/[^\x20-\x7e]|["\\]/g, '_');
  const extended = encodeURIComponent(fileName).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `inline; filename="${ascii}"; filename*=UTF-8''${extended}`;
}
