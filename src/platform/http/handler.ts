/**
 * The typed contract between the generated operation map and the handlers: every
 * operationId of the spec must have a handler whose inputs and outputs match the spec,
 * or `tsc` fails.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { operations as Operations } from '../../../generated/api.ts';
import type { OperationId, operations } from '../../../generated/operations.ts';
import type { Auth } from '../auth/auth.ts';
import type { Services } from '../services.ts';
import type { PresentedMark } from '../result-controls/result-controls.ts';
import type { StreamedJson } from './json-stream.ts';

type Op<K extends OperationId> = Operations[K];
type JsonOf<C> = C extends { 'application/json': infer J } ? J : C extends Record<string, infer X> ? X | Buffer : never;
/**
 * A JSON answer as a handler may give it: wherever the spec answers an object, a record a
 * view presented (`Presented`, known by its `PresentedMark`) is accepted too, since
 * TypeScript cannot see a view's fields (the serializer and the tests' contract check hold
 * it to the schema); everything else keeps its spec type, unknown keys refused.
 */
type Answer<J> = J extends readonly (infer Item)[] ? Answer<Item>[] : J extends object ? { [P in keyof J]: Answer<J[P]> } | PresentedMark : J;
/** An answer's body; a JSON one may be written as a stream (json-stream.ts) when it is too large to hold whole. */
type ContentOf<R> = R extends { content: infer C } ? (C extends { 'application/json': infer J } ? Answer<J> | StreamedJson<J> : JsonOf<C>) : undefined;
type Defined<T, Fallback> = [NonNullable<T>] extends [never] ? Fallback : NonNullable<T>;

export type Body<K extends OperationId> = [NonNullable<Op<K>['requestBody']>] extends [never]
  ? undefined
  : NonNullable<Op<K>['requestBody']> extends { content: infer C }
    ? JsonOf<C>
    : undefined;
export type Query<K extends OperationId> = Defined<Op<K>['parameters']['query'], Record<string, never>>;
export type Params<K extends OperationId> = Defined<Op<K>['parameters']['path'], Record<string, never>>;

type Responses<K extends OperationId> = Op<K>['responses'];
export type Result<K extends OperationId> = {
  [S in keyof Responses<K>]: ContentOf<Responses<K>[S]> extends undefined
    ? { status: S; body?: undefined; headers?: Record<string, string> }
    : { status: S; body: ContentOf<Responses<K>[S]>; headers?: Record<string, string> };
}[keyof Responses<K>];

export interface Context<K extends OperationId> {
  request: FastifyRequest;
  reply: FastifyReply;
  body: Body<K>;
  query: Query<K>;
  params: Params<K>;
  /** Present on every operation the spec secures; null on public ones. */
  auth: (typeof operations)[K]['secured'] extends true ? Auth : null;
  services: Services;
}

export type Handler<K extends OperationId> = (ctx: Context<K>) => Promise<Result<K>>;
export type Handlers = { [K in OperationId]: Handler<K> };
