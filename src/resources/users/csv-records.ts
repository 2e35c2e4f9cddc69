/**
 * The records of an uploaded CSV file, each with its line (docs/users.md#csv-import-preview).
 * csv-parse reads every file; a file without quotes, whose lines all end alike and none is
 * longer than csv-parse accepts, is split at its line ends and delimiters instead, which
 * gives the same records, lines and errors (`test/resources/users/csv-records.test.ts`
 * checks both on generated files) in a fraction of csv-parse's time, which looks at every
 * character. Whether a file is such a file is learnt on the reading that checks its
 * encoding (`FileShape`), before its records are read.
 */
import { isUtf8 } from 'node:buffer';
import { once } from 'node:events';
import { CsvError, Parser } from 'csv-parse';

/** The longest line accepted (a row of every key at its longest fits many times over); a longer one refuses the file. */
export const MAX_LINE_CHARACTERS = 64 * 1024;

/** Where a file's records go, in order: the cells and the line of each. */
export type OnRecord = (record: string[], line: number) => void;

/** A file that is no CSV as csv-parse reads it; the message is csv-parse's. */
export class MalformedCsv extends Error {}

/** A reader of records: chunks of the file in order, then `finish`. A malformed file fails with `MalformedCsv`. */
export interface Records {
  /**
   * Reads one chunk: its complete records have been handed over when this resolves. The
   * chunk's memory is the caller's, who may read the next chunk into it: what is kept is copied.
   */
  parse(chunk: Buffer): Promise<void>;
  /** Reads what is left after the last chunk. */
  finish(): Promise<void>;
}

const QUOTE = 0x22;
const CR = 0x0d;
const LF = 0x0a;

/** The bytes at the end of `chunk` that begin a character it does not finish (0 to 3). */
function unfinishedCharacter(chunk: Buffer): number {
  for (let back = 1; back <= 4 && back <= chunk.length; back++) {
    const byte = chunk[chunk.length - back]!;
    if (byte < 0x80) return 0;
    // A leading byte says how long its character is; continuation bytes (10xxxxxx) come after it.
    if (byte >= 0xc0) return (byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : 2) > back ? back : 0;
  }
  return 0;
}

/**
 * What one reading of a file learns, chunk by chunk: whether it is UTF-8 (a character may be
 * split between two chunks), its start up to the end of the header line (or
 * MAX_LINE_CHARACTERS bytes), and whether its records can be split without csv-parse.
 */
export class FileShape {
  private readonly headChunks: Buffer[] = [];
  private headBytes = 0;
  private unfinished: Buffer | null = null;
  private encoded = true;
  private quoted = false;
  private lineFeeds = 0;
  private carriageReturns = 0;
  /** Line feeds right after a carriage return. */
  private crlfs = 0;
  private longestLine = 0;
  /** Bytes since the last line feed. */
  private lineBytes = 0;
  private lastByte = -1;

  /** Reads the next chunk; answers whether the file is still UTF-8 (once it is not, the rest need not be read). */
  add(chunk: Buffer): boolean {
    if (!this.encoded) return false;
    if (this.headBytes < MAX_LINE_CHARACTERS && (this.headChunks.length === 0 || this.headChunks.at(-1)!.indexOf(LF) === -1)) {
      // A copy: the chunk's memory is its reader's.
      this.headChunks.push(Buffer.from(chunk));
      this.headBytes += chunk.length;
    }
    const joined = this.unfinished ? Buffer.concat([this.unfinished, chunk]) : chunk;
    const cut = joined.length - unfinishedCharacter(joined);
    if (!isUtf8(joined.subarray(0, cut))) {
      this.encoded = false;
      return false;
    }
    this.unfinished = cut < joined.length ? Buffer.from(joined.subarray(cut)) : null;

    if (!this.quoted && chunk.indexOf(QUOTE) !== -1) this.quoted = true;
    for (let at = chunk.indexOf(CR); at !== -1; at = chunk.indexOf(CR, at + 1)) this.carriageReturns++;
    let start = 0;
    for (let at = chunk.indexOf(LF); at !== -1; at = chunk.indexOf(LF, start)) {
      this.lineFeeds++;
      if ((at > 0 ? chunk[at - 1] : this.lastByte) === CR) this.crlfs++;
      this.longestLine = Math.max(this.longestLine, this.lineBytes + at - start);
      this.lineBytes = 0;
      start = at + 1;
    }
    this.lineBytes += chunk.length - start;
    if (chunk.length > 0) this.lastByte = chunk[chunk.length - 1]!;
    return true;
  }

  /** Whether the whole file is UTF-8 (after its last chunk). */
  get utf8(): boolean {
    return this.encoded && this.unfinished === null;
  }

  /** The file's start, up to the end of its first line or MAX_LINE_CHARACTERS bytes. */
  get head(): Buffer {
    return Buffer.concat(this.headChunks);
  }

  /** `,` or `;`, whichever the header line uses more (a longer line than MAX_LINE_CHARACTERS refuses the file anyway). */
  get delimiter(): string {
    const head = this.head;
    const end = head.indexOf(LF);
    const firstLine = head.subarray(0, Math.min(end === -1 ? head.length : end, MAX_LINE_CHARACTERS)).toString('utf8');
    return (firstLine.match(/;/g)?.length ?? 0) > (firstLine.match(/,/g)?.length ?? 0) ? ';' : ',';
  }

  /**
   * How its lines end, when its records can be split at line ends and delimiters (after its
   * last chunk): no quote anywhere (a cell is then never more than the text between two
   * delimiters), every line ending alike (no carriage return, or one before every line
   * feed and none elsewhere) and no line longer than MAX_LINE_CHARACTERS bytes (csv-parse
   * refuses longer ones). Otherwise (or when the file is no UTF-8) null: csv-parse reads it.
   */
  get lineEnd(): '\n' | '\r\n' | null {
    if (!this.utf8 || this.quoted || Math.max(this.longestLine, this.lineBytes) > MAX_LINE_CHARACTERS) return null;
    if (this.carriageReturns === 0) return '\n';
    return this.carriageReturns === this.crlfs && this.lineFeeds === this.crlfs ? '\r\n' : null;
  }
}

/** The records of the file `shape` has read, `delimiter` between cells. */
export function recordsOf(shape: FileShape, delimiter: string, onRecord: OnRecord): Records {
  const lineEnd = shape.lineEnd;
  return lineEnd ? new SplitRecords(delimiter, lineEnd, onRecord) : new NumberedRecords(delimiter, onRecord);
}

/**
 * csv-parse's parser, handing each record over as soon as it is parsed, with its line:
 * the parser's `info.lines` at that moment, the line its `info` option reports, without
 * that option's copy of the parser's state for every record.
 */
export class NumberedRecords extends Parser implements Records {
  /** The first failure of `onRecord`: parsing fails with it, and later records are dropped. */
  private failure: { error: unknown } | null = null;

  constructor(
    delimiter: string,
    private readonly onRecord: OnRecord,
  ) {
    super({ bom: true, delimiter, skip_empty_lines: true, relax_quotes: false, max_record_size: MAX_LINE_CHARACTERS });
    // Failures are taken from the callbacks of `write` and from `end`.
    this.on('error', () => undefined);
  }

  override push(record: unknown): boolean {
    if (record === null) return super.push(null);
    if (this.failure) return true;
    try {
      this.onRecord(record as string[], this.info.lines);
    } catch (error) {
      this.failure = { error };
    }
    return true;
  }

  async parse(chunk: Buffer): Promise<void> {
    // A copy: csv-parse keeps a view of the chunk's unfinished end until the next chunk.
    const own = Buffer.from(chunk);
    await this.failing(new Promise<void>((resolve, reject) => this.write(own, (error) => (error ? reject(error) : resolve()))));
  }

  async finish(): Promise<void> {
    const finished = once(this, 'finish');
    this.end();
    await this.failing(finished);
  }

  /** `parsed`, failing with the callback's failure first (a malformed record after it is never reached by the split). */
  private async failing(parsed: Promise<unknown>): Promise<void> {
    try {
      await parsed;
    } catch (error) {
      throw this.failure ? this.failure.error : malformed(error);
    }
    if (this.failure) throw this.failure.error;
  }
}

/** Synchronous `work` as a promise: its failure rejects it. */
const settled = async (work: () => void): Promise<void> => work();

const malformed = (error: unknown): Error => (error instanceof CsvError ? new MalformedCsv(error.message) : (error as Error));

/**
 * The records of a file `FileShape` found plain: each line that is not empty is a record,
 * its cells the text between delimiters. As csv-parse reads such a file: a byte order mark
 * at the start is dropped, empty lines are skipped but counted, and a record with another
 * number of cells than the first fails the file with csv-parse's error.
 */
export class SplitRecords implements Records {
  /** The bytes after the last line feed read so far (less than a line). */
  private rest: Buffer | null = null;
  private line = 0;
  /** The first record's number of cells. */
  private cells = -1;
  /** Bytes that end a line. */
  private readonly endLength: number;

  constructor(
    private readonly delimiter: string,
    lineEnd: '\n' | '\r\n',
    private readonly onRecord: OnRecord,
  ) {
    this.endLength = lineEnd.length;
  }

  // Synchronous: a chunk is split at once (the interface is csv-parse's, which is a stream).
  parse(chunk: Buffer): Promise<void> {
    return settled(() => this.split(chunk));
  }

  finish(): Promise<void> {
    return settled(() => {
      const rest = this.rest;
      this.rest = null;
      if (rest) this.record(rest, 0, rest.length);
    });
  }

  private split(chunk: Buffer): void {
    let start = 0;
    let at = chunk.indexOf(LF);
    if (this.rest) {
      if (at === -1) {
        this.rest = Buffer.concat([this.rest, chunk]);
        return;
      }
      const first = Buffer.concat([this.rest, chunk.subarray(0, at + 1)]);
      this.rest = null;
      this.record(first, 0, first.length - this.endLength);
      start = at + 1;
      at = chunk.indexOf(LF, start);
    }
    for (; at !== -1; at = chunk.indexOf(LF, start)) {
      this.record(chunk, start, at + 1 - this.endLength);
      start = at + 1;
    }
    // A copy: the chunk's memory is its reader's.
    if (start < chunk.length) this.rest = Buffer.from(chunk.subarray(start));
  }

  /**
   * The line `bytes[start, end)` (its end left out). Each line is decoded on its own, so
   * that a cell kept while its batch is judged holds its line's text, not a chunk's.
   */
  private record(bytes: Buffer, start: number, end: number): void {
    this.line++;
    if (this.line === 1 && end - start >= 3 && bytes[start] === 0xef && bytes[start + 1] === 0xbb && bytes[start + 2] === 0xbf) start += 3;
    if (end <= start) return;
    const record = bytes.toString('utf8', start, end).split(this.delimiter);
    if (this.cells === -1) this.cells = record.length;
    else if (record.length !== this.cells) {
      throw new MalformedCsv(`Invalid Record Length: expect ${this.cells}, got ${record.length} on line ${this.line}`);
    }
    this.onRecord(record, this.line);
  }
}
