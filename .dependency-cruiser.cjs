/**
 * Import rules of Atrium, checked by `npm run check:deps` (and so by CI). There is no list of
 * tolerated violations: every rule holds for the whole tree.
 */
module.exports = {
  forbidden: [
    {
      name: 'platform-never-imports-resources',
      severity: 'error',
      comment: 'src/platform is the generic layer; resources build on it, never the reverse. Type-only imports count too.',
      from: { path: '^src/platform/' },
      to: { path: '^src/resources/' },
    },
    {
      name: 'no-composition-root-imports',
      severity: 'error',
      comment: 'src/{app,server,handlers,jobs,schema,main}.ts wire everything together; nothing below them imports them.',
      from: { path: '^src/(platform|resources)/' },
      to: { path: '^src/(app|server|handlers|jobs|schema|main)\\.ts$' },
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import cycles, type-only ones included.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'handlers-are-leaves',
      severity: 'error',
      comment: 'Only src/handlers.ts imports a resource handlers.ts; shared code lives in queries, views or rules.',
      from: { pathNot: '^src/handlers\\.ts$' },
      to: { path: '^src/resources/[^/]+/handlers\\.ts$' },
    },
    {
      name: 'src-never-imports-tests-or-scripts',
      severity: 'error',
      comment: 'The application does not depend on its tests or tooling.',
      from: { path: '^src/' },
      to: { path: '^(test|scripts)/' },
    },
    {
      name: 'no-orphans',
      severity: 'error',
      comment:
        'A module nothing imports and that imports nothing is dead code (entry points excepted, and the module hook and the module it sends to that test/helpers/shared-process.ts loads by URL).',
      from: { orphan: true, pathNot: ['\\.d\\.ts$', '^src/(main|cli/main)\\.ts$', '^test/helpers/file-test(-hooks)?\\.mjs$'] },
      to: {},
    },
  ],
  options: {
    tsPreCompilationDeps: true, // type-only imports are edges
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^(generated|drizzle)/', '^test/clients/\\.generated/', '(^|/)node_modules/'] }, // (^|/): a worktree may link node_modules from elsewhere
  },
};
