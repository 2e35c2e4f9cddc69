import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import openapiGlue from 'fastify-openapi-glue';
import { operations, type OperationId } from '../../../generated/operations.ts';
import { authenticateRequest, requirePermission, requirePermissionUnlessSelf, type Auth, type Caller } from '../auth/auth.ts';
import type { Permission } from '../auth/permissions.ts';
import type { Services } from '../services.ts';
import type { Context, Handlers } from './handler.ts';
import { StreamedJson } from './json-stream.ts';
import { nextPageLink, nextPageOf } from './next-page.ts';
import {
  claimKey,
  IDEMPOTENCY_KEY_HEADER,
  idempotencyKeyOf,
  requestFingerprint,
  settleKey,
  type Caller as KeyOwner,
  type StoredAnswer,
} from './idempotency.ts';
import { emptyPathParameter, noRouteError } from './no-route.ts';
import { failedPrecondition } from './preconditions.ts';
import { coded, invalid, ProblemError } from './problem.ts';

/**
 * Media types the spec only answers with (problem+json, images, CSV) are not accepted as
 * request bodies: say so with a 415, explicitly (glue also warns about any type that has
 * no parser).
 */
function refuseResponseOnlyMediaTypes(app: FastifyInstance, specification: Record<string, unknown>): void {
  const types = new Set<string>();
  type Response = { $ref?: string; content?: object };
  const paths = (specification.paths ?? {}) as Record<string, Record<string, { responses?: Record<string, Response> }>>;
  const shared = (specification.components as { responses?: Record<string, Response> } | undefined)?.responses ?? {};
  // The answers of the bound operations only: another service's (SCIM's own media type) are its business.
  for (const item of Object.values(paths)) {
    for (const operation of Object.values(item)) {
      for (const declared of Object.values(operation.responses ?? {})) {
        const response = declared.$ref ? shared[declared.$ref.replace('#/components/responses/', '')] : declared;
        for (const type of Object.keys(response?.content ?? {})) types.add(type);
      }
    }
  }
  for (const type of types) {
    if (app.hasContentTypeParser(type)) continue;
    app.addContentTypeParser(type, (_request, _payload, done) =>
      done(Object.assign(new Error(`${type} is not accepted as a request body`), { statusCode: 415, code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE' }), undefined),
    );
  }
}

const specPath = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../generated/openapi.json');

/** The bundled OpenAPI document (generated/openapi.json). */
export function loadSpecification(): Record<string, unknown> {
  return JSON.parse(readFileSync(specPath, 'utf8')) as Record<string, unknown>;
}

const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace']);

/**
 * The document without the operations another service serves (`x-atrium-served-by`, such as
 * SCIM at `/scim/v2`): scripts/generate.ts leaves those out of `operations`, and what is not
 * there is no route of this binding. A path item left without an operation is dropped.
 */
export function boundSpecification(specification: Record<string, unknown>): Record<string, unknown> {
  const bound = new Set(Object.values(operations).map((meta) => `${meta.method} ${meta.path}`));
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [route, item] of Object.entries((specification.paths ?? {}) as Record<string, Record<string, unknown>>)) {
    const kept = Object.fromEntries(Object.entries(item).filter(([key]) => !HTTP_METHODS.has(key) || bound.has(`${key.toUpperCase()} ${route}`)));
    if (Object.keys(kept).some((key) => HTTP_METHODS.has(key))) paths[route] = kept;
  }
  return { ...specification, paths };
}

interface RequestBodyObject {
  $ref?: string;
  required?: boolean;
  content?: Record<string, unknown>;
}

type SpecPaths = Record<string, Record<string, { requestBody?: RequestBodyObject }>>;

interface DeclaredBody {
  mediaTypes: string[];
  required: boolean;
}

/**
 * The media types an operation's request body may have and whether it is required, or
 * null when it declares no body. A body may be declared in place or as a reference to
 * `components/requestBodies`.
 */
function declaredBody(specification: Record<string, unknown>, path: string, method: string): DeclaredBody | null {
  let body = (specification.paths as SpecPaths)[path]?.[method.toLowerCase()]?.requestBody;
  if (body?.$ref) {
    const name = body.$ref.replace('#/components/requestBodies/', '');
    body = ((specification.components as { requestBodies?: Record<string, RequestBodyObject> } | undefined)?.requestBodies ?? {})[name];
  }
  return body?.content ? { mediaTypes: Object.keys(body.content), required: body.required === true } : null;
}

interface ParameterObject {
  $ref?: string;
  name?: string;
  in?: string;
}

/** Whether the operation declares the `Idempotency-Key` header (idempotency.ts), in place or as a reference. */
function declaresIdempotencyKey(specification: Record<string, unknown>, path: string, method: string): boolean {
  const operation = (specification.paths as Record<string, Record<string, { parameters?: ParameterObject[] }>>)[path]?.[method.toLowerCase()];
  const shared = (specification.components as { parameters?: Record<string, ParameterObject> } | undefined)?.parameters ?? {};
  return (operation?.parameters ?? []).some((parameter) => {
    const declared = parameter.$ref ? shared[parameter.$ref.replace('#/components/parameters/', '')] : parameter;
    return declared?.in === 'header' && declared.name?.toLowerCase() === IDEMPOTENCY_KEY_HEADER;
  });
}

/** The answer as sent, to keep for a retry with the same Idempotency-Key. */
function answerOf(reply: FastifyReply, payload: unknown): StoredAnswer {
  return {
    status: reply.statusCode,
    contentType: (reply.getHeader('content-type') as string | undefined) ?? null,
    location: (reply.getHeader('location') as string | undefined) ?? null,
    // Answers of operations that create or dispatch are serialized JSON (or none).
    body: typeof payload === 'string' ? payload : null,
  };
}

/** The answer a retry with the same Idempotency-Key gets: the first one's, as it was sent. */
function replay(reply: FastifyReply, answer: StoredAnswer): FastifyReply {
  reply.code(answer.status).header('idempotent-replayed', 'true');
  if (answer.location) reply.header('location', answer.location);
  if (answer.contentType) reply.type(answer.contentType);
  return reply.send(answer.body ?? undefined);
}

/**
 * A body of a media type the operation does not declare is 415, not a validation
 * failure. Operations without a body ignore one, except uploads: those are never read
 * (buffered) where no operation expects them.
 */
function assertDeclaredMediaType(request: FastifyRequest, body: DeclaredBody | null): void {
  const header = request.headers['content-type'];
  if (!header) return;
  const mediaType = header.split(';')[0]!.trim().toLowerCase();
  if (body ? !body.mediaTypes.includes(mediaType) : mediaType === 'multipart/form-data') {
    throw new ProblemError(415, body ? `The request body must be ${body.mediaTypes.join(' or ')}.` : 'This operation takes no request body.');
  }
}

/**
 * Validation judges a body by its media type, so a request that sends none (no
 * Content-Type, nothing to parse) is not validated at all: where the spec requires a
 * body, its absence is a 422 on `body`, before any handler reads it.
 */
function assertRequiredBody(request: FastifyRequest, body: DeclaredBody | null): void {
  if (body?.required && request.body === undefined) throw invalid({ body: [coded('required', 'is required')] }, 'The request body is required.');
}

interface ParameterObject {
  $ref?: string;
  name?: string;
  in?: string;
  style?: string;
  explode?: boolean;
  schema?: { type?: string; $ref?: string };
}

/**
 * The names of the query parameters an operation declares (on the operation or its path,
 * in place or by reference to `components/parameters`), or null when one of them is an
 * object spread over the query string (`style: form`, exploded: its keys are validated as
 * the query's own, e.g. the CSV template's header names).
 */
function declaredQueryParameters(specification: Record<string, unknown>, path: string, method: string): Set<string> | null {
  const item = (specification.paths as Record<string, Record<string, { parameters?: ParameterObject[] }> & { parameters?: ParameterObject[] }>)[path];
  const shared = (specification.components as { parameters?: Record<string, ParameterObject> } | undefined)?.parameters ?? {};
  const resolve = (parameter: ParameterObject) => (parameter.$ref ? shared[parameter.$ref.replace('#/components/parameters/', '')] : parameter);
  const all = [...(item?.parameters ?? []), ...(item?.[method.toLowerCase()]?.parameters ?? [])];
  const query = all.map(resolve).filter((p): p is ParameterObject => p?.in === 'query');
  const schemas = (specification.components as { schemas?: Record<string, { type?: string }> } | undefined)?.schemas ?? {};
  const typeOf = (schema: ParameterObject['schema']) => (schema?.$ref ? schemas[schema.$ref.replace('#/components/schemas/', '')]?.type : schema?.type);
  const spread = (p: ParameterObject) => (p.style ?? 'form') === 'form' && p.explode !== false && typeOf(p.schema) === 'object';
  if (query.some(spread)) return null;
  return new Set(query.map((p) => p.name!));
}

/**
 * Query parameters the operation does not declare are ignored (as HTTP APIs commonly do):
 * they are removed before validation, so no handler ever reads an unvalidated value (such
 * as a `filter[...]` sent to an operation that takes no filter).
 */
function dropUndeclaredQuery(request: FastifyRequest, declared: Set<string> | null): void {
  const query = request.query as Record<string, unknown> | undefined;
  if (!declared || !query || typeof query !== 'object') return;
  for (const key of Object.keys(query)) if (!declared.has(key)) delete query[key];
}

/** An operation's `x-permission`, as scripts/generate.ts writes it into generated/operations.ts. */
export interface PermissionRule {
  /** The permission key, or null: every signed-in user may call the operation. */
  permission: Permission | null;
  /** The `unless-self` form: the path parameter naming a user, whose own caller needs no permission. */
  unlessSelf: string | null;
}

/** A deprecated operation's dates (`x-deprecated-since`, `x-sunset`), as scripts/generate.ts writes them into generated/operations.ts. */
export interface Deprecation {
  /** YYYY-MM-DD (UTC): since when the operation is deprecated. */
  since: string;
  /** YYYY-MM-DD (UTC): the earliest day it may be removed. */
  sunset: string;
}

/**
 * The headers every answer of a deprecated operation carries (docs/api-versions.md#deprecation):
 * `Deprecation` (RFC 9745, a structured-field date: `@` and seconds since the epoch) and
 * `Sunset` (RFC 8594, an HTTP date), both at midnight UTC of the spec's dates.
 */
export function deprecationHeaders(deprecation: Deprecation): { deprecation: string; sunset: string } {
  const midnight = (day: string) => new Date(`${day}T00:00:00Z`);
  return { deprecation: `@${midnight(deprecation.since).getTime() / 1000}`, sunset: midnight(deprecation.sunset).toUTCString() };
}

/**
 * Where an operation's `x-permission` is checked (docs/architecture.md#request-lifecycle):
 * a permission every caller needs, as soon as the caller is known (`onRequest`, before the
 * body is parsed, let alone validated); the `unless-self` form only once the request is
 * validated (`preHandler`), as it reads a path parameter — so an invalid request is a 422
 * whoever's record it names, and only a valid one on another user's record is a 403.
 */
export function permissionChecks(rule: PermissionRule): {
  onRequest: ((auth: Caller) => void) | null;
  preHandler: ((auth: Caller, params: Record<string, unknown>) => void) | null;
} {
  const { permission, unlessSelf } = rule;
  if (!permission) return { onRequest: null, preHandler: null };
  if (!unlessSelf) return { onRequest: (auth) => requirePermission(auth, permission), preHandler: null };
  return { onRequest: null, preHandler: (auth, params) => requirePermissionUnlessSelf(auth, permission, Number(params[unlessSelf])) };
}

/**
 * The caller of `request` as they stand now, judged as the request was when it began: its
 * bearer token looked up afresh (never from the last second's look-ups) and the
 * operation's `x-permission` checked again. Throws what a new request would be answered
 * (401, 403). For an answer that outlives its start (an export read in batches): a session
 * signed out, marked for logout, deactivated, deleted or blacked out, or a permission
 * revoked, holds for the rest of it.
 */
export async function reauthorize(services: Pick<Services, 'db' | 'secrets'>, request: FastifyRequest): Promise<Auth> {
  const meta = operations[request.routeOptions.config?.operationId as OperationId];
  if (!meta?.secured) throw new Error('Only a secured operation has a caller to authorize again');
  const auth = await authenticateRequest(services.db, services.secrets, request);
  const checks = permissionChecks({ permission: meta.permission, unlessSelf: meta.unlessSelf });
  checks.onRequest?.(auth);
  checks.preHandler?.(auth, request.params as Record<string, unknown>);
  return auth;
}

/**
 * Binds every operation of the spec but those another service serves (`boundSpecification`):
 * fastify-openapi-glue builds the routes, request validation and response serialization
 * from it. Authentication runs in `onRequest`, so a missing token is a 401 before the body
 * is even parsed, let alone validated; the operation's `x-permission` where
 * `permissionChecks` says. Authentication also confines a session whose user must change
 * their password to the few operations that allows (403 otherwise).
 */
export async function registerOperations(app: FastifyInstance, handlers: Handlers, services: Services): Promise<void> {
  app.decorateRequest('auth', null);
  app.decorateRequest('idempotencyKey', null);
  const specification = boundSpecification(loadSpecification());
  refuseResponseOnlyMediaTypes(app, specification);
  await app.register(openapiGlue, {
    specification,
    operationResolver: ((operationId: string): Partial<RouteOptions> => {
      const meta = operations[operationId as OperationId];
      const handler = handlers[operationId as OperationId] as unknown as (ctx: Context<OperationId>) => Promise<{
        status: number;
        body?: unknown;
        headers?: Record<string, string>;
      }>;
      if (!meta || !handler) throw new Error(`Operation ${operationId} has no handler`);
      // No caller is known on an operation without authentication (the generator refuses an x-permission there).
      const permission = permissionChecks(meta.secured ? { permission: meta.permission, unlessSelf: meta.unlessSelf } : { permission: null, unlessSelf: null });
      const afterValidation = permission.preHandler;
      const body = declaredBody(specification, meta.path, meta.method);
      const queryParameters = declaredQueryParameters(specification, meta.path, meta.method);
      // A safe request may take its principal from the last second's look-ups; any other forgets them all before it answers.
      const safe = meta.method === 'GET';
      const deprecated = meta.deprecation ? deprecationHeaders(meta.deprecation) : null;
      const idempotent = meta.secured && declaresIdempotencyKey(specification, meta.path, meta.method);
      /**
       * A deprecated operation's headers, set first so that every answer carries them, refusals
       * included; then authentication (secured operations: 401 / the operation's permission,
       * 403), then the media type of a body.
       */
      const onRequest = async (request: FastifyRequest, reply: FastifyReply) => {
        // `/api/users/` is no path the spec declares, as no route served it: 404 (or 405), before authentication.
        if (emptyPathParameter(request)) throw noRouteError(request);
        // No bytes is no body, whatever Content-Type says (many clients send one on every request): without the header
        // the body is neither parsed nor validated by a media type, and an optional body is absent.
        const { 'content-length': length, 'transfer-encoding': chunked } = request.headers;
        if (chunked === undefined && (length === undefined || length === '0')) delete request.headers['content-type'];
        if (deprecated) reply.headers(deprecated);
        if (meta.secured) {
          request.auth = await authenticateRequest(services.db, services.secrets, request, safe ? services.principals : undefined);
          permission.onRequest?.(request.auth);
        }
        assertDeclaredMediaType(request, body);
      };
      return {
        // Authentication restricts some sessions to some operations (auth.ts): it reads this.
        config: { operationId },
        onRequest,
        preValidation: (request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void) => {
          try {
            dropUndeclaredQuery(request, queryParameters);
            assertRequiredBody(request, body);
            done();
          } catch (error) {
            done(error as Error);
          }
        },
        onSend: safe
          ? undefined
          : async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
              // A request refused before it was authenticated changes nothing, so it forgets nothing.
              if (!meta.secured || request.auth) services.principals.clear();
              const claimed = request.idempotencyKey;
              if (claimed) {
                request.idempotencyKey = null;
                await settleKey(services, claimed, answerOf(reply, payload), request.log);
              }
              return payload;
            },
        // Then a write's preconditions (If-Match, If-None-Match): once the request is authenticated, permitted and
        // valid, before the handler looks anything up.
        preHandler:
          afterValidation || !safe
            ? async (request: FastifyRequest) => {
                afterValidation?.(request.auth!, request.params as Record<string, unknown>);
                if (!safe) {
                  const failed = failedPrecondition(request.headers);
                  if (failed) throw failed;
                }
              }
            : undefined,
        handler: async (request: FastifyRequest, reply: FastifyReply) => {
          const key = idempotent ? idempotencyKeyOf(request.headers) : null;
          if (key !== null) {
            const owner: KeyOwner = { tenantId: request.auth!.tenantId, userId: request.auth!.userId };
            const fingerprint = await requestFingerprint(services.secrets, operationId, request, request.uploads);
            const answered = await claimKey(services, owner, key, operationId, fingerprint);
            if (answered) return replay(reply, answered);
            request.idempotencyKey = { owner, key };
          }
          const result = await handler({
            request,
            reply,
            body: request.body,
            query: request.query as never,
            params: request.params as never,
            auth: request.auth as never,
            services,
          });
          // A handler that took the connection over (event streams) answers by itself.
          if (reply.sent) return reply;
          // A list cut short by `limit` links its next page (docs/api-conventions.md#paging).
          const next = nextPageOf(result.body);
          if (next) reply.header('link', nextPageLink(request.url, next));
          if (result.headers) reply.headers(result.headers);
          reply.code(result.status);
          if (result.body instanceof StreamedJson) return reply.type('application/json; charset=utf-8').send(result.body.stream);
          return result.body === undefined ? reply.send() : result.body;
        },
      };
    }) as never,
  });
}
