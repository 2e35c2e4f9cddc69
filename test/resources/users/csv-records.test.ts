/**
 * The records of a CSV file (src/resources/users/csv-records.ts): a plain file (no quotes,
 * lines ending alike, none too long) is split without csv-parse, a file whose quotes are
 * well placed is cut without it, and each must give exactly what csv-parse gives: the
 * same records with the same lines, the same failure with the same message, whatever the
 * chunks the file arrives in. Checked on generated files against csv-parse itself, with
 * the options the CSV import uses; a file that is neither (a quote out of place, a quote
 * left open, line ends of both kinds, a record too long) goes to csv-parse.
 */
import t from 'tap';
import {
  FileShape,
  MalformedCsv,
  MAX_LINE_CHARACTERS,
  NumberedRecords,
  QuotedRecords,
  recordsOf,
  SplitRecords,
  type Records,
} from '../../../src/resources/users/csv-records.ts';

type Read = { records: [string[], number][]; failure: string | null };

/**
 * `file` cut at `cuts`, each piece in one buffer that is scribbled over when the next piece
 * is asked for, as the import reads an upload (`chunks({ transient: true })`): a reader
 * that kept a view of a chunk instead of a copy reads the scribbles.
 */
function* transientChunks(file: Buffer, cuts: number[]): Generator<Buffer> {
  const shared = Buffer.alloc(file.length);
  let from = 0;
  for (const cut of [...cuts, file.length]) {
    const chunk = shared.subarray(0, cut - from);
    file.copy(chunk, 0, from, cut);
    yield chunk;
    shared.fill('X');
    from = cut;
  }
}

/** The records `make` reads from `file` sent in chunks cut at `cuts`. */
async function read(make: (onRecord: (record: string[], line: number) => void) => Records, file: Buffer, cuts: number[]): Promise<Read> {
  const records: [string[], number][] = [];
  const reader = make((record, line) => records.push([record, line]));
  try {
    for (const chunk of transientChunks(file, cuts)) await reader.parse(chunk);
    await reader.finish();
    return { records, failure: null };
  } catch (error) {
    if (!(error instanceof MalformedCsv)) throw error;
    return { records, failure: error.message };
  }
}

function shapeOf(file: Buffer, cuts: number[]): FileShape {
  const shape = new FileShape();
  for (const chunk of transientChunks(file, cuts)) shape.add(chunk);
  return shape;
}

/** A deterministic generator (mulberry32), so that a failure can be run again. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const CELL_CHARACTERS = ['a', 'b', 'Z', '0', '7', ' ', '-', '@', '.', 'ä', 'ß', '€', '😀', '\t', "'"];

/** A plain file: random cells (multi-byte characters included), empty lines, a BOM, LF or CRLF, sometimes a row of another width. */
function plainFile(next: () => number, delimiter: string, lineEnd: string): Buffer {
  const width = 1 + Math.floor(next() * 9);
  const lines: string[] = [];
  const rows = Math.floor(next() * 40);
  for (let row = 0; row < rows; row++) {
    if (next() < 0.1) {
      lines.push('');
      continue;
    }
    const cells = next() < 0.05 ? width + (next() < 0.5 ? -1 : 1) : width;
    const line: string[] = [];
    for (let cell = 0; cell < Math.max(1, cells); cell++) {
      let text = '';
      const length = Math.floor(next() * (next() < 0.05 ? 40 : 8));
      for (let i = 0; i < length; i++) text += CELL_CHARACTERS[Math.floor(next() * CELL_CHARACTERS.length)];
      line.push(text);
    }
    lines.push(line.join(delimiter));
  }
  const text = (next() < 0.2 ? '\uFEFF' : '') + lines.join(lineEnd) + (next() < 0.5 ? lineEnd : '');
  return Buffer.from(text);
}

/**
 * A file with quotes: random cells, some quoted (delimiters, doubled quotes and line ends of
 * the file's kind inside), empty lines, a BOM, sometimes a row of another width, and
 * sometimes one flaw csv-parse refuses or that makes the file no longer one of well-placed
 * quotes (a quote inside an unquoted cell, text after a closing quote, a quote left open,
 * a line end of the other kind, a bare carriage return, a quoted empty line).
 */
function quotedFile(next: () => number, delimiter: string, lineEnd: string): Buffer {
  const width = 1 + Math.floor(next() * 6);
  const pick = <T>(items: readonly T[]) => items[Math.floor(next() * items.length)]!;
  const inside = [...CELL_CHARACTERS, '""', delimiter, delimiter === ',' ? ';' : ',', lineEnd];
  const lines: string[] = [];
  const rows = Math.floor(next() * 30);
  for (let row = 0; row < rows; row++) {
    if (next() < 0.08) {
      lines.push(next() < 0.2 ? '""' : '');
      continue;
    }
    const cells = next() < 0.05 ? width + (next() < 0.5 ? -1 : 1) : width;
    const line: string[] = [];
    for (let cell = 0; cell < Math.max(1, cells); cell++) {
      let text = '';
      const quoted = next() < 0.6;
      const length = Math.floor(next() * (next() < 0.05 ? 40 : 6));
      for (let i = 0; i < length; i++) text += quoted ? pick(inside) : pick(CELL_CHARACTERS);
      line.push(quoted ? `"${text}"` : text);
    }
    lines.push(line.join(delimiter));
  }
  let text = (next() < 0.2 ? '\uFEFF' : '') + lines.join(lineEnd) + (next() < 0.5 ? lineEnd : '');
  if (next() < 0.25 && text.length > 0) {
    const at = Math.floor(next() * text.length);
    const flaw = pick(['"', 'x"', '"x', '\r', '\n', '\r\n', 'x']);
    text = text.slice(0, at) + flaw + text.slice(at);
  }
  return Buffer.from(text);
}

function randomCuts(next: () => number, length: number): number[] {
  const cuts = new Set<number>();
  const count = Math.floor(next() * 6);
  for (let i = 0; i < count; i++) cuts.add(Math.floor(next() * (length + 1)));
  return [...cuts].sort((a, b) => a - b);
}

t.test('a plain file is split as csv-parse parses it: the same records, lines and failures, in any chunks', async (t) => {
  const next = random(20261127);
  let split = 0;
  let failed = 0;
  for (let round = 0; round < 600; round++) {
    const delimiter = next() < 0.5 ? ',' : ';';
    const lineEnd = next() < 0.5 ? '\n' : '\r\n';
    const file = plainFile(next, delimiter, lineEnd);
    const cuts = randomCuts(next, file.length);
    const shape = shapeOf(file, cuts);
    if (!shape.utf8 || shape.lineEnd === null) {
      t.fail(`a generated plain file is taken for another (round ${round})`);
      continue;
    }
    const expected = await read((onRecord) => new NumberedRecords(delimiter, onRecord), file, []);
    const actual = await read((onRecord) => recordsOf(shape, delimiter, onRecord), file, cuts);
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      t.strictSame(actual, expected, `round ${round}: ${JSON.stringify(file.toString())} cut at ${cuts.join(', ')}`);
      break;
    }
    split++;
    if (expected.failure) failed++;
  }
  t.equal(split, 600, 'every generated file read alike');
  t.ok(failed > 20 && failed < 580, `both kinds of files among them (${failed} malformed)`);
});

t.test('a file with quotes is read as csv-parse reads it: the same records, lines and failures, in any chunks', async (t) => {
  const next = random(20261128);
  let cut = 0;
  let failed = 0;
  for (let round = 0; round < 1500; round++) {
    const delimiter = next() < 0.5 ? ',' : ';';
    const lineEnd = next() < 0.5 ? '\n' : '\r\n';
    const file = quotedFile(next, delimiter, lineEnd);
    const cuts = randomCuts(next, file.length);
    const shape = shapeOf(file, cuts);
    if (!shape.utf8) continue;
    const expected = await read((onRecord) => new NumberedRecords(delimiter, onRecord), file, []);
    const reader = (onRecord: (record: string[], line: number) => void) => recordsOf(shape, delimiter, onRecord);
    const actual = await read(reader, file, cuts);
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      t.strictSame(actual, expected, `round ${round}: ${JSON.stringify(file.toString())} cut at ${cuts.join(', ')}`);
      break;
    }
    if (reader(() => undefined) instanceof QuotedRecords) {
      cut++;
      if (expected.failure) failed++;
    }
  }
  t.ok(cut > 700, `most generated files cut without csv-parse (${cut})`);
  t.ok(failed > 10, `files of another width among them (${failed})`);
});

t.test('the shape of a file with quotes: which files are cut, which go to csv-parse', async (t) => {
  const quotedLineEnd = (text: string, cuts: number[] = [], delimiter = ',') => shapeOf(Buffer.from(text), cuts).quotedLineEnd(delimiter);
  t.equal(quotedLineEnd('a,b\nc,d"x\n'), null, 'a quote inside an unquoted cell');
  t.equal(quotedLineEnd('a,b\n"c"d,e\n'), null, 'text after a closing quote');
  t.equal(quotedLineEnd('a,b\n"c,d\n'), null, 'a quote left open at the end');
  t.equal(quotedLineEnd('a,b\r\n"c",d\n'), null, 'line ends of both kinds');
  t.equal(quotedLineEnd('a,b\r\n"c\nx",d\r\n'), null, 'a line feed alone inside quotes of a CRLF file');
  t.equal(quotedLineEnd('a,b\n"c\rx",d\n'), null, 'a carriage return alone inside quotes');
  t.equal(quotedLineEnd(`a\n"${'x'.repeat(MAX_LINE_CHARACTERS)}"\n`, [10, 40_000]), null, 'a record longer than csv-parse accepts, across chunks');
  t.equal(quotedLineEnd(`a\n"${'x\n'.repeat(MAX_LINE_CHARACTERS / 2)}"\n`), null, 'a record of short lines, longer than csv-parse accepts');
  t.equal(quotedLineEnd('a;b\n"c";d\n', [], ','), null, 'another delimiter than the header line uses');
  t.equal(quotedLineEnd('a,b\nc,d\n'), null, 'no quote at all (split instead)');
  t.equal(quotedLineEnd('a,b\n"c ""x"", y",d\n'), '\n', 'quotes doubled and a delimiter inside quotes');
  t.equal(quotedLineEnd('"a","b"\r\n"c\r\nx",d\r\n', [1, 9, 10]), '\r\n', 'CRLF, inside quotes too, in small chunks');
  t.equal(quotedLineEnd('\uFEFF"a",b\n', [1, 2]), '\n', 'a quote after the byte order mark');
  t.equal(quotedLineEnd('"a","b"', [3]), '\n', 'one line without an end');
  t.equal(quotedLineEnd(`${'x'.repeat(70_000)}\n"a"\n`), null, 'a header line longer than csv-parse accepts');
  t.equal(quotedLineEnd(`a,b\n${'c,d\n'.repeat(40_000)}"e",f\n`, [65_536, 131_072]), '\n', 'a first quote chunks after the header line');
  t.equal(quotedLineEnd(`a,b\n${'c,d\n'.repeat(40_000)}e,"f`, [65_536, 131_072]), null, 'a quote left open, chunks after the header line');
  t.equal(quotedLineEnd(`a,"b\n${'c,d\n'.repeat(40_000)}"\n`), null, 'a header line that is never finished');

  const file = Buffer.from('a,b\n"x, y",z\n');
  t.type(
    recordsOf(shapeOf(file, []), ',', () => undefined),
    QuotedRecords,
  );
});

t.test('the shape of a file: which files are split, which go to csv-parse', async (t) => {
  const lineEnd = (text: string | Buffer, cuts: number[] = []) => shapeOf(Buffer.from(text), cuts).lineEnd;
  t.equal(lineEnd('a,b\nc,d\n'), '\n');
  t.equal(lineEnd('a,b\r\nc,d\r\n', [4]), '\r\n', 'CRLF, also with the pair in two chunks');
  t.equal(lineEnd('a,b'), '\n', 'one line without an end');
  t.equal(lineEnd(''), '\n', 'an empty file');
  t.equal(lineEnd('a,"b"\nc,d\n'), null, 'a quote anywhere');
  t.equal(lineEnd('a,b\r\nc,d\n'), null, 'line ends of both kinds');
  t.equal(lineEnd('a,b\rc,d\r'), null, 'carriage returns alone');
  t.equal(lineEnd('a,b\r\nc\rd\r\n'), null, 'a carriage return inside a line');
  t.equal(lineEnd(`a\n${'x'.repeat(MAX_LINE_CHARACTERS)}\n`), '\n', 'a line of the longest length');
  t.equal(lineEnd(`a\n${'x'.repeat(MAX_LINE_CHARACTERS + 1)}\n`, [10, 40_000]), null, 'a longer line, across chunks');
  t.equal(lineEnd(`a\n${'x'.repeat(MAX_LINE_CHARACTERS + 1)}`), null, 'a longer last line without an end');

  const utf8 = (bytes: Buffer, cuts: number[] = []) => shapeOf(bytes, cuts).utf8;
  t.equal(utf8(Buffer.from('name\nJürgen\n'), [7]), true, 'a character split between two chunks');
  t.equal(utf8(Buffer.from([0x61, 0x0a, 0xff, 0x0a])), false, 'a byte no UTF-8 text holds');
  t.equal(utf8(Buffer.from([0x61, 0xc3])), false, 'a character cut off at the end');
  t.equal(lineEnd(Buffer.from([0xff, 0x0a, 0x61, 0x2c, 0x22, 0x62, 0x0d, 0x0a])), null, 'a file that is no UTF-8 is never split');
  t.equal(shapeOf(Buffer.from('user;city\nanna;Bonn\n'), [3]).head.toString(), 'user;city\nanna;Bonn\n', 'the head reaches past the first line end');
  t.equal(shapeOf(Buffer.from('user;city;x,y\nanna,Bonn,x,y\n'), [2]).delimiter, ';', 'the separator the header line uses more');
  t.equal(shapeOf(Buffer.from('user,city;x\nanna;Bonn;x\n'), []).delimiter, ',', 'counted on the header line only');
});

t.test('files that are neither plain nor of well-placed quotes are read by csv-parse', async (t) => {
  const quoted = Buffer.from('a,b\n"x, y"z,z\n');
  const shape = shapeOf(quoted, []);
  t.type(
    recordsOf(shape, ',', () => undefined),
    NumberedRecords,
  );
  t.strictSame(await read((onRecord) => recordsOf(shape, ',', onRecord), quoted, [5]), {
    records: [[['a', 'b'], 1]],
    failure: 'Invalid Closing Quote: a quoted field is followed by something other than a delimiter at line 2',
  });
  const plain = shapeOf(Buffer.from('a,b\n'), []);
  t.type(
    recordsOf(plain, ',', () => undefined),
    SplitRecords,
  );
});

t.test('a failure of the record callback fails the reading, and no record after it is handed over', async (t) => {
  for (const make of [
    (on: (r: string[]) => void) => new SplitRecords(',', '\n', on),
    (on: (r: string[]) => void) => new QuotedRecords(',', '\n', on),
    (on: (r: string[]) => void) => new NumberedRecords(',', on),
  ]) {
    const seen: string[][] = [];
    const reader = make((record) => {
      if (record[0] === 'stop') throw new Error('refused');
      seen.push(record);
    });
    await t.rejects(
      (async () => {
        await reader.parse(Buffer.from('a,b\nstop,x\nc,d\n'));
        await reader.finish();
      })(),
      { message: 'refused' },
    );
    t.strictSame(seen, [['a', 'b']]);
  }
});

t.test('a failure of the record callback comes before a malformed record after it, in either reader and any chunks', async (t) => {
  // As an invalid header fails the preview although its second line is malformed.
  const file = Buffer.from('bogus,x\nanna\nb,c\n');
  const refuseHeader = (record: string[], line: number) => {
    if (line === 1) throw new Error('the header is refused');
  };
  for (const cuts of [[], [8], [9], [3, 12]]) {
    for (const make of [
      () => new NumberedRecords(',', refuseHeader),
      () => new SplitRecords(',', '\n', refuseHeader),
      () => new QuotedRecords(',', '\n', refuseHeader),
    ]) {
      const reader = make();
      await t.rejects(
        (async () => {
          let from = 0;
          for (const cut of [...cuts, file.length]) {
            await reader.parse(file.subarray(from, cut));
            from = cut;
          }
          await reader.finish();
        })(),
        { message: 'the header is refused' },
        `${reader.constructor.name}, cut at ${cuts.join(', ') || 'nothing'}`,
      );
    }
  }
});
