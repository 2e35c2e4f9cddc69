/**
 * Regenerates everything in generated/ from openapi/ (the one source of truth):
 *   generated/openapi.json   the bundled document (served at /api/openapi.json)
 *   generated/api.ts         TypeScript types (openapi-typescript)
 *   generated/operations.ts  every operation: method, path, security, permission rule, deprecation;
 *                            those another service serves (`x-atrium-served-by`) apart
 *   clients/typescript/src/schema.ts  the typed client's types (file parts as `Blob`)
 * `npm run generate`; `npm run check:generated` (CI) fails when the files differ from a fresh run.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { parse as parseYaml } from 'yaml';
import { PERMISSIONS, type Permission } from '../src/platform/auth/permissions.ts';
import type { Deprecation, PermissionRule } from '../src/platform/http/operations.ts';

/**
 * Reads an operation's `x-permission` (docs/api-conventions.md#x-permission-string-and-unless-self-forms):
 * `none` (any signed-in user reaches the handler, which decides), a permission key (every
 * caller needs it), or `{ permission: <key>, unless-self: <path parameter> }` (the caller
 * whose own user the parameter names needs no permission, every other caller needs the
 * key). An operation with an access token must say which: left out, the operation would
 * be open to every signed-in user without anyone having chosen that. Anything the binding
 * could not enforce as written is an error: an unknown key, another shape, a parameter
 * that is not in the operation's path, a permission on an operation without
 * authentication.
 */
export function permissionRule(operationId: string, route: string, secured: boolean, value: unknown): PermissionRule {
  const fail = (why: string) => new Error(`${operationId}: x-permission ${why}`);
  if (value === undefined) {
    if (!secured) return { permission: null, unlessSelf: null };
    throw fail(
      'is missing: an operation with an access token names the permission every caller needs, or says none when any signed-in user may call it ' +
        '(docs/api-conventions.md#x-permission-string-and-unless-self-forms)',
    );
  }
  if (!secured) throw fail('is set, but the operation needs no access token, so no caller is known to check it against');
  if (value === 'none') return { permission: null, unlessSelf: null };
  const known = (key: unknown): Permission => {
    if (typeof key !== 'string' || !(PERMISSIONS as readonly string[]).includes(key)) throw fail(`names ${JSON.stringify(key)}, which is not a permission key`);
    return key as Permission;
  };
  if (typeof value === 'string') return { permission: known(value), unlessSelf: null };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw fail('must be a permission key or { permission, unless-self }');
  const form = value as Record<string, unknown>;
  const extra = Object.keys(form).filter((key) => key !== 'permission' && key !== 'unless-self');
  if (extra.length > 0 || !('unless-self' in form))
    throw fail(`as an object has exactly the keys permission and unless-self (got ${Object.keys(form).join(', ') || 'none'})`);
  const parameter = form['unless-self'];
  const pathParameters = [...route.matchAll(/\{([^{}]+)\}/g)].map((match) => match[1]);
  if (typeof parameter !== 'string' || !pathParameters.includes(parameter)) {
    throw fail(`unless-self must name a parameter of the path ${route} (got ${JSON.stringify(parameter)})`);
  }
  return { permission: known(form.permission), unlessSelf: parameter };
}

/** The shortest time from an operation's deprecation to its sunset (docs/api-versions.md#deprecation). */
export const MINIMUM_DEPRECATION_DAYS = 180;

/**
 * Reads an operation's deprecation (docs/api-versions.md#deprecation): `deprecated: true`
 * with `x-deprecated-since` and `x-sunset`, two dates (`YYYY-MM-DD`), the sunset at least
 * MINIMUM_DEPRECATION_DAYS after the deprecation. The server answers such an operation
 * with the `Deprecation` and `Sunset` headers. Either date without
 * `deprecated: true`, or `deprecated: true` without both, is an error: the headers would
 * promise nothing, or the spec would promise what no header says.
 */
export function deprecationOf(operationId: string, deprecated: unknown, since: unknown, sunset: unknown): Deprecation | null {
  const fail = (why: string) => new Error(`${operationId}: ${why}`);
  if (deprecated !== true) {
    if (deprecated !== undefined && deprecated !== false) throw fail(`deprecated must be true or false (got ${JSON.stringify(deprecated)})`);
    if (since !== undefined || sunset !== undefined) throw fail('x-deprecated-since and x-sunset belong to an operation marked deprecated: true');
    return null;
  }
  const day = (name: string, value: unknown): number => {
    const time = typeof value === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(value) ? Date.parse(`${value}T00:00:00Z`) : NaN;
    if (Number.isNaN(time) || new Date(time).toISOString().slice(0, 10) !== value) {
      throw fail(`a deprecated operation needs ${name}, a date written YYYY-MM-DD (got ${JSON.stringify(value)})`);
    }
    return time;
  };
  const from = day('x-deprecated-since', since);
  const days = (day('x-sunset', sunset) - from) / 86_400_000;
  if (days < MINIMUM_DEPRECATION_DAYS) throw fail(`x-sunset must be at least ${MINIMUM_DEPRECATION_DAYS} days after x-deprecated-since (it is ${days})`);
  return { since: since as string, sunset: sunset as string };
}

/** The services that serve operations of the spec outside the operation binding, by the value of `x-atrium-served-by`. */
export const SERVING_SERVICES = ['scim'] as const;
export type ServingService = (typeof SERVING_SERVICES)[number];

/**
 * Reads an operation's `x-atrium-served-by`: absent (the operation binding serves it, from
 * `operations`), or the service that serves it instead (`scim`: src/resources/scim/service.ts,
 * under RFC 7644), whose operations the binding leaves alone. Such an operation authenticates
 * and refuses in its service's own way, so `x-permission` and a deprecation, which only the
 * binding enforces, would promise what nothing does: they are errors there, as is an unknown
 * service.
 */
export function servingService(operationId: string, value: unknown, declarations: { permission: unknown; deprecated: unknown }): ServingService | null {
  if (value === undefined) return null;
  const fail = (why: string) => new Error(`${operationId}: ${why}`);
  if (typeof value !== 'string' || !(SERVING_SERVICES as readonly string[]).includes(value)) {
    throw fail(`x-atrium-served-by names ${JSON.stringify(value)}, not one of ${SERVING_SERVICES.join(', ')}`);
  }
  if (declarations.permission !== undefined) throw fail(`x-permission is set, but the ${value} service serves the operation and does not read it`);
  if (declarations.deprecated !== undefined && declarations.deprecated !== false) {
    throw fail(`deprecated is set, but the ${value} service serves the operation and sends no Deprecation or Sunset header`);
  }
  return value as ServingService;
}

/** One line of generated/operations.ts. */
export function operationEntry(
  operationId: string,
  method: string,
  route: string,
  secured: boolean,
  rule: PermissionRule,
  extension: boolean,
  deprecation: Deprecation | null,
): string {
  const literal = (value: string | null) => (value === null ? 'null' : `'${value}'`);
  const deprecated = deprecation ? `{ since: '${deprecation.since}', sunset: '${deprecation.sunset}' }` : 'null';
  return (
    `  ${operationId}: { method: '${method.toUpperCase()}', path: '${route}', secured: ${secured}, ` +
    `permission: ${literal(rule.permission)}, unlessSelf: ${literal(rule.unlessSelf)}, extension: ${extension}, deprecation: ${deprecated} },`
  );
}

/** One line of `servedElsewhere` in generated/operations.ts: an operation another service serves. */
export function servedEntry(operationId: string, method: string, route: string, service: ServingService, extension: boolean): string {
  return `  ${operationId}: { method: '${method.toUpperCase()}', path: '${route}', service: '${service}', extension: ${extension} },`;
}

/**
 * The path items of `openapi/paths/*.yaml` (top-level entries holding an operation) that
 * `openapi/openapi.yaml` does not reference: the bundle leaves them out without a word, so
 * an operation written there would be generated nowhere. (The files hold shared schemas
 * and parameters too, which other files reference.)
 */
export function unreferencedPathItems(root: string): string[] {
  const document = readFileSync(path.join(root, 'openapi/openapi.yaml'), 'utf8');
  const missing: string[] = [];
  for (const file of readdirSync(path.join(root, 'openapi/paths')).filter((name) => name.endsWith('.yaml'))) {
    const items = parseYaml(readFileSync(path.join(root, 'openapi/paths', file), 'utf8')) as Record<string, unknown>;
    for (const [key, item] of Object.entries(items ?? {})) {
      const holdsOperation = item !== null && typeof item === 'object' && HTTP_METHODS.some((method) => method in item);
      const referenced = document.split(/\s+/).includes(`paths/${file}#/${key}`);
      if (holdsOperation && !referenced) missing.push(`openapi/paths/${file}#/${key}`);
    }
  }
  return missing;
}

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];

async function generate(): Promise<void> {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const out = path.join(root, 'generated');
  const banner = '// Generated by `npm run generate` from openapi/. Do not edit.\n';
  const unreferenced = unreferencedPathItems(root);
  if (unreferenced.length > 0) {
    throw new Error(`${unreferenced.join(', ')}: not referenced under paths: in openapi/openapi.yaml (add "<route>: $ref: paths/<file>#/<item>")`);
  }
  mkdirSync(out, { recursive: true });

  const bundlePath = path.join(out, 'openapi.json');
  execFileSync(path.join(root, 'node_modules/.bin/redocly'), ['bundle', 'openapi/openapi.yaml', '--output', bundlePath, '--ext', 'json'], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
  });
  const spec = JSON.parse(readFileSync(bundlePath, 'utf8')) as {
    security?: unknown[];
    paths: Record<
      string,
      Record<
        string,
        {
          operationId?: string;
          security?: unknown[];
          'x-permission'?: unknown;
          'x-atrium-extension'?: boolean;
          'x-atrium-served-by'?: unknown;
          deprecated?: unknown;
          'x-deprecated-since'?: unknown;
          'x-sunset'?: unknown;
        }
      >
    >;
  };
  writeFileSync(bundlePath, JSON.stringify(spec, null, 2) + '\n');

  const types = astToString(await openapiTS(spec as never, { alphabetize: true }));
  writeFileSync(path.join(out, 'api.ts'), banner + types);

  // The server sees a file part as its name (a string); a client sends a Blob or File.
  const blob = ts.factory.createTypeReferenceNode('Blob');
  const clientTypes = astToString(
    await openapiTS(spec as never, {
      alphabetize: true,
      transform: (schema) => (schema.format === 'binary' ? blob : undefined),
    }),
  );
  writeFileSync(path.join(root, 'clients/typescript/src/schema.ts'), banner + clientTypes);

  const methods = ['get', 'put', 'post', 'delete', 'patch'];
  const entries: string[] = [];
  const servedElsewhere: string[] = [];
  const seen = new Set<string>();
  for (const [route, item] of Object.entries(spec.paths)) {
    for (const method of methods) {
      const op = item[method];
      if (!op) continue;
      if (!op.operationId) throw new Error(`${method.toUpperCase()} ${route} has no operationId`);
      if (seen.has(op.operationId)) throw new Error(`operationId ${op.operationId} is used twice`);
      seen.add(op.operationId);
      const service = servingService(op.operationId, op['x-atrium-served-by'], { permission: op['x-permission'], deprecated: op.deprecated });
      if (service) {
        servedElsewhere.push(servedEntry(op.operationId, method, route, service, op['x-atrium-extension'] === true));
        continue;
      }
      const secured = (op.security ?? spec.security ?? []).length > 0;
      const rule = permissionRule(op.operationId, route, secured, op['x-permission']);
      const deprecation = deprecationOf(op.operationId, op.deprecated, op['x-deprecated-since'], op['x-sunset']);
      entries.push(operationEntry(op.operationId, method, route, secured, rule, op['x-atrium-extension'] === true, deprecation));
    }
  }
  writeFileSync(
    path.join(out, 'operations.ts'),
    banner +
      `/** The operations the operation binding serves (src/platform/http/operations.ts). */\n` +
      `export const operations = {\n${entries.join('\n')}\n} as const;\n\n` +
      `export type OperationId = keyof typeof operations;\n\n` +
      `/** The operations another service serves (\`x-atrium-served-by\`); the binding leaves them alone. */\n` +
      `export const servedElsewhere = {\n${servedElsewhere.join('\n')}\n} as const;\n\n` +
      `export type ServedElsewhereId = keyof typeof servedElsewhere;\n`,
  );
  console.log(`generated/: ${seen.size} operations, ${servedElsewhere.length} of them served outside the operation binding`);
}

// Run by `npm run generate`; imported (by the tests of the functions above), it does nothing.
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) await generate();
