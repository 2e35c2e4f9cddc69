import fastJsonStringify, { type Schema } from 'fast-json-stringify';
import type { FastifySerializerCompiler } from 'fastify';

/**
 * Answers are serialized by their response schema (fast-json-stringify), as Fastify does by
 * default, but each serializer is compiled on its first use: a process compiles the
 * serializers of the answers it gives, not of every status of every operation at start
 * (docs/performance.md#memory-of-a-started-process).
 */
export const serializerCompiler: FastifySerializerCompiler<unknown> = ({ schema }) => {
  let serialize: ((data: unknown) => string) | undefined;
  return (data: unknown) => (serialize ??= fastJsonStringify(schema as Schema))(data);
};
