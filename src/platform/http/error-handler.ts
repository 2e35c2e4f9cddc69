import type { FastifyError, FastifyInstance } from 'fastify';
import { isMalformedMultipart } from './multipart.ts';
import { ProblemError, problemDocument, type ProblemDocument } from './problem.ts';
import { fieldErrors } from './validation.ts';

const PROBLEM = 'application/problem+json';

/** Fastify's own client errors, by code, that keep their status but get our wording. */
const CLIENT_ERRORS: Record<string, [number, string]> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: [415, 'The request body has an unsupported media type.'],
  FST_ERR_CTP_BODY_TOO_LARGE: [413, 'The request body is too large.'],
  FST_ERR_CTP_EMPTY_JSON_BODY: [400, 'The request declares a JSON body but sends none.'],
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: [400, 'The Content-Length header does not match the body.'],
  FST_ERR_CTP_INVALID_JSON_BODY: [400, 'The request body is not valid JSON.'],
};

function toProblem(error: FastifyError): { problem: ProblemDocument; headers: Record<string, string> } | null {
  if (error instanceof ProblemError) return { problem: error.toDocument(), headers: error.headers };
  if (error.validation) {
    const context = error.validationContext === 'querystring' ? 'query' : error.validationContext;
    return {
      problem: problemDocument(422, 'The request is invalid.', fieldErrors(error.validation as never, context)),
      headers: {},
    };
  }
  const known = error.code ? CLIENT_ERRORS[error.code] : undefined;
  if (known) return { problem: problemDocument(known[0], known[1]), headers: {} };
  if (error instanceof SyntaxError || (error.statusCode === 400 && /JSON/i.test(error.message))) {
    return { problem: problemDocument(400, 'The request body is not valid JSON.'), headers: {} };
  }
  const status = error.statusCode;
  if (status && status >= 400 && status < 500) return { problem: problemDocument(status, error.message), headers: {} };
  return null;
}

/** Every failure leaves as an RFC 9457 problem document; internals are logged, never sent. */
export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const known =
      toProblem(error) ??
      (isMalformedMultipart(request, error) ? { problem: problemDocument(400, 'The multipart body is malformed.'), headers: {} } : null);
    if (known) {
      if (known.problem.status >= 500) request.log.error({ err: error }, 'request failed');
      return reply.code(known.problem.status).headers(known.headers).type(PROBLEM).send(known.problem);
    }
    request.log.error({ err: error }, 'unhandled error');
    return reply.code(500).type(PROBLEM).send(problemDocument(500, 'An unexpected error occurred.'));
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).type(PROBLEM).send(problemDocument(404, `No route ${request.method} ${request.url.split('?')[0]}.`)),
  );
}
