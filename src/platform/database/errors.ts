import { invalid } from '../http/problem.ts';

/** PostgreSQL errors surface from postgres.js directly or wrapped by drizzle (`cause`). */
export function isUniqueViolation(error: unknown, constraint: string): boolean {
  for (let current: unknown = error; current && typeof current === 'object'; current = (current as { cause?: unknown }).cause) {
    const pg = current as { code?: string; constraint_name?: string };
    if (pg.code === '23505' && pg.constraint_name === constraint) return true;
  }
  return false;
}

/** Runs `work`; a violation of the unique rule `constraint` (a race past the handler's own check) becomes the same 422. */
export async function uniqueAs422<T>(work: Promise<T>, constraint: string, field: string): Promise<T> {
  try {
    return await work;
  } catch (error) {
    if (isUniqueViolation(error, constraint)) throw invalid({ [field]: ['has already been taken'] });
    throw error;
  }
}
