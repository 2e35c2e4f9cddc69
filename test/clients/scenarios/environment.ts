/**
 * What a scenario program is given (by test/clients/sdk.test.ts): a running server and a
 * tenant whose administrator `admin` signs in with ATRIUM_PASSWORD. Each program creates
 * its own department and user, named after RUN (the generator), and exits 0 when every
 * step answered as documented.
 */
export const BASE_URL = required('ATRIUM_URL');
export const TENANT = required('ATRIUM_TENANT');
export const ADMIN_PASSWORD = required('ATRIUM_PASSWORD');
export const RUN = required('ATRIUM_RUN');

/** A 1×1 PNG: the smallest picture the server accepts. */
export const PNG_1X1 = Uint8Array.from(atob('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=='), (c) =>
  c.charCodeAt(0),
);

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

export function check(condition: unknown, what: string): asserts condition {
  if (!condition) throw new Error(`scenario step failed: ${what}`);
}

/** Asks `read` until it yields a value (the notification is delivered by a background job). */
export async function eventually<T>(what: string, read: () => Promise<T | undefined>): Promise<T> {
  for (let attempt = 0; attempt < 600; attempt++) {
    const value = await read();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`scenario step never happened: ${what}`);
}
