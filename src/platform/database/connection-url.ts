/**
 * PostgreSQL connection URLs as libpq and postgres.js read them, a list of hosts included:
 * `postgres://user:password@host1:5432,host2:5433/database?target_session_attrs=read-write`.
 * A client given several hosts tries them in turn, and with `target_session_attrs=read-write`
 * keeps only a server that accepts writes: how Atrium follows the primary of a cluster with
 * automatic failover (docs/operations.md#high-availability). WHATWG's `URL` refuses such a
 * host list, so every database URL Atrium reads goes through here.
 */
import postgres from 'postgres';

export interface ConnectionUrl {
  /** `postgres` or `postgresql`. */
  scheme: string;
  /** Decoded; empty when the URL names none. */
  user: string;
  /** Decoded; empty when the URL has none. */
  password: string;
  /** At least one: a host name or address (IPv6 in brackets), and a port when the URL gives one. */
  hosts: { host: string; port: number | undefined }[];
  /** Decoded; empty when the URL names none. */
  database: string;
  params: URLSearchParams;
}

/** The values of `target_session_attrs` the driver (postgres.js) knows. */
export const TARGET_SESSION_ATTRS = ['read-write', 'read-only', 'primary', 'standby', 'prefer-standby'] as const;

/**
 * The values of `sslmode` libpq documents (https://www.postgresql.org/docs/current/libpq-ssl.html).
 * postgres.js takes any other as "TLS, the certificate verified", so a typo would turn into a
 * setting nobody chose: only these are accepted. The driver reads `allow` as `require` (TLS
 * first, not after a refused plain connection) and `verify-ca` as `verify-full` (the host name
 * checked too): what it does is never weaker than what libpq does.
 */
export const SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;

const DEFAULT_PORT = 5432;
const SHAPE = /^(postgres|postgresql):\/\/([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/;
/** A host name or IPv4 address, or an IPv6 address in brackets, and an optional port. */
const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+)(?::(\d{1,5}))?$/;

function decode(value: string): string | null {
  try {
    return decodeURIComponent(value);
  } catch {
    return null;
  }
}

/** Whether `value`, when it has the shape of a connection URL, gives an `sslmode` that is not one of `SSL_MODES` (an empty one included). */
export function hasUnknownSslMode(value: string): boolean {
  const query = SHAPE.exec(value.trim())?.[4];
  return query !== undefined && sslModeUnknown(new URLSearchParams(query.replace(/^\?/, '')));
}

/** Every `sslmode` in `params` (the driver reads the last, libpq too) must be one libpq knows. */
const sslModeUnknown = (params: URLSearchParams) => params.getAll('sslmode').some((mode) => !(SSL_MODES as readonly string[]).includes(mode));

/**
 * The parts of `value`, or null when it is not a PostgreSQL connection URL with at least one
 * host (each `name[:port]`, the port from 1 to 65535; an IPv6 address only alone) and, when
 * it names one, a `target_session_attrs` the driver knows and an `sslmode` libpq knows.
 */
export function parseConnectionUrl(value: string): ConnectionUrl | null {
  const shape = SHAPE.exec(value.trim());
  if (!shape) return null;
  const [, scheme, authority, pathname = '', query = ''] = shape as unknown as [string, string, string, string | undefined, string | undefined];
  // The last `@` ends the credentials (a password may hold an unencoded one); hosts hold none.
  const at = authority.lastIndexOf('@');
  const userinfo = at === -1 ? '' : authority.slice(0, at);
  const colon = userinfo.indexOf(':');
  const user = decode(colon === -1 ? userinfo : userinfo.slice(0, colon));
  const password = decode(colon === -1 ? '' : userinfo.slice(colon + 1));
  const database = decode(pathname.replace(/^\//, ''));
  if (user === null || password === null || database === null) return null;
  const hosts: ConnectionUrl['hosts'] = [];
  for (const entry of authority.slice(at + 1).split(',')) {
    const host = HOST.exec(entry);
    if (!host) return null;
    const port = host[2] === undefined ? undefined : Number(host[2]);
    if (port !== undefined && (port < 1 || port > 65535)) return null;
    const name = decode(host[1]!);
    // A bracket written encoded (`%5B`) is no IPv6 address, and no host name either.
    if (name === null || name === '' || (!host[1]!.startsWith('[') && /[[\]]/.test(name))) return null;
    hosts.push({ host: name, port });
  }
  // The driver splits each entry of a host list at its first colon: an IPv6 address works alone only.
  if (hosts.length > 1 && hosts.some(({ host }) => host.startsWith('['))) return null;
  const params = new URLSearchParams(query.replace(/^\?/, ''));
  const target = params.get('target_session_attrs');
  if (target !== null && !(TARGET_SESSION_ATTRS as readonly string[]).includes(target)) return null;
  if (sslModeUnknown(params)) return null;
  return { scheme, user, password, hosts, database, params };
}

/**
 * The hosts of `value` as postgres.js options when one is an IPv6 address, else none (the
 * URL says them). postgres.js 3.4 splits a URL's host at its first colon, so `[::1]:5432`
 * would send it to a host named `[` (porsager/postgres#663, unreleased); given as options,
 * the hosts and ports are taken as they are. Spread into every pool's options.
 */
export function driverHosts(value: string): { host?: string; port?: number } {
  const url = parseConnectionUrl(value);
  if (!url?.hosts.some(({ host }) => host.startsWith('['))) return {};
  // The driver takes arrays here (one entry per host), though its types name a single value.
  const host = url.hosts.map(({ host: name }) => name.replace(/^\[(.*)\]$/, '$1'));
  const port = url.hosts.map(({ port: number }) => number ?? DEFAULT_PORT);
  return { host: host as unknown as string, port: port as unknown as number };
}

/**
 * A postgres.js client of the database URL `value`, given to the driver as it must be
 * (`driverUrl`, `driverHosts`), with `options`. Every pool and probe connects through here.
 */
export function connectTo<T extends Record<string, postgres.PostgresType>>(value: string, options: postgres.Options<T>) {
  return postgres(driverUrl(value), { ...driverHosts(value), ...options });
}

/** `url` as a connection URL again (each part encoded), which `parseConnectionUrl` reads back as it is. */
export function formatConnectionUrl(url: ConnectionUrl): string {
  const credentials =
    url.user === '' && url.password === '' ? '' : `${encodeURIComponent(url.user)}${url.password === '' ? '' : `:${encodeURIComponent(url.password)}`}@`;
  const hosts = url.hosts.map(({ host, port }) => `${host.startsWith('[') ? host : encodeURIComponent(host)}${port === undefined ? '' : `:${port}`}`).join(',');
  const query = url.params.toString();
  return `${url.scheme}://${credentials}${hosts}/${encodeURIComponent(url.database)}${query === '' ? '' : `?${query}`}`;
}

/**
 * `value` as the driver (postgres.js 3.4) is given it: its credentials encoded, since with
 * several hosts the driver ends them at the first `@`, and with several hosts each port
 * written out, since the driver would give a host without one the first host's port where
 * libpq gives 5432. A value that does not parse is left as it is (the driver reports it).
 */
export function driverUrl(value: string): string {
  const url = parseConnectionUrl(value);
  if (!url) return value;
  const hosts = url.hosts.length > 1 ? url.hosts.map(({ host, port }) => ({ host, port: port ?? DEFAULT_PORT })) : url.hosts;
  return formatConnectionUrl({ ...url, hosts });
}
