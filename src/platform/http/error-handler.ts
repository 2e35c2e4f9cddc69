import { DrizzleQueryError } from 'drizzle-orm';
import { ServerResponse, STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import pino from 'pino';
import { isConnectionLoss } from '../database/connection-loss.ts';
import { isMalformedMultipart, UPLOAD_MAX_BYTES } from './multipart.ts';
import { randomUUID } from 'node:crypto';
import { noRouteError } from './no-route.ts';
import { coded, ProblemError, problemDocument, type ProblemDocument } from './problem.ts';
import { REQUEST_ID_HEADER } from './request-id.ts';
import { ANSWER_HEADERS } from './security-headers.ts';
import { corsAnswerHeaders } from './cors.ts';
import { fieldErrors } from './validation.ts';

const PROBLEM = 'application/problem+json';

/** Fastify's own client errors, by code, that keep their status but get our wording. */
const CLIENT_ERRORS: Record<string, [number, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'The request body has an unsupported media type.'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'The request body is too large.'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'The request declares a JSON body but sends none.'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'The Content-Length header does not match the body.'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'The request body is not valid JSON.'],
  // @fastify/multipart reads a part that declares `Content-Type: application/json` as JSON, and gives a 406 when it is not.
  FST_INVALID_JSON_FIELD_ERROR: [400, 'A multipart field declared as JSON (Content-Type: application/json) is not valid JSON.'],
  FST_FILES_LIMIT: [413, 'The request carries more than one file; each operation takes one file.'],
  FST_REQ_FILE_TOO_LARGE: [413, `The file is larger than ${UPLOAD_MAX_BYTES / 1024 / 1024} MiB.`],
};

interface PostgresError {
  code?: string;
  message?: string;
  detail?: string;
  where?: string;
  constraint_name?: string;
  table_name?: string;
}

/**
 * The constraint `error` names, and its table when the error says. A Citus worker's
 * refusal reaches the coordinator's client without those fields (its `where` says "while
 * executing command on" the worker): its message names the shard's constraint, the
 * schema's name followed by `_<shard id>` (`departments_tenant_id_name_key_102049`), and
 * the name is that without the suffix.
 */
export function violatedConstraint(error: PostgresError): { name: string; table?: string } | undefined {
  if (error.constraint_name) return { name: error.constraint_name, table: error.table_name };
  if (!/while executing command on /.test(error.where ?? '')) return undefined;
  const name = /constraint "([a-z0-9_]+)_\d+"/.exec(error.message ?? '')?.[1];
  return name === undefined ? undefined : { name };
}

/**
 * The field a violation names: `users_tenant_id_username_key` of `users` → `username` (our
 * unique rules are named `<table>_tenant_id_<field>_key`); without the table (a Citus
 * worker's refusal), the key's columns in the detail, `Key (tenant_id, username)=(…)`.
 */
function constraintField(error: PostgresError): string {
  const constraint = violatedConstraint(error);
  if (constraint?.table === undefined) {
    const columns = /^Key \(([^)]+)\)=/
      .exec(error.detail ?? '')?.[1]
      ?.split(', ')
      .filter((column) => column !== 'tenant_id');
    return constraint && columns?.length ? columns.join('_') : 'body';
  }
  const field = constraint.name
    .replace(new RegExp(`^${constraint.table}_`), '')
    .replace(/^tenant_id_/, '')
    .replace(/_(key|unique|fk|pkey)$/, '');
  return field || 'body';
}

/**
 * Database refusals caused by the client's input are 422s, never 500s:
 * a race that passed a handler's own check ends in a unique (23505) or foreign-key
 * (23503) violation, and PostgreSQL refuses some text outright (a NUL character in a
 * string or JSON value: 22021, 22P05). A number out of a column's range (22003) or text
 * that does not cast to a column's type (22P02) should have been refused by the spec's
 * bounds already; should one slip through, it is still the input's fault (and logged, as
 * a missing bound). drizzle wraps the driver's error as `cause`.
 */
const driverError = (error: unknown): PostgresError => ((error as { cause?: PostgresError }).cause ?? error) as PostgresError;

/** Database refusals of input that the spec's bounds should have caught first. */
const UNCHECKED_INPUT = new Set(['22003', '22P02']);

function databaseProblem(error: FastifyError): ProblemDocument | null {
  const pg = driverError(error);
  switch (pg.code) {
    case '23505':
      return problemDocument(422, 'The request is invalid.', { errors: { [constraintField(pg)]: [coded('taken', 'is already taken')] } });
    case '23503':
      return problemDocument(422, 'The request is invalid.', {
        errors: { [constraintField(pg)]: [coded('missing_reference', 'refers to a record that does not exist')] },
      });
    case '22007': // invalid_datetime_format
    case '22008': // datetime_field_overflow
      return problemDocument(422, 'The request contains a date or time outside the supported range.');
    case '22021':
    case '22P05':
      return problemDocument(422, 'The request contains text that cannot be stored (such as a NUL character).');
    case '22003': // numeric_value_out_of_range
      return problemDocument(422, 'The request contains a number outside the range that can be stored.');
    case '22P02': // invalid_text_representation
      return problemDocument(422, 'The request contains a value that is not of the expected type.');
    default:
      return null;
  }
}

/** The headers of a 503 for a lost database connection: the client may try again in a second. */
export const DATABASE_UNAVAILABLE_HEADERS: Readonly<Record<string, string>> = { 'retry-after': '1' };

/**
 * A lost database connection (`isConnectionLoss`), not the client's own socket: reading a
 * request whose client left fails with the same ECONNRESET, but with the 400 Fastify gives
 * it (the client's side, logged as such).
 */
export function isDatabaseConnectionLoss(error: unknown): boolean {
  const status = (error as { statusCode?: unknown }).statusCode;
  return !(typeof status === 'number' && status < 500) && isConnectionLoss(error);
}

/** The detail of the 503 for a transaction PostgreSQL ended to let a concurrent one proceed. */
export const CONCURRENCY_CONFLICT_DETAIL = 'A concurrent request held the same records; nothing was changed. Send the request again.';

/**
 * Why PostgreSQL ended the request's transaction though the request was not at fault, as
 * the detail of a 503 with `Retry-After` (as for a lost connection); undefined for any
 * other error. Nothing of the transaction was written. Either it was ended to let a
 * concurrent one proceed (a deadlock, 40P01, or a serialization failure, 40001): the same
 * request sent again succeeds or is refused on its merits. Or its statement was cancelled
 * (57014): a `statement_timeout` the operator set, or an operator's `pg_cancel_backend`.
 */
export function endedByDatabase(error: unknown): string | undefined {
  switch (driverError(error).code) {
    case '40P01':
    case '40001':
      return CONCURRENCY_CONFLICT_DETAIL;
    case '57014':
      return "The database cancelled the request's statement (a statement timeout, or an operator); nothing was changed.";
    default:
      return undefined;
  }
}

function toProblem(error: FastifyError): { problem: ProblemDocument; headers: Record<string, string> } | null {
  if (error instanceof ProblemError) return { problem: error.toDocument(), headers: error.headers };
  // Lost database connections (restart, failover, a proxy's idle timeout) are the
  // server's passing trouble, not a bug: the client may try again in a moment.
  if (isDatabaseConnectionLoss(error)) {
    return {
      problem: problemDocument(503, 'The database is unavailable for the moment. Try again shortly.', { code: 'database_unavailable' }),
      headers: { ...DATABASE_UNAVAILABLE_HEADERS },
    };
  }
  const ended = endedByDatabase(error);
  if (ended) return { problem: problemDocument(503, ended, { code: 'service_unavailable' }), headers: { ...DATABASE_UNAVAILABLE_HEADERS } };
  if (error.validation) {
    const context = error.validationContext === 'querystring' ? 'query' : error.validationContext;
    return {
      problem: problemDocument(422, 'The request is invalid.', { errors: fieldErrors(error.validation as never, context) }),
      headers: {},
    };
  }
  const database = databaseProblem(error);
  if (database) return { problem: database, headers: {} };
  const known = error.code ? CLIENT_ERRORS[error.code] : undefined;
  if (known) return { problem: problemDocument(known[0], known[1]), headers: {} };
  if (error instanceof SyntaxError || (error.statusCode === 400 && /JSON/i.test(error.message))) {
    return { problem: problemDocument(400, 'The request body is not valid JSON.'), headers: {} };
  }
  const status = error.statusCode;
  if (status && status >= 400 && status < 500) return { problem: problemDocument(status, error.message), headers: {} };
  return null;
}

/** Only the call sites of a stack: its first line repeats the message, which may hold values. */
const stackFrames = (error: Error) =>
  (error.stack ?? '')
    .split('\n')
    .filter((line) => /^\s+at /.test(line))
    .join('\n');

/** A driver (postgres.js) error: `detail`, `where` and non-enumerable `parameters` may hold row values. */
const isDriverError = (error: unknown): error is Error & PostgresError & { severity?: string; column_name?: string } =>
  error instanceof Error && (error.name === 'PostgresError' || typeof (error as { severity?: unknown }).severity === 'string');

/**
 * What the log may keep of an error. Database errors lose their values: drizzle's
 * DrizzleQueryError carries the query parameters in its message and `params` (password
 * hashes, sealed secrets, personal data), and the driver's `detail` quotes rows. Kept: the
 * query text, the driver's message, code, constraint, table and column, and the call sites.
 * Answers the log line's fields: `err` for other errors, `databaseError` for these.
 */
export function errorLogFields(error: unknown): Record<string, unknown> {
  const driver = (candidate: unknown) =>
    isDriverError(candidate)
      ? {
          type: candidate.name,
          message: candidate.message,
          code: candidate.code,
          constraint: candidate.constraint_name,
          table: candidate.table_name,
          column: candidate.column_name,
          stack: stackFrames(candidate),
        }
      : undefined;
  if (error instanceof DrizzleQueryError) {
    const cause = error.cause instanceof Error ? (driver(error.cause) ?? { type: error.cause.name, stack: stackFrames(error.cause) }) : undefined;
    return { databaseError: { type: 'DrizzleQueryError', query: error.query, cause, stack: stackFrames(error) } };
  }
  const own = driver(error);
  // Not under `err`: pino's error serializer would fold the messages and lose the fields.
  return own ? { databaseError: own } : { err: error };
}

/**
 * The logger's `err` serializer: a database error logged as `{ err }` anywhere (a job, a
 * stream, the idempotency store) keeps what `errorLogFields` keeps, never the statement's
 * values; any other error is serialized as pino does.
 */
export function serializeLoggedError(error: Error): pino.SerializedError {
  const fields = errorLogFields(error);
  if (!('databaseError' in fields)) return pino.stdSerializers.err(error);
  const kept = fields.databaseError as { type: string; message?: string; query?: string; stack: string };
  // `raw`, as pino's own, is not enumerable: the log line never holds the error itself.
  return Object.defineProperty({ ...kept, message: kept.message ?? `Failed query: ${kept.query}` }, 'raw', {
    value: error,
    enumerable: false,
  }) as pino.SerializedError;
}

/**
 * What the log may keep of a background job's error (`Jobs`): a database error as
 * `errorLogFields` keeps it; any other by its kind, its codes and its call sites, not its
 * message, which may quote what the job was handling (an SMTP server's refusal names its
 * recipient's address).
 */
export function jobErrorLogFields(error: unknown): Record<string, unknown> {
  const fields = errorLogFields(error);
  if (!('err' in fields)) return fields;
  if (!(error instanceof Error)) return { error: { type: typeof error } };
  const { code, responseCode, command } = error as Error & { code?: unknown; responseCode?: unknown; command?: unknown };
  return { error: { type: error.name, code, responseCode, command, stack: stackFrames(error) } };
}

/** A problem document as sent: with the request's id, to quote when asking about it. */
const identified = (problem: ProblemDocument, request: FastifyRequest): ProblemDocument => ({ ...problem, request_id: request.id });

/** Every failure leaves as an RFC 9457 problem document; internals are logged, never sent. */
export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const known =
      toProblem(error) ?? (isMalformedMultipart(request, error) ? { problem: problemDocument(400, 'The multipart body is malformed.'), headers: {} } : null);
    if (known) {
      if (known.problem.status === 503) {
        request.log.warn(errorLogFields(error), endedByDatabase(error) ? 'transaction ended by the database' : 'database unavailable');
      } else if (known.problem.status >= 500) request.log.error(errorLogFields(error), 'request failed');
      else if (UNCHECKED_INPUT.has(driverError(error).code ?? '')) request.log.warn(errorLogFields(error), 'input reached the database unchecked');
      return reply.code(known.problem.status).headers(known.headers).type(PROBLEM).send(identified(known.problem, request));
    }
    request.log.error(errorLogFields(error), 'unhandled error');
    return reply
      .code(500)
      .type(PROBLEM)
      .send(identified(problemDocument(500, 'An unexpected error occurred.'), request));
  });
  // Answered before the body is read: a parser would refuse a malformed, oversized or non-UTF-8 one first (400, 413, 415).
  app.addHook('preParsing', async (request) => {
    if (request.is404) throw noRouteError(request);
  });
  app.setNotFoundHandler((request, reply) => {
    const refusal = noRouteError(request);
    return reply.code(refusal.status).headers(refusal.headers).type(PROBLEM).send(identified(refusal.toDocument(), request));
  });
}

/** Maximum length of one path segment (a route parameter) before routing refuses the URL. */
export const MAX_PATH_PARAMETER_LENGTH = 1024;

/**
 * Refusals of the router, before any route runs (Fastify's `frameworkErrors`): a path
 * segment longer than MAX_PATH_PARAMETER_LENGTH (414) and malformed percent-encoding in
 * the path (400). Answered as problem documents like every other failure, with the
 * headers every answer carries, the allowance of a listed origin (`corsOrigins`) included:
 * the request's hooks, which give them, have not run.
 */
export function answerRouterError(corsOrigins: readonly string[]): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    const [status, detail]: [number, string] =
      error.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? [414, `A path segment is longer than ${MAX_PATH_PARAMETER_LENGTH} characters.`]
        : error.code === 'FST_ERR_BAD_URL'
          ? [400, 'The request path is not valid (malformed percent-encoding).']
          : [500, 'An unexpected error occurred.'];
    if (status >= 500) request.log.error(errorLogFields(error), 'router error');
    const origin = request.headers.origin;
    void reply
      .code(status)
      .headers({ ...ANSWER_HEADERS, ...corsAnswerHeaders(corsOrigins, typeof origin === 'string' ? origin : undefined) })
      .header(REQUEST_ID_HEADER, request.id)
      .type(PROBLEM)
      .send(identified(problemDocument(status, detail), request));
  };
}

/**
 * Requests Node's HTTP parser refuses before Fastify sees them (Fastify's
 * `clientErrorHandler`): headers too large (431), a request that is not sent in time
 * (408), anything else unparseable (400). Written to the socket as a problem document;
 * the connection is then closed.
 */
export function answerClientError(this: FastifyInstance, error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, detail]: [number, string] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'The request headers are too large.']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'The request was not received in time.']
        : [400, 'The request is not a well-formed HTTP request.'];
  // No request was made of it: its id is a new one, in the log line and the answer alike.
  const id = randomUUID();
  this.log.debug({ request_id: id, err: { code: error.code, message: error.message } }, 'client error');
  if (socket.writable) {
    const body = JSON.stringify({ ...problemDocument(status, detail), request_id: id });
    // The headers every answer carries (no request was read, so no origin is known to allow).
    const headers = Object.entries(ANSWER_HEADERS)
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join('');
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM}; charset=utf-8\r\nX-Request-Id: ${id}\r\n${headers}` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}

/**
 * Requests Node's HTTP server would answer by itself, with no problem document, no request
 * id and no security headers. An HTTP/1.1 request without `Host` (which RFC 9112 §3.2 has a
 * server refuse, 400; the server is created with `requireHostHeader: false`) is refused
 * here, after the hooks that give every answer its headers. An `Expect` other than
 * `100-continue`, which Node answers with a bare 417, is ignored: RFC 9110 §10.1.1 lets a
 * server refuse it, and the request is answered as if it were not sent.
 *
 * A `CONNECT` (RFC 9110 §9.3.6, which asks a proxy for a tunnel: this server is none) is
 * not handed to the router by Node, which closes its connection without an answer when
 * nothing takes it. It is answered as any method no route serves is (404, or 405 on a
 * path served with other methods: the not-found handler), through every hook; the
 * connection, which Node no longer parses, is closed after the answer.
 */
export function registerNodeRefusals(app: FastifyInstance): void {
  app.server.on('checkExpectation', (request, response) => app.server.emit('request', request, response));
  // The last answer handed out on each connection: a CONNECT pipelined behind requests waits for their answers.
  const lastAnswer = new WeakMap<Socket, ServerResponse>();
  app.server.on('request', (request: IncomingMessage, response: ServerResponse) => lastAnswer.set(request.socket, response));
  app.server.on('connect', (request: IncomingMessage, socket: Socket) => {
    socket.on('error', () => socket.destroy());
    const answer = () => {
      // A request before it closed the connection (`Connection: close`), or the client left: nothing to answer on.
      if (socket.destroyed || !socket.writable) return void socket.destroy();
      const response = new ServerResponse(request);
      response.shouldKeepAlive = false;
      response.assignSocket(socket);
      // As Node ends a connection it will not keep: once the answer is written (the client may still be sending).
      response.on('finish', () => socket.destroySoon());
      app.server.emit('request', request, response);
    };
    // Requests pipelined before it are still owed their answers on this connection (Node writes them in order, each
    // once the one before is done): the CONNECT's answer comes after the last of them, as a request's would.
    const previous = lastAnswer.get(socket);
    if (previous && !previous.closed) previous.once('close', answer);
    else answer();
  });
  app.addHook('onRequest', (request, _reply, done) => {
    const hostless = request.raw.httpVersion === '1.1' && request.headers.host === undefined;
    done(hostless ? new ProblemError(400, 'The request has no Host header, which HTTP/1.1 requires.') : undefined);
  });
}
