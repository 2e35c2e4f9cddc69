// orval for test/clients/sdk.test.ts: the version that file installs and orval's
// configuration, a fetch client of the whole spec. orval is no dependency of the
// repository (see sdk.test.ts), so the configuration is a plain object rather than
// orval's `defineConfig`: nothing here can import orval.

/** The orval sdk.test.ts installs, exact, and the Node its `engines` ask for (`>=` this version). */
export const ORVAL = { version: '8.38.0', node: '22.18.0' };

export default {
  atrium: {
    input: { target: '../../generated/openapi.json' },
    output: {
      target: '.generated/orval/atrium.ts',
      client: 'fetch',
      mode: 'single',
      override: { mutator: { path: 'scenarios/orval-fetch.ts', name: 'atriumFetch' } },
    },
  },
};
