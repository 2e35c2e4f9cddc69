// The fetch that orval's generated functions call: the server's origin and the access token.
import { BASE_URL } from './environment.ts';

let token: string | undefined;

export const useToken = (value: string | undefined) => {
  token = value;
};

export async function atriumFetch<T>(url: string, options: RequestInit): Promise<T> {
  const headers = new Headers(options.headers);
  if (token) headers.set('authorization', `Bearer ${token}`);
  // orval sends the JSON body of an operation that also takes multipart (createUser,
  // updateUser) without a content type; every string body here is JSON.
  if (typeof options.body === 'string' && !headers.has('content-type')) headers.set('content-type', 'application/json');
  const response = await fetch(new URL(url, BASE_URL), { ...options, headers });
  const text = await response.text();
  const data: unknown = text && /json/.test(response.headers.get('content-type') ?? '') ? JSON.parse(text) : text;
  return { data, status: response.status, headers: response.headers } as T;
}
