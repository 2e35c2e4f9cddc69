/**
 * A typed client for the Atrium API: openapi-fetch over the types in ./schema.ts, which
 * `npm run generate` writes from the OpenAPI document (file parts typed as `Blob`).
 */
import createClient, { type Client, type ClientOptions } from 'openapi-fetch';
import type { components, operations, paths } from './schema.ts';

export type { components, operations, paths };
export type Schemas = components['schemas'];
export type AtriumClient = Client<paths>;

export interface AtriumClientOptions extends ClientOptions {
  /** An access token (`POST /api/auth/login`); sent as `Authorization: Bearer …`. */
  token?: string;
}

/** A client for the API at `baseUrl` (the server's origin, e.g. `https://atrium.example.com`). */
export function createAtriumClient(baseUrl: string, options: AtriumClientOptions = {}): AtriumClient {
  const { token, headers, ...rest } = options;
  return createClient<paths>({
    baseUrl,
    ...rest,
    headers: { ...(headers as Record<string, string> | undefined), ...(token ? { authorization: `Bearer ${token}` } : {}) },
  });
}

type FormValue = string | number | boolean | Blob | null | undefined | readonly (string | number | boolean)[];

/**
 * The `bodySerializer` of a `multipart/form-data` operation (`createUser`, `updateUser`,
 * `importUsersCsv`): every key becomes a part, an array one part per item, a
 * `Blob`/`File` a file part; `undefined` keys are left out. Pass the body's `File` with a
 * name (or a `Blob`, sent as `blob`).
 */
export function formData<T extends object>(body: T): FormData {
  const form = new FormData();
  for (const [key, value] of Object.entries(body) as [string, FormValue][]) {
    if (value === undefined) continue;
    if (value instanceof Blob) form.append(key, value, value instanceof File ? value.name : 'blob');
    else if (Array.isArray(value)) for (const item of value) form.append(key, String(item));
    else form.append(key, value === null ? '' : String(value));
  }
  return form;
}
