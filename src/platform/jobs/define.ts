import type { Services } from '../services.ts';
import type { JobDefinition } from './jobs.ts';

/** A job of Atrium: its work is given the process's services. */
export const defineJob = <T extends object>(definition: JobDefinition<T, Services>) => definition;
