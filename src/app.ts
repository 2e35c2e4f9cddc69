import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import qs from 'qs';
import { handlers } from './handlers.ts';
import { answerClientError, answerRouterError, MAX_PATH_PARAMETER_LENGTH, registerErrorHandling } from './platform/http/error-handler.ts';
import { registerJsonBodies } from './platform/http/json-body.ts';
import { registerMultipart } from './platform/http/multipart.ts';
import { loadSpecification, registerOperations } from './platform/http/operations.ts';
import { validatorCompiler } from './platform/http/validation.ts';
import type { Services } from './platform/services.ts';

/** Query values that are credentials (signed picture URLs) never reach the logs. */
const SECRET_QUERY = /([?&](?:signature|token|access_token)=)[^&]*/gi;

export function loggerOptions(level: string): FastifyServerOptions['logger'] {
  return {
    level,
    redact: { paths: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.token', '*.access_token'], censor: '[redacted]' },
    serializers: {
      req: (req: { method: string; url: string; ip?: string }) => ({
        method: req.method,
        url: req.url.replace(SECRET_QUERY, '$1[redacted]'),
        remoteAddress: req.ip,
      }),
    },
  };
}

export interface AppOptions {
  logger?: FastifyBaseLogger;
}

/** The HTTP API: spec-bound operations, docs, problem+json errors. No listening here. */
export async function buildApp(services: Services, options: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger } : { logger: loggerOptions(services.config.logLevel) }),
    bodyLimit: services.config.bodyLimitBytes,
    trustProxy: process.env.TRUST_PROXY === 'true',
    forceCloseConnections: 'idle',
    routerOptions: {
      // `filter[text]=…` → { filter: { text: … } }; no `comma` option: `selects` stays one string.
      querystringParser: (query: string) => qs.parse(query, { depth: 2, parameterLimit: 200, arrayLimit: 100 }),
      maxParamLength: MAX_PATH_PARAMETER_LENGTH,
    },
    // Refusals before any route runs are problem documents too.
    frameworkErrors: answerRouterError,
    clientErrorHandler: answerClientError,
  });
  app.setValidatorCompiler(validatorCompiler);
  registerErrorHandling(app);
  registerJsonBodies(app);

  const specification = loadSpecification();
  await app.register(swagger, { mode: 'static', specification: { document: specification as never } });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/api/openapi.json', { schema: { hide: true } }, async () => specification);

  // Before the operations: its content-type parser and body hook must cover their routes.
  await registerMultipart(app);
  await registerOperations(app, handlers, services);
  return app;
}
