/**
 * Pictures stored before their metadata was removed at upload (docs/users.md#profile-pictures):
 * `stripStoredPictures`, which `atrium pictures:strip-metadata` runs, stores each without it,
 * in every tenant, records the change, leaves what it cannot read as stored, and changes
 * nothing the second time.
 */
import { eq, sql } from 'drizzle-orm';
import exifr from 'exifr';
import t from 'tap';
import { commandSource } from '../../../src/resources/audit-events/record.ts';
import { withoutMetadata } from '../../../src/resources/users/picture-metadata.ts';
import { pictureEtag } from '../../../src/resources/users/profile-picture.ts';
import { stripStoredPictures } from '../../../src/resources/users/stored-pictures.ts';
import { userProfilePictures } from '../../../src/resources/users/table.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { PNG_1X1 } from '../../helpers/multipart.ts';
import { jpegWithMetadata, pngWithMetadata } from '../../helpers/pictures.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('stored-pictures');
const other = await api.createTenant('stored-pictures-other');

const secretsIn = (file: Buffer) => file.toString('latin1').match(/SECRET[-A-Z]*/g) ?? [];

/** A picture as an earlier version stored it: the bytes as uploaded. */
async function storeAsBefore(tenantId: number, userId: number, mediaType: string, content: Buffer) {
  await api.db.owner.insert(userProfilePictures).values({ tenantId, userId, mediaType, fileName: 'before.bin', content, etag: pictureEtag(content) });
}

const storedOf = async (userId: number) => (await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, userId)))[0]!;

const events = (tenantId: number) =>
  api.db.owner.execute<{ action: string; actor_type: string; command: string; target_id: string; changes: unknown }>(
    sql`select action, actor_type, command, target_id, changes from audit_events
        where tenant_id = ${tenantId} and command = 'pictures:strip-metadata' order by target_id::bigint`,
  );

t.test('pictures with metadata are stored without it, in every tenant; the rest are kept; a second run changes nothing', async (t) => {
  const phone = await api.createUser(tenant.tenantId, { username: 'phone' });
  const png = await api.createUser(tenant.tenantId, { username: 'png' });
  const plain = await api.createUser(tenant.tenantId, { username: 'plain' });
  const cut = await api.createUser(tenant.tenantId, { username: 'cut' });
  const elsewhere = await api.createUser(other.tenantId, { username: 'elsewhere' });
  const jpegFile = jpegWithMetadata(6);
  const cutFile = jpegFile.subarray(0, jpegFile.length - 40);
  await storeAsBefore(tenant.tenantId, phone.id, 'image/jpeg', jpegFile);
  await storeAsBefore(tenant.tenantId, png.id, 'image/png', pngWithMetadata());
  await storeAsBefore(tenant.tenantId, plain.id, 'image/png', PNG_1X1);
  await storeAsBefore(tenant.tenantId, cut.id, 'image/jpeg', cutFile);
  await storeAsBefore(other.tenantId, elsewhere.id, 'image/jpeg', jpegFile);
  const before = await storedOf(phone.id);

  const outcome = await stripStoredPictures(api.db, commandSource('pictures:strip-metadata'));
  t.strictSame(outcome, { read: 5, stripped: 3, unreadable: 1 });

  const after = await storedOf(phone.id);
  t.strictSame(secretsIn(after.content), [], 'the JPEG carries no metadata now');
  t.equal((await exifr.parse(after.content, { gps: true }))?.latitude, undefined, 'no GPS position');
  t.equal(await exifr.orientation(after.content), 6, 'the orientation is kept');
  t.ok(after.content.equals(withoutMetadata(jpegFile, 'image/jpeg', 6)), 'as an upload of the same file is stored now');
  t.equal(after.etag, pictureEtag(after.content), 'a new ETag: the picture URL changes, so caches fetch it again');
  t.not(after.etag, before.etag);
  t.ok(after.updatedAt > before.updatedAt);
  t.strictSame(secretsIn((await storedOf(png.id)).content), [], 'the PNG carries no metadata now');
  t.strictSame(secretsIn((await storedOf(elsewhere.id)).content), [], "another tenant's too");
  t.ok((await storedOf(plain.id)).content.equals(PNG_1X1), 'a picture without metadata is left as it was');
  t.ok((await storedOf(cut.id)).content.equals(cutFile), 'one whose structure cannot be followed is left as stored');

  const served = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: phone.id } });
  const url = new URL(served.body.profile_picture_url, 'http://atrium.test');
  const picture = await api.call(t, 'getProfilePicture', { params: { user: phone.id }, query: Object.fromEntries(url.searchParams) });
  t.equal(picture.status, 200);
  t.ok(picture.raw.equals(after.content), 'served without its metadata');

  t.strictSame(
    [...(await events(tenant.tenantId))],
    [phone, png].map((user) => ({
      action: 'user.updated',
      actor_type: 'command_line',
      command: 'pictures:strip-metadata',
      target_id: String(user.id),
      changes: { profile_picture: { changed: true } },
    })),
    "each change in its tenant's trail, by the command line",
  );
  t.equal((await events(other.tenantId)).length, 1);

  t.strictSame(await stripStoredPictures(api.db, commandSource('pictures:strip-metadata')), { read: 5, stripped: 0, unreadable: 1 }, 'again: nothing to do');
  t.equal((await events(tenant.tenantId)).length, 2, 'and nothing recorded');
});

t.test('a picture replaced after the command read it is kept as replaced, and nothing is recorded', async (t) => {
  const racer = await api.createUser(tenant.tenantId, { username: 'racer' });
  await storeAsBefore(tenant.tenantId, racer.id, 'image/jpeg', jpegWithMetadata(1));
  const waitingForLock = async () =>
    (
      await api.db.owner.execute<{ n: number }>(
        sql`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
      )
    )[0]!.n;
  let run: ReturnType<typeof stripStoredPictures> | undefined;
  // The user's row is held as an upload holds it, so the command has read the picture and waits
  // for the row when the picture is replaced; then the command goes on with what it read.
  await api.db.owner.transaction(async (tx) => {
    await tx.execute(sql`select 1 from users where tenant_id = ${tenant.tenantId} and id = ${racer.id} for no key update`);
    run = stripStoredPictures(api.db, commandSource('pictures:strip-metadata'));
    t.equal(await eventually(waitingForLock, (n) => n === 1), 1, 'the command waits for the user');
    await tx
      .update(userProfilePictures)
      .set({ mediaType: 'image/png', content: PNG_1X1, etag: pictureEtag(PNG_1X1) })
      .where(eq(userProfilePictures.userId, racer.id));
  });
  t.strictSame(await run, { read: 6, stripped: 0, unreadable: 1 }, 'the only picture with metadata was replaced meanwhile');
  const kept = await storedOf(racer.id);
  t.ok(kept.content.equals(PNG_1X1), 'the replacement stays');
  t.equal(kept.etag, pictureEtag(PNG_1X1), 'with its own ETag');
  t.equal((await events(tenant.tenantId)).length, 2, 'nothing recorded for it');
});
