/**
 * A profile picture without what the camera or editor wrote beside the image: GPS
 * position, time, device, names and comments (EXIF, XMP, IPTC, text chunks). Every
 * colleague who sees the picture could read them. The image data itself is copied byte
 * for byte (nothing is decoded or re-encoded), and so are the segments a decoder needs
 * (tables, colour profile). A JPEG's orientation, which only EXIF carries, is written
 * back as a minimal EXIF block of that one tag, so a phone photo is not shown on its side.
 * GIF carries no EXIF and is kept as sent. docs/users.md#profile-pictures.
 */

/** Thrown for a file whose structure this walk cannot follow: it is refused, not stored with what it may hide. */
export class UnreadablePicture extends Error {
  override name = 'UnreadablePicture';
}

/** JPEG segments kept besides the image's own (frame, tables, scans): JFIF (APP0), the ICC colour profile (APP2), Adobe's colour transform (APP14). */
function keptJpegSegment(marker: number, payload: Buffer): boolean {
  if (marker === 0xe0 || marker === 0xee) return true;
  if (marker === 0xe2) return payload.subarray(0, 12).toString('latin1') === 'ICC_PROFILE\0';
  // APP1 (EXIF, XMP), APP3–APP13, APP15 (vendors' metadata, IPTC) and COM (comments) go.
  return !(marker >= 0xe1 && marker <= 0xef) && marker !== 0xfe;
}

/** EXIF (APP1) holding only the orientation tag: a big-endian TIFF header and one IFD of one SHORT entry. */
function orientationSegment(orientation: number): Buffer {
  const segment = Buffer.alloc(36);
  segment.writeUInt16BE(0xffe1, 0);
  segment.writeUInt16BE(34, 2); // the length counts itself, not the marker
  segment.write('Exif\0\0MM\0*', 4, 'latin1');
  segment.writeUInt32BE(8, 14); // IFD0 right after the 8-byte TIFF header
  segment.writeUInt16BE(1, 18); // one entry
  segment.writeUInt16BE(0x0112, 20); // Orientation
  segment.writeUInt16BE(3, 22); // SHORT
  segment.writeUInt32BE(1, 24); // one value, held in the entry
  segment.writeUInt16BE(orientation, 28);
  segment.writeUInt32BE(0, 32); // no next IFD
  return segment;
}

/**
 * The JPEG up to its end-of-image marker, without metadata segments. Entropy-coded data
 * (after each scan's header) is copied to the next marker: a 0xFF in it is followed by a
 * stuffed 0x00 or a restart marker. What follows the end of the image (appended pictures
 * of a multi-picture file, vendors' trailers) goes too.
 */
function jpegWithoutMetadata(jpeg: Buffer, orientation: number | undefined): Buffer {
  const kept: Buffer[] = [jpeg.subarray(0, 2)];
  // Written before the first segment other than JFIF's, which comes first when present.
  let orientationTag = orientation !== undefined && orientation >= 2 && orientation <= 8 ? orientationSegment(orientation) : undefined;
  let at = 2;
  for (;;) {
    // Fill bytes may precede a marker.
    while (jpeg[at] === 0xff && jpeg[at + 1] === 0xff) at++;
    if (jpeg[at] !== 0xff || at + 1 >= jpeg.length) throw new UnreadablePicture('no JPEG marker where one belongs');
    const marker = jpeg[at + 1]!;
    if (orientationTag && marker !== 0xe0) {
      kept.push(orientationTag);
      orientationTag = undefined;
    }
    if (marker === 0xd9) {
      kept.push(jpeg.subarray(at, at + 2));
      return Buffer.concat(kept);
    }
    const end = at + 4 <= jpeg.length ? at + 2 + jpeg.readUInt16BE(at + 2) : Infinity;
    if (end > jpeg.length || end < at + 4) throw new UnreadablePicture('a JPEG segment is cut off');
    if (keptJpegSegment(marker, jpeg.subarray(at + 4, end))) kept.push(jpeg.subarray(at, end));
    at = end;
    if (marker !== 0xda) continue;
    // A scan: its entropy-coded data runs to the next 0xFF other than a stuffed 0xFF00 or a restart marker (0xFFD0–0xFFD7).
    let next = jpeg.indexOf(0xff, at);
    while (next !== -1 && (jpeg[next + 1] === 0x00 || (jpeg[next + 1]! >= 0xd0 && jpeg[next + 1]! <= 0xd7))) next = jpeg.indexOf(0xff, next + 2);
    if (next === -1 || next + 1 >= jpeg.length) throw new UnreadablePicture('a JPEG scan does not end');
    kept.push(jpeg.subarray(at, next));
    at = next;
  }
}

/** PNG chunks that hold text, EXIF or a time: the rest (image header and data, palette, colour, transparency) is kept. */
const PNG_METADATA = new Set(['tEXt', 'zTXt', 'iTXt', 'eXIf', 'tIME']);

/** The PNG up to its IEND chunk, without its metadata chunks (each chunk carries its own CRC, so the rest stays valid). */
function pngWithoutMetadata(png: Buffer): Buffer {
  const kept: Buffer[] = [png.subarray(0, 8)];
  let at = 8;
  for (;;) {
    if (at + 12 > png.length) throw new UnreadablePicture('a PNG chunk is cut off');
    const end = at + 12 + png.readUInt32BE(at);
    const type = png.subarray(at + 4, at + 8).toString('latin1');
    if (end > png.length) throw new UnreadablePicture('a PNG chunk is cut off');
    if (!PNG_METADATA.has(type)) kept.push(png.subarray(at, end));
    if (type === 'IEND') return Buffer.concat(kept);
    at = end;
  }
}

/** VP8X's flags: EXIF (bit 3) and XMP (bit 2) present. */
const VP8X_METADATA_FLAGS = 0x08 | 0x04;

/** The WebP (RIFF) without its EXIF and XMP chunks, the extended header's flags and the RIFF size made to match. */
function webpWithoutMetadata(webp: Buffer): Buffer {
  const riffEnd = 8 + webp.readUInt32LE(4);
  if (riffEnd > webp.length) throw new UnreadablePicture('the WebP is cut off');
  const kept: Buffer[] = [Buffer.from(webp.subarray(0, 12))];
  let at = 12;
  while (at < riffEnd) {
    if (at + 8 > riffEnd) throw new UnreadablePicture('a WebP chunk is cut off');
    const type = webp.subarray(at, at + 4).toString('latin1');
    const size = webp.readUInt32LE(at + 4);
    // A chunk's data is padded to an even length.
    const end = at + 8 + size + (size % 2);
    if (end > riffEnd) throw new UnreadablePicture('a WebP chunk is cut off');
    if (type === 'VP8X') {
      const header = Buffer.from(webp.subarray(at, end));
      header[8] = header[8]! & ~VP8X_METADATA_FLAGS;
      kept.push(header);
    } else if (type !== 'EXIF' && type !== 'XMP ') {
      kept.push(webp.subarray(at, end));
    }
    at = end;
  }
  const result = Buffer.concat(kept);
  result.writeUInt32LE(result.length - 8, 4);
  return result;
}

/**
 * `content` (of the detected `mediaType`) without its metadata; `orientation` is the
 * EXIF orientation read from it (image-size), written back for a JPEG.
 */
export function withoutMetadata(content: Buffer, mediaType: string, orientation?: number): Buffer {
  switch (mediaType) {
    case 'image/jpeg':
      return jpegWithoutMetadata(content, orientation);
    case 'image/png':
      return pngWithoutMetadata(content);
    case 'image/webp':
      return webpWithoutMetadata(content);
    default:
      return content;
  }
}
