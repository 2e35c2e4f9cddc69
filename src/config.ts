import path from 'node:path';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

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
  dataDir: string;
  role: 'all' | 'api' | 'worker';
  accessTokenTtlSeconds: number;
  passwordMinLength: number;
  adminPassword: string | undefined;
  logLevel: string;
  loginMaxFailures: number;
  loginFailureWindowSeconds: number;
  bodyLimitBytes: number;
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
  /** CIDRs that outbound requests may reach although they are not public (docs/security.md#6-outbound-requests-and-the-ssrf-policy). */
  webhookAllowedCidrs: string[];
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
  /**
   * Seconds a running job stays assigned to a worker that stopped renewing it (killed,
   * out of memory, host lost) before it is retried elsewhere (docs/fault-tolerance.md).
   */
  jobLeaseSeconds: number;
}

function list(env: NodeJS.ProcessEnv, name: string): string[] {
  return (env[name] ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part.length > 0);
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return value;
}

/**
 * `TRUST_PROXY`: unset, empty or `false` → none; an integer → that many hops; otherwise a
 * comma-separated list of proxy addresses or CIDRs. `true` (trust every hop, so any client
 * could choose its own address) and anything else stop start-up.
 */
function trustProxy(env: NodeJS.ProcessEnv): Config['trustProxy'] {
  const raw = (env.TRUST_PROXY ?? '').trim();
  if (raw === '' || raw === 'false') return false;
  if (/^\d+$/.test(raw)) {
    const hops = Number(raw);
    if (hops > 100) throw new Error(`TRUST_PROXY must be a hop count from 0 to 100 or a list of proxy addresses, got "${raw}"`);
    return hops === 0 ? false : hops;
  }
  const entries = list(env, 'TRUST_PROXY');
  for (const entry of entries) {
    // Strict literals only (no `1.5` or `0x7f.1` shorthand): what the operator wrote is what is trusted.
    const address = entry.split('/')[0]!;
    const valid = isIP(address) !== 0 && (!entry.includes('/') || ipaddr.isValidCIDR(entry));
    if (!valid) {
      throw new Error(
        `TRUST_PROXY must be the number of proxy hops in front of Atrium (e.g. 1) or a comma-separated list of proxy addresses or CIDRs (e.g. 10.0.0.1,10.1.0.0/16); "${entry}" is neither`,
      );
    }
  }
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

/** Both VAPID keys or neither: a lone one is a configuration mistake, not a reason to generate. */
function vapidKeys(env: NodeJS.ProcessEnv): Pick<Config, 'vapidPublicKey' | 'vapidPrivateKey'> {
  const vapidPublicKey = env.VAPID_PUBLIC_KEY || undefined;
  const vapidPrivateKey = env.VAPID_PRIVATE_KEY || undefined;
  if ((vapidPublicKey === undefined) !== (vapidPrivateKey === undefined)) {
    throw new Error('VAPID_PUBLIC_KEY and VAPID_PRIVATE_KEY must be set together (or both left unset)');
  }
  return { vapidPublicKey, vapidPrivateKey };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const role = env.ATRIUM_ROLE ?? 'all';
  if (role !== 'all' && role !== 'api' && role !== 'worker') {
    throw new Error(`ATRIUM_ROLE must be "api", "worker" or unset, got "${role}"`);
  }
  return {
    host: env.HOST || '127.0.0.1',
    port: integer(env, 'PORT', 3000),
    databaseUrl: env.DATABASE_URL || undefined,
    databaseDirectUrl: env.DATABASE_DIRECT_URL || undefined,
    dataDir: path.resolve(env.DATA_DIR || '.data'),
    role,
    accessTokenTtlSeconds: integer(env, 'ACCESS_TOKEN_TTL', 12 * 3600, 60),
    passwordMinLength: integer(env, 'PASSWORD_MIN_LENGTH', 10, 1),
    adminPassword: env.ATRIUM_ADMIN_PASSWORD || undefined,
    logLevel: env.LOG_LEVEL || 'info',
    loginMaxFailures: integer(env, 'LOGIN_MAX_FAILURES', 10, 1),
    loginFailureWindowSeconds: integer(env, 'LOGIN_FAILURE_WINDOW', 900, 1),
    bodyLimitBytes: integer(env, 'BODY_LIMIT', 1024 * 1024, 1024),
    trustProxy: trustProxy(env),
    secretKey: env.ATRIUM_SECRET_KEY || undefined,
    appDatabaseUrl: env.ATRIUM_APP_DATABASE_URL || undefined,
    webhookAllowedCidrs: list(env, 'WEBHOOK_ALLOWED_CIDRS'),
    outboundConnectTimeoutMs: integer(env, 'OUTBOUND_CONNECT_TIMEOUT_MS', 5_000, 1),
    outboundTimeoutMs: integer(env, 'OUTBOUND_TIMEOUT_MS', 15_000, 1),
    webhookMaxAttempts: integer(env, 'WEBHOOK_MAX_ATTEMPTS', 6, 1),
    webhookRetryDelayMs: integer(env, 'WEBHOOK_RETRY_DELAY_MS', 30_000, 0),
    smtpUrl: env.SMTP_URL || undefined,
    smtpFrom: env.SMTP_FROM || 'Atrium <no-reply@atrium.invalid>',
    ...vapidKeys(env),
    vapidSubject: env.VAPID_SUBJECT || 'mailto:no-reply@atrium.invalid',
    pushMaxAttempts: integer(env, 'PUSH_MAX_ATTEMPTS', 5, 1),
    pushRetryDelayMs: integer(env, 'PUSH_RETRY_DELAY_MS', 30_000, 0),
    streamHeartbeatMs: integer(env, 'STREAM_HEARTBEAT_MS', 15_000, 100),
    jobLeaseSeconds: integer(env, 'JOB_LEASE_SECONDS', 15, 2),
  };
}
