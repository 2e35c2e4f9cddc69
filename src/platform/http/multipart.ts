/**
 * `multipart/form-data` bodies (docs/api-conventions.md#multipart-bodies): every file part
 * is written, as it arrives, to an anonymous temporary file (anonymous-file.ts), never held
 * whole in memory, and kept on `request.uploads[field]`; the body field itself becomes the
 * file's name, so the spec's `format: binary` string validates and handlers see plain
 * values. A handler reads the file back in chunks as often as it needs (`Upload.chunks`),
 * or whole when it is small (`Upload.content`, pictures). The files are closed once the
 * answer is sent or the client is gone, and no reader still uses them; whatever failed on
 * the way (a refused body, a client that left mid-upload) included.
 * Field values are text; the spec's types are applied by the coercing validator.
 */
import type { FileHandle } from 'node:fs/promises';
import multipart, { type Multipart } from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { anonymousFile } from './anonymous-file.ts';
import { coded, invalid, ProblemError } from './problem.ts';

/** Bytes read back from an upload at a time. */
export const UPLOAD_CHUNK_BYTES = 64 * 1024;

export interface Upload {
  fileName: string;
  mimeType: string;
  /** The file's length in bytes. */
  size: number;
  /**
   * The file from its start, in chunks of at most UPLOAD_CHUNK_BYTES; each call reads it
   * anew. `transient`: the chunks are read into two buffers in turn (the next while the
   * reader works on the current one), so a chunk is only valid until the next one is asked
   * for; for readers that copy what they keep. Fresh memory costs a page fault per 4 KiB on
   * first use, which made reading a file back into a new buffer per chunk several times
   * slower than reading it into buffers already used.
   */
  chunks(options?: { transient?: boolean }): AsyncGenerator<Buffer>;
  /** The whole file in memory: for small files (pictures). */
  content(): Promise<Buffer>;
}

/** A file part spooled to an anonymous file: closed once released and no longer read. */
class SpooledFile {
  size = 0;
  private readers = 0;
  private released = false;
  private closed: Promise<void> | null = null;

  constructor(private readonly file: FileHandle) {}

  async append(chunk: Buffer): Promise<void> {
    await this.file.write(chunk, 0, chunk.length, this.size);
    this.size += chunk.length;
  }

  async *chunks({ transient = false } = {}): AsyncGenerator<Buffer> {
    if (this.released) throw new Error('the upload was already released');
    this.readers++;
    // The next chunk is read while the reader works on the current one: transient, into two
    // buffers in turn; otherwise into a fresh one each time (a reader may keep a chunk, or part of it).
    const buffers = transient ? [0, 1].map(() => Buffer.allocUnsafe(Math.min(UPLOAD_CHUNK_BYTES, this.size))) : null;
    let turn = 0;
    const readAt = async (position: number): Promise<Buffer> => {
      const length = Math.min(UPLOAD_CHUNK_BYTES, this.size - position);
      const buffer = buffers ? buffers[turn++ % 2]!.subarray(0, length) : Buffer.allocUnsafe(length);
      const { bytesRead } = await this.file.read(buffer, 0, length, position);
      if (bytesRead === 0) throw new Error('the upload file ended early');
      return bytesRead === length ? buffer : buffer.subarray(0, bytesRead);
    };
    const ahead = (position: number) => {
      if (position >= this.size) return null;
      const read = readAt(position);
      // Its failure is the reader's when it asks for the chunk; until then it is not unhandled.
      read.catch(() => undefined);
      return read;
    };
    let next = ahead(0);
    try {
      for (let position = 0; next;) {
        const chunk = await next;
        position += chunk.length;
        next = ahead(position);
        yield chunk;
      }
    } finally {
      // A reader that stopped early leaves a read under way: the file is not closed under it.
      await next?.catch(() => undefined);
      this.readers--;
      this.closeWhenUnused();
    }
  }

  async content(): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const chunk of this.chunks()) parts.push(chunk);
    return Buffer.concat(parts, this.size);
  }

  /** No reader may start after this; the file closes when the last one ends. */
  release(): void {
    this.released = true;
    this.closeWhenUnused();
  }

  private closeWhenUnused(): void {
    if (this.released && this.readers === 0) this.closed ??= this.file.close().catch(() => undefined);
  }
}

/** A file part that could not be written to its temporary file: the service's failure, not the body's. */
class UploadStorageError extends Error {
  constructor(cause: unknown) {
    super('a file part could not be written to its temporary file', { cause });
    this.name = 'UploadStorageError';
  }
}

/** `write`, with its failure an UploadStorageError. */
async function storing<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    throw new UploadStorageError(error);
  }
}

/** The files of one request, released together when its answer is done. */
class RequestFiles {
  private readonly files: SpooledFile[] = [];
  private released = false;

  add(file: SpooledFile): void {
    this.files.push(file);
    // Opened after the answer ended (the client left while the part was arriving).
    if (this.released) file.release();
  }

  release(): void {
    this.released = true;
    for (const file of this.files) file.release();
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    uploads: Record<string, Upload> | null;
    /** The request's spooled file parts, released when its answer is done. */
    uploadFiles: RequestFiles | null;
    /** Set once the body was read and validated: later failures are not the body's fault. */
    bodyAccepted: boolean;
  }
}

/** Largest file part accepted (the CSV import); pictures have their own, smaller limit. */
export const UPLOAD_MAX_BYTES = 20 * 1024 * 1024;

/** File parts per request: each multipart operation takes exactly one file. */
export const MAX_FILES = 1;

export async function registerMultipart(app: FastifyInstance): Promise<void> {
  app.decorateRequest('uploads', null);
  app.decorateRequest('uploadFiles', null);
  app.decorateRequest('bodyAccepted', false);
  app.addHook('preHandler', (request, _reply, done) => {
    request.bodyAccepted = true;
    done();
  });
  // Before the plugin's own hook, which reads the parts: the files it spools are released
  // when the response closes, whether it was sent or the client left first.
  app.addHook('preValidation', (request, reply, done) => {
    if (request.isMultipart()) {
      // Read only for an operation that takes it (any other operation refused it before, 415):
      // a route outside the operations answers without reading it (a path no route serves was
      // answered before its body was read: error-handler.ts).
      if (request.routeOptions.config.operationId === undefined) {
        done(new ProblemError(415, 'This resource takes no request body.'));
        return;
      }
      const files = new RequestFiles();
      request.uploadFiles = files;
      reply.raw.once('close', () => files.release());
      const parts = request.parts;
      request.parts = (options) => namedParts(parts.call(request, options));
    }
    done();
  });
  await app.register(multipart, {
    attachFieldsToBody: 'keyValues',
    // Every operation takes one file: a second file part is refused (413) rather than read.
    limits: { fileSize: UPLOAD_MAX_BYTES, files: MAX_FILES, fields: 100, parts: 100 + MAX_FILES, fieldSize: 64 * 1024 },
    async onFile(this: FastifyRequest, part) {
      const file = new SpooledFile(await storing(() => anonymousFile('atrium-upload')));
      this.uploadFiles!.add(file);
      for await (const chunk of part.file as AsyncIterable<Buffer>) await storing(() => file.append(chunk));
      // busboy stops at the size limit and marks the part truncated.
      if (part.file.truncated) throw new app.multipartErrors.RequestFileTooLargeError();
      const upload: Upload = {
        fileName: part.filename,
        mimeType: part.mimetype,
        size: file.size,
        chunks: (options) => file.chunks(options),
        content: () => file.content(),
      };
      this.uploads = { ...this.uploads, [part.fieldname]: upload };
      (part as unknown as { value: string }).value = part.filename || part.fieldname;
    },
  });
  // After the plugin's hook, which has put the text fields on the body.
  app.addHook('preValidation', (request, _reply, done) => {
    done(request.isMultipart() ? (fileInTextFieldError(request) ?? garbledFieldError(request)) : undefined);
  });
}

/**
 * The body's parts as the plugin reads them, refusing a part without a name (every part of
 * a form has one: RFC 7578), which the plugin would put on the body as a field named
 * "undefined", to be refused as a field the operation does not know.
 */
async function* namedParts(parts: AsyncIterableIterator<Multipart>): AsyncIterableIterator<Multipart> {
  let nameless = false;
  for await (const part of parts) {
    // From there on, the rest of the body is read and dropped, not stored: a connection left
    // with a body nobody reads would answer no further request.
    nameless ||= part.fieldname === undefined;
    if (!nameless) yield part;
    else if (part.type === 'file') part.file.resume();
  }
  if (nameless) throw new ProblemError(400, 'The multipart body has a part without a name.');
}

type FormSchema = { properties?: Record<string, { format?: string } | undefined> };

/**
 * A file part sent for a field the operation takes as text (a page that appends a Blob
 * for `first_name`): the body field holds the part's file name, which the field would
 * otherwise take as its value ("blob") without a word. Refused as the wrong type of value
 * for that field. A field the form does not know is left to validation ("is not a known key").
 */
function fileInTextFieldError(request: FastifyRequest): ProblemError | undefined {
  const body = request.routeOptions.schema?.body as { content?: Record<string, { schema?: FormSchema }> } | undefined;
  const properties = body?.content?.['multipart/form-data']?.schema?.properties ?? {};
  const misplaced = Object.keys(request.uploads ?? {}).filter((field) => {
    const declared = Object.hasOwn(properties, field) ? properties[field] : undefined;
    return declared !== undefined && declared.format !== 'binary';
  });
  if (misplaced.length === 0) return undefined;
  return invalid(Object.fromEntries(misplaced.map((field) => [field, [coded('type', 'must be a text field, not a file part')]])));
}

/**
 * U+FFFD, which the multipart parser puts for bytes that are not UTF-8 (a form sent in
 * Latin-1), or an unpaired surrogate (a part declaring UTF-16).
 */
const GARBLED = /\uFFFD|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * A text field that holds what the client did not send: the multipart parser decodes a
 * field's bytes itself, and puts U+FFFD in place of those that are not UTF-8, so such a
 * value would be stored without a word (a JSON body with them is refused, 400). A field
 * holding U+FFFD is refused the same way, though the character may have been sent: it
 * is what such a decoder writes, and no name or address needs it. The file's own part is
 * not judged here (its bytes are the file's).
 */
function garbledFieldError(request: FastifyRequest): ProblemError | undefined {
  const body = request.body as Record<string, unknown> | undefined;
  for (const [name, value] of Object.entries(body ?? {})) {
    if (request.uploads?.[name] !== undefined) continue;
    const values = Array.isArray(value) ? value : [value];
    if (values.some((item) => typeof item === 'string' && GARBLED.test(item))) {
      return new ProblemError(400, `The multipart field ${JSON.stringify(name.slice(0, 100))} is not valid UTF-8 text.`);
    }
  }
  return undefined;
}

export const uploadOf = (request: FastifyRequest, field: string): Upload | undefined => request.uploads?.[field];

/**
 * busboy reports a truncated or garbled multipart body with plain errors (no status):
 * raised while the body is read, they are the client's fault (400). A part that could
 * not be stored is not.
 */
export function isMalformedMultipart(request: FastifyRequest, error: { statusCode?: number }): boolean {
  // Apps without the multipart plugin (tests of the error handler) have no isMultipart.
  return (
    !request.bodyAccepted &&
    !(error instanceof UploadStorageError) &&
    typeof request.isMultipart === 'function' &&
    request.isMultipart() &&
    (error.statusCode === undefined || error.statusCode >= 500)
  );
}
