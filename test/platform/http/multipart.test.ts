/**
 * Multipart bodies (src/platform/http/multipart.ts, docs/api-conventions.md#multipart-bodies):
 * a file part is written to an anonymous temporary file as it arrives, never held whole
 * in memory, and the file is closed once the answer is sent or the client is gone,
 * whatever happened in between. Its only trace is an open handle (open-files.ts).
 */
import net from 'node:net';
import t from 'tap';
import { UPLOAD_MAX_BYTES } from '../../../src/platform/http/multipart.ts';
import { startTestApi } from '../../helpers/atrium.ts';
import { eventually } from '../../helpers/eventually.ts';
import { importUsersCsv, roleNamed } from '../../helpers/fixtures.ts';
import { multipart, PNG_1X1 } from '../../helpers/multipart.ts';
import { openFiles, withoutTempFolder } from '../../helpers/open-files.ts';

const api = await startTestApi(t);
const tenant = await api.createTenant('multipart-spool');
const role = await roleNamed(api.db, tenant.tenantId, 'Employee');
const app = api.atrium.app!;
const base = new URL(await app.listen({ port: 0, host: '127.0.0.1' }));

// A handle left for the garbage collector to close is a leak that only looks closed. Node
// warns of it once a process, so:
// This file runs in a process of its own (no other file's handle may take the one warning).
const closedByCollector: string[] = [];
process.on('warning', (warning: Error & { code?: string }) => {
  if (warning.code === 'DEP0137') closedByCollector.push(warning.message);
});
t.teardown(() => {
  if (closedByCollector.length > 0) throw new Error(`file handles closed by the garbage collector: ${closedByCollector.length}`);
});

const UPLOADS = 'atrium-upload-';
const ANSWERS = 'atrium-answer-';
/** Waits until this process holds no upload or answer file; answers how many are still open when the time is up. */
const noneOpen = () =>
  eventually(
    async () => (await openFiles(UPLOADS)) + (await openFiles(ANSWERS)),
    (open) => open === 0,
  );

/** A CSV of `rows` new users that the preview accepts. */
const usersCsv = (rows: number) =>
  Buffer.from(
    ['username,password,first_name,last_name,role_id', ...Array.from({ length: rows }, (_, i) => `spool${i},a long password,First,Last,${role!.id}`)].join(
      '\n',
    ) + '\n',
  );

/**
 * A raw HTTP connection that sends `importUsersCsv` (or the same body to `path` with
 * `method`, without a token) with the CSV as its file part, `sendBytes` of the body at first.
 */
async function rawUpload(csv: Buffer, sendBytes: number, path?: string, method = 'POST') {
  const { payload, contentType } = await multipart({ user_data_csv: { content: csv, fileName: 'users.csv', type: 'text/csv' } });
  const socket = net.connect(Number(base.port), base.hostname);
  await new Promise((resolve) => socket.once('connect', resolve));
  const head = [
    `${method} ${path ?? '/api/users/csv'} HTTP/1.1`,
    `Host: ${base.host}`,
    ...(path ? [] : [`Authorization: Bearer ${tenant.adminToken}`]),
    `Content-Type: ${contentType}`,
    `Content-Length: ${payload.length}`,
    'Connection: close',
    '',
    '',
  ].join('\r\n');
  socket.write(head);
  await new Promise((resolve) => socket.write(payload.subarray(0, sendBytes), resolve));
  const answered = new Promise<string>((resolve) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
  return { socket, answered, sendRest: () => new Promise((resolve) => socket.write(payload.subarray(sendBytes), resolve)) };
}

t.test('a file part goes to a temporary file while it arrives; a client that leaves mid-upload leaves no file open', async (t) => {
  t.equal(await noneOpen(), 0);
  const upload = await rawUpload(usersCsv(40_000), 512 * 1024);
  t.equal(
    await eventually(
      () => openFiles(UPLOADS),
      (open) => open === 1,
    ),
    1,
    'the part is written to a file before the body has arrived',
  );
  upload.socket.destroy();
  t.equal(await noneOpen(), 0, 'the file is closed once the client is gone');
  t.strictSame(closedByCollector, [], 'closed by the service, not by the garbage collector');
});

t.test('a client that leaves while its file is judged leaves no file open once the preview is done', async (t) => {
  const upload = await rawUpload(usersCsv(40_000), 0);
  await upload.sendRest();
  // The answer's first group spilled to its file: the handler is reading the upload.
  t.equal(
    await eventually(
      () => openFiles(ANSWERS),
      (open) => open > 0,
    ),
    1,
    'the preview is under way',
  );
  upload.socket.destroy();
  t.equal(await noneOpen(), 0);
  t.strictSame(closedByCollector, [], 'closed by the service, not by the garbage collector');
});

t.test('the file is closed after an answer and after every refusal, which are problem documents', async (t) => {
  const accepted = await importUsersCsv(api, t, tenant.adminToken, usersCsv(3));
  t.equal(accepted.status, 200);
  t.equal(accepted.body.new_users.length, 3);
  t.equal(await noneOpen(), 0, 'after an answer');

  const malformed = await importUsersCsv(api, t, tenant.adminToken, 'username,city\nx\n');
  t.equal(malformed.status, 422);
  t.equal(await noneOpen(), 0, 'after a refused file');

  const badFlag = await importUsersCsv(api, t, tenant.adminToken, usersCsv(3), { update_users: 'maybe' });
  t.equal(badFlag.status, 422);
  t.ok(badFlag.body.errors.update_users, 'refused before the handler reads the file');
  t.equal(await noneOpen(), 0, 'after a refused form');

  const tooLarge = await importUsersCsv(api, t, tenant.adminToken, Buffer.alloc(UPLOAD_MAX_BYTES + 1, 'a'));
  t.equal(tooLarge.status, 413);
  t.match(tooLarge.body, { status: 413, detail: 'The file is larger than 20 MiB.' });
  t.equal(await noneOpen(), 0, 'after a file over the limit');

  const form = new FormData();
  form.append('user_data_csv', new Blob([usersCsv(3)], { type: 'text/csv' }), 'one.csv');
  form.append('user_data_csv', new Blob([usersCsv(3)], { type: 'text/csv' }), 'two.csv');
  const body = new Response(form);
  const twoFiles = await api.call(t, 'importUsersCsv', {
    token: tenant.adminToken,
    payload: Buffer.from(await body.arrayBuffer()),
    contentType: body.headers.get('content-type')!,
  });
  t.equal(twoFiles.status, 413);
  t.equal(await noneOpen(), 0, 'after a second file part');
  t.strictSame(closedByCollector, [], 'closed by the service, not by the garbage collector');
});

t.test('an upload to a path no operation serves is answered at once, and not a byte of it is stored', async (t) => {
  for (const [method, path, status] of [
    ['POST', '/api/no-such-thing', 404],
    ['POST', '/docs/', 405], // the reference is served with GET
    ['GET', '/health/live', 415],
  ] as const) {
    const upload = await rawUpload(usersCsv(50_000), 64 * 1024, path, method);
    // Answered while most of the body is still unsent: nothing waits for the rest.
    const answer = await upload.answered;
    t.match(answer, new RegExp(`^HTTP/1.1 ${status} `), `${path}: ${answer.split('\r\n')[0]}`);
    t.match(answer, /application\/problem\+json/);
    t.equal(await openFiles(UPLOADS), 0, `${path}: no upload file was opened`);
    upload.socket.destroy();
  }
});

t.test('an upload answered over HTTP: the whole preview arrives and no file stays open', async (t) => {
  const form = new FormData();
  form.append('user_data_csv', new Blob([usersCsv(5_000)], { type: 'text/csv' }), 'users.csv');
  const response = await fetch(new URL('/api/users/csv', base), { method: 'POST', headers: { authorization: `Bearer ${tenant.adminToken}` }, body: form });
  t.equal(response.status, 200);
  const answer = (await response.json()) as { new_users: { line: number; user: { username: string } }[] };
  // The file is read back in several chunks, each into the same buffer: every row is whole.
  t.strictSame(
    answer.new_users.map((entry) => [entry.line, entry.user.username]),
    Array.from({ length: 5_000 }, (_, i) => [i + 2, `spool${i}`]),
  );
  t.equal(await noneOpen(), 0);
});

t.test('a file part that cannot be stored is the service failing (500), not a malformed body (400), and leaves nothing open', async (t) => {
  withoutTempFolder(t);
  const res = await importUsersCsv(api, t, tenant.adminToken, usersCsv(3));
  t.equal(res.status, 500);
  t.match(res.body, { status: 500, detail: 'An unexpected error occurred.' });
  t.equal(await noneOpen(), 0);
});

t.test('a text field whose bytes are not UTF-8 is refused (400), not stored with U+FFFD; UTF-8 is read, declared or not', async (t) => {
  const user = await api.createUser(tenant.tenantId, { values: { roleId: role.id, firstName: 'Before' } });
  const part = (headers: string, value: Buffer) =>
    Buffer.concat([Buffer.from(`--b\r\nContent-Disposition: form-data; name="first_name"\r\n${headers}\r\n`), value, Buffer.from('\r\n--b--\r\n')]);
  const update = (payload: Buffer) =>
    api.call(t, 'updateUser', { token: tenant.adminToken, params: { user: user.id }, payload, contentType: 'multipart/form-data; boundary=b' });
  const stored = async () => (await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: user.id } })).body.first_name;

  const latin1 = await update(part('', Buffer.from('Jos\xe9', 'latin1')));
  t.equal(latin1.status, 400, 'a form sent in Latin-1');
  t.match(latin1.body.detail, /"first_name" is not valid UTF-8/);
  const declared = await update(part('Content-Type: text/plain; charset=utf-8\r\n', Buffer.from('M\xfcller', 'latin1')));
  t.equal(declared.status, 400, 'not UTF-8 though it says so');
  // 41 00, then a lone high surrogate (00 D8), then 42 00.
  const utf16 = await update(part('Content-Type: text/plain; charset=utf-16le\r\n', Buffer.from([0x41, 0x00, 0x00, 0xd8, 0x42, 0x00])));
  t.equal(utf16.status, 400, 'an unpaired surrogate');
  t.equal(await stored(), 'Before', 'nothing changed');

  t.equal((await update(part('', Buffer.from('Jörg ☕')))).status, 200, 'UTF-8 without a charset');
  t.equal(await stored(), 'Jörg ☕');
  t.equal((await update(part('Content-Type: text/plain; charset=utf-8\r\n', Buffer.from('Müller 😀')))).status, 200, 'UTF-8 declared');
  t.equal(await stored(), 'Müller 😀');
});

t.test('a part declared as JSON that is not JSON is a malformed body (400), and nothing changes', async (t) => {
  const user = await api.createUser(tenant.tenantId, { values: { roleId: role.id, firstName: 'Before' } });
  const payload = Buffer.from(
    '--b\r\nContent-Disposition: form-data; name="last_name"\r\n\r\nAfter\r\n' +
      '--b\r\nContent-Disposition: form-data; name="first_name"\r\nContent-Type: application/json\r\n\r\nnot json\r\n--b--\r\n',
  );
  // api.call judges the answer by the operation's declared statuses: no operation declares a 406.
  const refused = await api.call(t, 'updateUser', {
    token: tenant.adminToken,
    params: { user: user.id },
    payload,
    contentType: 'multipart/form-data; boundary=b',
  });
  t.equal(refused.status, 400);
  t.match(refused.body, { type: '/problems/bad-request', status: 400, code: 'malformed_request', detail: /not valid JSON/ });
  const stored = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: user.id } });
  t.strictSame([stored.body.first_name, stored.body.last_name], ['Before', user.username], 'nothing changed');
});

t.test(
  'a part without a name is a malformed body (400), a text part or a file part, and nothing changes; a part named "undefined" is an unknown field (422)',
  async (t) => {
    const user = await api.createUser(tenant.tenantId, { values: { roleId: role.id, firstName: 'Before' } });
    const update = (parts: string) =>
      api.call(t, 'updateUser', {
        token: tenant.adminToken,
        params: { user: user.id },
        payload: Buffer.from(`--b\r\nContent-Disposition: form-data; name="last_name"\r\n\r\nAfter\r\n${parts}--b--\r\n`),
        contentType: 'multipart/form-data; boundary=b',
      });
    const text = await update('--b\r\nContent-Disposition: form-data\r\n\r\nAfter\r\n');
    t.equal(text.status, 400, 'a text part');
    t.match(text.body, { type: '/problems/bad-request', status: 400, code: 'malformed_request', detail: /part without a name/ });
    const file = await update('--b\r\nContent-Disposition: form-data; filename="me.png"\r\nContent-Type: image/png\r\n\r\nnot really a picture\r\n');
    t.equal(file.status, 400, 'a file part');
    t.match(file.body, { code: 'malformed_request', detail: /part without a name/ });
    // Over HTTP, on a connection kept open: the 400 is sent once the rest of the body (4 MiB) is read and dropped, and the next request on that connection is answered.
    for (const nameless of [
      '--b\r\nContent-Disposition: form-data; filename="me.png"',
      '--b\r\nContent-Disposition: form-data\r\n\r\nAfter\r\n--b\r\nContent-Disposition: form-data; name="profile_picture"; filename="me.png"',
    ]) {
      const body = Buffer.concat([
        Buffer.from(`${nameless}\r\nContent-Type: image/png\r\n\r\n`),
        Buffer.alloc(4 * 1024 * 1024, 'x'),
        Buffer.from('\r\n--b--\r\n'),
      ]);
      const socket = net.connect(Number(base.port), base.hostname);
      await new Promise((resolve) => socket.once('connect', resolve));
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
      socket.write(
        `PUT /api/users/${user.id} HTTP/1.1\r\nHost: ${base.host}\r\nAuthorization: Bearer ${tenant.adminToken}\r\n` +
          `Content-Type: multipart/form-data; boundary=b\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      socket.write(body);
      const first = await eventually(
        async () => received,
        (text) => /\r\n\r\n\{.*\}/.test(text),
      );
      t.match(first, /^HTTP\/1\.1 400 [^]*"code":"malformed_request"[^]*part without a name/, 'refused');
      received = '';
      socket.write(`GET /health/live HTTP/1.1\r\nHost: ${base.host}\r\n\r\n`);
      t.match(
        await eventually(
          async () => received,
          (text) => text.startsWith('HTTP/1.1 200'),
        ),
        /^HTTP\/1\.1 200/,
        'the next request on the connection is answered',
      );
      socket.destroy();
    }
    const stored = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: user.id } });
    t.strictSame([stored.body.first_name, stored.body.last_name], ['Before', user.username], 'nothing changed');
    t.equal(await noneOpen(), 0, 'no file left open');

    // What a page's `form.append(undefined, value)` sends: a name, though not one the operation takes.
    const named = await update('--b\r\nContent-Disposition: form-data; name="undefined"\r\n\r\nAfter\r\n');
    t.equal(named.status, 422);
    t.match(named.body.errors, { undefined: ['is not a known key'] });
  },
);

t.test('a file part where the operation takes a text field is refused (422), not read as its file name', async (t) => {
  const user = await api.createUser(tenant.tenantId, { values: { roleId: role.id, firstName: 'Before' } });
  // A page that appends a Blob to its form sends a file part, named "blob" unless it says otherwise.
  const asFile = (text: string) => ({ content: Buffer.from(text), fileName: 'blob', type: 'text/plain' });
  const form = await multipart({ first_name: asFile('After') });
  const refused = await api.call(t, 'updateUser', {
    token: tenant.adminToken,
    params: { user: user.id },
    payload: form.payload,
    contentType: form.contentType,
  });
  t.equal(refused.status, 422);
  t.strictSame(refused.body.error_codes, { first_name: ['type'] });
  const stored = await api.call(t, 'getUser', { token: tenant.adminToken, params: { user: user.id } });
  t.equal(stored.body.first_name, 'Before', 'nothing changed');

  const created = await multipart({
    username: asFile('filed'),
    password: 'a long password',
    first_name: 'First',
    last_name: 'Last',
    role_id: String(role.id),
  });
  const create = await api.call(t, 'createUser', { token: tenant.adminToken, payload: created.payload, contentType: created.contentType });
  t.equal(create.status, 422);
  t.strictSame(create.body.error_codes, { username: ['type'] });
  const listed = await api.call(t, 'listUsers', { token: tenant.adminToken, query: { filter: { text: 'blob' } } });
  t.strictSame(listed.body, [], 'no user was created');
  // The operation's file field still takes its file.
  const picture = await multipart({ profile_picture: { content: PNG_1X1, fileName: 'me.png', type: 'image/png' } });
  const uploaded = await api.call(t, 'updateUser', {
    token: tenant.adminToken,
    params: { user: user.id },
    payload: picture.payload,
    contentType: picture.contentType,
  });
  t.equal(uploaded.status, 200);
});
