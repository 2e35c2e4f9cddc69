#!/usr/bin/env node
// The `atrium` command. In a checkout it runs the TypeScript source through tsx (a
// dependency), so it always matches the code; where only the build is installed (the
// container image ships dist/ without src/), it runs the compiled command with plain node.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  // By URL, as the source above: dist/ exists once `npm run build` has run, and the linter does not resolve it.
  await import(new URL('../dist/src/cli/main.js', import.meta.url).href);
}
