/** Builds a `multipart/form-data` request body the way a browser would (WHATWG FormData). */
export interface FilePart {
  content: Buffer;
  fileName: string;
  type?: string;
}

export async function multipart(fields: Record<string, string | string[] | FilePart>): Promise<{ payload: Buffer; contentType: string }> {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string') form.append(name, value);
    else if (Array.isArray(value)) for (const item of value) form.append(name, item);
    else form.append(name, new Blob([new Uint8Array(value.content)], { type: value.type ?? 'application/octet-stream' }), value.fileName);
  }
  const response = new Response(form);
  return { payload: Buffer.from(await response.arrayBuffer()), contentType: response.headers.get('content-type')! };
}

/** A valid 1×1 PNG. */
export const PNG_1X1 = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');
/** A valid 1×1 GIF. */
export const GIF_1X1 = Buffer.from('R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==', 'base64');
