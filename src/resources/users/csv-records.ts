/**
 * The records of an uploaded CSV file, each with its line (docs/users.md#csv-import-preview).
 * csv-parse reads every file, except two kinds that are read in a fraction of its time
 * (it looks at every character with every option in mind) and give the same records,
 * lines and errors (`test/resources/users/csv-records.test.ts` checks both on generated
 * files against csv-parse): a file without quotes, whose lines all end alike and none is
 * longer than csv-parse accepts, is split at its line ends and delimiters
 * (`SplitRecords`); a file whose quotes are all well placed (each quoted cell opens at a
 * cell's start and closes before a delimiter, a line end or the file's end, a quote inside
 * doubled), whose line ends alike and whose records are none longer than csv-parse
 * accepts, is cut into records at the line ends outside quotes and each record into cells
 * (`QuotedRecords`). Whether a file is of either kind is learnt on the reading that checks
 * its encoding (`FileShape`), before its records are read; any other file, a malformed one
 * included, goes to csv-parse, whose error the preview then reports.
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
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/** Where `QuoteScan` is: at a cell's start, in a cell without quotes, inside quotes, right after a quote inside quotes. */
const enum Scan {
  CellStart,
  Unquoted,
  Quoted,
  QuoteSeen,
}

/**
 * Whether a file's quotes are all where csv-parse takes them without an error, read byte
 * by byte from the first chunk that holds a quote (the bytes before it hold none): a quote
 * opens a cell only at its start, and inside quotes a quote is doubled or closes the cell
 * before a delimiter, a carriage return, a line feed or the file's end. Also measures the
 * records (the bytes between two line feeds outside quotes), which must be no longer than
 * MAX_LINE_CHARACTERS bytes. Line ends are judged apart, by `FileShape`.
 */
class QuoteScan {
  private state: Scan;
  /** Bytes of the current record so far. */
  private recordBytes: number;
  private longestRecord = 0;
  private wellPlaced = true;

  constructor(
    private readonly delimiter: number,
    atCellStart: boolean,
    recordBytes: number,
    /** The longest record before the scan's start. */
    longestRecord: number,
    /** Bytes of a byte order mark still to come, which csv-parse drops. */
    private bomLeft: number,
  ) {
    this.state = atCellStart ? Scan.CellStart : Scan.Unquoted;
    this.recordBytes = recordBytes;
    this.longestRecord = longestRecord;
  }

  add(chunk: Buffer): void {
    if (!this.wellPlaced) return;
    const delimiter = this.delimiter;
    let state = this.state;
    let recordBytes = this.recordBytes;
    let from = 0;
    if (this.bomLeft > 0) {
      from = Math.min(this.bomLeft, chunk.length);
      this.bomLeft -= from;
      recordBytes += from;
    }
    for (let at = from; at < chunk.length; at++) {
      const byte = chunk[at]!;
      if (state === Scan.Quoted) {
        // Up to the next quote at once: nothing else inside quotes matters.
        const quote = chunk.indexOf(QUOTE, at);
        if (quote === -1) {
          recordBytes += chunk.length - at;
          break;
        }
        recordBytes += quote - at + 1;
        at = quote;
        state = Scan.QuoteSeen;
        continue;
      }
      if (byte === LF) {
        // A record's end: only quotes leave it open.
        if (recordBytes > this.longestRecord) this.longestRecord = recordBytes;
        recordBytes = 0;
        state = Scan.CellStart;
        continue;
      }
      recordBytes++;
      if (state === Scan.QuoteSeen) {
        if (byte === QUOTE) state = Scan.Quoted;
        else if (byte === delimiter) state = Scan.CellStart;
        // A carriage return is followed by a line feed in any file that is read this way.
        else if (byte === CR) state = Scan.Unquoted;
        else {
          this.wellPlaced = false;
          return;
        }
      } else if (byte === QUOTE) {
        if (state !== Scan.CellStart) {
          this.wellPlaced = false;
          return;
        }
        state = Scan.Quoted;
      } else if (byte === delimiter) state = Scan.CellStart;
      else state = Scan.Unquoted;
    }
    this.state = state;
    this.recordBytes = recordBytes;
  }

  /** After the last chunk: whether csv-parse reads the file's quotes without an error, and no record is too long. */
  get regular(): boolean {
    return this.wellPlaced && this.state !== Scan.Quoted && Math.max(this.longestRecord, this.recordBytes) <= MAX_LINE_CHARACTERS;
  }
}

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
  /** Bytes read so far. */
  private bytes = 0;
  /** The quotes' scan, from the chunk that holds the first quote (once the delimiter is known). */
  private scan: QuoteScan | null = null;
  /** A quote was seen before the end of the header line: the scan starts from the file's start once it ends. */
  private scanPending = false;
  private scanDelimiter: string | null = null;

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

    if (!this.quoted && chunk.indexOf(QUOTE) !== -1) {
      this.quoted = true;
      // The chunks before this one hold no quote: the scan starts here, from where the lines are.
      if (this.headComplete) this.startScan(this.lastByte, this.lineBytes).add(chunk);
      else this.scanPending = true;
    } else if (this.scan) this.scan.add(chunk);
    // The head holds every chunk so far (this one included) until it is complete.
    else if (this.scanPending && this.headComplete) this.scanHead();
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
    this.bytes += chunk.length;
    return true;
  }

  /** Whether the head is all it will be: it holds the first line feed, or MAX_LINE_CHARACTERS bytes. */
  private get headComplete(): boolean {
    return this.headBytes >= MAX_LINE_CHARACTERS || (this.headChunks.length > 0 && this.headChunks.at(-1)!.indexOf(LF) !== -1);
  }

  /** A scan starting after `this.bytes` bytes, the last of them `lastByte`, `lineBytes` since the last line feed. */
  private startScan(lastByte: number, lineBytes: number): QuoteScan {
    const delimiter = this.delimiter;
    const bom = this.bomBytes;
    const atStart = this.bytes <= bom;
    const atCellStart = atStart || lastByte === LF || lastByte === delimiter.charCodeAt(0);
    this.scanDelimiter = delimiter;
    this.scan = new QuoteScan(delimiter.charCodeAt(0), atCellStart, lineBytes, this.longestLine, atStart ? bom - this.bytes : 0);
    return this.scan;
  }

  /** The scan of the whole head, which holds every chunk read so far: from the file's start. */
  private scanHead(): void {
    this.scanPending = false;
    const delimiter = this.delimiter;
    this.scanDelimiter = delimiter;
    this.scan = new QuoteScan(delimiter.charCodeAt(0), true, 0, 0, this.bomBytes);
    for (const chunk of this.headChunks) this.scan.add(chunk);
  }

  /** The byte order mark's length at the file's start (0 without one). */
  private get bomBytes(): number {
    return this.head.subarray(0, 3).equals(BOM) ? 3 : 0;
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
    return this.sameLineEnds;
  }

  /** How every line ends: no carriage return, or one before every line feed and none elsewhere; null when they differ. */
  private get sameLineEnds(): '\n' | '\r\n' | null {
    if (this.carriageReturns === 0) return '\n';
    return this.carriageReturns === this.crlfs && this.lineFeeds === this.crlfs ? '\r\n' : null;
  }

  /**
   * How its lines end, when it holds quotes and its records can be cut at the line ends
   * outside quotes by `QuotedRecords` (after its last chunk): its quotes are all well placed
   * with `delimiter` between cells (`QuoteScan`), no record is longer than
   * MAX_LINE_CHARACTERS bytes, and every line ends alike, inside quotes too. Otherwise (or
   * when the file is no UTF-8) null: csv-parse reads it.
   */
  quotedLineEnd(delimiter: string): '\n' | '\r\n' | null {
    if (!this.utf8 || !this.quoted) return null;
    // No line end in the whole file: the head is all of it.
    if (this.scanPending) this.scanHead();
    if (!this.scan?.regular || this.scanDelimiter !== delimiter) return null;
    return this.sameLineEnds;
  }
}

/** The records of the file `shape` has read, `delimiter` between cells. */
export function recordsOf(shape: FileShape, delimiter: string, onRecord: OnRecord): Records {
  const lineEnd = shape.lineEnd;
  if (lineEnd) return new SplitRecords(delimiter, lineEnd, onRecord);
  const quotedLineEnd = shape.quotedLineEnd(delimiter);
  return quotedLineEnd ? new QuotedRecords(delimiter, quotedLineEnd, onRecord) : new NumberedRecords(delimiter, onRecord);
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

/**
 * csv-parse's refusal as the problem tells it. Two of its messages quote the cell they
 * stopped in (the text before a stray quote, the character after a closing one), which
 * may be a password: those are told by line and field alone.
 */
function malformed(error: unknown): Error {
  if (!(error instanceof CsvError)) return error as Error;
  const at = error as CsvError & { lines?: number; column?: number | string };
  // csv-parse counts fields from 0; people, and the rest of the preview, from 1.
  const field = typeof at.column === 'number' ? at.column + 1 : at.column;
  if (error.code === 'INVALID_OPENING_QUOTE') return new MalformedCsv(`Invalid Opening Quote: a quote is found inside field ${field} at line ${at.lines}`);
  if (error.code === 'CSV_INVALID_CLOSING_QUOTE') {
    return new MalformedCsv(`Invalid Closing Quote: a quoted field is followed by something other than a delimiter at line ${at.lines}`);
  }
  return new MalformedCsv(error.message);
}

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

/**
 * The records of a file whose quotes `FileShape` found well placed (`quotedLineEnd`): a
 * record ends at the first line feed after an even number of quotes since its start, it is
 * decoded on its own and cut into cells at the delimiters outside quotes, a quoted cell's
 * doubled quotes read as one. As csv-parse reads such a file: a byte order mark at the
 * start is dropped, empty lines are skipped but counted, a record's line is the one it
 * ends on (csv-parse counts a carriage return and a line feed inside quotes as a line
 * each), and a record with another number of cells than the first fails the file with
 * csv-parse's error.
 */
export class QuotedRecords implements Records {
  /** The bytes of the record the chunks read so far end in (it is no longer than a record). */
  private rest: Buffer | null = null;
  /** Whether the quotes in `rest` leave it inside quotes. */
  private restInside = false;
  /** Line feeds in `rest` (all inside quotes). */
  private restLineFeeds = 0;
  /** The line the next record starts on. */
  private line = 1;
  private started = false;
  /** The first record's number of cells. */
  private cells = -1;
  private readonly endLength: number;
  /** Lines csv-parse counts for a line end inside quotes. */
  private readonly linesPerQuotedEnd: number;

  constructor(
    private readonly delimiter: string,
    lineEnd: '\n' | '\r\n',
    private readonly onRecord: OnRecord,
  ) {
    this.endLength = lineEnd.length;
    this.linesPerQuotedEnd = lineEnd.length;
  }

  // Synchronous: a chunk is cut at once (the interface is csv-parse's, which is a stream).
  parse(chunk: Buffer): Promise<void> {
    return settled(() => this.cut(chunk));
  }

  finish(): Promise<void> {
    return settled(() => {
      const rest = this.rest;
      this.rest = null;
      if (rest) this.record(rest, 0, rest.length, this.restLineFeeds);
    });
  }

  private cut(chunk: Buffer): void {
    let inside = this.restInside;
    let lineFeeds = this.restLineFeeds;
    let start = 0;
    let quote = chunk.indexOf(QUOTE);
    for (let at = chunk.indexOf(LF); ; at = chunk.indexOf(LF, at + 1)) {
      // The quotes before this line feed (or the chunk's end) say whether it is inside quotes.
      const before = at === -1 ? chunk.length : at;
      while (quote !== -1 && quote < before) {
        inside = !inside;
        quote = chunk.indexOf(QUOTE, quote + 1);
      }
      if (at === -1) break;
      if (inside) {
        lineFeeds++;
        continue;
      }
      if (this.rest) {
        const first = Buffer.concat([this.rest, chunk.subarray(0, at + 1)]);
        this.rest = null;
        this.record(first, 0, first.length - this.endLength, lineFeeds);
      } else this.record(chunk, start, at + 1 - this.endLength, lineFeeds);
      lineFeeds = 0;
      start = at + 1;
    }
    // A copy: the chunk's memory is its reader's.
    if (start < chunk.length) this.rest = this.rest ? Buffer.concat([this.rest, chunk]) : Buffer.from(chunk.subarray(start));
    this.restInside = inside;
    this.restLineFeeds = lineFeeds;
  }

  /**
   * The record `bytes[start, end)` (its line end left out), `lineFeeds` inside its quotes.
   * Decoded on its own, so that a cell kept while its batch is judged holds its record's
   * text, not a chunk's.
   */
  private record(bytes: Buffer, start: number, end: number, lineFeeds: number): void {
    const line = this.line + lineFeeds * this.linesPerQuotedEnd;
    this.line = line + 1;
    if (!this.started) {
      this.started = true;
      if (end - start >= 3 && bytes[start] === 0xef && bytes[start + 1] === 0xbb && bytes[start + 2] === 0xbf) start += 3;
    }
    if (end <= start) return;
    const text = bytes.toString('utf8', start, end);
    const record = text.indexOf('"') === -1 ? text.split(this.delimiter) : cellsOf(text, this.delimiter);
    if (this.cells === -1) this.cells = record.length;
    else if (record.length !== this.cells) {
      throw new MalformedCsv(`Invalid Record Length: expect ${this.cells}, got ${record.length} on line ${line}`);
    }
    this.onRecord(record, line);
  }
}

/** The cells of a record whose quotes are well placed: quoted cells without their quotes, doubled quotes read as one. */
function cellsOf(text: string, delimiter: string): string[] {
  const cells: string[] = [];
  for (let at = 0; ;) {
    if (text.charCodeAt(at) === QUOTE) {
      let close = text.indexOf('"', at + 1);
      let doubled = false;
      while (close !== -1 && text.charCodeAt(close + 1) === QUOTE) {
        doubled = true;
        close = text.indexOf('"', close + 2);
      }
      // Never so in a file FileShape let through: a failure of the service, not the file's.
      if (close === -1 || (close + 1 < text.length && text[close + 1] !== delimiter)) throw new Error('a quoted cell is not well placed');
      const cell = text.slice(at + 1, close);
      cells.push(doubled ? cell.replaceAll('""', '"') : cell);
      // The delimiter after the closing quote, or the record's end.
      at = close + 2;
      if (at > text.length) return cells;
    } else {
      const next = text.indexOf(delimiter, at);
      if (next === -1) {
        cells.push(text.slice(at));
        return cells;
      }
      cells.push(text.slice(at, next));
      at = next + 1;
    }
  }
}
