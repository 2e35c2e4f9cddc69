/**
 * Profile pictures stored before Atrium removed their metadata (picture-metadata.ts):
 * `atrium pictures:strip-metadata` stores each without it, as an upload is stored now
 * (docs/users.md#profile-pictures). The image data stays byte for byte; a picture whose
 * structure cannot be followed is left as stored and counted.
 */
import { and, asc, eq, sql } from 'drizzle-orm';
import { SECRET_CHANGED, type AuditSource } from '../../platform/audit/audit.ts';
import type { Database } from '../../platform/database/database.ts';
import { lockRecord } from '../../platform/database/locks.ts';
import { audit, userLabel } from '../audit-events/record.ts';
import { UnreadablePicture, sizeReading, withoutMetadata } from './picture-metadata.ts';
import { pictureEtag } from './profile-picture.ts';
import { findUser } from './queries.ts';
import { userProfilePictures, users } from './table.ts';

/** Pictures read at a time: each may be 5 MiB. */
const BATCH = 10;

export interface StrippedPictures {
  /** Pictures read. */
  read: number;
  /** Stored again without their metadata (each with a `user.updated` event). */
  stripped: number;
  /** Left as stored: their structure could not be followed. */
  unreadable: number;
}

/** The picture's bytes without metadata (the same as before when it has none), or null when its structure cannot be followed. */
async function stripped(content: Buffer, mediaType: string): Promise<Buffer | null> {
  const { imageSize } = await import('image-size');
  let orientation: number | undefined;
  try {
    // Read as an upload reads it: a JPEG's header alone.
    orientation = imageSize(sizeReading(content, mediaType)).orientation;
  } catch {
    return null;
  }
  try {
    return withoutMetadata(content, mediaType, orientation);
  } catch (error) {
    if (error instanceof UnreadablePicture) return null;
    throw error;
  }
}

/**
 * Every tenant's pictures, in batches by tenant and user: each with metadata is stored
 * again without it, in its tenant's transaction with the user's row locked (as an upload
 * is), unless it was replaced or removed meanwhile, and the change is recorded as
 * `user.updated` by `source`. Running it again changes nothing.
 */
export async function stripStoredPictures(db: Database, source: AuditSource): Promise<StrippedPictures> {
  const outcome: StrippedPictures = { read: 0, stripped: 0, unreadable: 0 };
  let after = { tenantId: 0, userId: 0 };
  for (;;) {
    const batch = await db.owner
      .select({
        tenantId: userProfilePictures.tenantId,
        userId: userProfilePictures.userId,
        mediaType: userProfilePictures.mediaType,
        content: userProfilePictures.content,
        etag: userProfilePictures.etag,
      })
      .from(userProfilePictures)
      .where(sql`(${userProfilePictures.tenantId}, ${userProfilePictures.userId}) > (${after.tenantId}, ${after.userId})`)
      .orderBy(asc(userProfilePictures.tenantId), asc(userProfilePictures.userId))
      .limit(BATCH);
    if (batch.length === 0) return outcome;
    for (const picture of batch) {
      outcome.read++;
      const content = await stripped(picture.content, picture.mediaType);
      if (content === null) {
        outcome.unreadable++;
        continue;
      }
      if (content.equals(picture.content)) continue;
      const stored = await db.tenant(picture.tenantId, async (tx) => {
        await lockRecord(tx, users, picture.userId);
        const [updated] = await tx
          .update(userProfilePictures)
          .set({ content, etag: pictureEtag(content), updatedAt: sql`now()` })
          .where(and(eq(userProfilePictures.userId, picture.userId), eq(userProfilePictures.etag, picture.etag)))
          .returning({ userId: userProfilePictures.userId });
        if (!updated) return false;
        const user = await findUser(tx, picture.userId, true);
        await audit(tx, source, {
          action: 'user.updated',
          target: { type: 'user', id: picture.userId, label: userLabel(user!) },
          changes: { profile_picture: SECRET_CHANGED },
        });
        return true;
      });
      if (stored) outcome.stripped++;
    }
    after = batch.at(-1)!;
  }
}
