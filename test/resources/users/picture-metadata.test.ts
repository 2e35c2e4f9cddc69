import exifr from 'exifr';
import { imageSize } from 'image-size';
import jpeg from 'jpeg-js';
import { crc32 } from 'node:zlib';
import t from 'tap';
import { jpegSizeHeader, withoutMetadata } from '../../../src/resources/users/picture-metadata.ts';
import { GIF_1X1, PNG_1X1 } from '../../helpers/multipart.ts';
import {
  ADOBE_SEGMENT,
  ICC_SEGMENT,
  exifSegment,
  segment,
  SECRET_POSITION,
  WEBP_1X1,
  app14Segment,
  jpegWith,
  jpegWithMetadata,
  plainJpeg,
  riff,
  webpWithMetadata,
  pngWithMetadata,
} from '../../helpers/pictures.ts';

const secretsIn = (file: Buffer) => file.toString('latin1').match(/SECRET[-A-Z]*/g) ?? [];

t.test('a JPEG: EXIF (GPS, make), XMP, IPTC, comment, multi-picture index and trailer go; image, profile and orientation stay', async (t) => {
  const sent = jpegWithMetadata(6);
  // The fixture carries what a phone writes, as an independent reader sees it.
  const before = await exifr.parse(sent, { gps: true, xmp: true, iptc: true });
  t.equal(before.Make, 'SECRETCAM');
  t.ok(
    Math.abs(before.latitude - SECRET_POSITION.latitude) < 1e-6 && Math.abs(before.longitude - SECRET_POSITION.longitude) < 1e-6,
    'the GPS position is readable before',
  );
  t.equal(imageSize(sent).orientation, 6);

  const stored = withoutMetadata(sent, 'image/jpeg', imageSize(sent).orientation);
  t.strictSame(secretsIn(stored), [], 'no metadata left');
  const after = await exifr.parse(stored, { gps: true, xmp: true, iptc: true, mergeOutput: true });
  t.equal(after?.latitude, undefined, 'no GPS position');
  t.equal(after?.Make, undefined, 'no camera make');
  t.equal(await exifr.orientation(stored), 6, 'the orientation is kept (a phone photo is not shown on its side)');
  t.equal(imageSize(stored).orientation, 6);
  t.ok(stored.includes(ICC_SEGMENT), 'the colour profile is kept');
  t.strictSame(stored.subarray(-2), Buffer.from([0xff, 0xd9]), 'ends with the end of the image: the trailer is gone');
  // The image data, byte for byte: both decode to the same pixels as the plain JPEG.
  const pixels = (file: Buffer) => Buffer.from(jpeg.decode(file, { useTArray: true }).data);
  t.ok(pixels(stored).equals(pixels(plainJpeg())), 'the same pixels');
});

t.test('a JPEG without orientation gets no EXIF at all; one without metadata is stored as sent', async (t) => {
  const stored = withoutMetadata(jpegWithMetadata(undefined), 'image/jpeg', undefined);
  t.equal(stored.indexOf(Buffer.from('Exif\0\0', 'latin1')), -1, 'no EXIF block');
  t.strictSame(secretsIn(stored), []);
  // Orientation 1 (as stored) needs no tag either.
  t.equal(withoutMetadata(jpegWithMetadata(1), 'image/jpeg', 1).indexOf(Buffer.from('Exif', 'latin1')), -1);
  const plain = plainJpeg();
  t.ok(withoutMetadata(plain, 'image/jpeg', undefined).equals(plain), 'nothing to remove: the same bytes');
});

t.test("APP14 is kept only as Adobe's colour transform, and only its 12 bytes; any other APP14 goes", async (t) => {
  const adobe = jpegWith(ADOBE_SEGMENT);
  t.ok(withoutMetadata(adobe, 'image/jpeg').equals(adobe), "Adobe's segment kept as sent");
  const address = jpegWith(app14Segment('Home: 1 SECRET-STREET, 48.8567 N 2.3508 E'));
  t.strictSame(secretsIn(withoutMetadata(address, 'image/jpeg')), [], 'an APP14 of text goes');
  t.ok(withoutMetadata(address, 'image/jpeg').equals(plainJpeg()), 'the rest as sent');
  const both = jpegWith(app14Segment('SECRET-NOT-ADOBE'), ADOBE_SEGMENT);
  t.ok(withoutMetadata(both, 'image/jpeg').equals(adobe), "another APP14 beside Adobe's goes");
  // Decoders read Adobe's first 12 bytes; what an application appends after them goes.
  const appended = jpegWith(app14Segment(`${ADOBE_SEGMENT.subarray(4).toString('latin1')}SECRET-APPENDED`));
  t.ok(withoutMetadata(appended, 'image/jpeg').equals(adobe), "Adobe's segment cut to its 12 bytes");
  // Shorter than Adobe's segment, decoders pass over it.
  t.ok(withoutMetadata(jpegWith(app14Segment('Adobe')), 'image/jpeg').equals(plainJpeg()), "Adobe's identifier alone goes");
});

t.test('a PNG: text, EXIF and time chunks go, the rest is byte for byte the image', async (t) => {
  const sent = pngWithMetadata();
  t.ok((await exifr.parse(sent, { tiff: true }))?.Make === 'SECRETCAM', 'the fixture carries EXIF');
  t.not(secretsIn(sent).length, 0);
  t.ok(withoutMetadata(sent, 'image/png').equals(PNG_1X1), 'the plain PNG, every chunk and CRC as before');
  t.ok(withoutMetadata(Buffer.concat([PNG_1X1, Buffer.from('SECRET-AFTER-IEND')]), 'image/png').equals(PNG_1X1), 'nothing after IEND');
});

t.test('a WebP: EXIF and XMP chunks go, their flags are cleared and the RIFF size matches', async (t) => {
  const stored = withoutMetadata(webpWithMetadata(), 'image/webp');
  t.strictSame(secretsIn(stored), []);
  t.equal(stored.readUInt32LE(4), stored.length - 8, 'RIFF size');
  t.equal(stored.subarray(12, 16).toString('latin1'), 'VP8X');
  t.equal(stored[20], 0x10, 'only the alpha flag is left');
  t.ok(stored.subarray(30).equals(WEBP_1X1.subarray(12)), 'the image chunk as sent');
  t.strictSame(imageSize(stored), { height: 1, width: 1, type: 'webp' });
  t.ok(withoutMetadata(WEBP_1X1, 'image/webp').equals(WEBP_1X1), 'a simple WebP is stored as sent');
});

t.test("what decoders pass over is passed over; JFIF's thumbnail, JFXX and unknown chunks go", async (t) => {
  const plain = plainJpeg();
  const afterJfif = 4 + plain.readUInt16BE(4);
  // Stray bytes between two segments: decoders warn and go on; they are dropped.
  const stray = Buffer.concat([plain.subarray(0, afterJfif), Buffer.from('SECRET-STRAY', 'latin1'), plain.subarray(afterJfif)]);
  t.ok(withoutMetadata(stray, 'image/jpeg').equals(plain), 'stray bytes dropped, the rest as sent');
  // A JFIF header carrying a 2×1 RGB thumbnail, and a JFXX thumbnail segment.
  const jfif = Buffer.from(plain.subarray(0, afterJfif));
  const thumbnail = Buffer.from('SECRET', 'latin1');
  const withThumb = Buffer.concat([jfif.subarray(6, 18), Buffer.from([2, 1]), thumbnail]);
  const app0 = Buffer.concat([Buffer.from([0xff, 0xe0, 0, withThumb.length + 2]), withThumb]);
  const jfxx = Buffer.concat([Buffer.from([0xff, 0xe0, 0, 14]), Buffer.from('JFXX\0\x13SECRET', 'latin1')]);
  const thumbed = Buffer.concat([plain.subarray(0, 2), app0, jfxx, plain.subarray(afterJfif)]);
  const stored = withoutMetadata(thumbed, 'image/jpeg');
  t.strictSame(secretsIn(stored), [], 'no thumbnail left');
  t.ok(stored.equals(plain), "JFIF's header kept without its thumbnail: the plain JPEG");
  // A C2PA manifest (PNG caBX, WebP C2PA) and a chunk no one knows.
  const pngChunk = (type: string, data: string) => {
    const body = Buffer.from(type + data, 'latin1');
    const chunk = Buffer.alloc(12 + data.length);
    chunk.writeUInt32BE(data.length, 0);
    body.copy(chunk, 4);
    chunk.writeUInt32BE(crc32(body), 8 + data.length);
    return chunk;
  };
  const afterHeader = 8 + 12 + PNG_1X1.readUInt32BE(8);
  const png = Buffer.concat([
    PNG_1X1.subarray(0, afterHeader),
    pngChunk('caBX', 'SECRET-C2PA'),
    pngChunk('zzZZ', 'SECRET-UNKNOWN'),
    PNG_1X1.subarray(afterHeader),
  ]);
  t.ok(withoutMetadata(png, 'image/png').equals(PNG_1X1), 'PNG: only the chunks it needs');
  const webp = riff([WEBP_1X1.subarray(12), Buffer.concat([Buffer.from('C2PA\x0b\0\0\0SECRET-C2PA\0', 'latin1')])]);
  t.ok(withoutMetadata(webp, 'image/webp').equals(WEBP_1X1), 'WebP: only the chunks it needs');
});

/** GIF_1X1 with `blocks` before its image (after its header, screen and colour table, 19 bytes, and graphic control, 8). */
const gifWith = (...blocks: Buffer[]) => Buffer.concat([GIF_1X1.subarray(0, 27), ...blocks, GIF_1X1.subarray(27)]);
/** A GIF extension: introducer, label, the data as sub-blocks of at most 255 bytes, terminator. */
const gifExtension = (label: number, ...subBlocks: string[]) =>
  Buffer.concat([
    Buffer.from([0x21, label]),
    ...subBlocks.map((data) => Buffer.concat([Buffer.from([data.length]), Buffer.from(data, 'latin1')])),
    Buffer.from([0]),
  ]);

t.test('a GIF keeps its images, graphic control, loop count and colour profile; comments, plain text, XMP and the rest go', async (t) => {
  t.ok(withoutMetadata(GIF_1X1, 'image/gif').equals(GIF_1X1), 'a plain GIF is stored as sent');
  const loop = gifExtension(0xff, 'NETSCAPE2.0', '\x01\0\0');
  const profile = gifExtension(0xff, 'ICCRGBG1012', 'not a real profile');
  const looping = gifWith(loop, profile);
  t.ok(withoutMetadata(looping, 'image/gif').equals(looping), 'the loop count and the colour profile kept');
  const commented = Buffer.concat([
    gifWith(
      gifExtension(0xfe, 'SECRET-COMMENT'),
      gifExtension(0x01, 'SECRET-PLAIN-TEXT'),
      gifExtension(0xff, 'XMP DataXMP', '<x:xmpmeta>SECRET-XMP</x:xmpmeta>'),
      loop,
      gifExtension(0x99, 'SECRET-UNKNOWN'),
    ),
    Buffer.from('SECRET-AFTER-THE-TRAILER', 'latin1'),
  ]);
  const stored = withoutMetadata(commented, 'image/gif');
  t.strictSame(secretsIn(stored), [], 'no comment, XMP, unknown extension or trailing bytes left');
  t.ok(stored.equals(gifWith(loop)), 'the rest as sent');
  t.strictSame(imageSize(stored), { height: 1, width: 1, type: 'gif' });
});

t.test('a file whose structure cannot be followed is refused, never stored with what it may hide', async (t) => {
  const jpegFile = jpegWithMetadata(6);
  const cuts: [string, Buffer, string][] = [
    ['a JPEG cut in its image data', jpegFile.subarray(0, jpegFile.length - 40), 'image/jpeg'],
    ['a JPEG cut in a segment', jpegFile.subarray(0, 30), 'image/jpeg'],
    ['a PNG cut in a chunk', PNG_1X1.subarray(0, PNG_1X1.length - 6), 'image/png'],
    ['a PNG without IEND', PNG_1X1.subarray(0, PNG_1X1.length - 12), 'image/png'],
    ['a WebP whose RIFF size exceeds the file', Buffer.concat([WEBP_1X1.subarray(0, 4), Buffer.from([0xff, 0, 0, 0]), WEBP_1X1.subarray(8)]), 'image/webp'],
    ['a WebP whose chunk exceeds the RIFF', riff([Buffer.concat([Buffer.from('VP8L\xff\0\0\0', 'latin1'), Buffer.alloc(4)])]), 'image/webp'],
    ['a GIF cut in its image data', GIF_1X1.subarray(0, GIF_1X1.length - 3), 'image/gif'],
    ['a GIF without its trailer', GIF_1X1.subarray(0, GIF_1X1.length - 1), 'image/gif'],
    ['a GIF header followed by other bytes', Buffer.concat([GIF_1X1.subarray(0, 13), Buffer.from('<script>alert(1)</script>', 'latin1')]), 'image/gif'],
  ];
  for (const [name, file, type] of cuts) t.throws(() => withoutMetadata(file, type, 6), { name: 'UnreadablePicture' }, name);
});

t.test("a JPEG's size and orientation are read from its header alone, however many segments come before its frame header", async (t) => {
  // image-size walks every segment before the frame header at a cost each: a file of a million tiny ones held the event
  // loop for most of a second. It is given the start, the last EXIF block, the frame header and an end, no more.
  const tables = Buffer.alloc(4 * 1_000_000);
  for (let at = 0; at < tables.length; at += 4) tables.set([0xff, 0xc4, 0x00, 0x02], at);
  for (const [name, sent] of [
    ['plain', plainJpeg()],
    ['with metadata and orientation 6', jpegWithMetadata(6)],
    ['a million tables first', jpegWith(tables)],
    ['a million tables after EXIF (orientation 8)', jpegWith(exifSegment(8), tables)],
  ] as const) {
    const header = jpegSizeHeader(sent);
    t.ok(header.length < 1024, `${name}: ${header.length} bytes read`);
    t.strictSame(imageSize(header), imageSize(sent), `${name}: the size and orientation image-size reads of the whole file`);
  }
  t.throws(() => jpegSizeHeader(jpegWith(tables).subarray(0, 4_000)), { name: 'UnreadablePicture' }, 'no frame header: unreadable');
});

t.test('segments of JPEG extensions (JPG0 to JPG13: JPEG-LS) are kept as sent; APP1 to APP15 and comments go', async (t) => {
  for (const marker of [0xf0, 0xf7, 0xf8, 0xfd]) {
    const sent = jpegWith(segment(marker, Buffer.from('extension', 'latin1')));
    t.ok(withoutMetadata(sent, 'image/jpeg').equals(sent), `0x${marker.toString(16)}: kept`);
  }
  for (const marker of [0xe1, 0xef, 0xfe])
    t.ok(withoutMetadata(jpegWith(segment(marker, Buffer.from('SECRET', 'latin1'))), 'image/jpeg').equals(plainJpeg()), `0x${marker.toString(16)}: gone`);
});
