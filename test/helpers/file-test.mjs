// What `import t from 'tap'` gives a test file that runs beside others in one process
// (shared-process.ts): the subtest of that file. The hook imports this module once for each
// file (its URL names the file), so each file gets its own. Named imports are tap's.
export const FILE_TEST = Symbol.for('atrium.test.file');
export * from 'tap';
export default globalThis[FILE_TEST];
