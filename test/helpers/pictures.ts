/**
 * Pictures carrying the metadata a phone or an editor writes beside the image, built the
 * way those write it: a real JPEG (jpeg-js) with EXIF (a GPS position, the camera's make,
 * an orientation), XMP, IPTC, a comment, a colour profile, a multi-picture index and a
 * trailer after the image; a PNG with text, EXIF and time chunks; a WebP with EXIF and XMP
 * chunks. Every piece of metadata holds `SECRET`, so a test can tell none is left.
 */
import { crc32 } from 'node:zlib';
import jpeg from 'jpeg-js';
import { PNG_1X1 } from './multipart.ts';

/** A 1×1 lossless WebP (simple format: RIFF, WEBP, one VP8L chunk). */
export const WEBP_1X1 = Buffer.from('UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==', 'base64');

/** Where the GPS position of `exifSegment` points: 48°51′24″ N, 2°21′3″ E. */
export const SECRET_POSITION = { latitude: 48 + 51 / 60 + 24 / 3600, longitude: 2 + 21 / 60 + 3 / 3600 };

/** A JPEG segment: marker, length (counting itself), payload. */
export function segment(marker: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt16BE(0xff00 | marker, 0);
  head.writeUInt16BE(payload.length + 2, 2);
  return Buffer.concat([head, payload]);
}

/**
 * EXIF (APP1) as a camera writes it, big-endian TIFF: IFD0 with Make `SECRETCAM`,
 * `orientation` and a pointer to a GPS IFD holding `SECRET_POSITION`.
 */
export function exifSegment(orientation: number): Buffer {
  const tiff = Buffer.alloc(162);
  tiff.write('MM\0*', 0, 'latin1');
  tiff.writeUInt32BE(8, 4);
  const entry = (at: number, tag: number, type: number, count: number, value: number, short = false) => {
    tiff.writeUInt16BE(tag, at);
    tiff.writeUInt16BE(type, at + 2);
    tiff.writeUInt32BE(count, at + 4);
    if (short) tiff.writeUInt16BE(value, at + 8);
    else tiff.writeUInt32BE(value, at + 8);
  };
  // IFD0 at 8: three entries (8 + 2 + 36 + 4 = 50), then Make's text at 50 and the GPS IFD at 60.
  tiff.writeUInt16BE(3, 8);
  entry(10, 0x010f, 2, 10, 50); // Make, ASCII, at 50
  entry(22, 0x0112, 3, 1, orientation, true); // Orientation
  entry(34, 0x8825, 4, 1, 60); // GPSInfo IFD
  tiff.write('SECRETCAM\0', 50, 'latin1');
  // GPS IFD at 60: four entries (60 + 2 + 48 + 4 = 114), the latitude's rationals at 114, the longitude's at 138.
  tiff.writeUInt16BE(4, 60);
  entry(62, 0x0001, 2, 2, 0);
  tiff.write('N\0', 70, 'latin1'); // GPSLatitudeRef, inline
  entry(74, 0x0002, 5, 3, 114); // GPSLatitude
  entry(86, 0x0003, 2, 2, 0);
  tiff.write('E\0', 94, 'latin1'); // GPSLongitudeRef, inline
  entry(98, 0x0004, 5, 3, 138); // GPSLongitude
  [48, 1, 51, 1, 24, 1, 2, 1, 21, 1, 3, 1].forEach((value, i) => tiff.writeUInt32BE(value, 114 + 4 * i));
  return segment(0xe1, Buffer.concat([Buffer.from('Exif\0\0', 'latin1'), tiff]));
}

/** The colour profile's APP2 (kept: decoders need it); its bytes are no real profile, which no test decodes. */
export const ICC_SEGMENT = segment(0xe2, Buffer.from('ICC_PROFILE\0\x01\x01colour-profile-bytes', 'latin1'));

/** An APP14 segment holding `payload`. */
export const app14Segment = (payload: string): Buffer => segment(0xee, Buffer.from(payload, 'latin1'));

/** Adobe's APP14 (kept: it tells a decoder how the colours were transformed): identifier, version 100, no flags, transform 1 (YCbCr). */
export const ADOBE_SEGMENT = app14Segment('Adobe\0\x64\0\0\0\0\x01');

/** `plainJpeg()` with `segments` after its JFIF header. */
export function jpegWith(...segments: Buffer[]): Buffer {
  const plain = plainJpeg();
  const afterJfif = 4 + plain.readUInt16BE(4);
  return Buffer.concat([plain.subarray(0, afterJfif), ...segments, plain.subarray(afterJfif)]);
}

/** A 16×8 JPEG of a few colours (jpeg-js, baseline), without metadata but its JFIF header. */
export function plainJpeg(): Buffer {
  const width = 16;
  const height = 8;
  const data = Buffer.alloc(width * height * 4);
  for (let i = 0; i < width * height; i++) data.set([(i * 37) % 256, (i * 91) % 256, (i * 13) % 256, 255], i * 4);
  return Buffer.from(jpeg.encode({ data, width, height }, 90).data);
}

/**
 * `plainJpeg()` with a phone's and an editor's metadata after its JFIF header: EXIF with
 * `orientation` (none when undefined), XMP, IPTC, a comment, a colour profile, a
 * multi-picture index, and a trailer after the end of the image.
 */
export function jpegWithMetadata(orientation: number | undefined = 6): Buffer {
  const plain = plainJpeg();
  const afterJfif = 4 + plain.readUInt16BE(4);
  return Buffer.concat([
    plain.subarray(0, afterJfif),
    ...(orientation === undefined ? [] : [exifSegment(orientation)]),
    segment(0xe1, Buffer.from('http://ns.adobe.com/xap/1.0/\0<x:xmpmeta><rdf:Description>SECRET-XMP</rdf:Description></x:xmpmeta>', 'latin1')),
    segment(0xed, Buffer.from('Photoshop 3.0\x008BIM\x04\x04\0\0\0\0\0\x0bSECRET-IPTC', 'latin1')),
    segment(0xfe, Buffer.from('SECRET-COMMENT', 'latin1')),
    ICC_SEGMENT,
    segment(0xe2, Buffer.from('MPF\0SECRET-MPF', 'latin1')),
    plain.subarray(afterJfif),
    Buffer.from('SECRET-TRAILER', 'latin1'),
  ]);
}

/** A PNG chunk: length, type, data, CRC of type and data. */
function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

/** `PNG_1X1` with text, compressed-text, international-text, EXIF and time chunks after its header chunk. */
export function pngWithMetadata(): Buffer {
  const afterHeader = 8 + 12 + PNG_1X1.readUInt32BE(8);
  return Buffer.concat([
    PNG_1X1.subarray(0, afterHeader),
    pngChunk('tEXt', Buffer.from('Author\0SECRET-AUTHOR', 'latin1')),
    pngChunk('zTXt', Buffer.from('Comment\0\0x-not-really-compressed-SECRET', 'latin1')),
    pngChunk('iTXt', Buffer.from('Description\0\0\0\0\0SECRET-DESCRIPTION', 'latin1')),
    pngChunk('eXIf', exifSegment(1).subarray(10)),
    pngChunk('tIME', Buffer.from([7, 234, 11, 30, 12, 0, 0])),
    PNG_1X1.subarray(afterHeader),
  ]);
}

/**
 * A 1×1 animated PNG of two frames, as an encoder writes one: the animation's control
 * chunk (acTL) and the first frame's (fcTL) before the image data, which is the first
 * frame, then the second frame's control and data chunks (fcTL, fdAT: `PNG_1X1`'s pixels
 * again). Each chunk after the header carries the next sequence number.
 */
export function animatedPng(): Buffer {
  const afterHeader = 8 + 12 + PNG_1X1.readUInt32BE(8);
  const imageData = PNG_1X1.subarray(afterHeader + 8, afterHeader + 8 + PNG_1X1.readUInt32BE(afterHeader));
  const animation = Buffer.alloc(8);
  animation.writeUInt32BE(2, 0); // two frames, played for ever (0 loops)
  const frameControl = (sequence: number) => {
    const control = Buffer.alloc(26);
    control.writeUInt32BE(sequence, 0);
    control.writeUInt32BE(1, 4); // width
    control.writeUInt32BE(1, 8); // height; the offsets stay 0
    control.writeUInt16BE(1, 20); // a delay of 1/10 s
    control.writeUInt16BE(10, 22);
    return pngChunk('fcTL', control);
  };
  const sequenced = Buffer.alloc(4);
  sequenced.writeUInt32BE(2, 0);
  return Buffer.concat([
    PNG_1X1.subarray(0, afterHeader),
    pngChunk('acTL', animation),
    frameControl(0),
    PNG_1X1.subarray(afterHeader, PNG_1X1.length - 12),
    frameControl(1),
    pngChunk('fdAT', Buffer.concat([sequenced, imageData])),
    PNG_1X1.subarray(PNG_1X1.length - 12),
  ]);
}

/** `animatedPng()` with a text chunk after its header chunk. */
export function animatedPngWithMetadata(): Buffer {
  const plain = animatedPng();
  const afterHeader = 8 + 12 + plain.readUInt32BE(8);
  return Buffer.concat([plain.subarray(0, afterHeader), pngChunk('tEXt', Buffer.from('Author\0SECRET-AUTHOR', 'latin1')), plain.subarray(afterHeader)]);
}

/** A RIFF chunk of a WebP: type, little-endian size, data padded to an even length. */
function webpChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.write(type, 0, 'latin1');
  head.writeUInt32LE(data.length, 4);
  return Buffer.concat([head, data, Buffer.alloc(data.length % 2)]);
}

/** A 1×1 WebP in the extended format: VP8X flagging EXIF and XMP, the image (`WEBP_1X1`'s), an EXIF and an XMP chunk. */
export function webpWithMetadata(): Buffer {
  const vp8x = Buffer.alloc(10);
  vp8x[0] = 0x08 | 0x04 | 0x10; // EXIF, XMP and alpha
  // Canvas width and height minus one, 24 bits each: 0 for 1×1.
  return riff([
    webpChunk('VP8X', vp8x),
    WEBP_1X1.subarray(12),
    webpChunk('EXIF', exifSegment(1).subarray(10)),
    webpChunk('XMP ', Buffer.from('<x:xmpmeta>SECRET-XMP-WEBP</x:xmpmeta>', 'latin1')),
  ]);
}

/** A WebP (RIFF) file of `chunks`. */
export function riff(chunks: Buffer[]): Buffer {
  const head = Buffer.from('RIFF\0\0\0\0WEBP', 'latin1');
  const file = Buffer.concat([head, ...chunks]);
  file.writeUInt32LE(file.length - 8, 4);
  return file;
}
