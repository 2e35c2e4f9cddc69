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

/** The paths whose `GET` takes `selects`: the lists and shows of records. */
export type SelectablePath = {
  [P in keyof paths]: paths[P] extends { get: { parameters: { query?: infer Q } } }
    ? [NonNullable<Q>] extends [never]
      ? never
      : 'selects' extends keyof NonNullable<Q>
        ? P
        : never
    : never;
}[keyof paths];

type Get<P extends SelectablePath> = paths[P]['get'];
type Answer<P extends SelectablePath> = Get<P>['responses'] extends { 200: { content: { 'application/json': infer J } } } ? J : never;
/** The record a selectable path answers (the item of a list). */
export type SelectableRecord<P extends SelectablePath> = Answer<P> extends readonly (infer Item)[] ? Item : Answer<P>;
/**
 * The names `selects` may hold for `P`: the fields of its record. Relations are asked for
 * with `relations`, and a relation named in `selects` is refused (422), as is a field the
 * caller may not see.
 */
export type SelectableField<P extends SelectablePath> = keyof SelectableRecord<P> & string;

/**
 * A record narrowed to the fields `K`: every one of them is there, since the answer to
 * `selects` holds exactly the fields named (a field the caller may not see is a 422, not
 * an absent key), and no other.
 */
export type Selection<R, K extends keyof R> = { [F in keyof R as F extends K ? F : never]-?: Exclude<R[F], undefined> };
/** What `select` answers for `P` and the fields `K`: one record narrowed to them, or a list of them. */
export type Selected<P extends SelectablePath, K extends SelectableField<P>> =
  Answer<P> extends readonly unknown[] ? Selection<SelectableRecord<P>, K>[] : Selection<SelectableRecord<P>, K>;

type ParametersOf<P extends SelectablePath> = Get<P>['parameters'];
/** The request options of `select`: the path's parameters and query but `selects`, and openapi-fetch's own. */
export type SelectOptions<P extends SelectablePath> = Omit<RequestInit, 'body' | 'method'> & {
  params?: { query?: Omit<NonNullable<ParametersOf<P>['query']>, 'selects'> } & (ParametersOf<P>['path'] extends undefined
    ? { path?: undefined }
    : { path: NonNullable<ParametersOf<P>['path']> });
};

/** The answer of `select`, as openapi-fetch answers: `data` on success, else the problem document as `error`. */
export type SelectResult<P extends SelectablePath, K extends SelectableField<P>> =
  { data: Selected<P, K>; error?: undefined; response: Response } | { data?: undefined; error: components['schemas']['Problem']; response: Response };

/**
 * `GET` with `selects`: the answer holds exactly `fields`, and its type says so. Lists and
 * shows type their records with every field optional, since `selects` may leave out any
 * of them; `select` narrows the record to the fields asked for, each of them present.
 *
 * ```ts
 * const page = await select(atrium, '/api/departments', ['id', 'name'], { params: { query: { limit: 20 } } });
 * for (const { id, name } of page.data ?? []) console.log(id, name); // id: number, name: string
 * ```
 */
export function select<P extends SelectablePath, K extends SelectableField<P>>(
  client: AtriumClient,
  path: P,
  fields: readonly [K, ...K[]],
  ...options: ParametersOf<P>['path'] extends undefined ? [SelectOptions<P>?] : [SelectOptions<P>]
): Promise<SelectResult<P, K>>;
export async function select(
  client: AtriumClient,
  path: SelectablePath,
  fields: readonly string[],
  options: { params?: { query?: object; path?: object } } = {},
): Promise<{ data?: unknown; error?: unknown; response: Response }> {
  const init = { ...options, params: { ...options.params, query: { ...options.params?.query, selects: fields.join(',') } } };
  // openapi-fetch types `GET` per literal path; the overload above types this call per path instead.
  const get = client.GET as (path: string, init: object) => Promise<{ data?: unknown; error?: unknown; response: Response }>;
  const { data, error, response } = await get(path, init);
  return error === undefined ? { data, response } : { error, response };
}
