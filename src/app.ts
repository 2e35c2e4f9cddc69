import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { fastifyTrustProxy } from './config.ts';
import { registerApiReference, SPECIFICATION_URL } from './platform/http/api-reference.ts';
import { handlers } from './handlers.ts';
import { registerCors } from './platform/http/cors.ts';
import { registerRateLimit } from './platform/http/rate-limit.ts';
import { registerRequestId, requestId } from './platform/http/request-id.ts';
import { registerSecurityHeaders } from './platform/http/security-headers.ts';
import {
  answerClientError,
  registerNodeRefusals,
  answerRouterError,
  MAX_PATH_PARAMETER_LENGTH,
  registerErrorHandling,
  serializeLoggedError,
} from './platform/http/error-handler.ts';
import { registerDrain } from './platform/http/drain.ts';
import { registerJsonBodies } from './platform/http/json-body.ts';
import { registerContentCodings } from './platform/http/content-coding.ts';
import { registerMultipart } from './platform/http/multipart.ts';
import { parseQueryString, queryParameterName, registerQueryStringLimits } from './platform/http/query-string.ts';
import { loadSpecification, registerOperations } from './platform/http/operations.ts';
import { serializerCompiler } from './platform/http/serialization.ts';
import { validatorCompiler } from './platform/http/validation.ts';
import { registerMetrics } from './platform/metrics/metrics.ts';
import type { Services } from './platform/services.ts';
import { registerScim } from './resources/scim/service.ts';

/**
 * Query parameter names whose values are credentials (signed picture URLs carry
 * `signature`), compared in lower case after percent-decoding and without a trailing
 * `[]` or `[key]` (`signature[]=…` is the same parameter to the query parser), or as the
 * query parser reads the name (`[signature]=…` and `%5Bsignature%5D=…` set `signature`).
 */
const SECRET_QUERY_NAMES = new Set([
  'signature',
  'sig',
  'token',
  'access_token',
  'refresh_token',
  'id_token',
  'login_token',
  'password',
  'old_password',
  'secret',
  'client_secret',
  'api_key',
  'apikey',
  'key',
  'code',
  'authorization',
]);

function decodeQueryName(name: string): string {
  try {
    return decodeURIComponent(name.replace(/\+/g, ' '));
  } catch {
    return name;
  }
}

/**
 * A credential set anywhere in one `&`-separated pair, as a lenient parser may read it:
 * after a `;` (`expires=1;signature=…`) or with its `=` percent-encoded (`signature%3D…`),
 * its name in brackets of its own as well (`expires=1;[signature]=…`), as the query parser
 * reads a name that starts with a bracket. A bracket after another name or bracket
 * (`filter[key]=…`, `[filter][key]=…`) names a key inside that parameter: no credential.
 */
const SECRET_NAME = `(?:${[...SECRET_QUERY_NAMES].join('|')})`;
const SECRET_ASSIGNMENT = new RegExp(
  `(?:(?:^|[^a-z0-9_])${SECRET_NAME}|(?:^|[^a-z0-9_[\\]])\\[\\s*${SECRET_NAME}\\s*\\])(?:\\[[^\\][]*\\])*\\s*(?:=|%3d)`,
  'i',
);

/**
 * A filter that names a password (SCIM's `filter=password eq "…"`, `filter[password]=…`, and
 * `[filter]=…`, which the query parser reads as `filter`): refused, as no password is
 * filterable, but what it compares with is one.
 */
const FILTER_START = /^\s*filter\b/i;
const namesPasswordFilter = (names: string[], decoded: string) =>
  /password/i.test(decoded) && (FILTER_START.test(decoded) || names.some((name) => name.trim().toLowerCase() === 'filter'));

/** A percent-encoded `=` (`%3D`, or encoded again: `%253D`) and all that follows it. */
const ENCODED_EQUALS = /%(?:25)*3d[^]*/i;

/**
 * The user information before a target's host (`user:password@`), up to the host's last `@`:
 * a CONNECT's target is an authority (RFC 9110 §9.3.6), and an absolute-form target carries
 * one after its scheme (RFC 9112 §3.2.2), whatever the scheme. A target in origin form
 * (`/…`) has none.
 */
const USER_INFO = /^((?:[a-z][a-z0-9+.-]*:\/\/)?)[^/?#]*@/i;

/**
 * The user information of a CONNECT's target, up to its last `@`: the target is an authority
 * alone, so a `/`, `?` or `#` in it starts no path, query or fragment (Node passes `/` and `?`).
 */
const CONNECT_USER_INFO = /^[^]*@/;

/**
 * A request URL for the logs: the user information of its authority (a password, as often
 * as not) and values of credential query parameters are replaced.
 */
export function redactUrl(target: string, method?: string): string {
  const url = method === 'CONNECT' ? target.replace(CONNECT_USER_INFO, '[redacted]@') : target.replace(USER_INFO, '$1[redacted]@');
  const start = url.indexOf('?');
  if (start === -1) return url;
  const query = url
    .slice(start + 1)
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      const name = equals === -1 ? pair : pair.slice(0, equals);
      // The name before any bracket (`token[]`, `token[a][b]`), and the parameter the query parser reads, which for a
      // name starting with a bracket is inside it (`[token]`, `%5Btoken%5D`).
      const bare = decodeQueryName(name).split('[', 1)[0]!;
      const parsed = queryParameterName(pair) ?? '';
      // Shown up to a percent-encoded `=` (`signature[]%3D…`): what follows is the value to a lenient parser.
      if ([bare, parsed].some((candidate) => SECRET_QUERY_NAMES.has(candidate.trim().toLowerCase()))) {
        return `${name.replace(ENCODED_EQUALS, '')}=[redacted]`;
      }
      if (namesPasswordFilter([bare, parsed], decodeQueryName(pair))) return `${name.replace(ENCODED_EQUALS, '')}=[redacted]`;
      if (!SECRET_ASSIGNMENT.test(decodeQueryName(pair))) return pair;
      // The whole pair goes but its plain start: where the credential starts in it is the parser's guess.
      return `${pair.split(/[;%=+&]/, 1)[0]}=[redacted]`;
    })
    .join('&');
  return `${url.slice(0, start)}?${query}`;
}

export function loggerOptions(level: string): FastifyServerOptions['logger'] {
  return {
    level,
    // `*.headers.…`: plugins log request headers under keys of their own (the multipart parser at trace).
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.headers.authorization', '*.headers.cookie', '*.password', '*.token', '*.access_token'],
      censor: '[redacted]',
    },
    serializers: {
      err: serializeLoggedError,
      req: (req: { method: string; url: string; ip?: string }) => ({
        method: req.method,
        url: redactUrl(req.url, req.method),
        remoteAddress: req.ip,
      }),
    },
  };
}

/** A request target in origin form: an absolute-form http(s) target without its scheme and authority. */
export function originForm(target: string): string {
  const authority = /^https?:\/\/[^/?#]*/i.exec(target);
  if (!authority) return target;
  const rest = target.slice(authority[0].length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/** Paths polled by machines (probes, the metrics scrape): their requests are logged at debug. */
const QUIET_PATHS = /^\/(health\/|metrics(\?|$))/;

/** Fastify's request log lines ("incoming request", "request completed"), at info, or debug for QUIET_PATHS. */
function registerRequestLogging(app: FastifyInstance): void {
  app.addHook('onRequest', (request, _reply, done) => {
    request.log[QUIET_PATHS.test(request.url) ? 'debug' : 'info']({ req: request }, 'incoming request');
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    request.log[QUIET_PATHS.test(request.url) ? 'debug' : 'info'](
      { res: { statusCode: reply.statusCode }, responseTime: reply.elapsedTime },
      'request completed',
    );
    done();
  });
}

export interface AppOptions {
  logger?: FastifyBaseLogger;
}

/** The HTTP API: spec-bound operations, docs, problem+json errors. No listening here. */
export async function buildApp(services: Services, options: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger } : { logger: loggerOptions(services.config.logLevel) }),
    bodyLimit: services.config.bodyLimitBytes,
    // Fastify lifts Node's limit on the time to receive a request: a client sending a body
    // a byte at a time would hold its connection for ever. Headers get at most a minute of it.
    requestTimeout: services.config.requestTimeoutSeconds * 1000,
    http: {
      headersTimeout: Math.min(60_000, services.config.requestTimeoutSeconds * 1000),
      // Node would answer a request without Host with a bare 400; registerNodeRefusals refuses it as a problem document.
      requireHostHeader: false,
      // How often Node looks for requests over time: a limit is overrun by up to that much (Node's default, 30 s, made
      // the headers' minute up to ninety seconds). Every 5 s at most; a quarter of a shorter limit.
      connectionsCheckingInterval: Math.min(5_000, services.config.requestTimeoutSeconds * 250),
    },
    trustProxy: fastifyTrustProxy(services.config.trustProxy),
    // Connections are closed by registerDrain (drain.ts), once their answers are written.
    forceCloseConnections: false,
    // Fastify gives each close hook, the drain's included, as long as a plugin has to load (10 s by default), then
    // fails the close: the drain may take half of SHUTDOWN_TIMEOUT_MS, and the whole stop is bounded by it (main.ts).
    pluginTimeout: Math.max(10_000, services.config.shutdownTimeoutMs),
    // `X-Request-Id` when well-formed, otherwise a new one; logged as `request_id`.
    requestIdHeader: false,
    genReqId: requestId,
    // Requests are logged by registerRequestLogging instead (probes at debug).
    logController: new LogController({ requestIdLogLabel: 'request_id', disableRequestLogging: true }),
    // A request target in absolute form (`GET http://host/path`, as sent to a proxy; RFC 9112
    // §3.2.2) is routed by its path, and read as its path everywhere else too: the next-page
    // `Link` is built from the target as received, and would otherwise name the host the
    // client wrote. The router reads http and https targets so; anything else stays unrouted.
    rewriteUrl: (request) => originForm(request.url ?? '/'),
    routerOptions: {
      querystringParser: parseQueryString,
      maxParamLength: MAX_PATH_PARAMETER_LENGTH,
    },
    // Refusals before any route runs are problem documents too.
    frameworkErrors: answerRouterError(services.config.corsOrigins),
    clientErrorHandler: answerClientError,
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  registerRequestId(app);
  registerRequestLogging(app);
  registerMetrics(app, services.metrics, services.config.metricsToken);
  registerErrorHandling(app);
  // Half the shutdown's time: the job workers and the pools stop in the rest.
  registerDrain(app, services.config.shutdownTimeoutMs / 2);
  registerJsonBodies(app);
  registerContentCodings(app);
  // Before CORS: a preflight, answered in CORS's own hook, carries them too.
  registerSecurityHeaders(app);
  // Before CORS, which answers a preflight in its own hook: a preflight is counted too, and the
  // refusal carries a listed origin's allowance itself.
  registerRateLimit(app, {
    perToken: services.config.rateLimitPerToken,
    perAddress: services.config.rateLimitPerAddress,
    windowSeconds: services.config.rateLimitWindowSeconds,
    corsOrigins: services.config.corsOrigins,
  });
  await registerCors(app, services.config.corsOrigins);
  // After CORS and the security headers: their refusals carry them, as every answer does.
  registerQueryStringLimits(app);
  registerNodeRefusals(app);

  const specification = loadSpecification();
  app.get(SPECIFICATION_URL, async () => specification);
  await registerApiReference(app);

  // Before the operations: its content-type parser and body hook must cover their routes.
  await registerMultipart(app);
  await registerOperations(app, handlers, services);
  // SCIM 2.0 for identity providers, outside /api: its own tokens, media type and error documents.
  await registerScim(app, services);
  return app;
}
