import type { FastifyRequest } from 'fastify';
import { ProblemError } from './problem.ts';

/** The methods a path may be served with, in the order `Allow` lists them. */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * Whether route parameters name nothing: one left empty (`/api/users/`) is no path the spec
 * declares. A wildcard's rest (`/docs/*`) may be empty.
 */
function namesNothing(params: unknown): boolean {
  return Object.entries((params ?? {}) as Record<string, unknown>).some(([name, value]) => name !== '*' && value === '');
}

/**
 * The methods some route serves the request's path with, besides the request's own
 * (`OPTIONS` only beside another: with cross-origin access configured, the preflight
 * route answers `OPTIONS` on every path). Empty when no route serves the path.
 */
function allowedMethods(request: FastifyRequest): string[] {
  const url = request.url.split('?')[0]!;
  const served = (method: string) => {
    try {
      const route = request.server.findRoute({ method, url });
      return route !== null && !namesNothing(route.params);
    } catch {
      return false; // a path the router cannot read is served by nothing
    }
  };
  const methods: string[] = METHODS.filter((method) => method !== request.method && served(method));
  if (methods.length > 0 && request.method !== 'OPTIONS' && served('OPTIONS')) methods.push('OPTIONS');
  return methods;
}

/**
 * The refusal of a request no route serves, or served only by reading an empty path
 * parameter (`emptyPathParameter`): 405 with `Allow` when its path is served with other
 * methods (RFC 9110 §15.5.6), else 404.
 */
export function noRouteError(request: FastifyRequest): ProblemError {
  const path = request.url.split('?')[0];
  const allowed = allowedMethods(request);
  if (allowed.length === 0) return new ProblemError(404, `No route ${request.method} ${path}.`);
  return new ProblemError(405, `${path} is served with ${allowed.join(', ')}, not ${request.method}.`, { headers: { Allow: allowed.join(', ') } });
}

/** Whether a route matched the request only by taking an empty segment for a path parameter (`/api/users/`). */
export function emptyPathParameter(request: FastifyRequest): boolean {
  return namesNothing(request.params);
}
