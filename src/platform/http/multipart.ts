/**
 * `multipart/form-data` bodies: every file part is read into a
 * Buffer kept on `request.uploads[field]`, and the body field itself becomes the file's
 * name, so the spec's `format: binary` string validates and handlers see plain values.
 * Field values are text; the spec's types are applied by the coercing validator.
 */
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';

export interface Upload {
  content: Buffer;
  fileName: string;
  mimeType: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    uploads: Record<string, Upload> | null;
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
  app.decorateRequest('bodyAccepted', false);
  app.addHook('preHandler', (request, _reply, done) => {
    request.bodyAccepted = true;
    done();
  });
  await app.register(multipart, {
    attachFieldsToBody: 'keyValues',
    // Every operation takes one file: a second file part is refused (413) rather than buffered.
    limits: { fileSize: UPLOAD_MAX_BYTES, files: MAX_FILES, fields: 100, parts: 100 + MAX_FILES, fieldSize: 64 * 1024 },
    async onFile(this: FastifyRequest, part) {
      const content = await part.toBuffer();
      this.uploads = { ...this.uploads, [part.fieldname]: { content, fileName: part.filename, mimeType: part.mimetype } };
      (part as unknown as { value: string }).value = part.filename || part.fieldname;
    },
  });
}

export const uploadOf = (request: FastifyRequest, field: string): Upload | undefined => request.uploads?.[field];

/**
 * busboy reports a truncated or garbled multipart body with plain errors (no status):
 * raised while the body is read, they are the client's fault (400).
 */
export function isMalformedMultipart(request: FastifyRequest, error: { statusCode?: number }): boolean {
  // Apps without the multipart plugin (tests of the error handler) have no isMultipart.
  return (
    !request.bodyAccepted && typeof request.isMultipart === 'function' && request.isMultipart() && (error.statusCode === undefined || error.statusCode >= 500)
  );
}
