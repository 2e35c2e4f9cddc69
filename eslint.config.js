// ESLint: typescript-eslint, unused code and import hygiene. Formatting is Prettier's
// (`npm run format`); import cycles are dependency-cruiser's (`npm run check:deps`).
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import prettier from 'eslint-config-prettier';
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript';
import { importX } from 'eslint-plugin-import-x';
import regexp from 'eslint-plugin-regexp';
import unusedImports from 'eslint-plugin-unused-imports';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  {
    ignores: [
      'generated/**',
      'clients/typescript/src/schema.ts',
      'test/clients/.generated/**',
      'drizzle/**',
      'node_modules/**',
      '.tap/**',
      'tmp/**',
      '.data/**',
      'dist/**',
    ],
  },
  js.configs.recommended,
  importX.flatConfigs.recommended,
  importX.flatConfigs.typescript,
  {
    languageOptions: { globals: globals.node },
    settings: { 'import-x/resolver-next': [createTypeScriptImportResolver({ project: 'tsconfig.json' })] },
    plugins: { 'unused-imports': unusedImports },
    rules: {
      'no-unused-vars': 'off',
      'unused-imports/no-unused-imports': 'error',
      'unused-imports/no-unused-vars': [
        'error',
        {
          args: 'after-used',
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
          caughtErrors: 'none',
        },
      ],
      'import-x/no-duplicates': ['error', { 'prefer-inline': true }],
      'import-x/no-self-import': 'error',
      'import-x/no-useless-path-segments': 'error',
      // web-push, nodemailer: their default export is the documented API.
      'import-x/no-named-as-default-member': 'off',
      // The layer rule, mirrored from .dependency-cruiser.cjs for editor feedback.
      'import-x/no-restricted-paths': [
        'error',
        {
          zones: [
            {
              target: './src/platform',
              from: './src/resources',
              message: 'src/platform never imports src/resources: move the shared piece into src/platform.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommended],
    rules: {
      '@typescript-eslint/no-unused-vars': 'off', // unused-imports/no-unused-vars reports them
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
    },
  },
  {
    // Type-aware rules for the application and scripts only: on tests they mostly flag the
    // untyped API answers (`CallResult<any>`) and tap's un-awaited `t.test`.
    files: ['src/**/*.ts', 'scripts/**/*.ts'],
    extends: [tseslint.configs.recommendedTypeCheckedOnly],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/require-await': 'off', // handlers are async by the Handler contract
    },
  },
  {
    // Regular expressions that could take more than linear time on some input: the time one
    // request holds the event loop must not grow with the square of what it sends (ReDoS).
    // Both rules are static analyses of the pattern, so a finding does not depend on timing.
    files: ['src/**/*.ts', 'scripts/**/*.ts'],
    plugins: { regexp },
    rules: {
      'regexp/no-super-linear-backtracking': 'error',
      'regexp/no-super-linear-move': 'error',
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off', // API bodies in tests
    },
  },
  prettier,
  {
    // The scenario programs import clients that test/clients/sdk.test.ts generates first.
    files: ['test/clients/scenarios/**'],
    rules: { 'import-x/no-unresolved': ['error', { ignore: ['/\\.generated/'] }] },
  },
);
