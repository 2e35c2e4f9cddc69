import type { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { JsonArraySpool, jsonObjectOfArrays } from '../../../src/platform/http/json-stream.ts';
import { openFiles as openFilesMarked, withoutTempFolder } from '../../helpers/open-files.ts';

/** The whole text a stream writes. */
async function text(stream: NodeJS.ReadableStream): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string));
  return Buffer.concat(parts).toString('utf8');
}

/** Answer files this process holds open: a spool that spilled holds one, already removed from its folder. */
const openFiles = () => openFilesMarked('atrium-answer-');

/**
 * Waits for the stream to close and for its spools to release their files: the release
 * is asynchronous, and a spool the stream did not close fails here.
 */
async function released(t: Test, stream: Readable, spools: JsonArraySpool[]): Promise<void> {
  if (!stream.closed) await new Promise((resolve) => stream.once('close', resolve));
  for (const spool of spools) {
    t.ok(spool.closed, 'the stream closed the spool');
    await spool.closed;
  }
}

t.test('arrays larger than the memory buffer spill to a file and come back whole, in order, as one JSON object', async (t) => {
  const small = new JsonArraySpool();
  const large = new JsonArraySpool();
  const empty = new JsonArraySpool();
  const items = Array.from({ length: 20_000 }, (_, i) => ({ line: i + 2, user: { username: `user${i}`, city: 'Köln "Mitte"', tags: [i, null, true] } }));
  for (const item of items) await large.add(item);
  await small.add({ line: 1 });
  t.equal(large.length, 20_000);
  t.equal(await openFiles(), 1, 'the large array went to a file, the small ones did not');
  const streamed = jsonObjectOfArrays<{ small: object[]; large: object[]; empty: object[] }>([
    ['small', small],
    ['large', large],
    ['empty', empty],
  ]);
  const written = await text(streamed.stream);
  await released(t, streamed.stream, [small, large, empty]);
  t.strictSame(JSON.parse(written), { small: [{ line: 1 }], large: items, empty: [] });
  t.equal(written, JSON.stringify({ small: [{ line: 1 }], large: items, empty: [] }), 'byte for byte what JSON.stringify writes');
  t.equal(await openFiles(), 0, 'the file is closed once the answer is written');
});

t.test('an answer abandoned half way closes its files too', async (t) => {
  const spool = new JsonArraySpool();
  for (let i = 0; i < 20_000; i++) await spool.add({ i, padding: 'x'.repeat(20) });
  t.equal(await openFiles(), 1);
  const { stream } = jsonObjectOfArrays<{ items: object[] }>([['items', spool]]);
  for await (const _chunk of stream) break;
  await released(t, stream, [spool]);
  t.equal(await openFiles(), 0);
});

t.test(
  'items added all at once, items larger than the memory buffer and characters of every UTF-8 length come back as JSON.stringify writes them',
  async (t) => {
    const spool = new JsonArraySpool();
    const items: unknown[] = [
      { text: 'a'.repeat(300 * 1024) },
      ...Array.from({ length: 5_000 }, (_, i) => ({ i, text: `ä€😀 "${i}"\n` })),
      { text: '€'.repeat(100 * 1024) },
      null,
      'last',
    ];
    await spool.add(items[0]);
    await spool.addAll(items.slice(1));
    t.equal(spool.length, items.length);
    const { stream } = jsonObjectOfArrays<{ items: unknown[] }>([['items', spool]]);
    const written = await text(stream);
    await released(t, stream, [spool]);
    t.equal(written, JSON.stringify({ items }), 'byte for byte');
    t.equal(await openFiles(), 0);
  },
);

t.test('an answer destroyed before its first chunk (its client left while it was prepared) closes its files too', async (t) => {
  const spool = new JsonArraySpool();
  for (let i = 0; i < 20_000; i++) await spool.add({ i, padding: 'x'.repeat(20) });
  t.equal(await openFiles(), 1);
  const { stream } = jsonObjectOfArrays<{ items: object[] }>([['items', spool]]);
  stream.destroy();
  await released(t, stream, [spool]);
  t.equal(await openFiles(), 0);
});

t.test('a spool whose file cannot be written fails the answer, whether the failure comes while items are added or once they are read', async (t) => {
  withoutTempFolder(t);
  // The buffer is written while the next one fills: a failed write is reported by a later
  // write, or by the reading of the answer when none follows (one full buffer).
  for (const items of [7_000, 40_000]) {
    const spool = new JsonArraySpool();
    const answer = async () => {
      await spool.addAll(Array.from({ length: items }, (_, i) => ({ i, padding: 'x'.repeat(20) })));
      return text(jsonObjectOfArrays<{ items: object[] }>([['items', spool]]).stream);
    };
    await t.rejects(answer(), { code: 'ENOENT' }, `${items} items`);
    await spool.close();
  }
  t.equal(await openFiles(), 0);
});
