/**
 * JSON answers too large to hold whole (the CSV import preview of a large file): the
 * answer's arrays are serialized item by item as the handler produces them, kept in
 * memory up to a small buffer and appended to an anonymous temporary file beyond it, and
 * the answer is then written to the client as a stream. Memory stays flat whatever the
 * answer's size. Knows nothing of what is streamed.
 */
import { open, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';

/** Serialized items kept in memory before they are appended to the file. */
const BUFFER_BYTES = 256 * 1024;
/** Bytes read back from the file at a time. */
const READ_BYTES = 64 * 1024;

/** A file nobody else can open: removed from its folder at once, it lives as long as its handle. */
async function anonymousFile(): Promise<FileHandle> {
  const name = path.join(os.tmpdir(), `atrium-answer-${randomBytes(8).toString('hex')}`);
  const file = await open(name, 'wx+', 0o600);
  await unlink(name);
  return file;
}

/** The items of one JSON array, serialized as they are added. */
export class JsonArraySpool {
  private pending: string[] = [];
  private pendingBytes = 0;
  private file: FileHandle | null = null;
  private written = 0;
  private items = 0;

  get length(): number {
    return this.items;
  }

  async add(item: unknown): Promise<void> {
    const text = (this.items++ === 0 ? '' : ',') + JSON.stringify(item);
    this.pending.push(text);
    this.pendingBytes += text.length;
    if (this.pendingBytes >= BUFFER_BYTES) await this.flush();
  }

  private async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const bytes = Buffer.from(this.pending.join(''));
    this.pending = [];
    this.pendingBytes = 0;
    this.file ??= await anonymousFile();
    await this.file.write(bytes, 0, bytes.length, this.written);
    this.written += bytes.length;
  }

  /** The serialized items (without brackets), file first, then what is still in memory. */
  async *chunks(): AsyncGenerator<Buffer | string> {
    if (this.file) {
      for (let position = 0; position < this.written;) {
        const { bytesRead, buffer } = await this.file.read(Buffer.alloc(Math.min(READ_BYTES, this.written - position)), 0, undefined, position);
        if (bytesRead === 0) throw new Error('the answer file ended early');
        yield bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead);
        position += bytesRead;
      }
    }
    if (this.pending.length > 0) yield this.pending.join('');
  }

  /** Releases the file (also when the answer is never sent). */
  async close(): Promise<void> {
    const file = this.file;
    this.file = null;
    this.pending = [];
    await file?.close();
  }
}

/**
 * A JSON answer written as a stream: `T` is what it serializes to, so the handler's
 * answer is still checked against the spec's type.
 */
export class StreamedJson<T> {
  /** Only carries `T` for the type checker. */
  declare readonly of?: T;
  constructor(readonly stream: Readable) {}
}

/**
 * `{"<key>": [<items>], …}` for the given arrays, in the given order, as a stream; every
 * spool is closed when the stream ends, fails or is abandoned.
 */
export function jsonObjectOfArrays<T>(arrays: readonly (readonly [keyof T & string, JsonArraySpool])[]): StreamedJson<T> {
  async function* generate() {
    try {
      let separator = '{';
      for (const [key, spool] of arrays) {
        yield `${separator}${JSON.stringify(key)}:[`;
        yield* spool.chunks();
        yield ']';
        separator = ',';
      }
      yield arrays.length === 0 ? '{}' : '}';
    } finally {
      await Promise.all(arrays.map(([, spool]) => spool.close()));
    }
  }
  return new StreamedJson<T>(Readable.from(generate(), { objectMode: false }));
}
