/**
 * The one way Atrium makes HTTP requests to addresses users configure (webhooks, later
 * push endpoints). Every request gets a connect timeout (DNS and TLS included) and a total
 * timeout, redirects are never followed (a 3xx is returned as it is), the response body
 * is read up to a cap, and the address policy is applied to the address actually
 * connected to: the connector resolves the host itself and refuses before connecting,
 * so a name that resolved to a public address when it was validated and to a private
 * one now (DNS rebinding) is still refused.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { lookup as dnsLookupAsync } from 'node:dns/promises';
import type * as Undici from 'undici';
import { AddressPolicy, ipLiteral } from './address-policy.ts';

export type OutboundFailure = 'refused' | 'timeout' | 'network' | 'invalid';

/**
 * What a tenant user may be told about a request that got no HTTP response. Nothing
 * more: the address a name resolved to, its kind of range, or whether the connection was
 * refused, reset, timed out or failed in DNS or TLS would let them map the network
 * behind Atrium (which hosts exist, which ports are open). The reason is logged.
 */
/**
 * How many outbound deliveries of a queue (webhooks, push) a worker process makes at once
 * (docs/outbound-delivery.md#concurrency).
 */
export const OUTBOUND_CONCURRENCY = 8;

/** The longest an idle connection to a receiver is kept for its next request, in ms (a receiver's `Keep-Alive` asking more gets this). */
export const KEEP_ALIVE_MAX_MS = 5_000;

export const DESTINATION_NOT_ALLOWED = 'the destination is not allowed';
export const NOT_DELIVERED = 'could not be delivered';

/**
 * A space, control or format character of any script (a no-break or ideographic space, a
 * C1 control, a zero-width space): URL parsing drops, maps or percent-encodes it, so the
 * URL requested would not be the one stored and shown. The zero-width non-joiner and
 * joiner (U+200C, U+200D) are letters' parts in some scripts (Persian, the Indic ones),
 * kept in a host's IDNA form as an accented letter is.
 */
const HIDDEN_IN_URL = /(?![\u200c\u200d])[\p{Z}\p{Cc}\p{Cf}]/u;

/**
 * Whether `url`'s authority holds userinfo, even an empty one (`http://:@host`), which URL
 * parsing answers as an empty `username` and `password`. Special schemes take `\` as `/`.
 */
export const hasUserinfo = (url: string): boolean => /^[a-z][a-z\d+.-]*:[\\/]*[^\\/?#]*@/i.test(url);

/** A destination `destinationProblem` refuses, worded for a field error. */
export const NOT_AN_ALLOWED_DESTINATION = 'is not an allowed destination: its host must resolve, and only to addresses outbound requests may reach';

/**
 * A request that produced no HTTP response; `kind` tells whether retrying can help:
 * `refused` (a destination not admitted) and `invalid` (a request the HTTP client will
 * not send, such as a header value it cannot write) fail alike every time.
 * `message` is DESTINATION_NOT_ALLOWED or NOT_DELIVERED, fit for users; `detail` is the
 * reason, for the server log only.
 */
export class OutboundError extends Error {
  readonly detail: string;

  constructor(
    readonly kind: OutboundFailure,
    detail: string,
  ) {
    super(kind === 'refused' ? DESTINATION_NOT_ALLOWED : NOT_DELIVERED);
    this.name = 'OutboundError';
    this.detail = detail;
  }
}

/** Where the client reports why a destination was refused or a request failed. */
export interface OutboundLogger {
  warn(fields: object, message: string): void;
}

export interface OutboundOptions {
  allowedCidrs: readonly string[];
  /** The variable `allowedCidrs` comes from, named where an address is refused (default WEBHOOK_ALLOWED_CIDRS). */
  allowListSetting?: string;
  connectTimeoutMs: number;
  timeoutMs: number;
  /** Response bytes kept; the rest is discarded and the connection closed. Default 64 KiB. */
  maxResponseBytes?: number;
  logger?: OutboundLogger;
}

export interface OutboundRequest {
  url: string;
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  headers: Record<string, string>;
  body?: string | Buffer;
}

export interface OutboundResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** True when the body was longer than the cap. */
  truncated: boolean;
  durationMs: number;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** The HTTP client (undici) and the two guarded agents, made on the first request. */
interface Dispatchers {
  request: typeof Undici.request;
  agent: Undici.Agent;
  /** Connects only to addresses the operator allow-list admits (`send`'s `allowListedOnly`). */
  allowListedAgent: Undici.Agent;
}

export class OutboundClient {
  readonly policy: AddressPolicy;
  private readonly maxResponseBytes: number;
  /**
   * undici is loaded on the first request, not at start: a process that sends nothing (an
   * API process, mostly) never holds it (docs/performance.md#memory-of-a-started-process).
   */
  private dispatchers: Promise<Dispatchers> | null = null;

  constructor(private readonly options: OutboundOptions) {
    this.policy = new AddressPolicy(options.allowedCidrs, options.allowListSetting);
    this.maxResponseBytes = options.maxResponseBytes ?? 64 * 1024;
  }

  private loadDispatchers(): Promise<Dispatchers> {
    if (this.dispatchers) return this.dispatchers;
    const loading = import('undici').then((undici) => ({
      request: undici.request,
      agent: this.guardedAgent(
        undici,
        (ip) => this.policy.permits(ip),
        (ip) => `address ${this.policy.describe(ip)} is not public and not admitted by ${this.policy.setting}`,
      ),
      allowListedAgent: this.guardedAgent(
        undici,
        (ip) => this.policy.allowListed(ip),
        (ip) => `address ${this.policy.describe(ip)} is not admitted by ${this.policy.setting} (plain http)`,
      ),
    }));
    // A failed load is not kept: the next request tries again.
    loading.catch(() => {
      if (this.dispatchers === loading) this.dispatchers = null;
    });
    this.dispatchers = loading;
    return loading;
  }

  /** An agent that refuses, before connecting, any address `admits` rejects. */
  private guardedAgent({ Agent, buildConnector }: typeof Undici, admits: (ip: string) => boolean, refusal: (ip: string) => string): Undici.Agent {
    const connectResolved = buildConnector({ timeout: this.options.connectTimeoutMs, lookup: guardedLookup(admits, refusal) });
    return new Agent({
      // An IP literal never reaches `lookup` (net.connect skips resolution), so check it here.
      connect: (connectOptions, callback) => {
        const literal = ipLiteral(connectOptions.hostname);
        if (literal !== null && !admits(literal)) {
          callback(new OutboundError('refused', refusal(literal)), null);
          return;
        }
        connectResolved(connectOptions, callback);
      },
      headersTimeout: this.options.timeoutMs,
      bodyTimeout: this.options.timeoutMs,
      connections: 32,
      // A receiver may ask to keep an idle connection for up to undici's ten minutes (`Keep-Alive: timeout=600`):
      // peers are chosen by tenants, so an idle connection is kept at most this long, whatever it asks.
      keepAliveMaxTimeout: KEEP_ALIVE_MAX_MS,
    });
  }

  /**
   * Why `url` cannot be a destination (null when it can): http or https only, no
   * credentials in the URL, not port 0, a host that resolves, and only to permitted addresses.
   * Used when a configuration is validated; `send` checks again at connect time.
   * `allowListedOnly`: every address must be one the operator allow-list admits (push
   * endpoints over plain http). Every refusal of the host is the same
   * NOT_AN_ALLOWED_DESTINATION, whether the name does not resolve or resolves to a
   * refused address: the answer must not tell which names exist inside the network or
   * where they point. The reason is logged.
   */
  async destinationProblem(url: string, options: { allowListedOnly?: boolean } = {}): Promise<string | null> {
    if (HIDDEN_IN_URL.test(url)) return 'must not contain a space, control or format character (percent-encode it)';
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return 'must be an absolute http or https URL';
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return 'must be an http or https URL';
    if (parsed.username || parsed.password || hasUserinfo(url)) return 'must not contain credentials; use auth instead';
    // URL parsing admits port 0, which no connection reaches: every request would fail, and be retried.
    if (parsed.port === '0') return 'must name a port from 1 to 65535 (or none)';
    const reason = await this.hostProblem(parsed.hostname, options);
    if (reason === null) return null;
    this.options.logger?.warn({ outbound: { host: parsed.host, reason } }, 'outbound destination refused');
    return NOT_AN_ALLOWED_DESTINATION;
  }

  /** Why a host cannot be reached (for the log), or null when it can. */
  private async hostProblem(hostname: string, options: { allowListedOnly?: boolean }): Promise<string | null> {
    const literal = ipLiteral(hostname);
    let addresses: string[];
    if (literal !== null) addresses = [literal];
    else {
      const resolved = await this.resolveWithin(hostname, this.options.connectTimeoutMs);
      if (resolved === 'timeout') return `did not resolve within ${this.options.connectTimeoutMs} ms`;
      if (resolved === null) return 'does not resolve';
      addresses = resolved;
    }
    if (options.allowListedOnly) {
      const outside = addresses.find((address) => !this.policy.allowListed(address));
      return outside === undefined ? null : `address ${this.policy.describe(outside)} is not admitted by ${this.policy.setting} (plain http)`;
    }
    const refused = addresses.find((address) => !this.policy.permits(address));
    return refused === undefined ? null : `address ${this.policy.describe(refused)} is not public and not admitted by ${this.policy.setting}`;
  }

  /** The host's addresses, null when it does not resolve, 'timeout' when the resolver is too slow. */
  private async resolveWithin(hostname: string, ms: number): Promise<string[] | null | 'timeout'> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), ms);
    });
    const lookup = dnsLookupAsync(hostname, { all: true }).then(
      (entries) => entries.map((entry) => entry.address),
      () => null,
    );
    try {
      return await Promise.race([lookup, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Sends one request. Resolves with any HTTP response; rejects only with OutboundError.
   * `allowListedOnly`: connect only to addresses the operator allow-list admits (push
   * endpoints over plain http), checked on the address actually connected to.
   */
  async send(outbound: OutboundRequest, options: { allowListedOnly?: boolean } = {}): Promise<OutboundResponse> {
    // Before the clock starts: loading the client (the first request only) is no part of the destination's time.
    let dispatchers: Dispatchers;
    try {
      dispatchers = await this.loadDispatchers();
    } catch (error) {
      throw toOutboundError(error);
    }
    const started = performance.now();
    const abort = new AbortController();
    const timer = setTimeout(
      () => abort.abort(new OutboundError('timeout', `no complete response within ${this.options.timeoutMs} ms`)),
      this.options.timeoutMs,
    );
    try {
      const { request, agent, allowListedAgent } = dispatchers;
      const response = await request(outbound.url, {
        dispatcher: options.allowListedOnly ? allowListedAgent : agent,
        method: outbound.method,
        headers: outbound.headers,
        body: outbound.body,
        signal: abort.signal,
      });
      const chunks: Buffer[] = [];
      let size = 0;
      let truncated = false;
      for await (const chunk of response.body) {
        const buffer = chunk as Buffer;
        if (size + buffer.length > this.maxResponseBytes) {
          chunks.push(buffer.subarray(0, this.maxResponseBytes - size));
          truncated = true;
          response.body.destroy();
          break;
        }
        chunks.push(buffer);
        size += buffer.length;
      }
      return {
        status: response.statusCode,
        headers: response.headers,
        body: Buffer.concat(chunks),
        truncated,
        durationMs: Math.round(performance.now() - started),
      };
    } catch (error) {
      const failure = toOutboundError(abort.signal.aborted ? abort.signal.reason : error);
      // The host only: paths and query strings may carry credentials.
      this.options.logger?.warn({ outbound: { host: hostOf(outbound.url), kind: failure.kind, reason: failure.detail } }, 'outbound request failed');
      throw failure;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Takes no more requests and closes each connection once its request has ended, without
   * waiting for those still in flight. A shutdown closes the client after the job workers
   * have stopped: such a request belongs to a job they handed back, to be retried. Waiting
   * for it would hold the shutdown up to OUTBOUND_TIMEOUT_MS, and cutting it would wake the
   * job to record, as failed, the attempt that its retry makes again; it ends with the process.
   */
  async close(): Promise<void> {
    const dispatchers = await this.dispatchers?.catch(() => null);
    if (!dispatchers) return;
    for (const agent of [dispatchers.agent, dispatchers.allowListedAgent]) agent.close().catch(() => {});
  }
}

/** DNS resolution for net/tls.connect that refuses any address `admits` rejects. */
function guardedLookup(admits: (ip: string) => boolean, refusal: (ip: string) => string) {
  return (hostname: string, lookupOptions: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...lookupOptions, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const refused = addresses.find((entry) => !admits(entry.address));
      if (refused) return callback(new OutboundError('refused', refusal(refused.address)), []);
      if (lookupOptions.all) return callback(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

const hostOf = (url: string): string => {
  try {
    return new URL(url).host;
  } catch {
    return '(invalid URL)';
  }
};

/** Any failure → OutboundError; its `detail` (for the log) names the cause, never request data. */
function toOutboundError(error: unknown): OutboundError {
  if (error instanceof OutboundError) return error;
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof OutboundError) return cause;
  const code = (error as { code?: string }).code ?? '';
  const message = error instanceof Error ? error.message : String(error);
  if (TIMEOUT_CODES.has(code)) return new OutboundError('timeout', `${code}: ${message}`);
  // undici refused the request before sending it (a header value it cannot write): it would refuse it again.
  if (code === 'UND_ERR_INVALID_ARG') return new OutboundError('invalid', `${code}: ${message}`);
  return new OutboundError('network', code ? `${code}: ${message}` : message);
}
