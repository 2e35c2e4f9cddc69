import t from 'tap';
import { serializerCompiler } from '../../../src/platform/http/serialization.ts';

t.test('a response schema with alternatives serializes without writing to the console (the log stays JSON lines)', async (t) => {
  // fast-json-stringify picks among `anyOf` branches with Ajv, whose strict mode warned on
  // the console about branches that hold `required` without `type`, as the spec's do.
  const written: unknown[] = [];
  const original = { warn: console.warn, log: console.log, error: console.error };
  console.warn = console.log = console.error = (...args: unknown[]) => void written.push(args[0]);
  t.teardown(() => Object.assign(console, original));
  const schema = {
    type: 'object',
    properties: {
      auth: {
        type: 'object',
        properties: { basic: { type: 'string' }, bearer: { type: 'string' } },
        anyOf: [{ required: ['basic'] }, { required: ['bearer'] }],
      },
    },
  };
  const serialize = serializerCompiler({ schema } as never);
  t.equal(serialize({ auth: { bearer: 'x' } }), '{"auth":{"bearer":"x"}}');
  t.equal(serialize({ auth: { basic: 'y' } }), '{"auth":{"basic":"y"}}');
  Object.assign(console, original);
  t.same(written, [], 'nothing was written to the console');
});
