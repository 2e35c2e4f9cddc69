// orval's configuration for test/clients/sdk.test.ts: a fetch client of the whole spec.
import { defineConfig } from 'orval';

export default defineConfig({
  atrium: {
    input: { target: '../../generated/openapi.json' },
    output: {
      target: '.generated/orval/atrium.ts',
      client: 'fetch',
      mode: 'single',
      override: { mutator: { path: 'scenarios/orval-fetch.ts', name: 'atriumFetch' } },
    },
  },
});
