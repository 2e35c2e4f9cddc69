import fastJsonStringify, { type Schema } from 'fast-json-stringify';
import type { FastifySerializerCompiler } from 'fastify';

/**
 * fast-json-stringify picks among the branches of `anyOf` and `oneOf` with Ajv, whose strict
 * mode warns on the console (not in the JSON log) about a branch holding `required` without
 * `type`, as the spec's alternatives do (the request validator has checked the spec
 * already). The warning is off; the serialization is the same.
 */
const SERIALIZER_OPTIONS = { ajv: { strictTypes: false } } as const;

/**
 * Answers are serialized by their response schema (fast-json-stringify), as Fastify does by
 * default, but each serializer is compiled on its first use: a process compiles the
 * serializers of the answers it gives, not of every status of every operation at start
 * (docs/performance.md#memory-of-a-started-process).
 */
export const serializerCompiler: FastifySerializerCompiler<unknown> = ({ schema }) => {
  let serialize: ((data: unknown) => string) | undefined;
  return (data: unknown) => (serialize ??= fastJsonStringify(schema as Schema, SERIALIZER_OPTIONS))(data);
};
