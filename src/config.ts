import { createECDH } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';
import { parseEnv } from 'node:util';
import type { Ajv, ErrorObject } from 'ajv';
import envSchema from 'env-schema';
import ipaddr from 'ipaddr.js';
import { passwordLength, type PasswordHashCost } from './platform/auth/passwords.ts';
import { hasUnknownSslMode, parseConnectionUrl, SSL_MODES } from './platform/database/connection-url.ts';
import { displayNameProblems, storedName } from './resources/roles/names.ts';
import { SLUG } from './resources/tenants/slug.ts';

/** Process configuration, read once from the environment (README "Configuration"). */
export interface Config {
  host: string;
  port: number;
  /** External PostgreSQL; when absent an embedded server is started in `dataDir`. */
  databaseUrl: string | undefined;
  /**
   * A direct connection to the same database when `databaseUrl` goes through a
   * transaction-pooling proxy (PgBouncer): migrations, LISTEN and the job queue use it, and
   * no pooled connection uses named prepared statements (docs/fault-tolerance.md#connection-poolers).
   */
  databaseDirectUrl: string | undefined;
  /**
   * Connections of the request pool (docs/performance.md#connections): every request's
   * transaction holds one while it runs.
   */
  databasePoolSize: number;
  dataDir: string;
  role: 'all' | 'api' | 'worker';
  accessTokenTtlSeconds: number;
  passwordMinLength: number;
  /**
   * The first tenant, with an administrator `admin`, that `atrium migrate` or a starting
   * process creates on a database without any tenant (docs/running.md#first-start):
   * ATRIUM_BOOTSTRAP_TENANT, else `demo` on the embedded server. Unset with DATABASE_URL:
   * no tenant appears unless asked for.
   */
  bootstrapTenant: { slug: string; name: string } | undefined;
  /** The password of that administrator; generated and printed once when unset. */
  adminPassword: string | undefined;
  logLevel: string;
  loginMaxFailures: number;
  loginFailureWindowSeconds: number;
  bodyLimitBytes: number;
  /**
   * How long a client may take to send one whole request, headers and body; a request not
   * received by then is answered 408 and its connection closed. Bounds what a client that
   * sends slowly holds on to; answers (live streams, exports) are not limited by it.
   */
  requestTimeoutSeconds: number;
  /**
   * Which reverse proxies' `X-Forwarded-For` entries are believed (Fastify `trustProxy`):
   * false (none; the client address is the connection's), the number of proxy hops in
   * front of Atrium, or the proxies' addresses and CIDRs. Never "every hop".
   */
  trustProxy: false | number | string[];
  /** Login of the application pool (a role without BYPASSRLS, member of atrium_app). */
  appDatabaseUrl: string | undefined;
  /** Base64 32-byte master key; generated and stored in the database when unset. */
  secretKey: string | undefined;
  /** CIDRs that webhooks may reach although they are not public (docs/security.md#6-outbound-requests-and-the-ssrf-policy). */
  webhookAllowedCidrs: string[];
  /** CIDRs that push subscriptions, which every user registers, may reach although they are not public (none by default). */
  pushAllowedCidrs: string[];
  /** Outbound HTTP: time to establish a connection (DNS and TLS included), and for the whole exchange. */
  outboundConnectTimeoutMs: number;
  outboundTimeoutMs: number;
  /** Webhook deliveries: attempts in all, and the delay before the first retry (doubled each time). */
  webhookMaxAttempts: number;
  webhookRetryDelayMs: number;
  /** SMTP server for e-mail copies of notifications (`smtp://user:pass@host:port`); unset = no e-mail. */
  smtpUrl: string | undefined;
  /** Sender address of those e-mails. */
  smtpFrom: string;
  /** One e-mail copy's whole SMTP conversation, connection to the server's last answer. */
  smtpTimeoutMs: number;
  /** VAPID key pair (base64url, as `web-push generate-vapid-keys` prints); generated and stored in the database when unset. */
  vapidPublicKey: string | undefined;
  vapidPrivateKey: string | undefined;
  /** VAPID `sub` claim: a `mailto:` or `https:` contact for push services. */
  vapidSubject: string;
  /** Web Push: attempts per message in all (429, 5xx, timeouts), and the delay before the first retry (doubled each time). */
  pushMaxAttempts: number;
  pushRetryDelayMs: number;
  /** Live notification streams: interval of the keep-alive comment. */
  streamHeartbeatMs: number;
  /** On SIGTERM/SIGINT: how long the drain may take before the process gives up and exits 1. */
  shutdownTimeoutMs: number;
  /** How long finished records are kept before the hourly purge deletes them (docs/running.md#retention). */
  retention: RetentionConfig;
  /** Days audit events are kept before the hourly purge deletes them; 0 keeps them for ever (docs/audit.md#retention). */
  auditRetentionDays: number;
  /** Cost of new password hashes: `standard`, or `test` (only under NODE_ENV=test; see src/platform/auth/passwords.ts). */
  passwordHashCost: PasswordHashCost;
  /** Origins (`https://app.example.com`) whose browser pages may call the API (CORS); `*` any; empty: none. */
  corsOrigins: string[];
  /** General rate limit: requests per window per access token and per client address (0: no limit of that kind), and the window. */
  rateLimitPerToken: number;
  rateLimitPerAddress: number;
  rateLimitWindowSeconds: number;
  /** Bearer token that `GET /metrics` requires; unset: no metrics route. */
  metricsToken: string | undefined;
  /**
   * Seconds a running job stays assigned to a worker that stopped renewing it (killed,
   * out of memory, host lost) before it is retried elsewhere (docs/fault-tolerance.md).
   */
  jobLeaseSeconds: number;
}

/** Days each kind of record is kept (0 = kept for ever), and the rows deleted per statement. */
export interface RetentionConfig {
  /** Read notifications, counted from when they were read. */
  readNotificationsDays: number;
  /** Unread notifications, counted from when they were created. */
  unreadNotificationsDays: number;
  /** Finished webhook deliveries (succeeded or failed) with their attempts, counted from when they finished. */
  webhookDeliveriesDays: number;
  /** Delivered notification dispatches, counted from when they were delivered. */
  dispatchesDays: number;
  batchSize: number;
}

/** What a database URL variable accepts: one host, or several that the driver tries in turn (the primary of a failover cluster). */
const postgresUrlDescription = (what: string) =>
  `${what}, postgres://user:password@host:5432/database, or with several hosts postgres://user:password@host1:5432,host2:5432/database?target_session_attrs=read-write`;

const integer = (minimum: number, maximum: number, fallback: number, accepted: string) =>
  ({ type: 'integer', minimum, maximum, default: fallback, description: accepted }) as const;

/**
 * Every environment variable Atrium reads, as one JSON Schema (validated with env-schema).
 * `description` says what is accepted; a start-up error quotes it. `writeOnly` marks the
 * variables whose value is secret, which an error never repeats. Unset and empty mean the
 * same: the default applies.
 */
export const environmentSchema = {
  type: 'object',
  properties: {
    HOST: { type: 'string', format: 'listen-host', default: '127.0.0.1', description: 'an IP address or host name to listen on, e.g. 0.0.0.0 or ::' },
    PORT: integer(0, 65535, 3000, 'a TCP port, an integer from 0 to 65535'),
    DATABASE_URL: {
      type: 'string',
      format: 'postgres-url',
      writeOnly: true,
      description: postgresUrlDescription('a PostgreSQL connection URL'),
    },
    DATABASE_DIRECT_URL: {
      type: 'string',
      format: 'postgres-url',
      writeOnly: true,
      description: postgresUrlDescription('a PostgreSQL connection URL that bypasses the connection pooler'),
    },
    ATRIUM_APP_DATABASE_URL: {
      type: 'string',
      format: 'postgres-url',
      writeOnly: true,
      description: postgresUrlDescription('a PostgreSQL connection URL'),
    },
    DATABASE_POOL_SIZE: integer(1, 1000, 10, 'a number of connections from 1 to 1000'),
    DATA_DIR: { type: 'string', default: '.data', description: 'a folder for the embedded PostgreSQL' },
    ATRIUM_ROLE: { type: 'string', enum: ['all', 'api', 'worker'], default: 'all', description: 'one of all, api, worker' },
    ATRIUM_BOOTSTRAP_TENANT: { type: 'string', pattern: SLUG.source, description: 'a tenant slug: lower-case letters, digits and dashes, e.g. acme' },
    ATRIUM_BOOTSTRAP_TENANT_NAME: {
      type: 'string',
      format: 'tenant-name',
      maxLength: 200,
      description:
        'a tenant name of at most 200 characters, not blank, without whitespace at either end or control or other invisible characters, e.g. Acme Inc.',
    },
    ATRIUM_ADMIN_PASSWORD: { type: 'string', writeOnly: true, maxLength: 1024, description: 'a password of at most 1024 characters' },
    ATRIUM_SECRET_KEY: {
      type: 'string',
      format: 'base64-key',
      writeOnly: true,
      description: '32 random bytes, base64 encoded (openssl rand -base64 32)',
    },
    ACCESS_TOKEN_TTL: integer(60, 2 ** 31 - 1, 12 * 3600, 'a number of seconds, at least 60'),
    PASSWORD_MIN_LENGTH: integer(1, 1024, 10, 'an integer from 1 to 1024'),
    PASSWORD_HASH_COST: {
      type: 'string',
      enum: ['standard', 'test'],
      default: 'standard',
      description: 'standard; test (a weak hash for the test suite) only when NODE_ENV is test',
    },
    LOG_LEVEL: {
      type: 'string',
      enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
      default: 'info',
      description: 'one of fatal, error, warn, info, debug, trace, silent',
    },
    LOGIN_MAX_FAILURES: integer(1, 1_000_000, 10, 'an integer of at least 1'),
    LOGIN_FAILURE_WINDOW: integer(1, 2 ** 31 - 1, 900, 'a number of seconds, at least 1'),
    BODY_LIMIT: integer(1024, 2 ** 31 - 1, 1024 * 1024, 'a number of bytes, at least 1024'),
    REQUEST_TIMEOUT: integer(1, 3600, 300, 'a number of seconds from 1 to 3600'),
    TRUST_PROXY: {
      type: 'string',
      format: 'trust-proxy',
      description:
        'false, the number of proxy hops in front of Atrium (0 to 100), or a comma-separated list of proxy addresses or CIDRs (10.0.0.1,10.1.0.0/16); never true',
    },
    WEBHOOK_ALLOWED_CIDRS: { type: 'string', format: 'cidr-list', description: 'a comma-separated list of CIDRs, e.g. 10.0.0.0/8,::1/128' },
    PUSH_ALLOWED_CIDRS: { type: 'string', format: 'cidr-list', description: 'a comma-separated list of CIDRs, e.g. 10.0.0.5/32' },
    OUTBOUND_CONNECT_TIMEOUT_MS: integer(1, 2 ** 31 - 1, 5_000, 'a number of milliseconds, at least 1'),
    // At most five minutes: a push job's bound (three rounds of requests within its expiry) holds up to 500 s.
    OUTBOUND_TIMEOUT_MS: integer(1, 300_000, 15_000, 'a number of milliseconds from 1 to 300000 (five minutes)'),
    WEBHOOK_MAX_ATTEMPTS: integer(1, 100, 6, 'an integer from 1 to 100'),
    WEBHOOK_RETRY_DELAY_MS: integer(0, 2 ** 31 - 1, 30_000, 'a number of milliseconds'),
    SMTP_URL: { type: 'string', format: 'smtp-url', writeOnly: true, description: 'an SMTP URL, smtp://user:password@host:587 or smtps://…' },
    SMTP_FROM: {
      type: 'string',
      format: 'sender-address',
      maxLength: 998,
      default: 'Atrium <no-reply@atrium.invalid>',
      description: 'a sender address, name@example.com or Name <name@example.com>',
    },
    // Ten minutes by default: RFC 5321 has a client wait that long for the answer to a message's end.
    SMTP_TIMEOUT_MS: integer(1, 3_600_000, 600_000, 'a number of milliseconds from 1 to 3600000 (an hour)'),
    VAPID_PUBLIC_KEY: {
      type: 'string',
      format: 'vapid-public-key',
      description: 'a P-256 public key, 65 bytes in base64url without padding, as npx web-push generate-vapid-keys prints',
    },
    VAPID_PRIVATE_KEY: {
      type: 'string',
      format: 'vapid-private-key',
      writeOnly: true,
      description: 'a P-256 private key, 32 bytes in base64url without padding, as npx web-push generate-vapid-keys prints',
    },
    VAPID_SUBJECT: {
      type: 'string',
      // A contact: an address after mailto:, a host after https://.
      pattern: '^(mailto:[^\\s@]+@[^\\s@]+|https://[^\\s/?#]+\\S*)$',
      default: 'mailto:no-reply@atrium.invalid',
      description: 'a mailto: address or an https:// URL of a contact',
    },
    PUSH_MAX_ATTEMPTS: integer(1, 100, 5, 'an integer from 1 to 100'),
    PUSH_RETRY_DELAY_MS: integer(0, 2 ** 31 - 1, 30_000, 'a number of milliseconds'),
    STREAM_HEARTBEAT_MS: integer(100, 2 ** 31 - 1, 15_000, 'a number of milliseconds, at least 100'),
    JOB_LEASE_SECONDS: integer(2, 3600, 15, 'a number of seconds from 2 to 3600'),
    SHUTDOWN_TIMEOUT_MS: integer(100, 3_600_000, 20_000, 'a number of milliseconds from 100 to 3600000'),
    // Retention (docs/running.md#retention): days a kind of record is kept, 0 = for ever.
    RETENTION_READ_NOTIFICATIONS_DAYS: integer(0, 100_000, 90, 'a number of days, 0 to keep for ever'),
    RETENTION_UNREAD_NOTIFICATIONS_DAYS: integer(0, 100_000, 365, 'a number of days, 0 to keep for ever'),
    RETENTION_WEBHOOK_DELIVERIES_DAYS: integer(0, 100_000, 30, 'a number of days, 0 to keep for ever'),
    RETENTION_DISPATCHES_DAYS: integer(0, 100_000, 30, 'a number of days, 0 to keep for ever'),
    RETENTION_BATCH_SIZE: integer(1, 100_000, 1000, 'a number of rows per statement, 1 to 100000'),
    AUDIT_RETENTION_DAYS: integer(0, 100_000, 400, 'a number of days, 0 to keep for ever'),
    CORS_ORIGINS: {
      type: 'string',
      format: 'cors-origins',
      description: 'a comma-separated list of origins such as https://app.example.com (scheme, host, optional port, no path or trailing slash), or * alone',
    },
    RATE_LIMIT_PER_TOKEN: integer(0, 2 ** 31 - 1, 600, 'a number of requests per window, 0 for no limit'),
    RATE_LIMIT_PER_ADDRESS: integer(0, 2 ** 31 - 1, 1200, 'a number of requests per window, 0 for no limit'),
    RATE_LIMIT_WINDOW: integer(1, 86_400, 60, 'a number of seconds from 1 to 86400'),
    METRICS_TOKEN: { type: 'string', pattern: '^\\S{16,}$', writeOnly: true, description: 'a token of at least 16 characters without spaces' },
  },
  // Both VAPID keys or neither: a lone one is a mistake, not a reason to generate a pair.
  // A name for the first tenant without the tenant is a mistake too.
  dependencies: {
    VAPID_PUBLIC_KEY: ['VAPID_PRIVATE_KEY'],
    VAPID_PRIVATE_KEY: ['VAPID_PUBLIC_KEY'],
    ATRIUM_BOOTSTRAP_TENANT_NAME: ['ATRIUM_BOOTSTRAP_TENANT'],
    // Behind a pooler the application pool cannot switch roles at connection start: it logs in as its own role.
    DATABASE_DIRECT_URL: ['DATABASE_URL', 'ATRIUM_APP_DATABASE_URL'],
    // The embedded server sets up the application login itself; another one would reach another database.
    ATRIUM_APP_DATABASE_URL: ['DATABASE_URL'],
  },
} as const;

type Variable = keyof typeof environmentSchema.properties;

/** The variables after validation: strings, integers where the schema says so, defaults applied. */
type Environment = {
  -readonly [K in Variable]: (typeof environmentSchema.properties)[K] extends { type: 'integer' } ? number : string | undefined;
};

/** A configuration mistake: one line per variable, each naming it and what it accepts. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

function list(raw: string | undefined): string[] {
  return (raw ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part.length > 0);
}

/** A PostgreSQL connection URL, with one host or several (connection-url.ts). */
function postgresUrl(value: string): boolean {
  return parseConnectionUrl(value) !== null;
}

/** The role a PostgreSQL URL logs in as (after validation, so it parses). */
function loginOf(url: string): string {
  return parseConnectionUrl(url)?.user ?? '';
}

function smtpUrl(value: string): boolean {
  return URL.canParse(value) && ['smtp:', 'smtps:'].includes(new URL(value).protocol) && new URL(value).hostname !== '';
}

/**
 * VAPID keys as web-push takes them (base64url without padding): the public key an
 * uncompressed P-256 point (65 bytes, 0x04 first), the private key 32 bytes. Anything else
 * would be accepted here and fail every push, and be handed to browsers, later.
 */
function vapidKey(kind: 'public' | 'private'): (value: string) => boolean {
  return (value) => {
    const key = Buffer.from(value, 'base64url');
    return /^[A-Za-z0-9_-]+$/.test(value) && (kind === 'public' ? key.length === 65 && key[0] === 0x04 : key.length === 32);
  };
}

/** Whether `publicKey` is the public half of `privateKey` (both well-formed). */
function vapidPair(publicKey: string, privateKey: string): boolean {
  try {
    const ecdh = createECDH('prime256v1');
    ecdh.setPrivateKey(Buffer.from(privateKey, 'base64url'));
    return ecdh.getPublicKey().equals(Buffer.from(publicKey, 'base64url'));
  } catch {
    return false; // not a private key of the curve (zero, or beyond its order)
  }
}

function base64Key(value: string): boolean {
  return /^[A-Za-z0-9+/_-]+={0,2}$/.test(value) && Buffer.from(value, 'base64').length === 32;
}

/**
 * `TRUST_PROXY`: unset, empty or `false` → none; an integer → that many hops; otherwise a
 * comma-separated list of proxy addresses or CIDRs. `true` (trust every hop, so any client
 * could choose its own address) and anything else stop start-up.
 */
function trustProxy(raw: string | undefined): Config['trustProxy'] | null {
  const value = (raw ?? '').trim();
  if (value === '' || value === 'false') return false;
  if (/^\d+$/.test(value)) {
    const hops = Number(value);
    if (hops > 100) return null;
    return hops === 0 ? false : hops;
  }
  const entries = list(value);
  // Strict literals only (no `1.5` or `0x7f.1` shorthand): what the operator wrote is what is trusted.
  const valid = entries.every((entry) => isIP(entry.split('/')[0]!) !== 0 && (!entry.includes('/') || ipaddr.isValidCIDR(entry)));
  if (!valid) return null;
  return entries.length > 0 ? entries : false;
}

/**
 * `Config.trustProxy` as Fastify's option. Fastify no longer honours a bare hop count (it
 * cannot tell a proxy from a client that connects directly), so the count becomes a trust
 * function: the connection's peer and the entries it appended, up to `hops` in all. Only
 * sound when Atrium is reachable solely through those proxies (README).
 */
export function fastifyTrustProxy(value: Config['trustProxy']): false | string[] | ((address: string, hop: number) => boolean) {
  return typeof value === 'number' ? (_address: string, hop: number) => hop < value : value;
}

/** `CORS_ORIGINS`: exact origins (scheme, host, optional port; no path), or `*` alone. */
function corsOrigins(value: string): boolean {
  const origins = list(value);
  if (origins.includes('*')) return origins.length === 1;
  return origins.every((origin) => URL.canParse(origin) && /^https?:$/.test(new URL(origin).protocol) && new URL(origin).origin === origin);
}

/**
 * An address to listen on: an IP address, or a host name of RFC 1123 labels whose last
 * label is not all digits (dotted digits are an IPv4 address or nothing: 999.1.1.1 is no
 * name to look up). Caught here, a mistyped address is a configuration error before
 * PostgreSQL starts, not a failure to listen after.
 */
function listenHost(value: string): boolean {
  if (isIP(value) !== 0) return true;
  const labels = value.replace(/\.$/, '').split('.');
  return value.length <= 253 && labels.every((label) => /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i.test(label)) && !/^\d+$/.test(labels.at(-1)!);
}

/** A mail sender as nodemailer takes one: an address, or a display name and the address in angle brackets. */
const senderAddress = (value: string) => /^(?:[^<>\r\n]*<[^\s@<>]+@[^\s@<>]+>|[^\s@<>]+@[^\s@<>]+)$/.test(value.trim());

function withFormats(ajv: Ajv): Ajv {
  ajv.addFormat('listen-host', listenHost);
  ajv.addFormat('sender-address', senderAddress);
  ajv.addFormat('postgres-url', postgresUrl);
  ajv.addFormat('smtp-url', smtpUrl);
  ajv.addFormat('base64-key', base64Key);
  ajv.addFormat('vapid-public-key', vapidKey('public'));
  ajv.addFormat('vapid-private-key', vapidKey('private'));
  ajv.addFormat('trust-proxy', (value: string) => trustProxy(value) !== null);
  ajv.addFormat('cidr-list', (value: string) => list(value).every((cidr) => ipaddr.isValidCIDR(cidr)));
  ajv.addFormat('cors-origins', corsOrigins);
  // As atrium tenant:create takes --name, and the API the names people read (src/resources/roles/names.ts).
  ajv.addFormat('tenant-name', (value: string) => value.trim() !== '' && displayNameProblems(value).length === 0);
  return ajv;
}

/** One line for one variable: its name, the value unless secret, and what is accepted. */
function describe(error: ErrorObject, data: Record<string, unknown>): { variable: string; line: string } {
  if (error.keyword === 'dependencies') {
    const { property, missingProperty } = error.params as { property: string; missingProperty: string };
    const mutual = (environmentSchema.dependencies as Record<string, readonly string[]>)[missingProperty]?.includes(property);
    return {
      variable: missingProperty,
      line: mutual ? `${missingProperty} must be set together with ${property} (set both or neither)` : `${missingProperty} must be set when ${property} is`,
    };
  }
  const variable = error.instancePath.replace(/^\//, '');
  const spec = environmentSchema.properties[variable as Variable] as { description: string; writeOnly?: boolean } | undefined;
  if (!spec) return { variable, line: `configuration: ${error.message ?? 'invalid'}` };
  const shown = spec.writeOnly ? 'its value' : JSON.stringify(String(data[variable]));
  return { variable, line: `${variable}: ${shown} is not accepted; expected ${spec.description}` };
}

/**
 * The variables of `.env` in the working folder, if there is one (development; see
 * docs/operations.md). Variables already in the environment take precedence.
 */
export function readDotEnv(file = '.env'): Record<string, string | undefined> {
  if (!existsSync(file)) return {};
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    // A file that is there but cannot be read (its mode, a folder by that name) is a mistake to tell, not to pass over.
    throw new ConfigError(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)}); fix its permissions or remove it`);
  }
  // An editor's byte order mark would otherwise become part of the first variable's name.
  const parsed = parseEnv(text.replace(/^\uFEFF/, ''));
  // A line that is no NAME=value (a note without `#`) is passed over, as Node 22 and later do; Node 20 took it for
  // the start of the next line's name, and that setting was lost.
  for (const name of Object.keys(parsed)) {
    if (!name.includes('\n')) continue;
    const value = parsed[name];
    delete parsed[name];
    const setting = name
      .slice(name.lastIndexOf('\n') + 1)
      .replace(/^\s*export\s+/, '')
      .trim();
    if (setting !== '' && !(setting in parsed)) parsed[setting] = value;
  }
  return parsed;
}

/**
 * Validates every variable of `environmentSchema` before anything starts. Throws a
 * `ConfigError` whose message has one line per rejected variable.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const data: Record<string, string> = {};
  for (const name of Object.keys(environmentSchema.properties)) {
    const value = env[name];
    if (value !== undefined && value !== '') data[name] = value;
  }
  // Ajv reads an integer's text as Number() does, "0x10", "3e3" and " 3300" included: an integer variable is decimal digits only.
  // Of 309 digits or more Number() makes Infinity, which Ajv takes for an integer within any bounds.
  const lines = new Map<string, string>();
  for (const [name, spec] of Object.entries(environmentSchema.properties) as [string, { type?: string; description: string }][]) {
    const value = data[name];
    if (spec.type === 'integer' && value !== undefined && !(/^\d+$/.test(value) && Number.isSafeInteger(Number(value)))) {
      lines.set(name, `${name}: ${JSON.stringify(value)} is not accepted; expected ${spec.description}`);
      delete data[name];
    }
  }
  // A mistyped sslmode is told as such: the URL's own description says nothing of it.
  for (const name of ['DATABASE_URL', 'DATABASE_DIRECT_URL', 'ATRIUM_APP_DATABASE_URL']) {
    const value = data[name];
    if (value !== undefined && hasUnknownSslMode(value)) {
      lines.set(name, `${name}: its sslmode is not accepted; expected one of ${SSL_MODES.join(', ')}`);
      delete data[name];
    }
  }
  let vars: Environment;
  try {
    vars = envSchema<Environment>({
      schema: structuredClone(environmentSchema) as object,
      data: { ...data },
      env: false,
      ajv: { customOptions: withFormats },
    });
  } catch (error) {
    const errors = (error as { errors?: ErrorObject[] }).errors;
    if (!errors) throw error;
    for (const described of errors.map((e) => describe(e, data))) {
      if (!lines.has(described.variable)) lines.set(described.variable, described.line);
    }
    throw new ConfigError([...lines.values()].join('\n'));
  }
  if (lines.size > 0) throw new ConfigError([...lines.values()].join('\n'));
  // A weak hash is for the test suite only: anywhere else it would weaken every stored password.
  if (vars.PASSWORD_HASH_COST === 'test' && env.NODE_ENV !== 'test') {
    throw new ConfigError('PASSWORD_HASH_COST: "test" is not accepted unless NODE_ENV is test; expected standard');
  }
  // The first administrator's password is a password like any other (counted in characters, as the API counts).
  if (vars.ATRIUM_ADMIN_PASSWORD !== undefined && passwordLength(vars.ATRIUM_ADMIN_PASSWORD) < vars.PASSWORD_MIN_LENGTH) {
    throw new ConfigError(
      `ATRIUM_ADMIN_PASSWORD: its value is not accepted; expected a password of at least ${vars.PASSWORD_MIN_LENGTH} characters (PASSWORD_MIN_LENGTH)`,
    );
  }
  // Two well-formed keys of different pairs would sign pushes that no push service accepts.
  if (vars.VAPID_PUBLIC_KEY && vars.VAPID_PRIVATE_KEY && !vapidPair(vars.VAPID_PUBLIC_KEY, vars.VAPID_PRIVATE_KEY)) {
    throw new ConfigError(
      'VAPID_PUBLIC_KEY: its value is not accepted; expected the public key of VAPID_PRIVATE_KEY (the pair npx web-push generate-vapid-keys prints together)',
    );
  }
  // The table owner is not subject to row-level security: the application pool must log in as another role.
  if (vars.DATABASE_URL && vars.ATRIUM_APP_DATABASE_URL && loginOf(vars.DATABASE_URL) === loginOf(vars.ATRIUM_APP_DATABASE_URL)) {
    throw new ConfigError(
      'ATRIUM_APP_DATABASE_URL: its value is not accepted; expected a login role other than the one of DATABASE_URL, which owns the tables',
    );
  }
  return {
    host: vars.HOST!,
    port: vars.PORT,
    databaseUrl: vars.DATABASE_URL,
    dataDir: path.resolve(vars.DATA_DIR!),
    role: vars.ATRIUM_ROLE as Config['role'],
    accessTokenTtlSeconds: vars.ACCESS_TOKEN_TTL,
    passwordMinLength: vars.PASSWORD_MIN_LENGTH,
    passwordHashCost: vars.PASSWORD_HASH_COST as PasswordHashCost,
    bootstrapTenant: vars.ATRIUM_BOOTSTRAP_TENANT
      ? { slug: vars.ATRIUM_BOOTSTRAP_TENANT, name: storedName(vars.ATRIUM_BOOTSTRAP_TENANT_NAME ?? vars.ATRIUM_BOOTSTRAP_TENANT) }
      : vars.DATABASE_URL
        ? undefined
        : { slug: 'demo', name: 'Demo' },
    adminPassword: vars.ATRIUM_ADMIN_PASSWORD,
    logLevel: vars.LOG_LEVEL!,
    loginMaxFailures: vars.LOGIN_MAX_FAILURES,
    loginFailureWindowSeconds: vars.LOGIN_FAILURE_WINDOW,
    bodyLimitBytes: vars.BODY_LIMIT,
    requestTimeoutSeconds: vars.REQUEST_TIMEOUT,
    trustProxy: trustProxy(vars.TRUST_PROXY) ?? false,
    secretKey: vars.ATRIUM_SECRET_KEY,
    appDatabaseUrl: vars.ATRIUM_APP_DATABASE_URL,
    webhookAllowedCidrs: list(vars.WEBHOOK_ALLOWED_CIDRS),
    pushAllowedCidrs: list(vars.PUSH_ALLOWED_CIDRS),
    outboundConnectTimeoutMs: vars.OUTBOUND_CONNECT_TIMEOUT_MS,
    outboundTimeoutMs: vars.OUTBOUND_TIMEOUT_MS,
    webhookMaxAttempts: vars.WEBHOOK_MAX_ATTEMPTS,
    webhookRetryDelayMs: vars.WEBHOOK_RETRY_DELAY_MS,
    smtpUrl: vars.SMTP_URL,
    smtpFrom: vars.SMTP_FROM!,
    smtpTimeoutMs: vars.SMTP_TIMEOUT_MS,
    vapidPublicKey: vars.VAPID_PUBLIC_KEY,
    vapidPrivateKey: vars.VAPID_PRIVATE_KEY,
    vapidSubject: vars.VAPID_SUBJECT!,
    pushMaxAttempts: vars.PUSH_MAX_ATTEMPTS,
    pushRetryDelayMs: vars.PUSH_RETRY_DELAY_MS,
    streamHeartbeatMs: vars.STREAM_HEARTBEAT_MS,
    shutdownTimeoutMs: vars.SHUTDOWN_TIMEOUT_MS,
    retention: {
      readNotificationsDays: vars.RETENTION_READ_NOTIFICATIONS_DAYS,
      unreadNotificationsDays: vars.RETENTION_UNREAD_NOTIFICATIONS_DAYS,
      webhookDeliveriesDays: vars.RETENTION_WEBHOOK_DELIVERIES_DAYS,
      dispatchesDays: vars.RETENTION_DISPATCHES_DAYS,
      batchSize: vars.RETENTION_BATCH_SIZE,
    },
    auditRetentionDays: vars.AUDIT_RETENTION_DAYS,
    corsOrigins: list(vars.CORS_ORIGINS),
    rateLimitPerToken: vars.RATE_LIMIT_PER_TOKEN,
    rateLimitPerAddress: vars.RATE_LIMIT_PER_ADDRESS,
    rateLimitWindowSeconds: vars.RATE_LIMIT_WINDOW,
    metricsToken: vars.METRICS_TOKEN,
    databaseDirectUrl: vars.DATABASE_DIRECT_URL,
    databasePoolSize: vars.DATABASE_POOL_SIZE,
    jobLeaseSeconds: vars.JOB_LEASE_SECONDS,
  };
}

/** Edits (insert, delete, replace a character) from `a` to `b`. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * A line for each variable of `env` that looks like a misspelt setting: named `ATRIUM_…`, not
 * a setting, and within two edits of one (`ATRIUM_ROLLE=api` would otherwise be ignored
 * without a word, and the process run as all). Other `ATRIUM_…` names are left alone:
 * compose files, platforms and tools use that prefix for their own variables.
 */
export function unknownSettings(env: NodeJS.ProcessEnv): string[] {
  const known = Object.keys(environmentSchema.properties).filter((name) => name.startsWith('ATRIUM_'));
  return Object.keys(env)
    .filter((name) => name.startsWith('ATRIUM_') && !known.includes(name))
    .sort()
    .flatMap((name) => {
      const [closest] = known.map((candidate) => ({ candidate, distance: editDistance(name, candidate) })).sort((x, y) => x.distance - y.distance);
      return closest && closest.distance <= 2 ? [`${name} is not a setting of Atrium (did you mean ${closest.candidate}?); it is ignored`] : [];
    });
}

/**
 * The configuration of an entry point (`npm start`, the `atrium` command): `variables` (the
 * process's environment unless given) over `.env` when there is one. A mistake prints one
 * line per variable on stderr, no stack trace, and exits with status 78 (EX_CONFIG) before
 * anything has started.
 */
export function entryPointConfig(variables: NodeJS.ProcessEnv = process.env): Config {
  try {
    const env = { ...readDotEnv(), ...variables };
    for (const line of unknownSettings(env)) process.stderr.write(`atrium: ${line}\n`);
    return loadConfig(env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    for (const line of error.message.split('\n')) process.stderr.write(`atrium: ${line}\n`);
    process.exit(78);
  }
}
