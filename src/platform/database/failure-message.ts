import { DrizzleQueryError } from 'drizzle-orm/errors';

/**
 * An error's message for a terminal: the last line of a command that failed, or of a start
 * that did. A failed query's is its statement and the database's reason, without the
 * parameters drizzle's message lists (a password's hash, a sealed secret), as the log
 * keeps it (`errorLogFields`).
 */
export function failureMessage(error: unknown): string {
  if (error instanceof DrizzleQueryError) return `Failed query: ${error.query}: ${error.cause instanceof Error ? error.cause.message : 'no reason given'}`;
  return error instanceof Error ? error.message : String(error);
}
