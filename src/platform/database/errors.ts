/** PostgreSQL errors surface from postgres.js directly or wrapped by drizzle (`cause`). */
export function isUniqueViolation(error: unknown, constraint: string): boolean {
  for (let current: unknown = error; current && typeof current === 'object'; current = (current as { cause?: unknown }).cause) {
    const pg = current as { code?: string; constraint_name?: string };
    if (pg.code === '23505' && pg.constraint_name === constraint) return true;
  }
  return false;
}
