/**
 * JSON answers too large to hold whole (the CSV import preview of a large file): the
 * answer's arrays are serialized item by item as the handler produces them, kept in
 * memory up to a small buffer and appended to an anonymous temporary file beyond it, and
 * the answer is then written to the client as a stream. Memory stays flat whatever the
 * answer's size. Knows nothing of what is streamed.
 */
import type { FileHandle } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { anonymousFile } from './anonymous-file.ts';

/** Serialized items kept in memory before they are appended to the file. */
const BUFFER_BYTES = 256 * 1024;
/** Bytes read back from the file at a time. */
const READ_BYTES = 64 * 1024;
const COMMA = 0x2c;

/** The items of one JSON array, serialized as they are added. */
export class JsonArraySpool {
  /** Serialized items not in the file yet, as UTF-8. */
  private buffer: Buffer | null = null;
  private buffered = 0;
  /**
   * The write of the last full buffer while it is under way: the items that follow fill
   * the other buffer meanwhile. Awaited before the next write, the reading and the close.
   */
  private writing: Promise<void> | null = null;
  private spare: Buffer | null = null;
  private file: FileHandle | null = null;
  private written = 0;
  private items = 0;

  get length(): number {
    return this.items;
  }

  async add(item: unknown): Promise<void> {
    await this.addAll([item]);
  }

  /** Adds the items in order; waits only when the buffer is written to the file. */
  async addAll(items: Iterable<unknown>): Promise<void> {
    for (const item of items) {
      const text = JSON.stringify(item);
      // UTF-8 takes at most three bytes for each UTF-16 unit; one more for the comma.
      const most = text.length * 3 + 1;
      if (this.buffered + most > BUFFER_BYTES) await this.flush();
      const buffer = (this.buffer ??= Buffer.allocUnsafe(BUFFER_BYTES));
      if (this.items++ > 0) buffer[this.buffered++] = COMMA;
      if (most > BUFFER_BYTES) {
        await this.flush();
        await this.writeFinished();
        await this.append(Buffer.from(text));
      } else this.buffered += buffer.write(text, this.buffered);
    }
  }

  /** Starts writing the buffer to the file, once the write before it is done; the items that follow go to the other buffer. */
  private async flush(): Promise<void> {
    if (this.buffered === 0) return;
    await this.writeFinished();
    const writing = this.append(this.buffer!.subarray(0, this.buffered));
    // Its failure is taken by whoever awaits it next (`writeFinished`).
    writing.catch(() => undefined);
    this.writing = writing;
    [this.buffer, this.spare] = [this.spare, this.buffer];
    this.buffered = 0;
  }

  /** Waits for the write under way, if any; fails with its failure. */
  private async writeFinished(): Promise<void> {
    const writing = this.writing;
    this.writing = null;
    await writing;
  }

  private async append(bytes: Buffer): Promise<void> {
    this.file ??= await anonymousFile('atrium-answer');
    await this.file.write(bytes, 0, bytes.length, this.written);
    this.written += bytes.length;
  }

  /** The serialized items (without brackets), file first, then what is still in memory. */
  async *chunks(): AsyncGenerator<Buffer> {
    await this.writeFinished();
    if (this.file) {
      for (let position = 0; position < this.written;) {
        const { bytesRead, buffer } = await this.file.read(Buffer.allocUnsafe(Math.min(READ_BYTES, this.written - position)), 0, undefined, position);
        if (bytesRead === 0) throw new Error('the answer file ended early');
        yield bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead);
        position += bytesRead;
      }
    }
    if (this.buffered > 0) yield this.buffer!.subarray(0, this.buffered);
  }

  /** The release of the file, once `close` was called. */
  private closing: Promise<void> | null = null;

  /** Releases the file (also when the answer is never sent); once, however often it is called. */
  close(): Promise<void> {
    return (this.closing ??= this.release());
  }

  /** Settles when the file is released; null while `close` has not been called. */
  get closed(): Promise<void> | null {
    return this.closing;
  }

  private async release(): Promise<void> {
    await this.writing?.catch(() => undefined);
    const file = this.file;
    this.file = null;
    this.buffer = null;
    this.spare = null;
    this.buffered = 0;
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
 * spool is closed when the stream ends, fails or is abandoned, also before its first
 * chunk (a client that left while the answer was prepared).
 */
export function jsonObjectOfArrays<T>(arrays: readonly (readonly [keyof T & string, JsonArraySpool])[]): StreamedJson<T> {
  async function* generate() {
    let separator = '{';
    for (const [key, spool] of arrays) {
      yield `${separator}${JSON.stringify(key)}:[`;
      yield* spool.chunks();
      yield ']';
      separator = ',';
    }
    yield arrays.length === 0 ? '{}' : '}';
  }
  const stream = Readable.from(generate(), { objectMode: false });
  // 'close' follows the end, a failure and a destroy alike; a generator destroyed before it
  // started would never run a `finally`.
  stream.once('close', () => void Promise.all(arrays.map(([, spool]) => spool.close())).catch(() => undefined));
  return new StreamedJson<T>(stream);
}
