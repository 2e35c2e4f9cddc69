// A module resolve hook (node:module `register`) for test files sharing a process
// (shared-process.ts): `tap` imported by a test file resolves to file-test.mjs, once for
// each file (the importing file in its query), which gives the file its own subtest.
const fileTest = new URL('./file-test.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  // The importing file's path, without a query: file-test.mjs's own import of tap, whose query names a test file, is tap's.
  if (specifier === 'tap' && context.parentURL && new URL(context.parentURL).pathname.endsWith('.test.ts')) {
    return { url: `${fileTest}?file=${encodeURIComponent(context.parentURL)}`, shortCircuit: true, format: 'module' };
  }
  return next(specifier, context);
}
