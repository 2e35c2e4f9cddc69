import { eq, inArray, sql } from 'drizzle-orm';
import exifr from 'exifr';
import t, { type Test } from 'tap';
import { startTestApi } from '../../helpers/atrium.ts';
import { createDepartment, newUserBodies, roleNamed, rowCount } from '../../helpers/fixtures.ts';
import { GIF_1X1, PNG_1X1, multipart } from '../../helpers/multipart.ts';
import { ADOBE_SEGMENT, animatedPng, animatedPngWithMetadata, app14Segment, jpegWith, jpegWithMetadata, plainJpeg } from '../../helpers/pictures.ts';
import { departmentUsers } from '../../../src/resources/departments/table.ts';
import { signedPictureUrl } from '../../../src/resources/users/profile-picture.ts';
import { findPicture } from '../../../src/resources/users/queries.ts';
import { userProfilePictures, users } from '../../../src/resources/users/table.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('pictures');
const other = await api.createTenant('pictures-other');
const admin = tenant.adminToken;
const viewer = await api.createUser(tenant.tenantId, { username: 'viewer', permissions: ['users.view'] });
const nobody = await api.createUser(tenant.tenantId, { username: 'nobody' });
const outsider = await api.createUser(other.tenantId, { username: 'outsider', permissions: ['users.view'] });
const role = await roleNamed(api.db, tenant.tenantId, 'Employee');
const pictureCount = () => rowCount(api.db, 'user_profile_pictures');
const userCount = () => rowCount(api.db, 'users');

const createFields = newUserBodies(String(role.id), 'pic');

/** `/users/1/profile-picture/x.png?tenant=…` → path params and query of the picture operation. */
function parseUrl(url: string) {
  const parsed = new URL(url, 'http://atrium.test');
  const [, , user, , fileName] = parsed.pathname.split('/');
  return { user: Number(user), fileName: decodeURIComponent(fileName!), query: Object.fromEntries(parsed.searchParams) };
}

/** Uploads `content` as `target`'s picture (by the administrator) and fetches it from the answer's URL. */
async function uploadAndServe(t: Test, target: { id: number }, picture: { content: Buffer; fileName: string; type?: string }) {
  const form = await multipart({ profile_picture: picture });
  const uploaded = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...form });
  if (uploaded.status !== 200) return { uploaded, served: undefined };
  const { user, fileName, query } = parseUrl(uploaded.body.profile_picture_url);
  return { uploaded, served: await api.call(t, 'getProfilePictureNamed', { params: { user, fileName }, query }) };
}

t.test('bad uploads: non-image, oversized, malformed multipart; nothing is stored', async (t) => {
  const users = await userCount();
  const notImage = await multipart({
    ...createFields(),
    profile_picture: { content: Buffer.from('just text, not an image'), fileName: 'a.png', type: 'image/png' },
  });
  const res = await api.call(t, 'createUser', { token: admin, ...notImage });
  t.equal(res.status, 422);
  t.ok(res.body.errors.profile_picture);
  t.strictSame(res.body.error_codes, { profile_picture: ['unsupported_file_type'] });

  const big = Buffer.concat([PNG_1X1, Buffer.alloc(5 * 1024 * 1024)]);
  const oversized = await multipart({ ...createFields(), profile_picture: { content: big, fileName: 'big.png', type: 'image/png' } });
  t.equal((await api.call(t, 'createUser', { token: admin, ...oversized })).status, 413);

  const fine = await multipart(createFields());
  const truncated = fine.payload.subarray(0, fine.payload.length - 20);
  const malformed = await api.call(t, 'createUser', { token: admin, payload: truncated, contentType: fine.contentType });
  t.equal(malformed.status, 400, 'truncated multipart');
  const noBoundary = await api.call(t, 'createUser', { token: admin, payload: 'garbage', contentType: 'multipart/form-data' });
  t.ok(noBoundary.status >= 400 && noBoundary.status < 500, 'no boundary is a 4xx');

  const upload = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'x.png' } });
  t.equal((await api.call(t, 'deleteUser', { token: admin, params: { user: viewer.id }, ...upload })).status, 415, 'no uploads where none is expected');
  t.equal((await api.call(t, 'restoreUser', { token: admin, params: { user: viewer.id }, ...upload })).status, 415, 'JSON-only operation');
  const badField = await multipart({ ...createFields(), role_id: 'abc' });
  t.equal((await api.call(t, 'createUser', { token: admin, ...badField })).status, 422, 'multipart values are validated');
  t.equal(await userCount(), users, 'no user stored');
  t.equal(await pictureCount(), 0, 'no picture stored');
});

t.test('create with a picture (multipart): type detected from bytes, served with caching headers', async (t) => {
  const form = await multipart({
    ...createFields(),
    group_account: 'false',
    profile_picture: { content: PNG_1X1, fileName: 'Me & You.bin', type: 'application/octet-stream' },
  });
  const res = await api.call(t, 'createUser', { token: admin, ...form });
  t.equal(res.status, 201);
  t.equal(res.body.group_account, false, 'multipart text became a boolean');
  t.match(res.body.profile_picture_url, /^\/users\/\d+\/profile-picture\/Me-You\.png\?tenant=\d+&expires=\d+&signature=/);
  const { user, fileName, query } = parseUrl(res.body.profile_picture_url);

  const signed = await api.call(t, 'getProfilePictureNamed', { params: { user, fileName }, query });
  t.equal(signed.status, 200, 'the signed URL works without a token');
  t.equal(signed.headers['content-type'], 'image/png');
  t.ok(signed.raw.equals(PNG_1X1), 'the stored bytes');
  t.match(String(signed.headers['cache-control']), /private/);
  const etag = String(signed.headers.etag);
  t.match(etag, /^".+"$/);

  const unnamed = await api.call(t, 'getProfilePicture', { params: { user }, query });
  t.equal(unnamed.status, 200, 'works without the file name');
  t.match(String(unnamed.headers['content-disposition']), /Me-You\.png/);

  const cached = await api.call(t, 'getProfilePicture', { params: { user }, query, headers: { 'if-none-match': etag } });
  t.equal(cached.status, 304);
  t.equal(cached.raw.length, 0);
});

t.test('If-None-Match is read as RFC 9110 writes it: `*`, or entity tags that may hold commas, weak ones compared weakly', async (t) => {
  const form = await multipart({ ...createFields(), profile_picture: { content: PNG_1X1, fileName: 'a.png', type: 'image/png' } });
  const created = await api.call(t, 'createUser', { token: admin, ...form });
  const { user, query } = parseUrl(created.body.profile_picture_url);
  const etag = String((await api.call(t, 'getProfilePicture', { params: { user }, query })).headers.etag);
  const statusWith = async (ifNoneMatch: string) =>
    (await api.call(t, 'getProfilePicture', { params: { user }, query, headers: { 'if-none-match': ifNoneMatch } })).status;
  for (const matching of [etag, `W/${etag}`, `"a,b", ${etag}`, `"a,b",${etag}`, `"x", W/${etag}`, '*', '*, *', `, ${etag},`]) {
    t.equal(await statusWith(matching), 304, `If-None-Match: ${matching}`);
  }
  // One entity tag holding commas and a star (`"a,*,b"`) is no `*`, and a tag that merely holds the picture's is not its tag.
  const inner = etag.slice(1, -1);
  // Tags with what an array literal quotes (`\\`, braces, commas) are compared as sent.
  for (const other of ['"a,*,b"', '"a,b"', `"${inner},x"`, `"x,${inner}"`, `w/${etag}`, `"v1", *`, `W/"${inner}`, '"a\\b"', '"{x}", "NULL"']) {
    const answer = await api.call(t, 'getProfilePicture', { params: { user }, query, headers: { 'if-none-match': other } });
    t.equal(answer.status, 200, `If-None-Match: ${other}`);
    t.ok(answer.raw.equals(PNG_1X1), 'with the stored bytes');
  }
});

t.test('a read whose If-None-Match names the picture reads none of its bytes', async (t) => {
  const form = await multipart({ ...createFields(), profile_picture: { content: PNG_1X1, fileName: 'a.png', type: 'image/png' } });
  const created = await api.call(t, 'createUser', { token: admin, ...form });
  const { user } = parseUrl(created.body.profile_picture_url);
  const read = (known: 'any' | string[]) => api.db.tenant(tenant.tenantId, (tx) => findPicture(tx, user, known));
  const stored = await read([]);
  t.ok(stored?.content?.equals(PNG_1X1), 'without tags: the bytes');
  t.equal((await read([stored!.etag]))?.content, null, 'its tag: no bytes');
  t.equal((await read(['other', stored!.etag]))?.content, null, 'its tag in a list: no bytes');
  t.equal((await read('any'))?.content, null, '`*`: no bytes');
  t.ok((await read(['other']))?.content?.equals(PNG_1X1), 'another tag: the bytes');
});

t.test('the download name is written as RFC 8187 allows, whatever name the URL asks for', async (t) => {
  const form = await multipart({ ...createFields(), profile_picture: { content: PNG_1X1, fileName: 'a.png', type: 'image/png' } });
  const created = await api.call(t, 'createUser', { token: admin, ...form });
  const { user, query } = parseUrl(created.body.profile_picture_url);
  const fileName = "it's (1)*.png";
  const named = await api.call(t, 'getProfilePictureNamed', { params: { user, fileName }, query });
  t.equal(named.status, 200);
  const extended = /filename\*=UTF-8''([^;]*)/.exec(String(named.headers['content-disposition']))?.[1];
  // attr-char: letters, digits and !#$&+-.^_`|~; anything else percent-encoded.
  t.match(extended, /^(?:[A-Za-z0-9!#$&+\-.^_`|~]|%[0-9A-F]{2})+$/, 'only attr-chars and percent-encoded octets');
  t.equal(decodeURIComponent(extended!), fileName, 'which decode to the name asked for');
});

t.test('multipart: repeated fields are arrays (department_ids)', async (t) => {
  const [a, b] = [await createDepartment(api.db, tenant.tenantId, 'A'), await createDepartment(api.db, tenant.tenantId, 'B')];
  const form = await multipart({ ...createFields(), department_ids: [String(a!.id), String(b!.id)] });
  const res = await api.call(t, 'createUser', { token: admin, ...form, query: { relations: 'departments' } });
  t.equal(res.status, 201);
  const members = await api.db.owner.select().from(departmentUsers).where(eq(departmentUsers.userId, res.body.id));
  t.strictSame(members.map((m) => m.departmentId).sort(), [a!.id, b!.id].sort());
});

t.test('picture access: signature or Bearer token; otherwise refused', async (t) => {
  const form = await multipart({ ...createFields(), profile_picture: { content: GIF_1X1, fileName: 'x.gif' } });
  const created = await api.call(t, 'createUser', { token: admin, ...form });
  const { user, query } = parseUrl(created.body.profile_picture_url);
  t.equal((await api.call(t, 'getProfilePicture', { params: { user } })).status, 401, 'neither');
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, query: { ...query, signature: 'forged' } })).status, 401, 'forged');
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, query: { ...query, expires: 1000 } })).status, 401, 'expires altered');
  // Well signed, differing only in the time it was signed at: expiry alone decides.
  const signedAt = (now: number) => parseUrl(signedPictureUrl(api.atrium.services.secrets, tenant.tenantId, user, 'x.gif', query.v!, now)).query;
  const expired = signedAt(Date.now() - 3 * 3600_000);
  t.ok(Number(expired.expires) * 1000 < Date.now(), 'signed 3 h ago: expired');
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, query: expired })).status, 401, 'expired, correctly signed');
  const current = signedAt(Date.now() + 3 * 3600_000);
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, query: current })).status, 200, 'signed the same way, not expired');
  t.equal(
    (await api.call(t, 'getProfilePicture', { params: { user: user }, query: { ...query, tenant: other.tenantId } })).status,
    401,
    'other tenant in the URL',
  );
  const bearer = await api.call(t, 'getProfilePicture', { params: { user }, token: viewer.token });
  t.equal(bearer.status, 200, 'Bearer with users.view');
  t.equal(bearer.headers['content-type'], 'image/gif');
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, token: nobody.token })).status, 403, 'Bearer without permission');
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, token: outsider.token })).status, 404, "another tenant's token");
});

t.test('update: upload replaces, profile_picture null removes', async (t) => {
  const created = await api.call(t, 'createUser', { token: admin, body: { ...createFields(), role_id: role!.id } });
  const id = created.body.id;
  t.equal(created.body.profile_picture_url, null);
  const upload = await multipart({ city: 'Köln', profile_picture: { content: PNG_1X1, fileName: 'p.png' } });
  const updated = await api.call(t, 'updateUser', { token: admin, params: { user: id }, ...upload });
  t.equal(updated.status, 200);
  t.equal(updated.body.city, 'Köln');
  t.type(updated.body.profile_picture_url, 'string');
  const replaced = await api.call(t, 'updateUser', {
    token: admin,
    params: { user: id },
    ...(await multipart({ profile_picture: { content: GIF_1X1, fileName: 'p.gif' } })),
  });
  t.match(replaced.body.profile_picture_url, /p\.gif/);
  const sameName = await api.call(t, 'updateUser', {
    token: admin,
    params: { user: id },
    // Another delay in its graphic control extension: other bytes, the same picture.
    ...(await multipart({ profile_picture: { content: Buffer.concat([GIF_1X1.subarray(0, 23), Buffer.from([1]), GIF_1X1.subarray(24)]), fileName: 'p.gif' } })),
  });
  t.not(sameName.body.profile_picture_url, replaced.body.profile_picture_url, 'new bytes, new URL (cache key), even with the same name');
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, id));
  t.equal(stored!.mediaType, 'image/gif');
  const removed = await api.call(t, 'updateUser', { token: admin, params: { user: id }, body: { profile_picture: null } });
  t.equal(removed.body.profile_picture_url, null);
  t.equal((await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, id))).length, 0);
  const { user, query } = parseUrl(sameName.body.profile_picture_url);
  t.equal((await api.call(t, 'getProfilePicture', { params: { user }, query })).status, 404, 'gone');
});

t.test('a user updates their own picture; blackout deletes it', async (t) => {
  const self = await api.createUser(tenant.tenantId, { username: 'selfpic' });
  const res = await api.call(t, 'updateUser', {
    token: self.token,
    params: { user: self.id },
    ...(await multipart({ profile_picture: { content: PNG_1X1, fileName: 'me.png' } })),
  });
  t.equal(res.status, 200);
  t.equal((await api.call(t, 'getProfilePicture', { params: { user: self.id }, token: self.token })).status, 200, 'own picture by Bearer');
  t.equal((await api.call(t, 'blackoutUser', { token: admin, params: { user: self.id } })).status, 204);
  t.equal((await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, self.id))).length, 0);
});

/** PNG_1X1 with its header declaring `width` × `height` pixels (the rest unchanged: never decoded). */
function pngOfSize(width: number, height: number): Buffer {
  const png = Buffer.from(PNG_1X1);
  png.writeUInt32BE(width, 16);
  png.writeUInt32BE(height, 20);
  return png;
}

t.test('uploadProfilePicture: bad uploads change nothing', async (t) => {
  const target = await api.createUser(tenant.tenantId, { username: 'upload-bad' });
  const pictures = await pictureCount();
  const upload = (fields: Parameters<typeof multipart>[0]) => multipart(fields);
  const noFile = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...(await upload({ profile_picture: '' })) });
  t.equal(noFile.status, 422, 'a text part is no picture');
  t.ok(noFile.body.errors.profile_picture);
  t.strictSame(noFile.body.error_codes, { profile_picture: ['file_required'] });
  const missing = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...(await upload({})) });
  t.equal(missing.status, 422, 'the file part is required');
  const extra = await upload({ city: 'Köln', profile_picture: { content: PNG_1X1, fileName: 'x.png' } });
  t.equal((await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...extra })).status, 422, 'only the picture');
  const notImage = await upload({ profile_picture: { content: Buffer.from('plain text'), fileName: 'x.png' } });
  t.equal((await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...notImage })).status, 422);
  const big = await upload({ profile_picture: { content: Buffer.concat([PNG_1X1, Buffer.alloc(5 * 1024 * 1024)]), fileName: 'big.png' } });
  t.equal((await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...big })).status, 413);
  const json = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, body: { profile_picture: null } });
  t.equal(json.status, 415, 'multipart only');
  // A small file that declares a huge bitmap: every reader's browser would try to decode gigabytes.
  for (const [width, height] of [
    [60_000, 60_000],
    [10_001, 1],
    [8_000, 7_000],
  ]) {
    const bomb = await upload({ profile_picture: { content: pngOfSize(width!, height!), fileName: 'bomb.png' } });
    const refused = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...bomb });
    t.equal(refused.status, 422, `${width} × ${height} pixels`);
    t.strictSame(refused.body.error_codes, { profile_picture: ['out_of_range'] });
  }
  // A GIF whose screen and image declare no pixel: the refusal says a side needs one.
  const empty = Buffer.from(GIF_1X1);
  for (const at of [6, 8, 32, 34]) empty.writeUInt16LE(0, at);
  const noPixel = await api.call(t, 'uploadProfilePicture', {
    token: admin,
    params: { user: target.id },
    ...(await upload({ profile_picture: { content: empty, fileName: 'x.gif' } })),
  });
  t.equal(noPixel.status, 422, '0 × 0 pixels');
  t.match(noPixel.body.errors.profile_picture[0], /at least 1 and at most 10000 pixels a side .*\(it is 0 × 0\)/);
  // A GIF header followed by anything but a GIF's blocks is no image.
  const scripted = Buffer.concat([GIF_1X1.subarray(0, 13), Buffer.from('<script>alert(1)</script>')]);
  const notGif = await api.call(t, 'uploadProfilePicture', {
    token: admin,
    params: { user: target.id },
    ...(await upload({ profile_picture: { content: scripted, fileName: 'x.gif' } })),
  });
  t.equal(notGif.status, 422, "GIF's header before a script");
  t.strictSame(notGif.body.error_codes, { profile_picture: ['unsupported_file_type'] });
  const disguised = await upload({
    profile_picture: { content: Buffer.concat([PNG_1X1.subarray(0, 8), Buffer.from('<html><script>alert(1)</script>')]), fileName: 'x.png' },
  });
  const notPng = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...disguised });
  t.equal(notPng.status, 422, "PNG's signature before HTML: no image header to read");
  t.strictSame(notPng.body.error_codes, { profile_picture: ['unsupported_file_type'] });
  // Its header reads as a JPEG, but where its image data should end the file does: what follows cannot be told apart from metadata.
  const photo = jpegWithMetadata(6);
  const cut = await upload({ profile_picture: { content: photo.subarray(0, photo.length - 40), fileName: 'cut.jpg' } });
  const cutOff = await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...cut });
  t.equal(cutOff.status, 422, 'a JPEG cut off in its image data');
  t.strictSame(cutOff.body.error_codes, { profile_picture: ['unsupported_file_type'] });
  t.equal(await pictureCount(), pictures, 'nothing stored');
  const phone = await upload({ profile_picture: { content: pngOfSize(8_000, 6_000), fileName: 'phone.png' } });
  t.equal((await api.call(t, 'uploadProfilePicture', { token: admin, params: { user: target.id }, ...phone })).status, 200, 'a 48-megapixel photo fits');
});

/** GIF_1X1 (a 1×1 screen) whose one image is `width` × `height` pixels at `left`, `top`; the rest unchanged (never decoded). */
function gifWithFrame(left: number, top: number, width: number, height: number): Buffer {
  const gif = Buffer.from(GIF_1X1);
  // The image descriptor follows the header, screen, colour table and graphic control (27 bytes) and its 0x2C.
  [left, top, width, height].forEach((value, i) => gif.writeUInt16LE(value, 28 + 2 * i));
  return gif;
}

t.test("a GIF's frames are judged by the limits of its screen: browsers grow the screen to fit a larger frame", async (t) => {
  const target = await api.createUser(tenant.tenantId, { username: 'upload-gif-frames' });
  const pictures = await pictureCount();
  const send = async (content: Buffer) =>
    api.call(t, 'uploadProfilePicture', {
      token: admin,
      params: { user: target.id },
      ...(await multipart({ profile_picture: { content, fileName: 'x.gif' } })),
    });
  // 35 bytes: a 1×1 screen without a colour table, one 60000×60000 image of a few bytes of LZW data, the trailer.
  const screen = Buffer.from([1, 0, 1, 0, 0, 0, 0]);
  const descriptor = Buffer.from([0x2c, 0, 0, 0, 0, 0x60, 0xea, 0x60, 0xea, 0]);
  const bomb = Buffer.concat([Buffer.from('GIF89a', 'latin1'), screen, descriptor, Buffer.from([2, 8, 0x4c, 1, 0, 0, 0, 0, 0, 0, 0, 0x3b])]);
  t.equal(bomb.length, 35);
  const refused = await send(bomb);
  t.equal(refused.status, 422, 'a 1×1 screen holding a 60000 × 60000 frame');
  t.strictSame(refused.body.error_codes, { profile_picture: ['out_of_range'] });
  t.match(refused.body.errors?.profile_picture?.[0], /\(it is 60000 × 60000\)/, 'the size a browser would decode');
  // The frame's size, and where it ends (its place plus its size), a side and in all.
  for (const [left, top, width, height] of [
    [0, 0, 10_001, 1],
    [0, 0, 1, 10_001],
    [0, 0, 8_000, 7_000],
    [9_999, 0, 2, 1],
    [0, 60_000, 1, 1],
    [5_000, 0, 5_000, 7_000],
  ]) {
    const res = await send(gifWithFrame(left!, top!, width!, height!));
    t.equal(res.status, 422, `a ${width} × ${height} frame at ${left}, ${top}`);
    t.strictSame(res.body.error_codes, { profile_picture: ['out_of_range'] });
  }
  // Every frame, not only the first.
  const twoFrames = Buffer.concat([GIF_1X1.subarray(0, 42), gifWithFrame(0, 0, 60_000, 60_000).subarray(27)]);
  const second = await send(twoFrames);
  t.equal(second.status, 422, 'a second frame of 60000 × 60000');
  t.strictSame(second.body.error_codes, { profile_picture: ['out_of_range'] });
  t.equal(await pictureCount(), pictures, 'nothing stored');
  // A frame beyond the screen but within the limits is a picture of that size.
  t.equal((await send(gifWithFrame(50, 50, 100, 100))).status, 200, 'a 100 × 100 frame at 50, 50 of a 1×1 screen');
  t.equal((await send(gifWithFrame(0, 0, 8_000, 6_000))).status, 200, 'a 48-megapixel frame');
});

t.test('a phone photo is stored and served without its metadata (GPS position, camera), its orientation kept', async (t) => {
  const target = await api.createUser(tenant.tenantId, { username: 'upload-photo' });
  const sent = jpegWithMetadata(6);
  t.ok((await exifr.gps(sent))?.latitude, 'the photo as sent holds a position');
  const { uploaded, served } = await uploadAndServe(t, target, { content: sent, fileName: 'IMG_0001.JPG' });
  t.equal(uploaded.status, 200);
  if (!served) return;
  t.equal(served.status, 200);
  t.equal(served.headers['content-type'], 'image/jpeg');
  t.equal(await exifr.gps(served.raw), undefined, 'no GPS position');
  t.equal((await exifr.parse(served.raw))?.Make, undefined, 'no camera');
  t.equal(await exifr.orientation(served.raw), 6, 'the orientation');
  t.notMatch(served.raw.toString('latin1'), /SECRET/, 'no XMP, IPTC, comment or trailer');
  t.ok(served.raw.length < sent.length);
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, target.id));
  t.ok(stored!.content.equals(served.raw), 'stored as served: the metadata is not kept anywhere');
});

t.test("a JPEG's APP14 is served only as Adobe's colour transform: text an application wrote there is not", async (t) => {
  const target = await api.createUser(tenant.tenantId, { username: 'upload-app14' });
  const sent = jpegWith(app14Segment('Home: 1 SECRET-STREET, 48.8567 N 2.3508 E'), ADOBE_SEGMENT);
  const { uploaded, served } = await uploadAndServe(t, target, { content: sent, fileName: 'me.jpg' });
  t.equal(uploaded.status, 200);
  if (!served) return;
  t.equal(served.status, 200);
  t.notMatch(served.raw.toString('latin1'), /SECRET/, 'no address');
  t.ok(served.raw.equals(jpegWith(ADOBE_SEGMENT)), "Adobe's segment kept, the rest as sent");
});

t.test('an animated PNG is a PNG: stored with its frames and without its text, served as image/png', async (t) => {
  const target = await api.createUser(tenant.tenantId, { username: 'upload-apng' });
  const { uploaded, served } = await uploadAndServe(t, target, { content: animatedPngWithMetadata(), fileName: 'wave.apng', type: 'image/png' });
  if (!t.equal(uploaded.status, 200, 'accepted') || !served) return;
  t.match(uploaded.body.profile_picture_url, /\/wave\.png\?/, "a PNG's extension");
  t.equal(served.status, 200);
  t.equal(served.headers['content-type'], 'image/png');
  t.ok(served.raw.equals(animatedPng()), 'every frame kept (acTL, fcTL, fdAT), the text chunk gone');
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, target.id));
  t.equal(stored!.mediaType, 'image/png');
});

t.test('uploadProfilePicture: own picture, another user with users.administer, refusals', async (t) => {
  const self = await api.createUser(tenant.tenantId, { username: 'upload-self' });
  const form = async () => multipart({ profile_picture: { content: PNG_1X1, fileName: 'me.png' } });
  const own = await api.call(t, 'uploadProfilePicture', { token: self.token, params: { user: self.id }, ...(await form()) });
  t.equal(own.status, 200);
  t.match(own.body.profile_picture_url, /me\.png/);
  const { user, query } = parseUrl(own.body.profile_picture_url);
  t.ok((await api.call(t, 'getProfilePicture', { params: { user }, query })).raw.equals(PNG_1X1), 'the stored bytes');

  const replaced = await api.call(t, 'uploadProfilePicture', {
    token: admin,
    params: { user: self.id },
    ...(await multipart({ profile_picture: { content: GIF_1X1, fileName: 'by-admin.gif' } })),
  });
  t.equal(replaced.status, 200, 'users.administer uploads for another user');
  t.match(replaced.body.profile_picture_url, /by-admin\.gif/);

  const delegated = await api.createUser(tenant.tenantId, { username: 'upload-delegated', permissions: ['users.administer', 'users.view'] });
  const refused = await api.call(t, 'uploadProfilePicture', { token: delegated.token, params: { user: tenant.adminUserId }, ...(await form()) });
  t.equal(refused.status, 403, 'not for a user whose role holds more than the caller');
  t.equal(
    (await api.call(t, 'uploadProfilePicture', { token: nobody.token, params: { user: self.id }, ...(await form()) })).status,
    403,
    'an employee, for another user',
  );
  t.equal((await api.call(t, 'uploadProfilePicture', { token: outsider.token, params: { user: self.id }, ...(await form()) })).status, 403, 'another tenant');
  const otherTenantAdmin = await api.call(t, 'uploadProfilePicture', { token: other.adminToken, params: { user: self.id }, ...(await form()) });
  t.equal(otherTenantAdmin.status, 404, "another tenant's user is a missing one");
  t.equal((await api.call(t, 'uploadProfilePicture', { params: { user: self.id }, ...(await form()) })).status, 401);
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, self.id));
  t.equal(stored!.mediaType, 'image/gif', 'the refused uploads changed nothing');
});

t.test('uploadProfilePicture answers and stores the user as updateUser does: updated_at and the audit event', async (t) => {
  const earlier = new Date('2026-01-02T03:04:05.678Z');
  /** A user without a picture, last updated at `earlier`, so that a moved updated_at shows whatever the clock's resolution. */
  const twin = async (username: string) => {
    const user = await api.createUser(tenant.tenantId, { username });
    await api.db.owner.update(users).set({ updatedAt: earlier }).where(eq(users.id, user.id));
    return user;
  };
  /** What a write left on `userId`: its answer's updated_at, the stored one, and the events it recorded (action, changes). */
  const send = async (operationId: 'updateUser' | 'uploadProfilePicture', userId: number, content: Buffer, fileName: string) => {
    const before = await auditOf(userId);
    const res = await api.call(t, operationId, { token: admin, params: { user: userId }, ...(await multipart({ profile_picture: { content, fileName } })) });
    t.equal(res.status, 200, `${operationId} → 200`);
    const [stored] = await api.db.owner.select({ updatedAt: users.updatedAt }).from(users).where(eq(users.id, userId));
    return { answered: res.body.updated_at as string, stored: stored!.updatedAt.toISOString(), events: (await auditOf(userId)).slice(before.length) };
  };
  const auditOf = async (userId: number) =>
    (
      await api.db.owner.execute<{ action: string; changes: Record<string, unknown> }>(
        sql`select action, changes from audit_events where target_type = 'user' and target_id = ${String(userId)} order by occurred_at, id`,
      )
    ).map((row) => ({ action: row.action, changes: row.changes }));

  const updated = await twin('updated-twin');
  const uploaded = await twin('uploaded-twin');
  const first = { update: await send('updateUser', updated.id, PNG_1X1, 'p.png'), upload: await send('uploadProfilePicture', uploaded.id, PNG_1X1, 'p.png') };
  t.not(first.update.answered, earlier.toISOString(), 'updateUser with a new picture moves updated_at');
  t.not(first.upload.answered, earlier.toISOString(), 'so does uploadProfilePicture');
  t.equal(first.upload.stored, first.upload.answered, 'as stored');
  t.strictSame(first.upload.events, first.update.events, 'and records the same event');
  t.strictSame(first.upload.events, [{ action: 'user.updated', changes: { profile_picture: { changed: true } } }], 'user.updated, the picture changed');

  // The same picture again, from a time well before: no change (docs/audit.md), so no event, and updated_at stays.
  const fromEarlier = () =>
    api.db.owner
      .update(users)
      .set({ updatedAt: earlier })
      .where(inArray(users.id, [updated.id, uploaded.id]));
  await fromEarlier();
  const again = { update: await send('updateUser', updated.id, PNG_1X1, 'p.png'), upload: await send('uploadProfilePicture', uploaded.id, PNG_1X1, 'p.png') };
  t.equal(again.update.answered, earlier.toISOString(), 'the same picture again: updated_at stays with updateUser');
  t.equal(again.upload.answered, earlier.toISOString(), 'and with uploadProfilePicture');
  t.equal(again.upload.stored, again.upload.answered, 'as stored');
  t.strictSame(again.update.events, [], 'no event for updateUser');
  t.strictSame(again.upload.events, [], 'nor for uploadProfilePicture');

  // The same bytes under another name are another picture: the name is the file of its URL and of its download.
  await fromEarlier();
  const renamed = { update: await send('updateUser', updated.id, PNG_1X1, 'q.png'), upload: await send('uploadProfilePicture', uploaded.id, PNG_1X1, 'q.png') };
  t.not(renamed.update.answered, earlier.toISOString(), 'the same bytes under another name: updateUser moves updated_at');
  t.not(renamed.upload.answered, earlier.toISOString(), 'so does uploadProfilePicture');
  t.strictSame(renamed.upload.events, [{ action: 'user.updated', changes: { profile_picture: { changed: true } } }], 'the picture changed');
  t.strictSame(renamed.update.events, renamed.upload.events, 'with either operation');
  const [stored] = await api.db.owner
    .select({ fileName: userProfilePictures.fileName })
    .from(userProfilePictures)
    .where(eq(userProfilePictures.userId, uploaded.id));
  t.equal(stored?.fileName, 'q.png', 'stored under the new name');
});

t.test('a picture of a million tiny segments (the most a picture may hold) is accepted and stored as sent', async (t) => {
  // How long such a file held the event loop is measured, not asserted here (picture-metadata.test.ts holds the reading
  // of its size to a few bytes).
  const plain = plainJpeg();
  const length = Math.floor((5 * 1024 * 1024 - plain.length) / 4) * 4;
  const tables = Buffer.alloc(length);
  for (let at = 0; at < length; at += 4) tables.set([0xff, 0xc4, 0x00, 0x02], at);
  const picture = jpegWith(tables);
  const target = await api.createUser(tenant.tenantId, { username: 'segments' });
  const form = await multipart({ profile_picture: { content: picture, fileName: 'segments.jpg', type: 'image/jpeg' } });
  const res = await api.call(t, 'uploadProfilePicture', { token: target.token, params: { user: target.id }, ...form });
  t.equal(res.status, 200);
  const [stored] = await api.db.owner.select().from(userProfilePictures).where(eq(userProfilePictures.userId, target.id));
  t.ok(stored?.content.equals(picture), 'stored as sent: it holds no metadata');
});
