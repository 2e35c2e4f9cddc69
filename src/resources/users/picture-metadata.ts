/**
 * A profile picture without what the camera or editor wrote beside the image: GPS
 * position, time, device, names and comments (EXIF, XMP, IPTC, text chunks). Every
 * colleague who sees the picture could read them. The image data itself is copied byte
 * for byte (nothing is decoded or re-encoded), and so are the segments a decoder needs
 * (tables, colour profile). A JPEG's orientation, which only EXIF carries, is written
 * back as a minimal EXIF block of that one tag, so a phone photo is not shown on its side.
 * PNG, WebP and GIF keep only the chunks or blocks they need (an allow-list). Pictures
 * stored before are served as they were stored until `atrium pictures:strip-metadata`
 * stores them without it (stored-pictures.ts). The same walk of a GIF's blocks gives the
 * size its frames reach (`gifExtent`), which the upload's size limit judges.
 * docs/users.md#profile-pictures.
 */

/** Thrown for a file whose structure this walk cannot follow: it is refused, not stored with what it may hide. */
export class UnreadablePicture extends Error {
  override name = 'UnreadablePicture';
}

/**
 * What a walk keeps of a picture, joined once at its end: ranges of the file (a range that
 * starts where the one before ended extends it) and bytes of the walk's own, gathered in
 * one buffer. A file of 5 MiB may hold a million segments, chunks or blocks of a few
 * bytes: a buffer for each, kept until the end, held the event loop for a second and
 * took some 150 MB.
 */
class Kept {
  /** Pairs of offsets: a range of the file (start, end), or of `own` (-1 - start, -1 - end); `count` of them used. */
  private ranges = new Float64Array(64);
  private count = 0;
  private own = Buffer.alloc(0);
  private ownLength = 0;
  private length = 0;

  constructor(private readonly file: Buffer) {}

  /** The file's bytes from `start` to `end`. */
  range(start: number, end: number): void {
    this.length += end - start;
    const last = this.count - 1;
    if (last > 0 && this.ranges[last - 1]! >= 0 && this.ranges[last] === start) this.ranges[last] = end;
    else this.pair(start, end);
  }

  /** Bytes of the walk's own (copied). */
  bytes(bytes: Buffer): void {
    if (this.ownLength + bytes.length > this.own.length) {
      const grown = Buffer.alloc(Math.max(2 * this.own.length, this.ownLength + bytes.length, 64));
      this.own.copy(grown, 0, 0, this.ownLength);
      this.own = grown;
    }
    bytes.copy(this.own, this.ownLength);
    this.pair(-1 - this.ownLength, -1 - (this.ownLength + bytes.length));
    this.ownLength += bytes.length;
    this.length += bytes.length;
  }

  private pair(first: number, second: number): void {
    if (this.count + 2 > this.ranges.length) {
      const grown = new Float64Array(2 * this.ranges.length);
      grown.set(this.ranges);
      this.ranges = grown;
    }
    this.ranges[this.count++] = first;
    this.ranges[this.count++] = second;
  }

  join(): Buffer {
    const joined = Buffer.alloc(this.length);
    let at = 0;
    for (let i = 0; i < this.count; i += 2) {
      const start = this.ranges[i]!;
      const from = start < 0 ? this.own : this.file;
      const first = start < 0 ? -1 - start : start;
      const last = start < 0 ? -1 - this.ranges[i + 1]! : this.ranges[i + 1]!;
      // A few bytes are copied here: a call to copy them costs more than they do.
      if (last - first > 64) at += from.copy(joined, at, first, last);
      else for (let byte = first; byte < last; byte++) joined[at++] = from[byte]!;
    }
    return joined;
  }
}

/** Whether `file` holds `id` at `at`, within `end`. */
function holds(file: Buffer, at: number, end: number, id: Buffer): boolean {
  if (end - at < id.length) return false;
  for (let i = 0; i < id.length; i++) if (file[at + i] !== id[i]) return false;
  return true;
}

const JFIF_ID = Buffer.from('JFIF\0', 'latin1');
const ADOBE_ID = Buffer.from('Adobe', 'latin1');
const ICC_ID = Buffer.from('ICC_PROFILE\0', 'latin1');

/** The length of Adobe's APP14 payload: `Adobe`, version, flags0, flags1 and the colour transform. */
const ADOBE_LENGTH = 12;

/**
 * How the JPEG segment of `marker` from `at` to `end` (marker, length, payload) is kept:
 * as it is (true), as the buffer answered, or not at all (false). Kept
 * besides the image's own (frame, tables, scans): JFIF's header (APP0) without the
 * thumbnail it may carry, the ICC colour profile (APP2) and Adobe's colour transform
 * (APP14 starting with `Adobe`, cut to the 12 bytes decoders read). APP1 (EXIF, XMP),
 * JFXX thumbnails, APP3–APP13, any other APP14, APP15 (vendors' metadata, IPTC, C2PA) and
 * COM (comments) go.
 */
function keptJpegSegment(marker: number, jpeg: Buffer, at: number, end: number): Buffer | boolean {
  // The image's own segments (frame, tables, scans, and JPG0–JPG13 after the APPn, as JPEG-LS's) are kept as they
  // are, without a look at their bytes.
  if (marker < 0xe0 || (marker >= 0xf0 && marker !== 0xfe)) return true;
  const payload = at + 4;
  if (marker === 0xe0) {
    // JFIF: identifier, version, units, densities (14 bytes), then a thumbnail's size and pixels, which go.
    if (end - payload < 14 || !holds(jpeg, payload, end, JFIF_ID)) return false;
    const header = Buffer.alloc(18);
    jpeg.copy(header, 0, at, at + 16);
    header.writeUInt16BE(16, 2);
    return header;
  }
  if (marker === 0xee) {
    // Adobe's: identifier, version, two flag words and the colour transform. Whatever else an application writes in
    // APP14, or after those 12 bytes, is no part of the image.
    if (end - payload < ADOBE_LENGTH || !holds(jpeg, payload, end, ADOBE_ID)) return false;
    const adobe = Buffer.from(jpeg.subarray(at, at + 4 + ADOBE_LENGTH));
    adobe.writeUInt16BE(2 + ADOBE_LENGTH, 2);
    return adobe;
  }
  return marker === 0xe2 && holds(jpeg, payload, end, ICC_ID);
}

/** What image-size takes for an EXIF block: a segment whose payload starts so. */
const EXIF_ID = Buffer.from('Exif', 'latin1');
const JPEG_END = Buffer.from([0xff, 0xd9]);
/** An APP0 of no payload: image-size reads a frame header only after the first segment. */
const EMPTY_SEGMENT = Buffer.from([0xff, 0xe0, 0x00, 0x02]);

/**
 * Where the JPEG marker at or after `at` is: fill bytes (0xFF) before it are passed over, and
 * so are stray bytes, as decoders pass over them. Both walks of a JPEG (`jpegSizeHeader`,
 * `jpegWithoutMetadata`) follow its segments so.
 */
function jpegMarkerAt(jpeg: Buffer, at: number): number {
  if (jpeg[at] !== 0xff) at = jpeg.indexOf(0xff, at);
  while (at !== -1 && jpeg[at] === 0xff && jpeg[at + 1] === 0xff) at++;
  if (at === -1 || at + 1 >= jpeg.length) throw new UnreadablePicture('no JPEG marker where one belongs');
  return at;
}

/** Where the segment whose marker is at `at` (marker, length, payload) ends. */
function jpegSegmentEnd(jpeg: Buffer, at: number): number {
  const end = at + 4 <= jpeg.length ? at + 2 + jpeg.readUInt16BE(at + 2) : Infinity;
  if (end > jpeg.length || end < at + 4) throw new UnreadablePicture('a JPEG segment is cut off');
  return end;
}

/**
 * What image-size reads of a JPEG for its size and orientation, and no more: its start,
 * the last EXIF block before its first frame header (or a segment of nothing: image-size
 * looks for the frame header after the first segment), that frame header (SOF0–SOF2, the
 * ones image-size reads) and an end. image-size walks every segment before the frame header,
 * and every stray byte between them, at a microsecond or so each: a 5 MiB file of a
 * million tiny segments held the event loop for most of a second there. Segments are
 * followed as `jpegWithoutMetadata` follows them; throws `UnreadablePicture` when no frame
 * header comes before the image data.
 */
export function jpegSizeHeader(jpeg: Buffer): Buffer {
  let exif: Buffer | undefined;
  for (let at = 2; ;) {
    at = jpegMarkerAt(jpeg, at);
    const marker = jpeg[at + 1]!;
    if (marker === 0xd9 || marker === 0xda) throw new UnreadablePicture('no JPEG frame header before the image data');
    const end = jpegSegmentEnd(jpeg, at);
    if (marker >= 0xc0 && marker <= 0xc2) {
      // Precision, height and width: a frame header too short to hold them is none.
      if (end < at + 9) throw new UnreadablePicture('a JPEG frame header is cut off');
      return Buffer.concat([jpeg.subarray(0, 2), exif ?? EMPTY_SEGMENT, jpeg.subarray(at, end), JPEG_END]);
    }
    if (holds(jpeg, at + 4, end, EXIF_ID)) exif = jpeg.subarray(at, end);
    at = end;
  }
}

/** What image-size is given of a picture of `mediaType` for its size and orientation: a JPEG's header alone (`jpegSizeHeader`). */
export const sizeReading = (content: Buffer, mediaType: string): Buffer => (mediaType === 'image/jpeg' ? jpegSizeHeader(content) : content);

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
  const kept = new Kept(jpeg);
  kept.range(0, 2);
  // Written before the first segment other than JFIF's, which comes first when present.
  let orientationTag = orientation !== undefined && orientation >= 2 && orientation <= 8 ? orientationSegment(orientation) : undefined;
  for (let at = 2; ;) {
    // Stray bytes before a marker go too.
    at = jpegMarkerAt(jpeg, at);
    const marker = jpeg[at + 1]!;
    if (orientationTag && marker !== 0xe0) {
      kept.bytes(orientationTag);
      orientationTag = undefined;
    }
    if (marker === 0xd9) {
      kept.range(at, at + 2);
      return kept.join();
    }
    const end = jpegSegmentEnd(jpeg, at);
    const segment = keptJpegSegment(marker, jpeg, at, end);
    if (segment === true) kept.range(at, end);
    else if (segment) kept.bytes(segment);
    at = end;
    if (marker !== 0xda) continue;
    // A scan: its entropy-coded data runs to the next 0xFF other than a stuffed 0xFF00 or a restart marker (0xFFD0–0xFFD7).
    let next = jpeg.indexOf(0xff, at);
    while (next !== -1 && (jpeg[next + 1] === 0x00 || (jpeg[next + 1]! >= 0xd0 && jpeg[next + 1]! <= 0xd7))) next = jpeg.indexOf(0xff, next + 2);
    if (next === -1 || next + 1 >= jpeg.length) throw new UnreadablePicture('a JPEG scan does not end');
    kept.range(at, next);
    at = next;
  }
}

/**
 * PNG chunks kept: those of the image (header, palette, data, end, APNG's frames) and
 * those that say how to show it (transparency, gamma, chromaticities, colour space, ICC
 * profile, significant bits, background, pixel size, HDR metadata). Every other chunk
 * goes: text, EXIF, time, C2PA manifests, and whatever an editor adds.
 */
const PNG_KEPT_NAMES = [
  'IHDR',
  'PLTE',
  'IDAT',
  'IEND',
  'acTL',
  'fcTL',
  'fdAT',
  'tRNS',
  'gAMA',
  'cHRM',
  'sRGB',
  'iCCP',
  'cICP',
  'mDCV',
  'cLLI',
  'sBIT',
  'bKGD',
  'pHYs',
];

/** A chunk's type as the number its four bytes make (read without making a string of each chunk's). */
const chunkType = (name: string) => Buffer.from(name, 'latin1').readUInt32BE(0);
const PNG_KEPT = new Set(PNG_KEPT_NAMES.map(chunkType));
const IEND = chunkType('IEND');

/** The PNG up to its IEND chunk, with only the chunks it needs (each chunk carries its own CRC, so the rest stays valid). */
function pngWithoutMetadata(png: Buffer): Buffer {
  const kept = new Kept(png);
  kept.range(0, 8);
  let at = 8;
  for (;;) {
    if (at + 12 > png.length) throw new UnreadablePicture('a PNG chunk is cut off');
    const end = at + 12 + png.readUInt32BE(at);
    const type = png.readUInt32BE(at + 4);
    if (end > png.length) throw new UnreadablePicture('a PNG chunk is cut off');
    if (PNG_KEPT.has(type)) kept.range(at, end);
    if (type === IEND) return kept.join();
    at = end;
  }
}

/** VP8X's flags: EXIF (bit 3) and XMP (bit 2) present. */
const VP8X_METADATA_FLAGS = 0x08 | 0x04;

/**
 * WebP chunks kept: the image's (lossy, lossless, alpha, animation and its frames), the
 * extended header and the ICC profile. EXIF, XMP, C2PA and any other chunk go.
 */
const WEBP_KEPT = new Set(['VP8 ', 'VP8L', 'VP8X', 'ALPH', 'ANIM', 'ANMF', 'ICCP'].map(chunkType));
const VP8X = chunkType('VP8X');

/** The WebP (RIFF) with only the chunks it needs, the extended header's EXIF and XMP flags cleared and the RIFF size made to match. */
function webpWithoutMetadata(webp: Buffer): Buffer {
  const riffEnd = 8 + webp.readUInt32LE(4);
  if (riffEnd > webp.length) throw new UnreadablePicture('the WebP is cut off');
  const kept = new Kept(webp);
  kept.range(0, 12);
  let at = 12;
  while (at < riffEnd) {
    if (at + 8 > riffEnd) throw new UnreadablePicture('a WebP chunk is cut off');
    const type = webp.readUInt32BE(at);
    const size = webp.readUInt32LE(at + 4);
    // A chunk's data is padded to an even length.
    const end = at + 8 + size + (size % 2);
    if (end > riffEnd) throw new UnreadablePicture('a WebP chunk is cut off');
    if (type === VP8X) {
      const header = Buffer.from(webp.subarray(at, end));
      header[8] = header[8]! & ~VP8X_METADATA_FLAGS;
      kept.bytes(header);
    } else if (WEBP_KEPT.has(type)) {
      kept.range(at, end);
    }
    at = end;
  }
  const result = kept.join();
  result.writeUInt32LE(result.length - 8, 4);
  return result;
}

/**
 * GIF application extensions kept, by their identifier and authentication code: the
 * animation's loop count (Netscape's, and its twin) and the ICC colour profile. XMP and
 * any other application's data go.
 */
const GIF_KEPT_APPLICATIONS = new Set(['NETSCAPE2.0', 'ANIMEXTS1.0', 'ICCRGBG1012']);

/** A GIF's block: where it starts and ends, what it is, and whether it is kept without metadata. */
interface GifBlock {
  kind: 'screen' | 'image' | 'extension' | 'trailer';
  at: number;
  end: number;
  keep: boolean;
}

/**
 * The blocks of a GIF up to its trailer: first its header, screen and colour table, then
 * its images, extensions and trailer. Kept are the images, the graphic control extensions
 * and the application extensions in `GIF_KEPT_APPLICATIONS`; comments, plain-text
 * extensions (text that browsers do not show), other application extensions and unknown
 * ones are not. Blocks are self-delimiting, so what is kept stays valid.
 */
function* gifBlocks(gif: Buffer): Generator<GifBlock> {
  const cut = () => new UnreadablePicture('a GIF block is cut off');
  /** The end of the data sub-blocks starting at `at` (after their zero-length terminator). */
  const afterSubBlocks = (at: number): number => {
    for (;;) {
      if (at >= gif.length) throw cut();
      const size = gif[at]!;
      at += 1 + size;
      if (size === 0) return at;
    }
  };
  /** The size of a colour table that the packed byte `packed` announces, or 0. */
  const colourTable = (packed: number) => (packed & 0x80 ? 3 * 2 ** ((packed & 0x07) + 1) : 0);
  if (gif.length < 13) throw cut();
  let at = 13 + colourTable(gif[10]!);
  yield { kind: 'screen', at: 0, end: at, keep: true };
  for (;;) {
    if (at >= gif.length) throw cut();
    const introducer = gif[at]!;
    if (introducer === 0x3b) {
      yield { kind: 'trailer', at, end: at + 1, keep: true };
      return;
    }
    let block: GifBlock;
    if (introducer === 0x2c) {
      if (at + 10 > gif.length) throw cut();
      // The descriptor, its local colour table, the LZW code size, then the image's sub-blocks.
      block = { kind: 'image', at, end: afterSubBlocks(at + 10 + colourTable(gif[at + 9]!) + 1), keep: true };
    } else if (introducer === 0x21) {
      if (at + 2 > gif.length) throw cut();
      const label = gif[at + 1]!;
      const application = label === 0xff && gif[at + 2] === 11 ? gif.subarray(at + 3, at + 14).toString('latin1') : null;
      const keep = label === 0xf9 || (application !== null && GIF_KEPT_APPLICATIONS.has(application));
      block = { kind: 'extension', at, end: afterSubBlocks(at + 2), keep };
    } else {
      throw new UnreadablePicture('a GIF block of an unknown kind');
    }
    if (block.end > gif.length) throw cut();
    yield block;
    at = block.end;
  }
}

/** The GIF up to its trailer with only the blocks it needs (`gifBlocks`); whatever follows the trailer goes. */
function gifWithoutMetadata(gif: Buffer): Buffer {
  const kept = new Kept(gif);
  for (const block of gifBlocks(gif)) if (block.keep) kept.range(block.at, block.end);
  return kept.join();
}

/**
 * The width and height of the smallest rectangle that holds a GIF's screen and each of its
 * images at its place (left and top plus width and height). A browser grows the screen to
 * fit a first image larger than it, so a small file whose screen is 1×1 may declare an
 * image of billions of pixels: that is the size to judge, not the screen's. Throws
 * `UnreadablePicture` where `withoutMetadata` would.
 */
export function gifExtent(gif: Buffer): { width: number; height: number } {
  let width = 0;
  let height = 0;
  for (const block of gifBlocks(gif)) {
    // The screen's width and height follow the 6-byte header; an image's left, top, width and height follow its 0x2C.
    if (block.kind === 'screen') {
      width = gif.readUInt16LE(6);
      height = gif.readUInt16LE(8);
    } else if (block.kind === 'image') {
      width = Math.max(width, gif.readUInt16LE(block.at + 1) + gif.readUInt16LE(block.at + 5));
      height = Math.max(height, gif.readUInt16LE(block.at + 3) + gif.readUInt16LE(block.at + 7));
    }
  }
  return { width, height };
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
    case 'image/gif':
      return gifWithoutMetadata(content);
    default:
      return content;
  }
}
