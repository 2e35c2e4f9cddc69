#!/usr/bin/env node
// The `atrium` command: runs the TypeScript CLI through tsx (a dependency), no build step.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
