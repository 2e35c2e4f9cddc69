import { DrizzleQueryError } from 'drizzle-orm/errors';

/** How much of a failed statement the message quotes: a migration's whole file would bury the reason. */
const QUOTED_STATEMENT = 160;

/**
 * An error's message for a terminal: the last line of a command that failed, or of a start
 * that did, on one line. A failed query's is the start of its statement and the database's
 * reason, without the parameters drizzle's message lists (a password's hash, a sealed
 * secret), as the log keeps it (`errorLogFields`).
 */
export function failureMessage(error: unknown): string {
  const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();
  if (error instanceof DrizzleQueryError) {
    const statement = oneLine(error.query);
    // Cut by characters (code points), never inside one.
    const characters = [...statement];
    const quoted = characters.length > QUOTED_STATEMENT ? `${characters.slice(0, QUOTED_STATEMENT).join('')}…` : statement;
    return `Failed query: ${quoted}: ${error.cause instanceof Error ? oneLine(error.cause.message) : 'no reason given'}`;
  }
  return oneLine(error instanceof Error ? error.message : String(error));
}
